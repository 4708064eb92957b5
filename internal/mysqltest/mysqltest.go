// Package mysqltest gives tests a real MariaDB (or MySQL): Start returns
// the URL of a new, empty database for one test, on a server that is
// either the one EDGERELAY_TEST_MYSQL names or a throwaway one this test
// process starts from the installed binaries (Debian's mariadb-server
// package: mariadb-install-db and mariadbd). Without either, tests skip
// with one line saying how to enable them; under CI (CI set) they fail
// instead, so a missing install step cannot pass as green.
//
// The throwaway server is started once per test process and shared by its
// tests, each in its own database. It runs as an unprivileged user (the
// mysql user when the tests run as root) in a temporary directory, on a
// free loopback port, with a password user over TCP so that tests see
// credentials in their URLs and can check they never leak. It dies with
// the test process (a parent-death signal), and its directory is removed
// by Stop (from TestMain) or, after a killed run, by the next process that
// starts a server.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"

	"github.com/go-sql-driver/mysql"
)

// EnvURL names an existing server to test against instead of starting one:
// mysql://USER:PASS@HOST:PORT/ for a user that may create databases and
// users.
const EnvURL = "EDGERELAY_TEST_MYSQL"

// dirPrefix names the throwaway servers' directories under os.TempDir(),
// followed by the owning process's pid.
const dirPrefix = "edgerelay-my-"

type server struct {
	base     *url.URL // the admin user's URL, no database
	db       *sql.DB  // as that user
	external bool

	mu   sync.Mutex
	made []string // databases made on an external server, dropped by Stop

	dir  string
	p    *testserver.Proc
	logf string
	// How to start it again (Restart).
	bin, sock string
	args      []string
	cred      *syscall.Credential
}

var (
	once    sync.Once
	srv     *server
	srvErr  error
	skipMsg string
	dbs     atomic.Int64
)

// Start returns the URL (mysql://USER:PASS@127.0.0.1:PORT/DB) of a new,
// empty database for this test, as a user with every privilege. With
// EDGERELAY_TEST_MYSQL the database is dropped when the test ends; on a
// throwaway server it goes with the server.
func Start(t testing.TB) string {
	t.Helper()
	return get(t).newDatabase(t)
}

func (s *server) newDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("mysqltest: create database: %v", err)
	}
	if s.external {
		s.mu.Lock()
		s.made = append(s.made, name)
		s.mu.Unlock()
	}
	u := *s.base
	u.Path = "/" + name
	return u.String()
}

// User creates a user with a random password and the given grants
// (statements with %s standing for the user, e.g. "GRANT SELECT ON db.* TO
// %s"), and returns db's URL as that user: for tests of what a tailer does
// without some privilege.
func User(t testing.TB, dbURL string, grants ...string) string {
	t.Helper()
	s := get(t)
	name := fmt.Sprintf("u%d_%d", os.Getpid(), dbs.Add(1))
	pw := randHex()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	who := "'" + name + "'@'%'"
	if _, err := s.db.ExecContext(ctx, "CREATE USER "+who+" IDENTIFIED BY '"+pw+"'"); err != nil {
		t.Fatalf("mysqltest: create user: %v", err)
	}
	t.Cleanup(func() { s.db.Exec("DROP USER " + who) })
	for _, g := range grants {
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf(g, who)); err != nil {
			t.Fatalf("mysqltest: %s: %v", g, err)
		}
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, pw)
	return u.String()
}

func get(t testing.TB) *server {
	t.Helper()
	once.Do(func() { srv, skipMsg, srvErr = setup() })
	switch {
	case skipMsg != "":
		testserver.Unavailable(t, "mysqltest", skipMsg)
	case srvErr != nil:
		t.Fatalf("mysqltest: %v", srvErr)
	}
	return srv
}

func setup() (*server, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if env := os.Getenv(EnvURL); env != "" {
		u, err := url.Parse(env)
		if err != nil || u.Scheme != "mysql" {
			return nil, "", fmt.Errorf("%s is not a mysql:// URL", EnvURL) // it may hold a password: not repeated
		}
		s := &server{base: u, external: true}
		if s.db, err = openAdmin(u); err == nil {
			err = s.db.PingContext(ctx)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", EnvURL, err)
		}
		return s, "", nil
	}
	installDB, err1 := exec.LookPath("mariadb-install-db")
	mariadbd, err2 := lookServer()
	if err1 != nil || err2 != nil {
		return nil, "MariaDB tests skipped: set " + EnvURL + "=mysql://USER:PASS@HOST:PORT/, or install MariaDB's server " +
			"(Debian: apt-get install mariadb-server) so the tests start their own", nil
	}
	s, err := startServer(ctx, installDB, mariadbd)
	return s, "", err
}

// lookServer finds mariadbd: Debian puts it in /usr/sbin, which a test's
// PATH may lack.
func lookServer() (string, error) {
	if p, err := exec.LookPath("mariadbd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mariadbd", "/usr/libexec/mariadbd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("no mariadbd")
}

func openAdmin(u *url.URL) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.Timeout = 10 * time.Second
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

func randHex() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func startServer(ctx context.Context, installDB, mariadbd string) (*server, error) {
	dir, err := testserver.Dir(dirPrefix)
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, logf: filepath.Join(dir, "server.log")}
	fail := func(err error) (*server, error) {
		s.stop()
		return nil, err
	}
	// As root (CI), mariadbd refuses to run: it runs as the mysql user, in
	// a directory it owns.
	cred, err := testserver.As("mysql", "mariadbd", dir)
	if err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	// A temporary directory of its own: with the shared /tmp, a bootstrap
	// run beside other servers' once failed deleting its own temporary
	// table ("Error on delete of '/tmp/#sql-temptable-…' (Errcode: 2)").
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	// Small files: a test server holds a few rows.
	small := []string{"--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M", "--tmpdir=" + tmp}
	install := exec.CommandContext(ctx, installDB, append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}, small...)...)
	install.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := install.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mariadb-install-db: %v\n%s", err, out))
	}
	port, err := testserver.FreePort()
	if err != nil {
		return fail(err)
	}
	s.sock = filepath.Join(dir, "s")
	s.bin, s.cred = mariadbd, cred
	s.args = append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + s.sock,
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--log-error=" + s.logf, "--pid-file=" + filepath.Join(dir, "pid")}, small...)
	if err := s.launch(ctx); err != nil {
		return fail(err)
	}
	root, err := s.root()
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	pw := randHex()
	for _, q := range []string{
		"CREATE USER 'edgerelay'@'127.0.0.1' IDENTIFIED BY '" + pw + "'",
		"GRANT ALL ON *.* TO 'edgerelay'@'127.0.0.1' WITH GRANT OPTION",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return fail(fmt.Errorf("set up user: %w", err))
		}
	}
	s.base = &url.URL{Scheme: "mysql", User: url.UserPassword("edgerelay", pw),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/"}
	if s.db, err = openAdmin(s.base); err != nil {
		return fail(err)
	}
	return s, nil
}

// launch starts mariadbd and waits until it takes connections.
func (s *server) launch(ctx context.Context) error {
	// SIGKILL when the test process dies: a throwaway server needs no
	// clean shutdown.
	p, err := testserver.Start(exec.Command(s.bin, s.args...), s.cred, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	s.p = p
	root, err := s.root()
	if err != nil {
		return err
	}
	defer root.Close()
	return p.WaitReady("mariadbd", s.logf, 30*time.Second, func() error { return root.PingContext(ctx) })
}

// root connects as root over the socket, where root has no password; tests
// connect over TCP as a user with one.
func (s *server) root() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.sock
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// A Server is a throwaway server of one test's own (Own), which it may
// restart.
type Server struct{ s *server }

// Own starts a server for this test alone, on its own port and directory,
// stopped when the test ends: for tests that restart it (a few seconds:
// prefer Start). It needs the installed binaries, even with
// EDGERELAY_TEST_MYSQL set.
func Own(t testing.TB) *Server {
	t.Helper()
	installDB, err1 := exec.LookPath("mariadb-install-db")
	mariadbd, err2 := lookServer()
	if err1 != nil || err2 != nil {
		testserver.Unavailable(t, "mysqltest", "MariaDB restart tests skipped: install MariaDB's server (Debian: apt-get install mariadb-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := startServer(ctx, installDB, mariadbd)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(s.stop)
	return &Server{s: s}
}

// Start returns the URL of a new, empty database on the server.
func (sv *Server) Start(t testing.TB) string {
	t.Helper()
	return sv.s.newDatabase(t)
}

// Restart stops the server cleanly and starts it again on the same port
// and data.
func (sv *Server) Restart(t testing.TB) {
	t.Helper()
	sv.Stop(t)
	sv.Resume(t)
}

// Stop stops the server cleanly (SIGTERM), waiting until it has exited.
func (sv *Server) Stop(t testing.TB) {
	t.Helper()
	if !sv.s.p.Stop(syscall.SIGTERM, 30*time.Second) {
		t.Fatalf("mysqltest: mariadbd did not stop within 30s")
	}
}

// Resume starts a stopped server again.
func (sv *Server) Resume(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sv.s.launch(ctx); err != nil {
		t.Fatalf("mysqltest: restart: %v", err)
	}
}

// Stop shuts down the server this process started, if any, and removes its
// directory (on an external server: drops the databases made). Call it
// from TestMain after m.Run.
func Stop() {
	if srv == nil {
		return
	}
	if srv.external {
		for _, name := range srv.made {
			srv.db.Exec("DROP DATABASE " + name)
		}
		srv.db.Close()
		return
	}
	srv.stop()
}

func (s *server) stop() {
	if s.db != nil {
		s.db.Close()
	}
	if s.p != nil {
		s.p.Stop(syscall.SIGKILL, time.Minute) // a throwaway: nothing to keep
	}
	os.RemoveAll(s.dir)
}

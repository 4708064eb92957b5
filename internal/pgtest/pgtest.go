// Package pgtest gives tests a real PostgreSQL: Start returns the URL of a
// new, empty schema for one test, on a server that is either the one
// EDGERELAY_TEST_POSTGRES names or a throwaway one this test process starts
// from the installed binaries (Debian's postgresql package puts them under
// /usr/lib/postgresql/N/bin). Without either, tests skip with one line
// saying how to enable them; under CI (CI set) they fail instead, so a
// missing install step cannot pass as green.
//
// The throwaway server is started once per go test run and shared by its
// test processes (shared.go), each in a database of its own, and by their
// tests, each in its own schema (search_path in the URL), so a test costs a
// CREATE SCHEMA, not a CREATE DATABASE; a Pool reuses set-up schemas,
// emptied, for tests that need many. It runs with PostgreSQL's defaults
// (fsync and synchronous_commit on: durability tests need them; only the
// WAL level is minimal, see startServer), on a free
// loopback port, with password authentication over TCP so that tests see
// credentials in their URLs and can check they never leak. The run's
// server is stopped, and its directory removed, by a watchdog once the go
// command has exited. A test binary run without go test starts a server of
// its own, which dies with the test process (a parent-death signal), and
// whose directory is removed by Stop (from TestMain) or, after a killed
// run, by the next process that starts a server.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvURL names an existing server to test against instead of starting one:
// a URL whose user may create schemas in its database.
const EnvURL = "EDGERELAY_TEST_POSTGRES"

// dirPrefix names the throwaway servers' directories under os.TempDir(),
// followed by the owning process's pid.
const dirPrefix = "edgerelay-pg-"

type server struct {
	base     *url.URL // a superuser URL to the test database
	pool     *pgxpool.Pool
	external bool
	shared   bool // the run's server (shared.go), not this process's

	mu   sync.Mutex
	made []string // schemas of pools on an external server, dropped by Stop

	// The throwaway server, when this process started one.
	dir  string
	p    *testserver.Proc // the postmaster, once started
	logf string
	bin  string
	cred *syscall.Credential
	port int
}

var (
	once    sync.Once
	srv     *server
	srvErr  error
	skipMsg string
	schemas atomic.Int64
)

// Start returns the URL of a new, empty schema for this test (the URL's
// search_path names it). With EDGERELAY_TEST_POSTGRES the schema is dropped
// when the test ends; on a throwaway server it goes with the server.
func Start(t testing.TB) string {
	t.Helper()
	s := get(t)
	name, err := s.newSchema()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.external {
		t.Cleanup(func() {
			if err := s.dropSchema(name); err != nil {
				t.Errorf("pgtest: %v", err)
			}
		})
	}
	return s.schemaURL(name)
}

// Database returns the URL of a new, empty database of its own for this
// test, on the same server as Start's schemas. A test of something that
// reads the whole database's activity (the tailer's horizon is the oldest
// open transaction of its database) needs one: in a shared database,
// another test's open transaction holds that test's gaps open. Where the
// server refuses to create databases (EDGERELAY_TEST_POSTGRES names a user
// without CREATEDB), it is a schema, as Start gives, and the test logs so.
func Database(t testing.TB) string {
	t.Helper()
	s := get(t)
	name := fmt.Sprintf("d%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Logf("pgtest: a schema, not a database of its own (%v): other tests' transactions share its horizon", err)
		return Start(t)
	}
	if s.external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := s.pool.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
				t.Errorf("pgtest: drop database %s: %v", name, err)
			}
		})
	}
	u := *s.base
	u.Path = "/" + name
	return u.String()
}

func (s *server) newSchema() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("create schema: %w", err)
	}
	return name, nil
}

func (s *server) dropSchema(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	return nil
}

func (s *server) schemaURL(name string) string {
	u := *s.base
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// A Pool hands out schemas that prepare has set up (migrated, say) and
// that hold no rows, for tests of code that needs a set-up schema but not
// a new one. Setting up a schema costs what creating its tables and
// indexes costs (a file each: about 100 ms for edgerelay's); emptying one
// costs a few milliseconds. So a schema is set up once, and when the test
// that had it ends, every row of every table but those named in keep is
// deleted and every sequence starts again at 1, and the schema goes to the
// next test. A schema that cannot be emptied is not reused.
type Pool struct {
	prepare func(url string) error
	keep    []string

	mu   sync.Mutex
	free []string // schema names
}

// NewPool makes a pool whose schemas prepare sets up; keep names tables
// whose rows belong to the set-up (a schema version) and stay.
func NewPool(prepare func(url string) error, keep ...string) *Pool {
	return &Pool{prepare: prepare, keep: keep}
}

// Get returns the URL of an empty, set-up schema for this test.
func (p *Pool) Get(t testing.TB) string {
	t.Helper()
	s := get(t)
	p.mu.Lock()
	var name string
	if n := len(p.free); n > 0 {
		name, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if name == "" {
		var err error
		if name, err = s.newSchema(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		s.track(name)
		if err := p.prepare(s.schemaURL(name)); err != nil {
			t.Fatalf("pgtest: set up schema %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		if err := p.empty(s, name); err != nil {
			t.Logf("pgtest: schema %s not reused: %v", name, err)
			return
		}
		p.mu.Lock()
		p.free = append(p.free, name)
		p.mu.Unlock()
	})
	return s.schemaURL(name)
}

// empty deletes every row of the schema's tables but keep's, in one
// statement (foreign keys are checked at its end, when every referencing
// row is gone too), and restarts its sequences.
func (p *Pool) empty(s *server, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND NOT (table_name = ANY($2::text[])) ORDER BY table_name`, name, append([]string{}, p.keep...))
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("SET LOCAL lock_timeout = '5s'; WITH ")
	for i, tb := range tables {
		fmt.Fprintf(&b, "d%d AS (DELETE FROM %s), ", i, tb)
	}
	b.WriteString(`s AS (SELECT setval(c.oid::regclass, 1, false) FROM pg_class c
		WHERE c.relkind = 'S' AND c.relnamespace = ` + "'" + name + "'" + `::regnamespace) SELECT count(*) FROM s`)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, b.String())
		return err
	})
}

// track remembers a schema made outside a test, to drop in Stop when the
// server is not a throwaway one.
func (s *server) track(name string) {
	if s.external {
		s.mu.Lock()
		s.made = append(s.made, name)
		s.mu.Unlock()
	}
}

// A Server is a throwaway server of one test's own (Own), which the test
// can stop and start again: a database restart under the code tested.
type Server struct{ s *server }

// Own starts a server for this test alone, removed when the test ends. It
// needs the installed binaries (EDGERELAY_TEST_POSTGRES cannot be
// restarted): without them the test skips, or fails under CI.
func Own(t testing.TB) *Server {
	t.Helper()
	bin := binDir()
	if bin == "" {
		testserver.Unavailable(t, "pgtest", "PostgreSQL restart tests skipped: install PostgreSQL's server (Debian: apt-get install postgresql)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := startServer(ctx, bin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.stop)
	return &Server{s: s}
}

// Start returns the URL of a new, empty schema on the server.
func (sv *Server) Start(t testing.TB) string {
	t.Helper()
	name, err := sv.s.newSchema()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return sv.s.schemaURL(name)
}

// Stop stops the server (fast shutdown: sessions are ended), waiting until
// it has exited.
func (sv *Server) Stop(t testing.TB) {
	t.Helper()
	if !sv.s.p.Stop(syscall.SIGINT, 30*time.Second) {
		t.Fatalf("pgtest: postgres did not stop within 30s")
	}
}

// Resume starts a stopped server again, on the same port and data.
func (sv *Server) Resume(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := sv.s.launch(ctx)
	if err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
	conn.Close(ctx)
}

// Admin returns a superuser URL to the database that Start's schemas are
// in (no search_path): for tests that end other sessions or read the
// server's settings.
func Admin(t testing.TB) string {
	t.Helper()
	return get(t).base.String()
}

func get(t testing.TB) *server {
	t.Helper()
	once.Do(func() { srv, skipMsg, srvErr = setup() })
	switch {
	case skipMsg != "":
		testserver.Unavailable(t, "pgtest", skipMsg)
	case srvErr != nil:
		t.Fatalf("pgtest: %v", srvErr)
	}
	return srv
}

func setup() (*server, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if env := os.Getenv(EnvURL); env != "" {
		u, err := url.Parse(env)
		if err != nil {
			return nil, "", fmt.Errorf("%s is not a URL", EnvURL) // the URL may hold a password: not repeated
		}
		pool, err := pgxpool.New(ctx, env)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", EnvURL, err)
		}
		return &server{base: u, pool: pool, external: true}, "", nil
	}
	bin := binDir()
	if bin == "" {
		return nil, "PostgreSQL tests skipped: set " + EnvURL + "=postgres://USER:PASS@HOST:PORT/DB, or install PostgreSQL's server " +
			"(Debian: apt-get install postgresql) so the tests start their own", nil
	}
	if anchor := runAnchor(); anchor != 0 {
		s, err := joinRun(ctx, bin, anchor)
		return s, "", err
	}
	s, err := startServer(ctx, bin)
	return s, "", err
}

// binDir finds the directory of initdb and postgres: the newest Debian
// version directory, else PATH.
func binDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && executable(filepath.Join(filepath.Dir(p), "postgres")) {
		return filepath.Dir(p)
	}
	return ""
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func startServer(ctx context.Context, bin string) (*server, error) {
	// A short path: the unix socket (dir/.s.PGSQL.PORT) must stay under
	// about 107 bytes.
	dir, err := testserver.Dir(dirPrefix)
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, logf: filepath.Join(dir, "server.log")}
	fail := func(err error) (*server, error) {
		s.stop()
		return nil, err
	}
	// As root (CI), initdb and postgres refuse to run: they run as the
	// postgres user, in a directory it owns (t.TempDir() would sit under a
	// directory only root can enter).
	cred, err := testserver.As("postgres", "initdb", dir)
	if err != nil {
		return fail(err)
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	password := hex.EncodeToString(pw)
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o644); err != nil {
		return fail(err)
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pwfile, "--locale=C", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	port, err := testserver.FreePort()
	if err != nil {
		return fail(err)
	}
	s.bin, s.cred, s.port = bin, cred, port
	s.base = &url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}
	conn, err := s.launch(ctx)
	if err != nil {
		return fail(err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE edgerelay_test")
	conn.Close(ctx)
	if err != nil {
		return fail(fmt.Errorf("create database: %w", err))
	}
	s.base.Path = "/edgerelay_test"
	if s.pool, err = pgxpool.New(ctx, s.base.String()); err != nil {
		return fail(err)
	}
	return s, nil
}

// launch starts the postmaster on the server's directory and port and
// waits until it takes connections (sslmode=disable in base: the server has
// no TLS, and pgx's default would first ask for it on every connection).
func (s *server) launch(ctx context.Context) (*pgx.Conn, error) {
	logFile, err := os.OpenFile(s.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), serverArgs(filepath.Join(s.dir, "data"), s.port, s.dir, 300)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGQUIT when the test process dies: an immediate shutdown.
	p, err := testserver.Start(cmd, s.cred, syscall.SIGQUIT)
	logFile.Close() // the server has its own
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s.p = p
	// Ready when it takes connections.
	var c *pgx.Conn
	err = p.WaitReady("postgres", s.logf, 30*time.Second, func() (err error) {
		c, err = pgx.Connect(ctx, s.base.String())
		return err
	})
	return c, err
}

// serverArgs are the postmaster's arguments: data directory, port,
// socket directory and connections.
func serverArgs(data string, port int, sockets string, conns int) []string {
	return []string{"-D", data, "-p", strconv.Itoa(port), "-k", sockets,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=" + strconv.Itoa(conns),
		// Minimal WAL (no replication) is as crash-safe as the default;
		// it lets a new table or index be written to the WAL at commit
		// instead of fsynced file by file, which makes a migration about
		// three times faster. fsync and synchronous_commit stay on.
		"-c", "wal_level=minimal", "-c", "max_wal_senders=0"}
}

// Stop shuts down the server this process started, if any, and removes its
// directory. Call it from TestMain after m.Run; without it the server still
// dies with the process, and the next server started removes the directory.
func Stop() {
	stopBouncers()
	if srv == nil {
		return
	}
	if srv.shared { // the run's: its watchdog stops it after the run
		srv.pool.Close()
		return
	}
	if srv.external {
		for _, name := range srv.made {
			srv.dropSchema(name)
		}
		srv.pool.Close()
		return
	}
	srv.stop()
}

func (s *server) stop() {
	if s.pool != nil {
		s.pool.Close()
	}
	if s.p != nil {
		s.p.Stop(syscall.SIGINT, 10*time.Second) // fast shutdown: sessions are ended, no checkpoint wait for clients
	}
	os.RemoveAll(s.dir)
}

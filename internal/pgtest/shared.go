package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// One server per go test run. go test ./... runs a test binary per
// package, two at a time on two cores, each a child of the one go
// command. Rather than each starting a server of its own (initdb and a
// start: about 2 s of CPU and 3-5 s of wall each, a dozen times a run),
// the first to need one starts it for the run, and the others find it:
// its port and password are in the run's directory
// (os.TempDir()/edgerelay-pg-GOPID-run, under a file lock), and each test
// process works in a database of its own on it (p<pid>), its tests in
// schemas there, as with a server of its own.
//
// The server outlives the process that started it: a watchdog shell,
// its parent, stops it (fast shutdown) and removes the run's directory
// once the go command has exited, however the run ended (it looks every
// half second), or at once if the server dies. A test binary run on its
// own (not a child of go) starts a server of its own as before.

// runAnchor is the pid of the go command running this test binary, or 0
// when this process is not a child of one.
func runAnchor() int {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return 0
	}
	return ppid
}

// runDir is the run's directory. Its name has the go command's pid where
// testserver.Dir looks for an owner's, so a directory left by a run whose
// watchdog was killed too is swept once that go command is gone.
func runDir(anchor int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-run", dirPrefix, anchor))
}

// joinRun returns this process's database on the run's server, starting
// the server if this is the first process of the run to need one.
func joinRun(ctx context.Context, bin string, anchor int) (*server, error) {
	dir := runDir(anchor)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	info := filepath.Join(dir, "server")
	s := &server{dir: dir, logf: filepath.Join(dir, "server.log"), shared: true}
	var conn *pgx.Conn
	if text, err := os.ReadFile(info); err == nil {
		if s.base, err = parseInfo(string(text)); err != nil {
			return nil, err
		}
		if conn, err = pgx.Connect(ctx, s.base.String()); err != nil {
			log, _ := os.ReadFile(s.logf)
			return nil, fmt.Errorf("the run's server (%s): %v\n%s", dir, err, log)
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		if conn, err = s.startRun(ctx, bin, anchor); err != nil {
			return nil, err
		}
		u := s.base
		text := fmt.Sprintf("%s %s\n", u.Host, func() string { p, _ := u.User.Password(); return p }())
		if err := os.WriteFile(info, []byte(text), 0o600); err != nil {
			conn.Close(ctx)
			return nil, err
		}
	} else {
		return nil, err
	}
	db := fmt.Sprintf("p%d", os.Getpid())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+db)
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", db, err)
	}
	s.base.Path = "/" + db
	if s.pool, err = pgxpool.New(ctx, s.base.String()); err != nil {
		return nil, err
	}
	return s, nil
}

func parseInfo(text string) (*url.URL, error) {
	host, password, ok := strings.Cut(strings.TrimSpace(text), " ")
	if !ok {
		return nil, errors.New("the run's server file is not host and password")
	}
	return &url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password),
		Host: host, Path: "/postgres", RawQuery: "sslmode=disable"}, nil
}

// watchdog runs postgres ($0, with the arguments after $3) and stops it once
// the go command ($1, a pid) has exited, then removes the run's directory
// ($2). $3 is the server's log.
const watchdog = `pg="$0"; anchor="$1"; dir="$2"; log="$3"; shift 3
"$pg" "$@" >>"$log" 2>&1 &
child=$!
trap 'kill -INT $child' TERM INT
while [ -e /proc/$anchor ] && kill -0 $child 2>/dev/null; do sleep 0.5; done
kill -INT $child 2>/dev/null
wait $child
rm -rf "$dir"
`

// startRun initdbs the run's server in dir/data and starts it under the
// watchdog, in a session of its own (a signal to this process's group does
// not reach it), then waits until it takes connections.
func (s *server) startRun(ctx context.Context, bin string, anchor int) (*pgx.Conn, error) {
	data := filepath.Join(s.dir, "data")
	os.RemoveAll(data) // a start that failed half-way
	cred, err := testserver.As("postgres", "initdb", s.dir)
	if err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	password := hex.EncodeToString(pw)
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o644); err != nil {
		return nil, err
	}
	defer os.Remove(pwfile)
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pwfile, "--locale=C", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := testserver.FreePort()
	if err != nil {
		return nil, err
	}
	s.base = &url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}
	// Two test processes at a time, each with its pools and the binaries
	// it starts: twice the connections of a process's own server.
	args := append([]string{"-c", watchdog, filepath.Join(bin, "postgres"), strconv.Itoa(anchor), s.dir, s.logf}, serverArgs(data, port, s.dir, 600)...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, s.base.String())
		if err == nil {
			return c, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(s.logf)
			return nil, fmt.Errorf("postgres exited:\n%s", log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Signal(syscall.SIGTERM)
			log, _ := os.ReadFile(s.logf)
			return nil, fmt.Errorf("postgres not ready after 30s: %v\n%s", err, log)
		}
	}
}

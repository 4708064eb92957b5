// Package testserver is what internal/pgtest and internal/mysqltest share
// to run a throwaway database server (or PgBouncer) from the installed
// binaries for a test process: a directory under os.TempDir() named by
// the owning process (swept once that process is gone), the unprivileged
// user a server must run as when the tests run as root, a free loopback
// port, a process that dies with the test process (Linux's parent-death
// signal) and can be waited on until it is ready and stopped, and the one
// line a test skips with (or fails with, under CI) when the binaries are
// missing. It knows nothing of any one server; it must never be imported
// outside tests.
package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Unavailable skips the test with msg, one line saying how to enable it;
// under CI (CI set) it fails instead, so a missing install step cannot
// pass as green. pkg prefixes the failure ("pgtest").
func Unavailable(t testing.TB, pkg, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: CI is set, and %s", pkg, msg)
	}
	t.Skip(msg)
}

// Dir makes a new directory under os.TempDir() named prefix, this
// process's pid and "-", after removing those of processes that are gone
// (killed before they could remove their own; their servers died with
// them). Keep prefix short: a unix socket inside must stay under about 107
// bytes.
func Dir(prefix string) (string, error) {
	sweep(prefix)
	return os.MkdirTemp("", fmt.Sprintf("%s%d-", prefix, os.Getpid()))
}

func sweep(prefix string) {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

// As is who a server runs as: nil (this process's user) unless the tests
// run as root, which PostgreSQL, MariaDB and PgBouncer refuse; then the
// named system user (postgres, mysql), who is given dir. server names the
// program in the error ("initdb").
func As(name, server, dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, %s needs the %s user: %w", server, name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return cred, nil
}

// FreePort is a loopback TCP port free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is a server process started by Start.
type Proc struct {
	// Process is the started process.
	Process *os.Process
	exited  chan struct{}
	err     error
}

// Start starts cmd as cred (nil: as this process's user). On Linux the
// kernel sends it death when the thread that started it exits; the
// goroutine that starts it keeps its thread until it has exited, so the
// server dies with the test process, however that ends. Elsewhere a killed
// test process leaves it running until Stop or a reboot.
func Start(cmd *exec.Cmd, cred *syscall.Credential, death syscall.Signal) (*Proc, error) {
	p := &Proc{exited: make(chan struct{})}
	cmd.SysProcAttr = procAttr(cred, death)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.exited)
			return
		}
		p.Process = cmd.Process
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited, once Exited is closed.
func (p *Proc) Err() error { return p.err }

// WaitReady calls ready every 20 ms until it returns nil, for at most
// within. It fails early when the process exits; either failure quotes the
// log file logf. name names the server in the error ("postgres").
func (p *Proc) WaitReady(name, logf string, within time.Duration, ready func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(logf)
			return fmt.Errorf("%s exited (%v):\n%s", name, p.err, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf)
			return fmt.Errorf("%s not ready after %s: %v\n%s", name, within, err, log)
		}
	}
}

// Stop sends sig and waits until the process has exited, killing it after
// grace; it reports whether it exited within grace. A process that has
// exited already is only waited for.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) bool {
	p.Process.Signal(sig)
	select {
	case <-p.exited:
		return true
	case <-time.After(grace):
		p.Process.Kill()
		<-p.exited
		return false
	}
}

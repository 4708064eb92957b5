package main

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lockedLines collects a process's stderr line by line and lets a test
// wait for a line that contains a string.
type lockedLines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	grown chan struct{} // closed and replaced at each line
}

func (l *lockedLines) read(r *bufio.Reader) {
	for {
		line, err := r.ReadString('\n')
		l.mu.Lock()
		l.buf.WriteString(line)
		close(l.grown)
		l.grown = make(chan struct{})
		l.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the text holds s, for at most d.
func (l *lockedLines) waitFor(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		has, grown := strings.Contains(l.buf.String(), s), l.grown
		l.mu.Unlock()
		if has {
			return
		}
		select {
		case <-grown:
		case <-deadline:
			t.Fatalf("stderr has no %q after %s:\n%s", s, d, l.String())
		}
	}
}

// Ctrl-C during batch send --dispatch, and during dispatch --until-idle:
// the process stops claiming, lets the call in flight finish, and exits 1
// (as --help says for an interrupted run) with a last line that says it
// was interrupted and counts what is still pending: the notifications
// never tried, not only those waiting for a retry.
func TestBatchSendInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process and interrupts it")
	}
	t.Parallel()
	for _, how := range []string{"batch send --dispatch", "dispatch --until-idle"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			t.Parallel()
			interruptDelivery(t, how)
		})
	}
}

func interruptDelivery(t *testing.T, how string) {
	bin := binary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "in.jsonl")
	const n = 60
	writeLines(t, file, n, nil)

	// The provider holds each call until released: one call is in
	// flight (--workers 1) when the signal comes.
	var calls atomic.Int64
	first, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(first)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	db, route := filepath.Join(dir, "r.db"), "email=webhook+"+srv.URL+"/hook"
	cmd := exec.Command(bin, "batch", "send", file, "--db", db, "--dispatch", "--workers", "1", "--route", route, "--log-level", "info")
	if how == "dispatch --until-idle" {
		if out, err := exec.Command(bin, "batch", "send", file, "--db", db, "--route", route).CombinedOutput(); err != nil {
			t.Fatalf("batch send: %v\n%s", err, out)
		}
		cmd = exec.Command(bin, "dispatch", "--until-idle", "--db", db, "--workers", "1", "--route", route, "--log-level", "info")
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedLines{grown: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { stderr.read(bufio.NewReader(pipe)); close(done) }()
	select {
	case <-first:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("no provider call within a minute:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// No more claims; the call in flight is waited for. Then it ends.
	stderr.waitFor(t, "dispatcher stopping", time.Minute)
	close(release)
	<-done
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitError {
		t.Errorf("exit: %v, want status %d (interrupted, as %s --help says)", err, exitError, strings.Fields(how)[0])
	}
	out := stderr.String()
	t.Logf("stderr:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "interrupted") {
		t.Errorf("the last line does not say interrupted: %q", last)
	}
	sent := int(calls.Load())
	if want := "sent 1,"; sent != 1 || !strings.Contains(out, want) {
		t.Errorf("%d provider calls, want 1 and %q in the summary", sent, want)
	}
	if want := "59 pending"; !strings.Contains(out, want) {
		t.Errorf("the summary does not count %q", want)
	}
	if !strings.Contains(out, "wait=\"up to 10s\"") {
		t.Errorf("the drain's log line does not say how long it waits (10 s in cron mode)")
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"

	"github.com/jackc/pgx/v5"
)

// heldRun is a migrate-store process whose stderr is watched for its
// stop or crash point.
type heldRun struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	stderr  bytes.Buffer
	stdout  bytes.Buffer
	reached chan struct{} // closed when it says it reached its point
	exited  chan struct{}
}

func startMigrate(t *testing.T, bin string, env []string, args ...string) *heldRun {
	t.Helper()
	h := &heldRun{reached: make(chan struct{}), exited: make(chan struct{})}
	h.cmd = exec.Command(bin, append([]string{"migrate-store"}, args...)...)
	h.cmd.Env = append(os.Environ(), env...)
	h.cmd.Stdout = &h.stdout
	pipe, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.cmd.Process.Signal(syscall.SIGCONT)
		h.cmd.Process.Kill()
		<-h.exited
	})
	go func() {
		sc := bufio.NewScanner(pipe)
		once := sync.Once{}
		for sc.Scan() {
			h.mu.Lock()
			h.stderr.WriteString(sc.Text() + "\n")
			h.mu.Unlock()
			if strings.Contains(sc.Text(), "migrate-store point ") {
				once.Do(func() { close(h.reached) })
			}
		}
		h.cmd.Wait()
		close(h.exited)
	}()
	return h
}

func (h *heldRun) errText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// waitPoint waits until the run says it reached its point.
func (h *heldRun) waitPoint(t *testing.T) {
	t.Helper()
	select {
	case <-h.reached:
	case <-h.exited:
		t.Fatalf("migrate-store exited (%v) before its point:\n%s", h.cmd.ProcessState, h.errText())
	case <-time.After(60 * time.Second):
		t.Fatalf("migrate-store did not reach its point in 60s:\n%s", h.errText())
	}
}

// Two migrate-store runs at once into one target, through the real
// binary: the first is stopped (SIGSTOP, EDGERELAY_STOP_AT) after its first
// batch committed, with its locks held. Meanwhile a second run is refused,
// naming the first (its pid); a relay command on the target is refused
// (nothing starts on a half-copied schema); and nothing can commit to the
// source. Resumed, the first finishes the copy: the target holds the
// source's rows, once. A run killed part-way (EDGERELAY_CRASH_AT) leaves
// its lock with its connection: the next run is not refused and finishes
// the copy.
func TestMigrateStoreTwoRunsAtOnce(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	bin := binary(t)
	src := filepath.Join(t.TempDir(), "box.db")
	for i := range 3 {
		ev := fmt.Sprintf(`{"id": "evt_%d", "type": "t", "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "b"}`, i, i, i)
		if r := runCLI(t, ev, "send", "--db", src); r.code != 0 {
			t.Fatalf("send: %d %s", r.code, r.stderr)
		}
	}
	pg := pgtest.Start(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	count := func(c *pgx.Conn, table string) int {
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := startMigrate(t, bin, []string{"EDGERELAY_STOP_AT=copied:1"}, "--from", src, "--to", pg, "--batch", "1", "--json")
	first.waitPoint(t)

	second := exec.Command(bin, "migrate-store", "--from", src, "--to", pg, "--batch", "1")
	var serr bytes.Buffer
	second.Stderr = &serr
	err = second.Run()
	if err == nil || !strings.Contains(serr.String(), "migrate-store is copying into it") ||
		!strings.Contains(serr.String(), fmt.Sprintf("pid %d ", first.cmd.Process.Pid)) {
		t.Errorf("the second run while the first copies: %v\n%s", err, serr.String())
	}
	t.Logf("the second run, refused: %s", strings.TrimSpace(serr.String()))
	if r := runCLI(t, "", "status", "--db", pg); r.code == 0 || !strings.Contains(r.stderr, "migrate-store is copying into it") {
		t.Errorf("status on the target while it is copied into: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lite, err := sql.Open("sqlite", "file:"+src+"?_pragma=busy_timeout(200)")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	if _, err := lite.Exec(`INSERT INTO leases (name, holder, until) VALUES ('probe', 'test', 0)`); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("a write to the source while it is copied: %v, want it locked out", err)
	}
	if n := count(conn, "events"); n != 1 {
		t.Fatalf("%d events on the target while the first run is held after one batch of 1", n)
	}

	first.cmd.Process.Signal(syscall.SIGCONT)
	<-first.exited
	if code := first.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the first run, resumed: exit %d\n%s", code, first.errText())
	}
	var res migrateOut
	if err := json.Unmarshal(first.stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, first.stdout.String())
	}
	for _, c := range res.Tables {
		if (c.Table == "events" || c.Table == "notifications") && (c.Source != 3 || c.Copied != 3 || c.Present != 0) {
			t.Errorf("the first run's %s: %+v, want 3 copied", c.Table, c)
		}
	}
	if e, n := count(conn, "events"), count(conn, "notifications"); e != 3 || n != 3 {
		t.Fatalf("target after the first run: %d events, %d notifications; want 3 and 3", e, n)
	}

	// Killed after its second batch: its lock goes with its connection.
	pg2 := pgtest.Start(t)
	crashed := startMigrate(t, bin, []string{"EDGERELAY_CRASH_AT=copied:2"}, "--from", src, "--to", pg2, "--batch", "1")
	<-crashed.exited
	if ws, ok := crashed.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the run was not killed at its crash point: %v\n%s", crashed.cmd.ProcessState, crashed.errText())
	}
	again := exec.Command(bin, "migrate-store", "--from", src, "--to", pg2, "--json")
	out, err := again.Output()
	if err != nil {
		t.Fatalf("the run after the crash: %v\n%s", err, out)
	}
	res = migrateOut{}
	json.Unmarshal(out, &res)
	for _, c := range res.Tables {
		if c.Table == "events" && (c.Copied != 1 || c.Present != 2) {
			t.Errorf("events after the crash: %+v, want the 2 copied before it present and 1 copied", c)
		}
	}
	conn2, err := pgx.Connect(ctx, pg2)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	if e, n := count(conn2, "events"), count(conn2, "notifications"); e != 3 || n != 3 {
		t.Fatalf("target after the crash and a rerun: %d events, %d notifications; want 3 and 3", e, n)
	}
}

//go:build linux

package main

// Processes started together on a new database file (cron lines, sidecars,
// a CLI beside serve) all find it empty and migrate it at once. Each must
// either do the work or wait for the one doing it, and then go on.

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// barrierEnv makes the test binary a starting gate: it writes one byte to
// fd 3 (it is waiting), reads fd 4 until EOF (the test closes it for every
// process at once), then execs its arguments. Exec is all that remains
// between the gate and edgerelay's main, so the processes open the
// database within a millisecond or so of each other.
const barrierEnv = "EDGERELAY_TEST_BARRIER"

func init() {
	if os.Getenv(barrierEnv) == "" {
		return
	}
	ready, gate := os.NewFile(3, "ready"), os.NewFile(4, "gate")
	if _, err := ready.Write([]byte{1}); err != nil || len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "barrier: %v, args %q\n", err, os.Args)
		os.Exit(126)
	}
	ready.Close()
	io.Copy(io.Discard, gate)
	gate.Close()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, barrierEnv+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintf(os.Stderr, "barrier: exec %s: %v\n", os.Args[1], err)
	os.Exit(127)
}

// startTogether starts one process per command, each held at the gate until
// all of them are waiting there, then releases them at once. The commands
// are edgerelay command lines (argv[0] is the binary); set up their output
// before calling.
func startTogether(t *testing.T, cmds []*exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	gateR, gateW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gateW.Close() // releases them if the test fails before the gate opens
	for _, c := range cmds {
		c.Args = append([]string{self}, c.Args...)
		c.Path = self
		c.Env = append(diskEnv(nil), barrierEnv+"=1")
		c.ExtraFiles = []*os.File{readyW, gateR}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c.ProcessState == nil {
				c.Process.Kill()
				c.Wait()
			}
		})
	}
	readyW.Close() // the children hold it now: a child that dies early ends the read
	gateR.Close()
	if _, err := io.ReadFull(readyR, make([]byte, len(cmds))); err != nil {
		t.Fatalf("waiting for %d processes at the gate: %v", len(cmds), err)
	}
	gateW.Close()
}

// TestSendsStartedTogetherOnANewFile: 12 sends released at one instant on
// a database that does not exist yet, in a few rounds. Every one succeeds
// and stores its event: none fails on a migration another ran, on the
// switch to WAL, or on a lock. Before migrating under the write lock, 31 of
// 36 such runs failed ("migration 0002_api.sql: ... table request_keys
// already exists").
func TestSendsStartedTogetherOnANewFile(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	bin := binary(t)
	const rounds, procs = 4, 12
	dir := t.TempDir()
	events := make([]string, procs)
	for i := range events {
		events[i] = filepath.Join(dir, fmt.Sprintf("event-%02d.json", i))
		ev := fmt.Sprintf(`{"id": "evt_race_%02d", "type": "race", "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "b"}`, i, i, i)
		if err := os.WriteFile(events[i], []byte(ev), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var failed []string
	for r := range rounds {
		db := filepath.Join(dir, fmt.Sprintf("round-%d.db", r))
		cmds := make([]*exec.Cmd, procs)
		outs := make([]*bytes.Buffer, procs)
		errs := make([]*bytes.Buffer, procs)
		for i := range cmds {
			cmds[i] = exec.Command(bin, "send", "--db", db, "--file", events[i])
			outs[i], errs[i] = &bytes.Buffer{}, &bytes.Buffer{}
			cmds[i].Stdout, cmds[i].Stderr = outs[i], errs[i]
		}
		startTogether(t, cmds)
		for i, c := range cmds {
			c.Wait()
			if code := c.ProcessState.ExitCode(); code != 0 || !strings.Contains(outs[i].String(), `"result":"new"`) {
				failed = append(failed, fmt.Sprintf("round %d send %d: exit %d, %s%s", r, i, code,
					strings.TrimSpace(errs[i].String()), strings.TrimSpace(outs[i].String())))
			}
		}
		if n := countRows(t, db, "events"); n != procs && len(failed) == 0 {
			t.Fatalf("round %d: %d events stored after %d successful sends", r, n, procs)
		}
		sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var v int
		err = sdb.QueryRow("PRAGMA user_version").Scan(&v)
		sdb.Close()
		if err != nil || v != sqlite.SchemaVersion() {
			t.Fatalf("round %d: schema version %d (%v), want %d", r, v, err, sqlite.SchemaVersion())
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d sends started together on a new file failed:\n%s", len(failed), rounds*procs, strings.Join(failed, "\n"))
	}
}

// TestServesStartedTogetherOnANewFile: three serve processes released at
// one instant on a new file, each on a free port: all of them come up and
// answer /readyz 200. Before, one in three exited on a migration another
// had run.
func TestServesStartedTogetherOnANewFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "new.db")
	const procs = 3
	cmds := make([]*exec.Cmd, procs)
	serving := make(chan string, procs)
	exited := make(chan int, procs)
	stderrs := make([]*bytes.Buffer, procs) // each read only once its process has exited
	for i := range cmds {
		cmds[i] = exec.Command(bin, "serve", "--db", db, "--listen", "127.0.0.1:0", "--route", "*=log://"+filepath.Join(dir, "sent.log"))
		pipe, err := cmds[i].StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderrs[i] = &bytes.Buffer{}
		go func() {
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				stderrs[i].WriteString(sc.Text() + "\n")
				if rest, ok := strings.CutPrefix(sc.Text(), "edgerelay: serving "); ok {
					u, _, _ := strings.Cut(rest, " ")
					serving <- u
				}
			}
			exited <- i
		}()
	}
	startTogether(t, cmds)
	deadline := time.After(20 * time.Second)
	var bases []string
	for len(bases) < procs {
		select {
		case u := <-serving:
			bases = append(bases, u)
		case i := <-exited:
			cmds[i].Wait()
			t.Fatalf("serve %d exited (%d) while starting beside %d others on a new file:\n%s",
				i, cmds[i].ProcessState.ExitCode(), procs-1, stderrs[i].String())
		case <-deadline:
			t.Fatalf("%d of %d serve processes serving after 20s", len(bases), procs)
		}
	}
	for _, base := range bases {
		for until := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			status := 0
			resp, err := http.Get(base + "/readyz")
			if err == nil {
				resp.Body.Close()
				status = resp.StatusCode
			}
			if status == http.StatusOK {
				break
			}
			if time.Now().After(until) {
				t.Fatalf("%s/readyz not 200 after 10s: status %d, %v", base, status, err)
			}
		}
	}
	for _, c := range cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	for range procs {
		i := <-exited
		cmds[i].Wait()
		if code := cmds[i].ProcessState.ExitCode(); code != 0 {
			t.Errorf("serve %d exited %d after SIGTERM:\n%s", i, code, stderrs[i].String())
		}
	}
}

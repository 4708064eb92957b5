package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// run runs the binary with args (and env added to the environment), and
// returns its exit code, stdout and stderr.
func runBin(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after a minute; stderr:\n%s", args, &stderr)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// A rejected outbox row through the binary: a tailer SIGKILLed just before
// its batch is settled has recorded neither the position nor the
// rejection (one transaction), and the next run records the row with its
// reason; tail rejects list shows it and status counts it; the
// application fixes the row; tail rejects retry (twice) makes the next
// run accept it once, and the record goes; a retry then finds nothing to
// ask. drop removes a record. Usage errors name what was wrong.
func TestTailRejectsThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, db := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db")
	app := tailApp(t, appPath)
	srcURL := "sqlite://" + appPath + "?mark_processed=true"
	rr := &relayReader{path: db}
	t.Cleanup(func() {
		if rr.db != nil {
			rr.db.Close()
		}
	})
	once := func(env ...string) (int, onceSummary, string) {
		t.Helper()
		code, out, e := runBin(t, bin, env, "tail", "--once", "--db", db, "--json", "--log-level", "warn", "--source", srcURL)
		var sum onceSummary
		if code >= 0 && code != exitError {
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("stdout %q: %v; stderr:\n%s", out, err, e)
			}
		}
		return code, sum, e
	}
	list := func(args ...string) []model.SourceReject {
		t.Helper()
		code, out, e := runBin(t, bin, nil, append([]string{"tail", "rejects", "list", "--db", db, "--json"}, args...)...)
		var rs []model.SourceReject
		if code != 0 || json.Unmarshal([]byte(out), &rs) != nil {
			t.Fatalf("tail rejects list: exit %d, stdout %q\n%s", code, out, e)
		}
		return rs
	}

	placeOrder(app, 1)
	if _, err := app.Exec(`INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "ord_2", "type": "order.created"}')`); err != nil {
		t.Fatal(err)
	}
	placeOrder(app, 3)

	// Killed after the accept's commit, before the settle's.
	if code, _, e := once("EDGERELAY_CRASH_AT=settle:1"); code != -1 || !strings.Contains(e, "crash point settle:1") {
		t.Fatalf("run with a crash point: exit %d, want killed at settle:1\n%s", code, e)
	}
	if events, pos := rr.state(t); events != 2 || pos != 0 {
		t.Fatalf("after the kill: %d events, position %d; want 2 (accepted), 0 (not settled)", events, pos)
	}
	if rs := list(); len(rs) != 0 {
		t.Fatalf("after the kill: recorded %+v; want none (nor the position)", rs)
	}
	code, sum, e := once()
	if code != exitRejected || sum.Rejected != 1 || sum.Duplicates != 2 || sum.Position != 3 {
		t.Fatalf("run after the kill: exit %d, %+v; want 5, 1 rejected, 2 duplicates, position 3\n%s", code, sum.TailStats, e)
	}
	rs := list("--source", srcURL)
	if len(rs) != 1 || rs[0].Row != 2 || rs[0].EventID != "ord_2" || !strings.Contains(rs[0].Reason, "recipients") {
		t.Fatalf("recorded %+v; want row 2, event ord_2, a reason naming recipients", rs)
	}
	name := rs[0].Source
	// The URL gives the source's name without opening it: the same list
	// while the app's database is away.
	if err := os.Rename(appPath, appPath+".away"); err != nil {
		t.Fatal(err)
	}
	if rs := list("--source", srcURL); len(rs) != 1 || rs[0].Source != name {
		t.Fatalf("tail rejects list --source URL, the app's database away: %+v, want the record of %s", rs, name)
	}
	if err := os.Rename(appPath+".away", appPath); err != nil {
		t.Fatal(err)
	}
	if c, out, e := runBin(t, bin, nil, "tail", "rejects", "list", "--db", db); c != 0 || !strings.Contains(out, "source "+name+"\n  2\tevent ord_2") || !strings.Contains(out, "recipients") {
		t.Fatalf("tail rejects list: exit %d\n%s%s", c, out, e)
	}
	if c, out, _ := runBin(t, bin, nil, "status", "--db", db); c != 0 || !strings.Contains(out, "rejected outbox rows  1 ("+name+": 1)") {
		t.Fatalf("status: exit %d, want a line counting 1 rejected row of %s\n%s", c, name, out)
	}

	// Usage errors, before anything is opened.
	for _, args := range [][]string{
		{"retry", "2"},                            // no --source
		{"retry", "--source", name},               // no rows
		{"retry", "--source", name, "--all", "2"}, // both
		{"drop", "--source", name, "two"},         // not a row id
	} {
		if c, _, e := runBin(t, bin, nil, append([]string{"tail", "rejects", args[0], "--db", db}, args[1:]...)...); c != exitUsage || !strings.Contains(e, "tail rejects "+args[0]) {
			t.Fatalf("tail rejects %v: exit %d, want %d naming the command\n%s", args, c, exitUsage, e)
		}
	}

	// The application fixes its row; retried twice, it is accepted once.
	if _, err := app.Exec(`UPDATE edgerelay_outbox SET event = ? WHERE id = 2`,
		`{"id": "ord_2", "type": "order.created", "recipients": [{"id": "cus_2", "email": "c2@example.com"}], "subject": "s", "body": "b"}`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if c, out, e := runBin(t, bin, nil, "tail", "rejects", "retry", "--db", db, "--source", name, "2"); c != 0 || !strings.Contains(out, "rows 2 asked to be read again") {
			t.Fatalf("tail rejects retry: exit %d\n%s%s", c, out, e)
		}
	}
	if code, sum, e := once(); code != exitOK || sum.Retried != 1 || sum.Accepted != 1 || sum.Rejected != 0 {
		t.Fatalf("run after the retry: exit %d, %+v; want 0, 1 retried and accepted\n%s", code, sum.TailStats, e)
	}
	if rs := list(); len(rs) != 0 {
		t.Fatalf("after the accepted retry: %+v recorded, want none", rs)
	}
	if events, _ := rr.state(t); events != 3 {
		t.Fatalf("%d events, want 3", events)
	}
	var unmarked int
	app.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NULL`).Scan(&unmarked)
	if unmarked != 0 {
		t.Fatalf("%d rows unmarked after the retry, want 0", unmarked)
	}
	if c, _, e := runBin(t, bin, nil, "tail", "rejects", "retry", "--db", db, "--source", name, "2"); c != exitError || !strings.Contains(e, "no rejected row 2") {
		t.Fatalf("retry of an accepted row: exit %d, want 1 saying there is no record\n%s", c, e)
	}
	if code, sum, e := once(); code != exitOK || sum.Read != 0 {
		t.Fatalf("last run: exit %d, %+v; want 0, nothing read\n%s", code, sum.TailStats, e)
	}

	// Drop: another bad row, recorded, then dropped.
	if _, err := app.Exec(`INSERT INTO edgerelay_outbox (event) VALUES ('[]')`); err != nil {
		t.Fatal(err)
	}
	if code, _, e := once(); code != exitRejected {
		t.Fatalf("run with a second bad row: exit %d, want 5\n%s", code, e)
	}
	if c, out, e := runBin(t, bin, nil, "tail", "rejects", "drop", "--db", db, "--source", srcURL, "--all"); c != 0 || !strings.Contains(out, "rows 4 records dropped") {
		t.Fatalf("tail rejects drop --all: exit %d\n%s%s", c, out, e)
	}
	if rs := list(); len(rs) != 0 {
		t.Fatalf("after drop: %+v", rs)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/edgerelay/edgerelay/batch"
	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/relay"
)

// batchOut decodes what batch send --json prints.
func batchOut(t *testing.T, r cliResult) batchSummary {
	t.Helper()
	var s batchSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("batch --json printed %q (exit %d, stderr %q): %v", r.stdout, r.code, r.stderr, err)
	}
	return s
}

// writeLines writes a JSON Lines batch of n events, one recipient and one
// email each; bad maps a line number to the text to put there instead.
func writeLines(t *testing.T, path string, n int, bad map[int]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		if b, ok := bad[i+1]; ok {
			fmt.Fprintln(w, b)
			continue
		}
		fmt.Fprintf(w, `{"id": "evt_%d", "type": "notice", "channels": ["email"], "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "hello %d"}`+"\n", i, i, i, i)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

// The example files are accepted whole; a second run of the same file
// creates nothing (all duplicates); flags go before or after FILE.
func TestBatchSendExamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file                           string
		events, skipped, notifications int
	}{
		{"testdata/batch_example.jsonl", 4, 3, 5}, // 2 comment lines, 1 blank
		{"testdata/batch_example.csv", 3, 0, 4},
	} {
		db := filepath.Join(t.TempDir(), "r.db")
		r := runCLI(t, "", "batch", "send", "--db", db, tc.file, "--json")
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.file, r.code, r.stderr)
		}
		lines := tc.events + tc.skipped
		want := batch.Result{Lines: lines, New: tc.events, Skipped: tc.skipped, Notifications: tc.notifications}
		if got := batchOut(t, r).Batch; got != want {
			t.Fatalf("%s: %+v, want %+v", tc.file, got, want)
		}
		if !strings.Contains(r.stderr, fmt.Sprintf("batch: %d lines, %d accepted (%d new, 0 duplicate), 0 rejected", lines, tc.events, tc.events)) {
			t.Fatalf("%s: stderr %q", tc.file, r.stderr)
		}
		r = runCLI(t, "", "--db", db, "batch", "send", "--json", tc.file)
		if got := batchOut(t, r).Batch; r.code != 0 || got != (batch.Result{Lines: lines, Duplicate: tc.events, Skipped: tc.skipped}) {
			t.Fatalf("%s re-run: exit %d, %+v", tc.file, r.code, got)
		}
		if n := countRows(t, db, "notifications"); n != tc.notifications {
			t.Fatalf("%s: %d notifications after a re-run, want %d", tc.file, n, tc.notifications)
		}
	}
}

// A bad line is reported with its number and reason, the others are
// accepted, and the exit status is 5; progress lines appear when asked.
func TestBatchSendBadLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 40, map[int]string{
		3:  `{"id": "evt_x", "type": "notice", "recipients": [{"email": "x@example.com"}]}`,
		17: `{"id": "evt_y", "type": "notice", "recipents": []}`,
	})
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--json", "--progress-every", "1ns")
	if r.code != exitRejected {
		t.Fatalf("exit %d, want %d: %s", r.code, exitRejected, r.stderr)
	}
	for _, want := range []string{"batch: line 3: invalid event: recipients[0].id: required\n",
		"batch: line 17: invalid event: recipents: unknown field\n", "batch: 40 lines, 38 accepted, 2 rejected\n",
		"batch: 40 lines, 38 accepted (38 new, 0 duplicate), 2 rejected; 38 new notifications\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if got := batchOut(t, r).Batch; got != (batch.Result{Lines: 40, New: 38, Notifications: 38, Rejected: 2}) {
		t.Fatalf("%+v", got)
	}
	if n := countRows(t, db, "events"); n != 38 {
		t.Fatalf("%d events, want 38", n)
	}
}

// --strict accepts nothing when one line is bad, and everything when none is.
func TestBatchSendStrict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 100, map[int]string{77: `{"id": "evt_77", "type": "notice", "channels": ["sms"], "recipients": [{"id": "a", "email": "a@x"}]}`})
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--strict", "--dispatch", "--route", "*=log://"+filepath.Join(dir, "sent.log"))
	if r.code != exitRejected || !strings.Contains(r.stderr, `line 77: invalid event: recipients[0]: recipient "a" has no address for channel "sms"`) ||
		!strings.Contains(r.stderr, "1 of 100 lines are bad; nothing accepted (--strict)") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := countRows(t, db, "events"); n != 0 {
		t.Fatalf("--strict with a bad line wrote %d events", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "sent.log")); err == nil {
		if b, _ := os.ReadFile(filepath.Join(dir, "sent.log")); len(b) > 0 {
			t.Fatalf("--strict with a bad line delivered:\n%s", b)
		}
	}
	writeLines(t, file, 100, nil)
	r = runCLI(t, "", "batch", "send", file, "--db", db, "--strict", "--json")
	s := batchOut(t, r)
	if r.code != 0 || s.Batch != (batch.Result{Lines: 100, New: 100, Notifications: 100}) || s.Strict == nil || s.Strict.Valid != 100 {
		t.Fatalf("exit %d, %+v %+v: %s", r.code, s.Batch, s.Strict, r.stderr)
	}
}

// --dispatch delivers what was accepted; the exit status puts a failed
// delivery (3) before rejected lines (5).
func TestBatchSendDispatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, logFile := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log")
	r := runCLI(t, "", "batch", "send", "testdata/batch_example.csv", "--db", db, "--dispatch", "--json",
		"--route", "*=log://"+logFile, "--log-level", "warn")
	s := batchOut(t, r)
	if r.code != 0 || s.Dispatch == nil || s.Dispatch.Sent != 4 || !strings.Contains(r.stderr, "dispatch: 4 attempts; sent 4") {
		t.Fatalf("exit %d %+v: %s", r.code, s.Dispatch, r.stderr)
	}
	b, _ := os.ReadFile(logFile)
	for _, addr := range []string{"ada@example.com", "ben@example.com", "+15550101", "+15550102"} {
		if !strings.Contains(string(b), addr) {
			t.Errorf("log lacks %s:\n%s", addr, b)
		}
	}

	// One line rejected, the rest delivered: 5.
	file := filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 10, map[int]string{4: "nonsense"})
	r = runCLI(t, "", "batch", "send", file, "--db", db, "--dispatch", "--route", "*=log://"+logFile, "--log-level", "warn")
	if r.code != exitRejected || !strings.Contains(r.stderr, "line 4: invalid event: malformed JSON") || !strings.Contains(r.stderr, "sent 9") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}

	// A provider that refuses for good: 3, though a line was rejected too.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"invalid recipient"}`, http.StatusUnprocessableEntity)
	}))
	defer bad.Close()
	db2 := filepath.Join(dir, "r2.db")
	r = runCLI(t, "", "batch", "send", file, "--db", db2, "--dispatch", "--route", "*=webhook+"+bad.URL, "--log-level", "error")
	if r.code != exitFailed || !strings.Contains(r.stderr, "failed 9") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestBatchSendUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	badHeader := filepath.Join(dir, "bad.csv")
	os.WriteFile(badHeader, []byte("id,type,recipient_id,emial\ne1,t,a,a@x\n"), 0o644)
	txt := filepath.Join(dir, "events.txt")
	os.WriteFile(txt, []byte(`{"id": "e1", "type": "t", "recipients": [{"id": "a", "email": "a@x"}]}`+"\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no file", []string{"batch", "send", "--db", db}, exitUsage, "batch send takes one FILE"},
		{"two files", []string{"batch", "send", "--db", db, "a.jsonl", "b.jsonl"}, exitUsage, "batch send takes one FILE"},
		{"unknown extension", []string{"batch", "send", "--db", db, txt}, exitUsage, "cannot tell the format"},
		{"bad format", []string{"batch", "send", "--db", db, "--format", "xml", txt}, exitUsage, `batch format "xml"`},
		{"missing file", []string{"batch", "send", "--db", db, filepath.Join(dir, "none.jsonl")}, exitUsage, "no such file"},
		{"unknown flag", []string{"batch", "send", "--db", db, txt, "--nope"}, exitUsage, "flag provided but not defined: -nope"},
		{"group", []string{"batch", "send", "--db", db, "--group", "0", "--format", "jsonl", txt}, exitUsage, "--group 0"},
		{"strict stdin", []string{"batch", "send", "--db", db, "--format", "csv", "--strict", "-"}, exitUsage, "--strict reads the file twice"},
		{"stdin without format", []string{"batch", "send", "--db", db, "-"}, exitUsage, "give --format"},
		{"bad header", []string{"batch", "send", "--db", db, badHeader}, exitRejected, `line 1: CSV header: unknown column "emial"`},
		{"bad route", []string{"batch", "send", "--db", db, "--dispatch", "--route", "email=ftp://x", "--format", "jsonl", txt}, exitUsage, `unknown scheme "ftp"`},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Fatalf("a refused batch created the database")
	}
	// --format for a file without a known extension, and standard input.
	if r := runCLI(t, "", "batch", "send", "--db", db, "--format", "ndjson", txt); r.code != 0 {
		t.Fatalf("--format ndjson: exit %d %s", r.code, r.stderr)
	}
	csvIn, _ := os.ReadFile("testdata/batch_example.csv")
	if r := runCLI(t, string(csvIn), "batch", "send", "--db", db, "--format", "csv", "--json", "-"); r.code != 0 || batchOut(t, r).Batch.New != 3 {
		t.Fatalf("standard input: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "batch", "send", "--help"); r.code != 0 || !strings.Contains(r.stdout, "recipient_id") || !strings.Contains(r.stdout, "Exit status") {
		t.Fatalf("--help: exit %d %q", r.code, r.stdout)
	}
}

// counter reads a growing database and log file while a process writes
// them; errors (the database not yet created) read as zero.
type counter struct {
	db      *sql.DB
	logFile string
}

func (c *counter) events() int {
	var n int
	if err := c.db.QueryRowContext(context.Background(), "SELECT count(*) FROM events").Scan(&n); err != nil {
		return 0
	}
	return n
}

func (c *counter) logLines() int {
	b, _ := os.ReadFile(c.logFile)
	return bytes.Count(b, []byte("\n"))
}

var logKey = regexp.MustCompile(`"key":"(er1_[0-9a-f]+)"`)

// batch send --dispatch killed with SIGKILL three times, at random points
// of accepting and delivering a 3,000-line file, then run to the end:
// every event and its notification exist exactly once, and every
// notification was delivered. The log provider honours no keys, so a kill
// between a call and its record may repeat a line: at most one per call in
// flight per kill.
func TestBatchSendSIGKILLThenRerun(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db, file, logFile := filepath.Join(dir, "relay.db"), filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "sent.log")
	const n, workers, kills = 3000, 8, 3
	writeLines(t, file, n, nil)
	args := []string{"batch", "send", file, "--db", db, "--dispatch", "--route", "*=log://" + logFile,
		"--lease", "1s", "--workers", fmt.Sprint(workers), "--log-level", "error", "--json"}

	sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	c := &counter{db: sdb, logFile: logFile}

	// Progress is events accepted (0 to n), then lines delivered (n to 2n).
	// The first kill lands while accepting, the last while delivering, the
	// middle one anywhere.
	targets := []int{100 + rand.IntN(n-400), 0, n + 100 + rand.IntN(n-400)}
	targets[1] = targets[0] + 100 + rand.IntN(targets[2]-targets[0]-200)
	progress := func() int { return c.events() + c.logLines() }
	for k, target := range targets {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(time.Minute)
	wait:
		for progress() < target {
			select {
			case err := <-exited:
				t.Fatalf("run %d ended before its kill at %d (progress %d): %v\n%s", k, target, progress(), err, stderr.String())
			case <-deadline:
				break wait
			case <-time.After(2 * time.Millisecond):
			}
		}
		at := progress()
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("kill %d: process was not killed by the signal; stderr:\n%s", k, stderr.String())
		}
		t.Logf("kill %d at progress %d (target %d): %d events, %d log lines", k, at, target, c.events(), c.logLines())
	}

	// The re-run finishes: interrupted calls are settled when their 1s
	// leases expire, and retried.
	final := exec.Command(bin, append(args, "--max-wait", "30s")...)
	var stdout, stderr bytes.Buffer
	final.Stdout, final.Stderr = &stdout, &stderr
	if err := final.Run(); err != nil {
		t.Fatalf("final run: %v\n%s", err, stderr.String())
	}
	var sum batchSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil || sum.Batch.Accepted() != n || sum.Batch.Rejected != 0 {
		t.Fatalf("final run printed %q: %v", stdout.String(), err)
	}

	// Exactly once in the database.
	var events, notes, keys, sent, perEvent int
	err = sdb.QueryRow(`SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM notifications),
		(SELECT count(DISTINCT key) FROM notifications), (SELECT count(*) FROM notifications WHERE status = 'sent'),
		(SELECT count(*) FROM events e WHERE (SELECT count(*) FROM notifications x WHERE x.event = e.id) = 1)`).
		Scan(&events, &notes, &keys, &sent, &perEvent)
	if err != nil {
		t.Fatal(err)
	}
	if events != n || notes != n || keys != n || perEvent != n || sent != n {
		t.Fatalf("%d events, %d notifications (%d keys, %d sent, %d events with exactly one): want %d of each", events, notes, keys, sent, perEvent, n)
	}
	// At least once in the log, with few repeats.
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range logKey.FindAllSubmatch(b, -1) {
		seen[string(m[1])]++
	}
	var missing, twice, extra int
	for i := range n {
		switch seen[relay.Key("default", fmt.Sprintf("evt_%d", i), "notice", fmt.Sprintf("u%d", i), "email")] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	extra = len(seen) - (n - missing)
	t.Logf("ledger: %d lines, %d kills; %d events, %d notifications, %d sent; log: %d lines, %d keys, %d missing, %d repeated, %d unknown keys; final run: %+v, %+v",
		n, kills, events, notes, sent, bytes.Count(b, []byte("\n")), len(seen), missing, twice, extra, sum.Batch, sum.Dispatch)
	if missing != 0 || extra != 0 || twice > kills*workers {
		t.Fatalf("log: %d keys missing, %d unknown, %d repeated (at most %d allowed)", missing, extra, twice, kills*workers)
	}
}

// eventIDs lists the event ids in a database, sorted.
func eventIDs(t *testing.T, db string) []string {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	rows, err := sdb.Query("SELECT event_id FROM events ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// A 5,000-row CSV file with 4 bad rows, two of them quotes left open (one in
// recipient_id, one in a body, closed by chance by a later row's quote),
// between rows whose quoted bodies legitimately span lines (one such line
// looks like a row): every row is an event or a reported line, each bad one
// reported at its own line, and the counts add up. testdata/batch_5000_bad.csv
// was written by a script; its rows are c1 to c5000.
func TestBatchSendCSVUnterminatedQuote(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	r := runCLI(t, "", "batch", "send", "testdata/batch_5000_bad.csv", "--db", db, "--json")
	if r.code != exitRejected {
		t.Fatalf("exit %d, want %d: %s", r.code, exitRejected, r.stderr)
	}
	if got := batchOut(t, r).Batch; got != (batch.Result{Lines: 5000, New: 4996, Notifications: 4996, Rejected: 4}) {
		t.Fatalf("%+v", got)
	}
	var reported []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "batch: line ") {
			reported = append(reported, l)
		}
	}
	want := []string{
		"batch: line 1213: 3 cells, but the header has 5 columns",
		"batch: line 2528: unterminated quoted cell starting at line 2528 column 14 (recipient_id): only body, html and data cells may go on to the next line",
		"batch: line 3740: unterminated quoted cell starting at line 3740 column 38 (body): read as one row, it breaks at line 3743 column 38, a closing quote followed by \"h\"",
		"batch: line 4449: invalid event: recipients[0].email: not an email address",
	}
	if len(reported) != len(want) {
		t.Fatalf("reported %d lines, want %d:\n%s", len(reported), len(want), strings.Join(reported, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(reported[i], want[i]) {
			t.Errorf("reported\n  %s\nwant\n  %s", reported[i], want[i])
		}
	}
	if !strings.Contains(r.stderr, "batch: 5000 lines, 4996 accepted (4996 new, 0 duplicate), 4 rejected; 4996 new notifications\n") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	// Exactly the good rows, none of the body lines that look like rows.
	var ids []string
	for i := 1; i <= 5000; i++ {
		if i != 1200 && i != 2500 && i != 3700 && i != 4400 {
			ids = append(ids, fmt.Sprintf("c%d", i))
		}
	}
	slices.Sort(ids)
	if got := eventIDs(t, db); !slices.Equal(got, ids) {
		t.Fatalf("%d events; want the %d good rows", len(got), len(ids))
	}
}

// Quoted cells that span lines (CRLF, blank lines inside, doubled quotes,
// a line that looks like a row) are one row each, delivered whole; a
// blank line between rows is counted as skipped.
func TestBatchSendCSVMultiline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, logFile := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log")
	r := runCLI(t, "", "batch", "send", "testdata/batch_multiline.csv", "--db", db, "--json", "--dispatch",
		"--route", "*=log://"+logFile, "--log-level", "warn")
	s := batchOut(t, r)
	if r.code != 0 || s.Batch != (batch.Result{Lines: 3, New: 2, Notifications: 2, Skipped: 1}) || s.Dispatch == nil || s.Dispatch.Sent != 2 {
		t.Fatalf("exit %d, %+v %+v: %s", r.code, s.Batch, s.Dispatch, r.stderr)
	}
	if !strings.Contains(r.stderr, "batch: 3 lines, 2 accepted (2 new, 0 duplicate), 0 rejected, 1 skipped (blank or comment); 2 new notifications\n") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	b, _ := os.ReadFile(logFile)
	body := `"body":"Dear Ada,\n\nyour \"order\" shipped.\nm9,notice,eve,eve@example.com,this line is part of the body,,,\nThanks"`
	if !strings.Contains(string(b), body) || !strings.Contains(string(b), `"body":"one line"`) {
		t.Fatalf("log lacks the bodies:\n%s", b)
	}
	if got := eventIDs(t, db); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("events %q", got)
	}
}

// runOnTerminal runs the binary with its stderr on a pseudo-terminal and
// returns what the terminal showed, stdout, and the exit code.
func runOnTerminal(t *testing.T, args ...string) (term, stdout string, code int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds its own copy; the master reads EIO once it exits
	var shown bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&shown, ptmx) // ends with EIO when the child's end closes
		close(copied)
	}()
	err = cmd.Wait()
	<-copied
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return shown.String(), out.String(), cmd.ProcessState.ExitCode()
}

var attemptLine = regexp.MustCompile(`level=(\w+) msg=(attempt|"decided without a call")`)

// batch send --dispatch of 10,000 lines to a log:// route, with stderr on
// a terminal: a bar while accepting, a bar with the counts while
// delivering, then the summary; not a line per attempt. With --log-level
// debug the attempt lines are there, at DEBUG.
func TestBatchSendDispatchTerminal(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds the binary and delivers 10,000 notifications")
	}
	t.Parallel()
	dir := t.TempDir()
	file, logFile := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "sent.log")
	const n = 10000
	writeLines(t, file, n, nil)
	term, _, code := runOnTerminal(t, "batch", "send", file, "--db", filepath.Join(dir, "r.db"), "--dispatch", "--route", "*=log://"+logFile)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, term)
	}
	if m := attemptLine.FindAllString(term, -1); len(m) > 0 {
		t.Fatalf("%d attempt lines on the terminal, the first %q", len(m), m[0])
	}
	for _, want := range []string{"batch: accepting", "dispatch: delivering",
		fmt.Sprintf("batch: %d lines, %d accepted (%d new, 0 duplicate), 0 rejected; %d new notifications\r\n", n, n, n, n),
		fmt.Sprintf("dispatch: %d attempts; sent %d, failed 0, dead 0, unknown 0; 0 waiting for a retry\r\n", n, n)} {
		if !strings.Contains(term, want) {
			t.Errorf("the terminal lacks %q:\n%.2000s", want, term)
		}
	}
	if got := (&counter{logFile: logFile}).logLines(); got != n {
		t.Fatalf("%d lines in the provider's log, want %d", got, n)
	}

	// --log-level debug: every attempt, at DEBUG.
	writeLines(t, file, 50, nil)
	term, _, code = runOnTerminal(t, "batch", "send", file, "--db", filepath.Join(dir, "r2.db"), "--dispatch",
		"--route", "*=log://"+filepath.Join(dir, "sent2.log"), "--log-level", "debug")
	m := attemptLine.FindAllStringSubmatch(term, -1)
	if code != 0 || len(m) != 50 || m[0][1] != "DEBUG" {
		t.Fatalf("exit %d, %d attempt lines (want 50 at DEBUG):\n%s", code, len(m), term)
	}
}

// Where stderr is not a terminal, the attempt lines stay at INFO, as
// dispatch writes them, and --log-level warn leaves them out.
func TestBatchSendAttemptLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 20, nil)
	r := runCLI(t, "", "batch", "send", file, "--db", filepath.Join(dir, "r.db"), "--dispatch", "--route", "*=log://"+filepath.Join(dir, "sent.log"))
	m := attemptLine.FindAllStringSubmatch(r.stderr, -1)
	if r.code != 0 || len(m) != 20 || m[0][1] != "INFO" || !strings.Contains(r.stderr, "dispatch: 20 attempts; sent 20") {
		t.Fatalf("exit %d, %d attempt lines (want 20 at INFO):\n%s", r.code, len(m), r.stderr)
	}
	r = runCLI(t, "", "batch", "send", file, "--db", filepath.Join(dir, "r2.db"), "--dispatch", "--route", "*=log://"+filepath.Join(dir, "sent2.log"),
		"--log-level", "warn")
	if r.code != 0 || attemptLine.MatchString(r.stderr) || !strings.Contains(r.stderr, "dispatch: 20 attempts; sent 20") {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
}

// The handler batch send gives the relay's log, as a table: which records
// show, at which level, on a terminal or not; and the per-attempt records
// are counted for progress whatever the level.
func TestBatchLogHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		terminal bool
		level    slog.Level
		want     string // the records shown, as level and message
	}{
		{true, slog.LevelInfo, "INFO dispatcher stopped"},
		{true, slog.LevelDebug, `DEBUG attempt|DEBUG decided without a call|INFO dispatcher stopped`},
		{true, slog.LevelWarn, ""},
		{false, slog.LevelInfo, `INFO attempt|INFO decided without a call|INFO dispatcher stopped`},
		{false, slog.LevelDebug, `INFO attempt|INFO decided without a call|INFO dispatcher stopped`},
		{false, slog.LevelWarn, ""},
	} {
		var buf bytes.Buffer
		next := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level})
		counts := newDeliveryCounts()
		log := slog.New(&batchLogHandler{next: next, level: attemptLevel(tc.terminal), counts: counts}).With("run", 1)
		log.Info("attempt", "notification", int64(1), "status", "pending", "applied", true)
		log.Info("attempt", "notification", int64(2), "status", "sent", "applied", true)
		log.Info("decided without a call", "notification", int64(3), "status", "dead", "applied", true)
		log.Info("attempt", "notification", int64(1), "status", "sent", "applied", true)
		log.Info("attempt", "notification", int64(4), "status", "sent", "applied", false)
		log.Info("dispatcher stopped")
		var got []string // each level and message shown, once
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var rec struct{ Level, Msg string }
			if err := dec.Decode(&rec); err != nil {
				t.Fatal(err)
			}
			if r := rec.Level + " " + rec.Msg; !slices.Contains(got, r) {
				got = append(got, r)
			}
		}
		if strings.Join(got, "|") != tc.want {
			t.Errorf("terminal %v, --log-level %v: shown %q, want %q", tc.terminal, tc.level, strings.Join(got, "|"), tc.want)
		}
		if s := counts.snapshot(); s != (relay.Summary{Attempts: 4, Sent: 2, Dead: 1}) {
			t.Errorf("terminal %v, --log-level %v: counted %+v", tc.terminal, tc.level, s)
		}
	}
}

package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// tailApp creates an application database in dir with an orders table and
// the outbox from outbox.sql, and returns the application's connection.
func tailApp(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ddl, err := os.ReadFile("outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(ddl), `CREATE TABLE orders (id TEXT PRIMARY KEY, total_cents INTEGER NOT NULL)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// placeOrder is the application's transaction: the order and its outbox
// row commit together.
func placeOrder(db *sql.DB, i int) (int64, error) {
	ev, _ := json.Marshal(relay.Event{ID: fmt.Sprintf("ord_%d", i), Type: "order.created", Purpose: "receipt",
		Recipients: []relay.Recipient{{ID: fmt.Sprintf("cus_%d", i), Email: fmt.Sprintf("c%d@example.com", i)}},
		Subject:    "Your order", Body: fmt.Sprintf("Order %d received.", i)})
	tx, err := db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO orders (id, total_cents) VALUES (?, ?)`, fmt.Sprintf("ord_%d", i), 100*i); err != nil {
		return 0, err
	}
	var row int64
	if err := tx.QueryRow(`INSERT INTO edgerelay_outbox (event) VALUES (?) RETURNING id`, string(ev)).Scan(&row); err != nil {
		return 0, err
	}
	return row, tx.Commit()
}

// relayReader reads edgerelay's database while a tailer process writes it.
type relayReader struct {
	path string
	db   *sql.DB
}

func (rr *relayReader) open(t *testing.T) bool {
	if rr.db != nil {
		return true
	}
	if _, err := os.Stat(rr.path); err != nil {
		return false
	}
	db, err := sql.Open("sqlite", "file:"+rr.path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rr.db = db
	return true
}

// state is how many events are accepted and the saved position (-1 before
// the database exists or has its schema).
func (rr *relayReader) state(t *testing.T) (events, position int64) {
	if !rr.open(t) {
		return -1, -1
	}
	err := rr.db.QueryRow(`SELECT (SELECT count(*) FROM events), (SELECT coalesce(max(position), 0) FROM source_positions)`).Scan(&events, &position)
	if err != nil {
		return -1, -1 // not migrated yet
	}
	return events, position
}

var resumeRE = regexp.MustCompile(`tail: reading rows after the saved position.* position=(\d+)`)

// A tailer process is SIGKILLed three times, twice at random moments and
// once between a batch's commit and the save of its position, while the
// application writes 2,000 orders, each order and its outbox row in one
// transaction, and restarted each time; a last run is let finish. Every
// outbox event is accepted exactly once, none is lost, and each kill's
// accepted-but-unsaved rows are read again as duplicates, creating nothing.
func TestTailSIGKILLResumesWithoutLossOrRepeat(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, relayPath := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db")
	app := tailApp(t, appPath)

	const n = 2000
	lastRow := make(chan int64, 1)
	writerErr := make(chan error, 1)
	var written atomic.Int64
	go func() {
		var last int64
		for i := 1; i <= n; i++ {
			row, err := placeOrder(app, i)
			if err != nil {
				writerErr <- fmt.Errorf("order %d: %w", i, err)
				return
			}
			last = row
			written.Store(int64(i))
			if i%2 == 0 {
				time.Sleep(time.Millisecond) // an application, not a bulk load
			}
		}
		lastRow <- last
		writerErr <- nil
	}()

	rr := &relayReader{path: relayPath}
	args := []string{"tail", "--db", relayPath, "--source", "sqlite://" + appPath + "?mark_processed=true",
		"--poll", "10ms", "--batch", "50", "--log-level", "info", "--json"}
	start := func(env ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(bin, args...)
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stdout, &stderr
	}
	resumedAt := func(stderr string) int64 {
		m := resumeRE.FindStringSubmatch(stderr)
		if m == nil {
			return -1
		}
		p, _ := strconv.ParseInt(m[1], 10, 64)
		return p
	}
	deadline := time.Now().Add(time.Minute)

	type kill struct{ resumed, events, saved, written int64 }
	var kills []kill
	var reread int64
	for k := range 3 {
		var cmd *exec.Cmd
		var stderr *bytes.Buffer
		if k < 2 {
			cmd, _, stderr = start()
			// Kill once a random number of events is in.
			target := int64(k*550 + 100 + rand.IntN(400))
			for {
				ev, _ := rr.state(t)
				if ev >= target || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
			cmd.Process.Signal(syscall.SIGKILL)
		} else {
			// A batch is committed in one transaction and its position saved
			// right after, so a timer rarely lands in between: the last kill
			// is the crash point there, after the 2nd to 4th batch's commit.
			cmd, _, stderr = start(fmt.Sprintf("EDGERELAY_CRASH_AT=accepted:%d", 2+rand.IntN(3)))
		}
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("kill %d: the tailer was not killed by the signal (%v); stderr:\n%s", k, err, stderr)
		}
		events, saved := rr.state(t)
		kills = append(kills, kill{resumed: resumedAt(stderr.String()), events: events, saved: saved, written: written.Load()})
		reread += events - saved // accepted, position not yet saved: read again by the next run
	}

	// The last run goes until the outbox is relayed, then stops cleanly.
	cmd, stdout, stderr := start()
	if err := <-writerErr; err != nil {
		t.Fatalf("application: %v", err)
	}
	last := <-lastRow
	for {
		ev, pos := rr.state(t)
		if ev == n && pos == last {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("after %s: %d events, position %d; want %d and %d; stderr:\n%s", time.Minute, ev, pos, n, last, stderr)
		}
		time.Sleep(2 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail after SIGTERM: %v\n%s", err, stderr)
	}
	var final sources.TailStats
	if err := json.Unmarshal(stdout.Bytes(), &final); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}

	// The ledger: every order's event once, with its notification once.
	perEvent := map[string]int{}
	rows, err := rr.db.Query(`SELECT e.event_id, count(n.id) FROM events e LEFT JOIN notifications n ON n.event = e.id GROUP BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	var events, notes int
	for rows.Next() {
		var id string
		var c int
		rows.Scan(&id, &c)
		perEvent[id]++
		events++
		notes += c
		if c != 1 {
			t.Errorf("event %s has %d notifications, want 1", id, c)
		}
	}
	rows.Close()
	var lost, twice []string
	for i := 1; i <= n; i++ {
		switch c := perEvent[fmt.Sprintf("ord_%d", i)]; {
		case c == 0:
			lost = append(lost, fmt.Sprintf("ord_%d", i))
		case c > 1:
			twice = append(twice, fmt.Sprintf("ord_%d", i))
		}
	}
	var unmarked, orders int
	app.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NULL`).Scan(&unmarked)
	app.QueryRow(`SELECT count(*) FROM orders`).Scan(&orders)

	var kl []string
	for i, k := range kills {
		next := resumedAt(stderr.String())
		if i+1 < len(kills) {
			next = kills[i+1].resumed
		}
		kl = append(kl, fmt.Sprintf("kill %d: resumed after row %d, killed with %d of %d orders written, %d events in and position %d saved; the next run resumed after row %d and read %d rows again",
			i+1, k.resumed, k.written, n, k.events, k.saved, next, k.events-next))
		if next != k.saved {
			t.Errorf("run after kill %d resumed after row %d, want the saved %d", i+1, next, k.saved)
		}
	}
	t.Logf("ledger: %d orders, %d outbox rows; %d events accepted, %d notifications; lost %d, accepted twice %d; %d rows left unmarked\n  %s\n  last run: %+v",
		orders, last, events, notes, len(lost), len(twice), unmarked, strings.Join(kl, "\n  "), final)
	if len(lost) != 0 || len(twice) != 0 || events != n || notes != n {
		t.Fatalf("lost %v, twice %v; %d events and %d notifications for %d orders", lost, twice, events, notes, n)
	}
	if unmarked != 0 || final.Rejected != 0 || final.Position != last {
		t.Fatalf("%d rows unmarked, last run %+v", unmarked, final)
	}
	// The last run read again what the last kill left unsaved, as duplicates.
	if lk := kills[len(kills)-1]; final.Duplicates != lk.events-lk.saved || final.Accepted != n-lk.events {
		t.Fatalf("last run %+v; want %d duplicates and %d accepted", final, lk.events-lk.saved, n-lk.events)
	}
	if reread == 0 {
		t.Fatal("every kill landed right after a save: the test did not exercise a re-read")
	}
}

func TestTailUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")
	appPath := filepath.Join(dir, "app.db")
	tailApp(t, appPath)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no source", nil, exitUsage, "--source is required"},
		{"bad URL", []string{"--source", "sqlite://app.db"}, exitUsage, "three slashes"},
		{"unknown scheme", []string{"--source", "oracle://u:pw@h/db"}, exitUsage, `unknown scheme "oracle"`},
		{"bad poll", []string{"--source", "sqlite:" + appPath, "--poll", "0s"}, exitUsage, "--poll"},
		{"bad batch", []string{"--source", "sqlite:" + appPath, "--batch", "0"}, exitUsage, "--batch"},
		{"missing table", []string{"--source", "sqlite:" + appPath + "?table=outbox"}, exitError, `no table "outbox"`},
		{"missing file", []string{"--source", "sqlite:" + filepath.Join(dir, "nope.db")}, exitError, "no such file"},
	} {
		r := runCLI(t, "", append([]string{"tail", "--db", db}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line naming %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Fatal("a tail that could not start created the edgerelay database")
	}
	if _, err := os.Stat(filepath.Join(dir, "nope.db")); err == nil {
		t.Fatal("a tail of a missing file created it")
	}
}

// tail accepts what is in the outbox and, with --dispatch, delivers it in
// the same process; stopped with SIGTERM, it prints its counters.
func TestTailDispatchInOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, db, out := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db"), filepath.Join(dir, "sent.jsonl")
	app := tailApp(t, appPath)
	for i := 1; i <= 3; i++ {
		if _, err := placeOrder(app, i); err != nil {
			t.Fatal(err)
		}
	}
	app.Exec(`INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "x", "type": "t"}')`)
	cmd := exec.Command(bin, "tail", "--db", db, "--source", "sqlite:"+appPath, "--poll", "5ms", "--dispatch",
		"--route", "*=log://"+out, "--json", "--log-level", "warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if b, _ := os.ReadFile(out); bytes.Count(b, []byte("\n")) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("nothing delivered after a minute; stderr:\n%s", &stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail after SIGTERM: %v\n%s", err, &stderr)
	}
	var st sources.TailStats
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
		t.Fatalf("stdout %q: %v", &stdout, err)
	}
	if st.Accepted != 3 || st.Rejected != 1 || st.Position != 4 || len(st.Rejections) != 1 || st.Rejections[0].Row != 4 {
		t.Fatalf("stats %+v", st)
	}
	if e := stderr.String(); !strings.Contains(e, `row=4 event=x reason="invalid event: recipients: required`) ||
		!strings.Contains(e, "tail: stopped at row 4: 3 accepted, 0 duplicates, 1 rejected") {
		t.Fatalf("stderr does not report the rejected row and the counters:\n%s", e)
	}
	b, _ := os.ReadFile(out)
	if got := bytes.Count(b, []byte(`"event_id":"ord_`)); got != 3 {
		t.Fatalf("%d deliveries, want 3:\n%s", got, b)
	}
}

// tail --once (cron): each run relays what is committed, then exits with
// dispatch --until-idle's codes; a failure exits 1 at once (not retried
// forever) and the next run goes on without repeating anything.
func TestTailOnceThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, db, out := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db"), filepath.Join(dir, "sent.jsonl")
	app := tailApp(t, appPath)
	once := func(extra ...string) (int, onceSummary, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"tail", "--once", "--db", db, "--json", "--log-level", "warn",
			"--source", "sqlite:" + appPath + "?mark_processed=true&busy_timeout=20ms", "--batch", "2"}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
			t.Fatalf("tail --once still running after a minute (it must exit once caught up); stderr:\n%s", &stderr)
		}
		var sum onceSummary
		if stdout.Len() == 0 && cmd.ProcessState.ExitCode() == exitError {
			return exitError, sum, stderr.String() // it could not start
		}
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Fatalf("stdout %q: %v; stderr:\n%s", &stdout, err, &stderr)
		}
		return cmd.ProcessState.ExitCode(), sum, stderr.String()
	}
	for i := 1; i <= 5; i++ {
		if _, err := placeOrder(app, i); err != nil {
			t.Fatal(err)
		}
	}
	// Five rows in batches of two: it reads until caught up, then exits 0.
	if code, sum, e := once(); code != exitOK || sum.Accepted != 5 || sum.Position != 5 || sum.Rejected != 0 {
		t.Fatalf("first run: exit %d, %+v; want 0, 5 accepted, position 5\n%s", code, sum.TailStats, e)
	}
	// Nothing new: exit 0, nothing read again.
	if code, sum, e := once(); code != exitOK || sum.Read != 0 || sum.Position != 5 {
		t.Fatalf("second run: exit %d, %+v; want 0, nothing read\n%s", code, sum.TailStats, e)
	}
	// A rejected row: exit 5, the rows around it relayed.
	placeOrder(app, 6)
	if _, err := app.Exec(`INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "x", "type": "t"}')`); err != nil {
		t.Fatal(err)
	}
	placeOrder(app, 7)
	if code, sum, e := once(); code != exitRejected || sum.Accepted != 2 || sum.Rejected != 1 || sum.Position != 8 ||
		!strings.Contains(e, "row=7") {
		t.Fatalf("run with a bad row: exit %d, %+v; want 5, 2 accepted, 1 rejected (row 7 logged), position 8\n%s", code, sum.TailStats, e)
	}
	// The app holds its write lock, so the source cannot be opened for
	// marking: exit 1 at once (not a wait), the position stays where it was.
	// (A failure later in the run is returned the same way:
	// sources.TestTailOnceReturnsAFailure.)
	placeOrder(app, 8)
	lock, err := app.Begin() // _txlock=immediate: takes the write lock now
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(`INSERT INTO orders (id, total_cents) VALUES ('lock', 0)`); err != nil {
		t.Fatal(err)
	}
	code, sum, e := once()
	lock.Rollback()
	if code != exitError || !strings.Contains(e, "locked") {
		t.Fatalf("run against a locked app database: exit %d, %+v; want 1 naming the lock\n%s", code, sum.TailStats, e)
	}
	// The next run relays row 9 and delivers everything, like dispatch
	// --until-idle.
	code, sum, e = once("--dispatch", "--route", "*=log://"+out)
	if code != exitOK || sum.Position != 9 || sum.Accepted+sum.Duplicates != 1 || sum.Dispatch == nil || sum.Dispatch.Sent != 8 {
		t.Fatalf("run with --dispatch: exit %d, %+v, dispatch %+v; want 0, position 9, 8 sent\n%s", code, sum.TailStats, sum.Dispatch, e)
	}
	var unmarked int
	app.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NULL`).Scan(&unmarked)
	if unmarked != 1 {
		t.Fatalf("%d rows unmarked, want 1 (the rejected one)", unmarked)
	}
	b, _ := os.ReadFile(out)
	if got := bytes.Count(b, []byte(`"event_id":"ord_`)); got != 8 {
		t.Fatalf("%d deliveries, want 8:\n%s", got, b)
	}
}

// tail --once stopped by SIGTERM before it caught up exits 4, not 0 (cron
// must not take it for caught up), with what it read saved.
func TestTailOnceStoppedBySignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, db := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db")
	app := tailApp(t, appPath)
	const n = 20000 // in batches of one row: seconds of work, stopped within milliseconds
	tx, err := app.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		ev := fmt.Sprintf(`{"id":"e%d","type":"t","recipients":[{"id":"u%d","email":"u%d@example.com"}],"body":"b"}`, i, i, i)
		if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "tail", "--once", "--db", db, "--json", "--log-level", "warn", "--source", "sqlite:"+appPath, "--batch", "1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rr := &relayReader{path: db}
	deadline := time.Now().Add(time.Minute)
	for {
		if rr.open(t) {
			if ev, _ := rr.state(t); ev > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("nothing accepted after a minute; stderr:\n%s", &stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	var sum onceSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout %q: %v; stderr:\n%s", &stdout, err, &stderr)
	}
	if sum.Position >= n {
		t.Skipf("it caught up (%d rows) before the signal arrived: nothing to check", n)
	}
	if code := cmd.ProcessState.ExitCode(); code != exitWaiting || sum.Position == 0 {
		t.Fatalf("exit %d at row %d of %d; want 4, some rows relayed\n%s", code, sum.Position, n, &stderr)
	}
	if _, pos := rr.state(t); pos != sum.Position {
		t.Fatalf("saved position %d, the run reported %d", pos, sum.Position)
	}
}

package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// These tests make the store's writes fail for real: a trigger on the
// database file makes SQLite abort the statements the dispatcher writes
// (a claim, an attempt row), through the real writer, as a full disk or an
// I/O error would; dropping the trigger gives the space back.

const injectedFault = "injected disk fault"

// faultDB opens a second connection on the relay's database file, for
// creating and dropping fault triggers beside the running relay.
func faultDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func execSQL(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Claims are UPDATEs of notifications; accepts only insert them.
const (
	failClaims      = `CREATE TRIGGER fail_claims BEFORE UPDATE ON notifications BEGIN SELECT RAISE(ABORT, '` + injectedFault + `'); END`
	failRecords     = `CREATE TRIGGER fail_records BEFORE INSERT ON attempts BEGIN SELECT RAISE(ABORT, '` + injectedFault + `'); END`
	dropFailClaims  = `DROP TRIGGER fail_claims`
	dropFailRecords = `DROP TRIGGER fail_records`
)

// logCounter counts log records by message and passes them on to a test's
// output.
type logCounter struct {
	slog.Handler
	mu *sync.Mutex
	n  map[string]int
}

func newLogCounter(t *testing.T) *logCounter {
	return &logCounter{Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}),
		mu: new(sync.Mutex), n: map[string]int{}}
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCounter) Handle(ctx context.Context, rec slog.Record) error {
	h.mu.Lock()
	h.n[rec.Message]++
	h.mu.Unlock()
	return h.Handler.Handle(ctx, rec)
}

func (h *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCounter{Handler: h.Handler.WithAttrs(as), mu: h.mu, n: h.n}
}

func (h *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{Handler: h.Handler.WithGroup(name), mu: h.mu, n: h.n}
}

// count returns how many records had a message starting with prefix, at
// or above level.
func (h *logCounter) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for m, k := range h.n {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func statusOf(t *testing.T, r *Relay, id int64) string {
	t.Helper()
	return notification(t, r, id).Status
}

const (
	episodeLog   = "dispatcher: a store write failed"
	retryLog     = "dispatcher: store write still failing"
	recoveredLog = "dispatcher: store writes work again"
)

// A started dispatcher (serve) outlives a store that refuses its writes:
// it logs the trouble once, keeps trying with backoff, reports it through
// DispatchErr, and once the writes work delivers what was accepted during
// and after the episode, each once.
func TestDispatcherSurvivesFailingWrites(t *testing.T) {
	t.Parallel()
	s := setupSim(t, false)
	logs := newLogCounter(t)
	path := t.TempDir() + "/relay.db"
	r := setupRelayAt(t, path, Options{Logger: slog.New(logs), Routes: Routes{"email": {s.provider(t, "none")}}})
	db := faultDB(t, path)
	if err := r.DispatchErr(); err != nil {
		t.Fatalf("DispatchErr before Start: %v", err)
	}

	execSQL(t, db, failClaims)
	rcpt := func(name string) Recipient { return Recipient{ID: name, Email: name + "@example.com"} }
	during := accept(t, r, receipt("evt_during", rcpt("during")))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Several claims fail (the writer rolls each back) and the dispatcher
	// says so.
	waitFor(t, 5*time.Second, "the dispatcher retried its failing claim 4 times", func() bool {
		return r.store.Stats().Failed >= 4
	})
	if err := r.DispatchErr(); err == nil || !strings.Contains(err.Error(), injectedFault) {
		t.Errorf("DispatchErr while claims fail: %v, want the injected fault", err)
	}
	// An accept during the episode works, and wakes the dispatcher, which
	// still cannot claim.
	during2 := accept(t, r, receipt("evt_during2", rcpt("during2")))
	failed := r.store.Stats().Failed
	waitFor(t, 5*time.Second, "a claim after the accept", func() bool { return r.store.Stats().Failed > failed })
	for _, id := range []int64{during.Notifications[0].ID, during2.Notifications[0].ID} {
		if st := statusOf(t, r, id); st != model.StatusPending {
			t.Errorf("notification %d is %s while claims fail, want pending", id, st)
		}
	}
	if n := s.srv.Requests(); n != 0 {
		t.Errorf("%d requests reached the provider while claims failed", n)
	}

	execSQL(t, db, dropFailClaims)
	after := accept(t, r, receipt("evt_after", rcpt("after")))
	ids := []int64{during.Notifications[0].ID, during2.Notifications[0].ID, after.Notifications[0].ID}
	waitFor(t, 5*time.Second, "every notification sent once the writes work", func() bool {
		for _, id := range ids {
			if statusOf(t, r, id) != model.StatusSent {
				return false
			}
		}
		return true
	})
	if err := r.DispatchErr(); err != nil {
		t.Errorf("DispatchErr after the episode: %v", err)
	}
	counts := s.srv.Counts()
	for _, name := range []string{"during", "during2", "after"} {
		if c := counts[name+"@example.com"]; c != 1 {
			t.Errorf("%s received %d emails, want 1", name, c)
		}
	}
	if e, rt, rc := logs.count(episodeLog), logs.count(retryLog), logs.count(recoveredLog); e != 1 || rc != 1 || rt < 3 {
		t.Errorf("logged the failure %d times (retries at debug: %d), the recovery %d times; want the failure once, the recovery once, "+
			"over at least 4 failed turns", e, rt, rc)
	}
	if n := logs.count("dispatcher stopped"); n != 0 {
		t.Errorf("a started dispatcher logged %d times that it stopped", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// Stop ends a started dispatcher's backoff at once.
func TestStopDuringDispatchBackoff(t *testing.T) {
	t.Parallel()
	s := setupSim(t, false)
	path := t.TempDir() + "/relay.db"
	// A poll of an hour: the backoff after the first failure is an hour
	// long, so a Stop that waited for it would run out of its minute.
	r := setupRelayAt(t, path, Options{Poll: time.Hour, Routes: Routes{"email": {s.provider(t, "none")}}})
	execSQL(t, faultDB(t, path), failClaims)
	accept(t, r, receipt("evt_501", ada))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a failed claim", func() bool { return r.DispatchErr() != nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Stop during an hour's backoff: %v, want it to end the backoff at once", err)
	}
}

// The cron mode does not wait for the disk: it reports the error (dispatch
// --until-idle exits non-zero) and the next run starts over.
func TestRunUntilIdleReturnsStoreError(t *testing.T) {
	t.Parallel()
	s := setupSim(t, false)
	logs := newLogCounter(t)
	path := t.TempDir() + "/relay.db"
	r := setupRelayAt(t, path, Options{Logger: slog.New(logs), Routes: Routes{"email": {s.provider(t, "none")}}})
	db := faultDB(t, path)
	execSQL(t, db, failClaims)
	res := accept(t, r, receipt("evt_501", ada))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := r.RunUntilIdle(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), injectedFault) {
		t.Fatalf("RunUntilIdle: %+v, %v; want the injected fault", sum, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("RunUntilIdle returned only when its context ended: %v", err)
	}
	if n := logs.count("dispatcher stopped"); n != 1 {
		t.Errorf("logged %d times that the run stopped, want 1", n)
	}
	if err := r.DispatchErr(); err != nil {
		t.Errorf("DispatchErr after the run: %v, want nil (no dispatcher)", err)
	}
	// The next run, with the writes working, delivers.
	execSQL(t, db, dropFailClaims)
	if sum := runIdle(t, r, 0); sum.Sent != 1 || !sum.OK() {
		t.Errorf("second run: %+v, want one sent", sum)
	}
	if st := statusOf(t, r, res.Notifications[0].ID); st != model.StatusSent {
		t.Errorf("status %s, want sent", st)
	}
}

// The provider has sent; the first writes of the attempt fail, then work
// again while the lease holds. The outcome this process knows must be
// recorded: sent, one attempt, one email (the provider does not honour
// keys, so a resend would be a second email).
func TestRecordRetriedWhileLeaseHolds(t *testing.T) {
	t.Parallel()
	s := setupSim(t, false)
	logs := newLogCounter(t)
	path := t.TempDir() + "/relay.db"
	r := setupRelayAt(t, path, Options{Logger: slog.New(logs), Lease: 4 * time.Second,
		Routes: Routes{"email": {s.provider(t, "none")}}})
	db := faultDB(t, path)
	execSQL(t, db, failRecords)
	res := accept(t, r, receipt("evt_501", ada))
	id := res.Notifications[0].ID
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.waitArrivals(t, 1)
	const k = 3
	waitFor(t, 3*time.Second, fmt.Sprintf("%d failed writes of the attempt", k), func() bool {
		return r.store.Stats().Failed >= k
	})
	n := notification(t, r, id)
	if n.Status != model.StatusSending || len(n.AttemptLog) != 0 {
		t.Fatalf("while the attempt's writes fail: %s with %d attempts, want sending with none", n.Status, len(n.AttemptLog))
	}
	if n.LeaseUntil == nil || time.Until(*n.LeaseUntil) < time.Second {
		t.Fatalf("lease %v: too little of it left for the test", n.LeaseUntil)
	}
	execSQL(t, db, dropFailRecords)

	waitFor(t, 3*time.Second, "the attempt recorded", func() bool { return statusOf(t, r, id) != model.StatusSending })
	n = notification(t, r, id)
	if n.Status != model.StatusSent || len(n.AttemptLog) != 1 || n.AttemptLog[0].Outcome != "sent" {
		t.Fatalf("status %s, attempts %v; want sent after one attempt that was sent", n.Status, outcomes(n))
	}
	if c := s.srv.Counts()["ada@example.com"]; c != 1 || s.srv.Requests() != 1 {
		t.Errorf("ada received %d emails in %d requests, want 1", c, s.srv.Requests())
	}
	// Stop waits for the call (and its log lines) to finish.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if got := logs.count("record attempt: write failed"); got != 1 {
		t.Errorf("logged the failing record %d times, want once", got)
	}
	if got := logs.count("record attempt: written after retries"); got != 1 {
		t.Errorf("logged the record written after retries %d times, want once", got)
	}
}

// A record that keeps failing does not hold up shutdown: a stop whose
// drain time runs out ends the retries, and a closed store ends them at
// once. The claim is left to lease recovery.
func TestRecordRetryEndsOnShutdown(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"drain timeout", "store closed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := setupSim(t, false)
			path := t.TempDir() + "/relay.db"
			// A long lease: the retries alone would last about an hour, so
			// a shutdown that waited for them would outlast its minute.
			r, err := openAt(context.Background(), path, Options{Lease: time.Hour, Poll: 20 * time.Millisecond,
				Logger: testLogger(t, slog.LevelInfo), Routes: Routes{"email": {s.provider(t, "none")}}})
			if err != nil {
				t.Fatal(err)
			}
			execSQL(t, faultDB(t, path), failRecords)
			res, err := r.Accept(context.Background(), receipt("evt_501", ada))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.waitArrivals(t, 1)
			waitFor(t, 3*time.Second, "failed writes of the attempt", func() bool { return r.store.Stats().Failed >= 2 })
			start := time.Now()
			switch how {
			case "drain timeout":
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err := r.Stop(ctx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Stop: %v, want the drain's deadline", err)
				}
			case "store closed":
				r.store.Close()
			}
			if err := r.Close(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close: %v", err)
			}
			if took := time.Since(start); took > time.Minute {
				t.Errorf("shutdown took %s while the attempt could not be recorded", took)
			}
			// The claim is left for lease recovery: still sending.
			ro, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			n, err := ro.Notification(context.Background(), "", res.Notifications[0].ID, "")
			if err != nil {
				t.Fatal(err)
			}
			if n.Status != model.StatusSending || len(n.AttemptLog) != 0 {
				t.Errorf("after shutdown: %s with %d attempts, want sending (for lease recovery)", n.Status, len(n.AttemptLog))
			}
		})
	}
}

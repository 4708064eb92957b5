package sources_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/sources"
	"github.com/edgerelay/edgerelay/store/open"
)

// bound is how long a test waits for something that should happen soon;
// reaching it means a bug, not a slow machine.
const bound = time.Minute

// setupRelay opens a relay on a fresh database in t.TempDir(), closed when
// the test ends, its log at Info to t.Output().
func setupRelay(t *testing.T, opts relay.Options) *relay.Relay {
	t.Helper()
	if opts.Poll == 0 {
		opts.Poll = 20 * time.Millisecond
	}
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := relaytest.Open(context.Background(), filepath.Join(t.TempDir(), "relay.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})
	return r
}

// simBundle is the provider simulator on loopback HTTP, with the
// Idempotency-Key of every send request recorded as it arrives.
type simBundle struct {
	ts      *httptest.Server
	arrived chan string

	mu   sync.Mutex
	keys []string
}

func setupSim(t *testing.T) *simBundle {
	t.Helper()
	b := &simBundle{arrived: make(chan string, 10000)}
	srv := sim.New(sim.Options{HonourKeys: true})
	b.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.URL.Path == "/v1/emails" {
			k := req.Header.Get("Idempotency-Key")
			b.mu.Lock()
			b.keys = append(b.keys, k)
			b.mu.Unlock()
			select {
			case b.arrived <- k:
			default:
			}
		}
		srv.ServeHTTP(w, req)
	}))
	t.Cleanup(b.ts.Close)
	t.Cleanup(srv.Close) // runs first: ends held requests so ts.Close does not wait
	return b
}

func (b *simBundle) provider(t *testing.T) providers.Provider {
	t.Helper()
	p, err := providers.New("email-http+" + b.ts.URL + "/v1/emails?from=relay@example.com&idempotency=honoured")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *simBundle) requestKeys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.keys...)
}

// waitArrivals waits until n send requests have reached the simulator.
func (b *simBundle) waitArrivals(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(bound)
	for i := range n {
		select {
		case <-b.arrived:
		case <-timeout:
			t.Fatalf("%d of %d send requests arrived within %s", i, n, bound)
		}
	}
}

// appBundle is an application's own SQLite database with an orders table
// and the outbox from ../outbox.sql, and the connection the application
// writes with.
type appBundle struct {
	path string
	db   *sql.DB
}

func setupApp(t *testing.T) *appBundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(ddl), `CREATE TABLE orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return &appBundle{path: path, db: db}
}

// order does what the application does: the business row and the outbox
// row in one transaction. It returns the outbox row's id.
func (a *appBundle) order(id, customer string, event []byte) (int64, error) {
	tx, err := a.db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO orders (id, customer) VALUES (?, ?)`, id, customer); err != nil {
		return 0, err
	}
	var row int64
	if err := tx.QueryRow(`INSERT INTO edgerelay_outbox (event) VALUES (?) RETURNING id`, string(event)).Scan(&row); err != nil {
		return 0, err
	}
	return row, tx.Commit()
}

func (a *appBundle) source(t *testing.T, params string) sources.Source {
	t.Helper()
	src, err := sources.Open("sqlite://" + a.path + params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// orderEvent is the event of order i: an email to the customer, and for
// every fifth order one to a second recipient too (two notifications).
func orderEvent(i int) relay.Event {
	rcs := []relay.Recipient{{ID: fmt.Sprintf("cus_%d", i), Email: fmt.Sprintf("c%d@example.com", i)}}
	if i%5 == 0 {
		rcs = append(rcs, relay.Recipient{ID: "accounts", Email: "accounts@example.com"})
	}
	return relay.Event{ID: fmt.Sprintf("ord_%d", i), Type: "order.created", Purpose: "receipt",
		Recipients: rcs, Subject: "Your order", Body: fmt.Sprintf("Order %d received.", i)}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// relayCounts lists, through the relay, the notifications of each event
// by event id, and the event ids in the order they were accepted (the
// order of their first notifications' ids).
func relayCounts(t *testing.T, r *relay.Relay) (map[string]int, []string) {
	t.Helper()
	per := map[string]int{}
	var order []string
	for after := int64(0); ; {
		ns, err := r.Store().ListNotifications(context.Background(), model.ListFilter{After: after, Limit: model.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) == 0 {
			return per, order
		}
		for _, n := range ns {
			if _, seen := per[n.EventID]; !seen {
				order = append(order, n.EventID)
			}
			per[n.EventID]++
			after = n.ID
		}
	}
}

// runTailer runs a tailer until its position reaches the source's last row
// (as read by until), then stops it and returns its counters.
func runTailer(t *testing.T, r *relay.Relay, src sources.Source, opts sources.TailOptions, until func() int64) sources.TailStats {
	t.Helper()
	batches := make(chan sources.TailStats, 1)
	opts.OnBatch = func(s sources.TailStats) {
		select {
		case <-batches: // keep only the latest
		default:
		}
		batches <- s
	}
	tl := sources.NewTailer(r, r.Store(), src, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	timeout := time.After(bound)
	for {
		last := until()
		if last >= 0 && tl.Stats().Position >= last {
			break
		}
		select {
		case <-batches:
		case <-time.After(50 * time.Millisecond): // until() may change without a batch
		case err := <-done:
			t.Fatalf("tailer stopped early: %v", err)
		case <-timeout:
			t.Fatalf("tailer at %+v after %s, want position %d", tl.Stats(), bound, until())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil when ctx ends", err)
		}
	case <-time.After(bound):
		t.Fatal("Run did not return after ctx ended")
	}
	return tl.Stats()
}

// The application writes orders (each an order row and an outbox row in one
// transaction) while the tailer runs and the dispatcher delivers: every
// outbox row becomes exactly one event with its notifications, each
// delivered once; none is missing, none twice. Invalid rows and a
// conflicting event are skipped, reported and left unmarked; a row the
// application wrote twice is a duplicate.
func TestTailConcurrentWriterEveryRowOnce(t *testing.T) {
	t.Parallel()
	b := setupSim(t)
	r := setupRelay(t, relay.Options{Routes: relay.Routes{"*": {b.provider(t)}}})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	app := setupApp(t)
	src := app.source(t, "?mark_processed=true")

	const n = 300
	want := map[string]int{}  // event id → notifications
	bad := map[int64]string{} // outbox row → what its rejection says
	var lastRow atomic.Int64
	lastRow.Store(-1)
	writerDone := make(chan error, 1)
	go func() {
		var last int64
		write := func(order, event string) error {
			row, err := app.order(order, "c", []byte(event))
			last = row
			return err
		}
		for i := 1; i <= n; i++ {
			ev := orderEvent(i)
			if err := write(fmt.Sprintf("o%d", i), string(mustJSON(ev))); err != nil {
				writerDone <- err
				return
			}
			want[ev.ID] = 1 + map[bool]int{true: 1}[i%5 == 0]
			var event, reason string
			switch i % 60 {
			case 7:
				event, reason = `{"type": "order.created", "recipients": [{"id": "a", "email": "a@x"}]}`, "id: required"
			case 19:
				event, reason = `{"id": "x19", "type": "t", "recipents": []}`, "recipents: unknown field"
			case 31:
				event, reason = `not json`, "malformed JSON"
			case 43: // the same order id with other content
				other := orderEvent(i)
				other.Body = "changed"
				event, reason = string(mustJSON(other)), "different content"
			case 55: // the application wrote the same event twice
				event = string(mustJSON(orderEvent(i)))
			default:
				continue
			}
			if err := write(fmt.Sprintf("o%d-extra", i), event); err != nil {
				writerDone <- err
				return
			}
			if reason != "" {
				bad[last] = reason
			}
		}
		lastRow.Store(last)
		writerDone <- nil
	}()

	st := runTailer(t, r, src, sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 16}, lastRow.Load)
	if err := <-writerDone; err != nil {
		t.Fatalf("application writer: %v", err)
	}

	got, order := relayCounts(t, r)
	var notes int
	for id, w := range want {
		if got[id] != w {
			t.Errorf("event %s: %d notifications, want %d", id, got[id], w)
		}
		notes += w
	}
	if len(got) != len(want) {
		t.Errorf("%d events stored, want %d", len(got), len(want))
	}
	// Accepted in outbox order: ord_1, ord_2, …
	for i, id := range order {
		if id != fmt.Sprintf("ord_%d", i+1) {
			t.Fatalf("event %d accepted is %s: not in outbox order", i, id)
		}
	}
	dups := n / 60 // the rows written twice
	if st.Accepted != n || st.Rejected != int64(len(bad)) || st.Duplicates != int64(dups) || st.Errors != 0 || st.Read != int64(n+len(bad)+dups) {
		t.Errorf("stats %+v: want %d accepted, %d rejected, %d duplicates, no errors", st, n, len(bad), dups)
	}
	if len(st.Rejections) != len(bad) {
		t.Fatalf("rejections %+v, want %d", st.Rejections, len(bad))
	}
	for _, rj := range st.Rejections {
		if !strings.Contains(rj.Reason, bad[rj.Row]) || bad[rj.Row] == "" {
			t.Errorf("rejection %+v, want row of %v", rj, bad)
		}
	}
	// Relayed rows are marked; the rejected ones are not.
	rows, err := app.db.Query(`SELECT id FROM edgerelay_outbox WHERE processed_at IS NULL ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var unmarked []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		unmarked = append(unmarked, id)
	}
	rows.Close()
	var badRows []int64
	for id := range bad {
		badRows = append(badRows, id)
	}
	sort.Slice(badRows, func(i, j int) bool { return badRows[i] < badRows[j] })
	if fmt.Sprint(unmarked) != fmt.Sprint(badRows) {
		t.Errorf("rows left unmarked %v, want the rejected %v", unmarked, badRows)
	}

	// Every notification is delivered once.
	b.waitArrivals(t, notes)
	perKey := map[string]int{}
	for _, k := range b.requestKeys() {
		perKey[k]++
	}
	for k, c := range perKey {
		if c != 1 {
			t.Errorf("key %s sent %d times", k, c)
		}
	}
	t.Logf("ledger: %d outbox rows; %d events accepted, %d duplicates, %d rejected; %d notifications, %d delivered",
		st.Read, st.Accepted, st.Duplicates, st.Rejected, notes, len(perKey))
	if len(perKey) != notes {
		t.Fatalf("%d keys delivered, want %d", len(perKey), notes)
	}
}

// flaky fails a Read and a MarkProcessed once each, and can rename the
// source (a fresh position).
type flaky struct {
	sources.Source
	name                 string
	failRead, failMark   atomic.Bool
	reads, marks, failed atomic.Int64
}

func (f *flaky) Name() string {
	if f.name != "" {
		return f.name
	}
	return f.Source.Name()
}

func (f *flaky) Read(ctx context.Context, after int64, limit int) ([]sources.Row, error) {
	f.reads.Add(1)
	if f.failRead.CompareAndSwap(true, false) {
		f.failed.Add(1)
		return nil, errors.New("disk I/O error (injected)")
	}
	return f.Source.Read(ctx, after, limit)
}

func (f *flaky) MarkProcessed(ctx context.Context, ids []int64) error {
	if f.marks.Add(1) == 2 && f.failMark.CompareAndSwap(true, false) {
		f.failed.Add(1)
		return errors.New("database is locked (injected)")
	}
	return f.Source.MarkProcessed(ctx, ids)
}

// A failed batch (here: marking fails, as if the process died after
// accepting and before saving the position) is read again: its rows are
// duplicates and no notification is created twice. Reading the whole
// outbox again from the start (a lost position) repeats nothing either.
func TestTailRereadRepeatsNothing(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	app := setupApp(t)
	const n = 50
	var last int64
	for i := 1; i <= n; i++ {
		row, err := app.order(fmt.Sprintf("o%d", i), "c", mustJSON(orderEvent(i)))
		if err != nil {
			t.Fatal(err)
		}
		last = row
	}
	until := func() int64 { return last }
	src := &flaky{Source: app.source(t, "?mark_processed=true")}
	src.failRead.Store(true)
	src.failMark.Store(true)
	st := runTailer(t, r, src, sources.TailOptions{Poll: time.Millisecond, Batch: 8}, until)
	// The first read failed; the second batch was accepted, not marked,
	// not saved, and read again.
	if st.Accepted != n || st.Duplicates != 8 || st.Errors != 2 || st.Rejected != 0 || src.failed.Load() != 2 {
		t.Fatalf("stats %+v (%d injected failures): want %d accepted, 8 duplicates, 2 errors", st, src.failed.Load(), n)
	}
	before, _ := relayCounts(t, r)
	var marked int
	app.db.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NOT NULL`).Scan(&marked)
	if len(before) != n || marked != n {
		t.Fatalf("%d events, %d rows marked; want %d", len(before), marked, n)
	}

	// The same outbox under another name: a position of 0.
	again := &flaky{Source: app.source(t, ""), name: "renamed"}
	st = runTailer(t, r, again, sources.TailOptions{Poll: time.Millisecond, Batch: 7}, until)
	if st.Accepted != 0 || st.Duplicates != n {
		t.Fatalf("re-reading everything: %+v, want %d duplicates and nothing new", st, n)
	}
	after, _ := relayCounts(t, r)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("notifications changed on a re-read:\n%v\n%v", before, after)
	}
	// Both positions are saved; the original's was not moved back.
	for _, name := range []string{src.Name(), "renamed"} {
		if st, err := r.Store().SourceState(context.Background(), name); err != nil || st.Position != last {
			t.Fatalf("position of %s: %+v, %v; want %d", name, st, err, last)
		}
	}
}

// A stopped tailer resumes after its saved position, and stopping it while
// idle returns at once.
func TestTailResumesFromSavedPosition(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	app := setupApp(t)
	var last int64
	add := func(from, to int) {
		for i := from; i <= to; i++ {
			row, err := app.order(fmt.Sprintf("o%d", i), "c", mustJSON(orderEvent(i)))
			if err != nil {
				t.Fatal(err)
			}
			last = row
		}
	}
	add(1, 10)
	until := func() int64 { return last }
	src := app.source(t, "") // read-only
	if st := runTailer(t, r, src, sources.TailOptions{Poll: time.Millisecond}, until); st.Accepted != 10 {
		t.Fatalf("first run: %+v", st)
	}
	add(11, 15)
	st := runTailer(t, r, src, sources.TailOptions{Poll: time.Hour}, until)
	if st.Accepted != 5 || st.Duplicates != 0 || st.Read != 5 {
		t.Fatalf("second run: %+v, want only the 5 new rows read", st)
	}
}

// Tail an application's outbox: the application writes each order and its
// event in one transaction; the tailer accepts the events, skipping (and
// reporting) an invalid one.
func ExampleTailer_Run() {
	dir, err := os.MkdirTemp("", "edgerelay-tail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The application's database, with the outbox table from outbox.sql.
	app, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := app.Exec(string(ddl) + `;
		CREATE TABLE orders (id TEXT PRIMARY KEY);
		BEGIN;
		INSERT INTO orders VALUES ('ord_1');
		INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "ord_1", "type": "order.created", "recipients": [{"id": "ada", "email": "ada@example.com"}], "body": "Thanks."}');
		COMMIT;
		INSERT INTO edgerelay_outbox (event) VALUES ('{"id": "ord_2"}');`); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := open.Store(ctx, filepath.Join(dir, "relay.db"), open.Options{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(ctx, st, relay.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	src, err := sources.Open("sqlite://" + filepath.Join(dir, "app.db") + "?table=edgerelay_outbox")
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()

	t := sources.NewTailer(r, st, src, sources.TailOptions{Poll: 10 * time.Millisecond, OnBatch: func(st sources.TailStats) {
		if st.Position == 2 {
			cancel() // a real tailer runs until SIGTERM
		}
	}})
	if err := t.Run(ctx); err != nil {
		log.Fatal(err)
	}
	stats := t.Stats()
	fmt.Printf("position %d: accepted %d, duplicates %d, rejected %d\n", stats.Position, stats.Accepted, stats.Duplicates, stats.Rejected)
	fmt.Printf("row %d rejected: %s\n", stats.Rejections[0].Row, stats.Rejections[0].Reason)
	// Output:
	// position 2: accepted 1, duplicates 0, rejected 1
	// row 2 rejected: invalid event: type: required
}

// A tailer says when it last found nothing new (the console's lag): not
// while rows wait, and once it has read them all.
func TestTailCaughtUp(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	app := setupApp(t)
	for i := 1; i <= 3; i++ {
		if _, err := app.order(fmt.Sprintf("o%d", i), "c", mustJSON(orderEvent(i))); err != nil {
			t.Fatal(err)
		}
	}
	tl := sources.NewTailer(r, r.Store(), app.source(t, ""), sources.TailOptions{Poll: time.Millisecond, Batch: 1})
	if st := tl.Stats(); !st.CaughtUp.IsZero() {
		t.Fatalf("caught up before running: %+v", st)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for tl.Stats().CaughtUp.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("not caught up after 10 s: %+v", tl.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := tl.Stats(); st.Position != 3 || st.Accepted != 3 {
		t.Fatalf("caught up at %+v, want after all 3 rows", st)
	}
}

func TestTailOnceReturnsAFailure(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	app := setupApp(t)
	for i := 1; i <= 5; i++ {
		if _, err := app.order(fmt.Sprintf("o%d", i), "c", mustJSON(orderEvent(i))); err != nil {
			t.Fatal(err)
		}
	}
	src := &flaky{Source: app.source(t, "")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tl := sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: time.Hour, Batch: 2, Once: true})
	if err := tl.Run(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx: %v); want nil once caught up, long before the poll of an hour", err, ctx.Err())
	}
	if st := tl.Stats(); st.Accepted != 5 || st.Position != 5 {
		t.Fatalf("%+v, want 5 accepted", st)
	}
	app.order("o6", "c", mustJSON(orderEvent(6)))
	src.failRead.Store(true)
	tl = sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: time.Hour, Batch: 2, Once: true})
	if err := tl.Run(ctx); err == nil || !strings.Contains(err.Error(), "injected") || ctx.Err() != nil {
		t.Fatalf("Run with a failing read: %v (ctx: %v); want the failure, returned at once", err, ctx.Err())
	}
	tl = sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: time.Hour, Batch: 2, Once: true})
	if err := tl.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := tl.Stats(); st.Accepted != 1 || st.Read != 1 || st.Position != 6 {
		t.Fatalf("run after the failure: %+v, want only row 6", st)
	}
}

// A tailer made from a Spec opens its source when it runs, not before:
// while the database is not there it retries (counted as errors), and
// once it is, it relays; run again (a lease taken back), it opens the
// source anew and goes on. With Once the failure to open is returned.
func TestTailerForOpensItsSourceWhenItRuns(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	path := filepath.Join(t.TempDir(), "app.db")
	spec, err := sources.Parse("sqlite://" + path)
	if err != nil {
		t.Fatalf("Parse of a source whose file is not there yet: %v, want it accepted (nothing is opened)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err = sources.NewTailerFor(r, r.Store(), spec, sources.TailOptions{Once: true}).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "opening the source") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Once, the file missing: %v, want the failure to open", err)
	}

	tl := sources.NewTailerFor(r, r.Store(), spec, sources.TailOptions{Poll: 5 * time.Millisecond})
	if st := tl.Stats(); st.Source != spec.Name() {
		t.Fatalf("stats of a tailer not run: %+v, want the source's name %q", st, spec.Name())
	}
	run := func() (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tl.Run(rctx) }()
		return func() {
			rcancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v, want nil when ctx ends", err)
			}
		}
	}
	wait := func(what string, ok func(sources.TailStats) bool) {
		t.Helper()
		deadline := time.Now().Add(bound)
		for !ok(tl.Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %+v", what, tl.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop := run()
	wait("two failed opens", func(s sources.TailStats) bool { return s.Errors >= 2 })
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	insert := func(i int) {
		if _, err := db.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, string(mustJSON(orderEvent(i)))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		insert(i)
	}
	wait("the rows, once the database is there", func(s sources.TailStats) bool { return s.Position == 3 && s.Accepted == 3 })
	stop()
	insert(4)
	stop = run()
	wait("row 4, after running again", func(s sources.TailStats) bool { return s.Position == 4 && s.Accepted == 4 })
	stop()
}

// A tailer stops when the relay's store is closed, as Run says: each
// round's first read (the retries asked for) is on the store, and a closed
// store is not a failure to back off from and retry.
func TestTailStopsWhenTheRelayCloses(t *testing.T) {
	t.Parallel()
	r, err := relaytest.Open(context.Background(), filepath.Join(t.TempDir(), "relay.db"), relay.Options{Poll: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	app := setupApp(t)
	tl := sources.NewTailer(r, r.Store(), app.source(t, ""), sources.TailOptions{Poll: time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- tl.Run(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for tl.Stats().CaughtUp.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("not caught up after 10 s: %+v", tl.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, model.ErrClosed) {
			t.Fatalf("Run after the relay closed: %v, want store.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tailer still runs 10 s after its relay closed")
	}
}

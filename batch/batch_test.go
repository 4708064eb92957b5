package batch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// testLogger routes the relay's log to the test's output.
func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// setupRelay opens a relay on a fresh database in t.TempDir(), closed when
// the test ends.
func setupRelay(t *testing.T, opts relay.Options) *relay.Relay {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t, slog.LevelInfo)
	}
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

// lines yields the events as batch lines numbered from 1.
func lines(evs ...relay.Event) func(func(Line) bool) {
	return func(yield func(Line) bool) {
		for i, ev := range evs {
			if !yield(Line{Line: i + 1, Event: ev}) {
				return
			}
		}
	}
}

func batchEvent(i int) relay.Event {
	return relay.Event{ID: fmt.Sprintf("evt_%d", i), Type: "notice", Channels: []string{"email"},
		Recipients: []relay.Recipient{{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i)}}, Body: "hello"}
}

// rejects collects what OnReject is told, in order.
type rejects struct{ got []string }

func (r *rejects) add(e *LineError) { r.got = append(r.got, e.Error()) }

func countNotifications(t *testing.T, r *relay.Relay) int64 {
	t.Helper()
	st, err := r.Store().Status(context.Background(), r.Now())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range st.Counts {
		n += c
	}
	return n
}

// The example files: every line accepted, a second run all duplicates with
// the same keys, nothing new written.
func TestAcceptBatchExamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file                           string
		events, skipped, notifications int
	}{
		{"../testdata/batch_example.jsonl", 4, 3, 5}, // 2 comment lines, 1 blank
		{"../testdata/batch_example.csv", 3, 0, 4},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			t.Parallel()
			r := setupRelay(t, relay.Options{})
			run := func() Result {
				f, err := os.Open(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				format, err := FormatFor(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				br, err := NewReader(f, format)
				if err != nil {
					t.Fatal(err)
				}
				var rej rejects
				res, err := Accept(context.Background(), r, br.Lines(), Options{OnReject: rej.add})
				if err == nil {
					err = br.Err()
				}
				if err != nil || len(rej.got) > 0 {
					t.Fatalf("%v %q", err, rej.got)
				}
				return res
			}
			first := run()
			if first != (Result{Lines: tc.events + tc.skipped, New: tc.events, Skipped: tc.skipped, Notifications: tc.notifications}) {
				t.Fatalf("first run %+v", first)
			}
			again := run()
			if again != (Result{Lines: tc.events + tc.skipped, Duplicate: tc.events, Skipped: tc.skipped}) {
				t.Fatalf("second run %+v", again)
			}
			if n := countNotifications(t, r); n != int64(tc.notifications) {
				t.Fatalf("%d notifications, want %d", n, tc.notifications)
			}
		})
	}
}

// A bad line is reported with its number and reason, in file order; every
// other line is accepted, in file order. A resend with different content
// is rejected alone.
func TestAcceptBatchBadLines(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	ctx := context.Background()
	if _, err := r.Accept(ctx, batchEvent(7)); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := range 50 {
		switch i {
		case 16: // line 17
			in.WriteString(`{"id": "evt_16", "type": "notice", "recipients": [{"email": "x@example.com"}]}` + "\n")
		case 30: // line 31
			in.WriteString("{not json}\n")
		case 7: // line 8: accepted before with another body
			in.WriteString(`{"id": "evt_7", "type": "notice", "channels": ["email"], "recipients": [{"id": "u7", "email": "u7@example.com"}], "body": "changed"}` + "\n")
		default:
			fmt.Fprintf(&in, `{"id": "evt_%d", "type": "notice", "channels": ["email"], "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "hello"}`+"\n", i, i, i)
		}
	}
	br, err := NewReader(strings.NewReader(in.String()), JSONL)
	if err != nil {
		t.Fatal(err)
	}
	var rej rejects
	var progress []Progress
	res, err := Accept(ctx, r, br.Lines(), Options{Group: 4, OnReject: rej.add,
		Progress: func(p Progress) { progress = append(progress, p) }})
	if err != nil || br.Err() != nil {
		t.Fatal(err, br.Err())
	}
	if res != (Result{Lines: 50, New: 47, Notifications: 47, Rejected: 3}) {
		t.Fatalf("result %+v", res)
	}
	got := rej.got
	if len(got) != 3 || !strings.HasPrefix(got[0], `line 8: accept event "evt_7": event already accepted with different content`) ||
		!strings.HasPrefix(got[1], "line 17: invalid event: recipients[0].id: required") ||
		!strings.HasPrefix(got[2], "line 31: invalid event: malformed JSON") {
		t.Fatalf("rejects %q", got)
	}
	// Accepted in file order: the notifications' ids follow the lines.
	ns, err := r.Store().ListNotifications(ctx, model.ListFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, n := range ns[1:] { // after evt_7, accepted before the batch
		order = append(order, strings.TrimPrefix(n.EventID, "evt_"))
	}
	if want := "0 1 2 3 4 5 6 8 9 10 11 12 13 14 15 17 18"; !strings.HasPrefix(strings.Join(order, " "), want) {
		t.Fatalf("accepted in the order %v, want %s …", order, want)
	}
	last := progress[len(progress)-1]
	if len(progress) != 50 || last.Result != res || last.Read != 50 || last.Bytes != int64(in.Len()) {
		t.Fatalf("%d progress calls, last %+v", len(progress), last)
	}
	if n := countNotifications(t, r); n != 48 {
		t.Fatalf("%d notifications, want 48", n)
	}
}

// Check writes nothing and finds every bad line, including those only
// Normalize finds and those that name a missing audience.
func TestCheckBatchWritesNothing(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{MaxRecipients: 2})
	ctx := context.Background()
	bad := batchEvent(3)
	bad.Recipients[0].ID = ""
	big := batchEvent(4)
	big.Channels = nil
	big.Recipients = append(big.Recipients, relay.Recipient{ID: "b", Email: "b@x"}, relay.Recipient{ID: "c", Email: "c@x"})
	aud := relay.Event{ID: "a1", Type: "t", Audience: "nobody"}
	var rej rejects
	res, err := Check(ctx, r, lines(batchEvent(1), batchEvent(2), bad, big, aud, batchEvent(6)), Options{OnReject: rej.add})
	if err != nil {
		t.Fatal(err)
	}
	if res != (Result{Lines: 6, Valid: 3, Rejected: 3}) {
		t.Fatalf("result %+v", res)
	}
	got := rej.got
	if len(got) != 3 || !strings.Contains(got[0], "line 3: invalid event: recipients[0].id: required") ||
		!strings.Contains(got[1], "line 4: invalid event: recipients: 3 recipients, more than the limit of 2") ||
		!strings.Contains(got[2], `line 5: invalid event: audience: no audience "nobody"`) {
		t.Fatalf("rejects %q", got)
	}
	if n := countNotifications(t, r); n != 0 {
		t.Fatalf("Check wrote %d notifications", n)
	}
}

// A cancelled context stops the batch: what was settled is counted, the
// error says why, and a second run finishes without writing anything twice.
func TestAcceptBatchCancelledThenRerun(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	evs := make([]relay.Event, 500)
	for i := range evs {
		evs[i] = batchEvent(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := Accept(ctx, r, lines(evs...), Options{Group: 8, Progress: func(p Progress) {
		if p.Lines == 100 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || res.Lines < 100 || res.Lines >= 500 {
		t.Fatalf("cancelled run: %+v, %v", res, err)
	}
	again, err := Accept(context.Background(), r, lines(evs...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every line accepted by the first run, and perhaps a few whose accept
	// had committed as the run was cancelled, are duplicates now.
	if again.Lines != 500 || again.Duplicate < res.New || again.New+again.Duplicate != 500 {
		t.Fatalf("re-run %+v after %+v", again, res)
	}
	if n := countNotifications(t, r); n != 500 {
		t.Fatalf("%d notifications, want 500", n)
	}
}

// An error that is not about a line (the database is closed) stops the
// batch with that error.
func TestAcceptBatchStopsOnStoreError(t *testing.T) {
	t.Parallel()
	r, err := relaytest.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"), relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	res, err := Accept(context.Background(), r, lines(batchEvent(1), batchEvent(2)), Options{})
	if !errors.Is(err, model.ErrClosed) || !strings.HasPrefix(err.Error(), "line ") || res.Accepted() != 0 {
		t.Fatalf("%+v, %v", res, err)
	}
}

// writeBatchFileBody writes n generated JSON Lines events to a file,
// each with the body given.
func writeBatchFileBody(t testing.TB, n int, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, `{"id": "evt_%d", "type": "notice", "channels": ["email"], "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "subject": "Notice %d", "body": %q}`+"\n", i, i, i, i, body)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// A batch file streams through with bounded memory: the heap in use stays
// far below what holding the file (or its events) would take. By default
// 10,000 events of 6 KiB (a 60 MiB file) must peak under 32 MiB, so holding
// the file or its bodies fails; with EDGERELAY_TEST_LONG=1, 200,000 small
// events (32 MiB) must peak under 64 MiB, which also catches state that
// grows by the line (a map of ids seen, say) and takes about a minute here.
// Under the race detector, 5,000 small lines (SQLite in pure Go slows
// tenfold and more): a check that it runs, not of the bound.
//
// Not parallel: HeapInuse is the process's, so the test runs while the
// parallel tests wait.
func TestAcceptBatchBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 MiB batch file")
	}
	n, body, bound := 10_000, strings.Repeat("0123456789abcdef", 6<<10/16), uint64(32<<20)
	switch {
	case raceEnabled():
		n, body, bound = 5_000, "hello", 64<<20
	case os.Getenv("EDGERELAY_TEST_LONG") == "1":
		n, body, bound = 200_000, "hello", 64<<20
	}
	path := writeBatchFileBody(t, n, body)
	st, _ := os.Stat(path)
	if body != "hello" && uint64(st.Size()) < bound {
		t.Fatalf("a %d MiB file proves nothing against a %d MiB bound", st.Size()>>20, bound>>20)
	}
	r := setupRelay(t, relay.Options{Logger: testLogger(t, slog.LevelWarn)})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br, err := NewReader(f, JSONL)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	sample := func() {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	start := time.Now()
	res, err := Accept(context.Background(), r, br.Lines(), Options{Progress: func(p Progress) {
		if p.Lines%2000 == 0 {
			sample()
		}
	}})
	took := time.Since(start)
	if err == nil {
		err = br.Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	if res != (Result{Lines: n, New: n, Notifications: n}) {
		t.Fatalf("result %+v", res)
	}
	ws := r.Store().Stats()
	t.Logf("%d lines (%d MiB) in %s: %.0f lines/s; heap in use %d MiB at start, peak %d MiB; %d commits (%.1f writes each, largest %d)",
		n, st.Size()>>20, took.Round(time.Millisecond), float64(n)/took.Seconds(), base>>20, peak>>20,
		ws.Commits, float64(ws.Writes)/float64(max(ws.Commits, 1)), ws.MaxBatch)
	if peak > bound {
		t.Fatalf("heap in use peaked at %d MiB for a %d MiB file: want under %d MiB", peak>>20, st.Size()>>20, bound>>20)
	}
	// Group commit works: many accepts per transaction.
	if ws.Commits > int64(n/4) {
		t.Errorf("%d commits for %d accepts: the writer is not batching", ws.Commits, n)
	}
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// Accept a JSON Lines batch with one bad line, then run it again: the
// second run creates nothing.
func ExampleAccept() {
	dir, err := os.MkdirTemp("", "edgerelay-batch-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	r, err := relaytest.Open(ctx, filepath.Join(dir, "relay.db"), relay.Options{})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	const file = `# invoices, one event per line
{"id": "inv_1", "type": "invoice", "recipients": [{"id": "ada", "email": "ada@example.com"}]}
{"id": "inv_2", "type": "invoice", "recipients": [{"id": "ben"}]}
{"id": "inv_3", "type": "invoice", "recipients": [{"id": "cy", "email": "cy@example.com", "phone": "+15550100"}]}
`
	for range 2 {
		br, err := NewReader(strings.NewReader(file), JSONL)
		if err != nil {
			panic(err)
		}
		res, err := Accept(ctx, r, br.Lines(), Options{
			OnReject: func(e *LineError) { fmt.Println(e) },
		})
		if err == nil {
			err = br.Err()
		}
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d new (%d notifications), %d duplicate, %d rejected\n", res.New, res.Notifications, res.Duplicate, res.Rejected)
	}
	// Output:
	// line 3: invalid event: recipients[0]: recipient "ben" has no address for any channel
	// 2 new (3 notifications), 0 duplicate, 1 rejected
	// line 3: invalid event: recipients[0]: recipient "ben" has no address for any channel
	// 0 new (0 notifications), 2 duplicate, 1 rejected
}

package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"edgerelay/store"
)

// readAll reads a batch from a string: the lines, and the reader's error.
func readAll(t *testing.T, format BatchFormat, in string) ([]BatchLine, error) {
	t.Helper()
	br, err := NewBatchReader(strings.NewReader(in), format)
	if err != nil {
		return nil, err
	}
	var out []BatchLine
	for l := range br.Lines() {
		out = append(out, l)
	}
	return out, br.Err()
}

// lineErrors lists "line N: reason" for the bad lines.
func lineErrors(ls []BatchLine) []string {
	var out []string
	for _, l := range ls {
		if l.Err != nil {
			out = append(out, l.Err.Error())
		}
	}
	return out
}

func TestBatchFormat(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]BatchFormat{"a.jsonl": BatchJSONL, "b.NDJSON": BatchJSONL, "dir.x/c.csv": BatchCSV, "d.json": "", "e": ""} {
		got, err := BatchFormatFor(path)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("BatchFormatFor(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for s, want := range map[string]BatchFormat{"jsonl": BatchJSONL, "ndjson": BatchJSONL, "CSV": BatchCSV, "tsv": ""} {
		got, err := ParseBatchFormat(s)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseBatchFormat(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	if _, err := NewBatchReader(strings.NewReader(""), "xml"); err == nil {
		t.Error("NewBatchReader took format xml")
	}
}

func TestReadJSONLines(t *testing.T) {
	t.Parallel()
	in := "\ufeff# a comment\n" +
		`{"id": "e1", "type": "t", "recipients": [{"id": "a", "email": "a@x"}]}` + "\r\n" +
		"\n   \n" +
		`{"id": "e2", "type": "t", "recipents": []}` + "\n" + // line 5: unknown field
		`{"id": "e3", ` + "\n" + // line 6: truncated
		"  # indented comment\n" +
		`[1, 2]` + "\n" + // line 8: not an object
		`{"id": "e4", "type": "t", "recipients": [{"id": "b", "email": "b@x"}]}` // line 9, no final newline
	ls, err := readAll(t, BatchJSONL, in)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, l := range ls {
		nums = append(nums, l.Line)
	}
	if !slices.Equal(nums, []int{2, 5, 6, 8, 9}) {
		t.Fatalf("line numbers %v, want [2 5 6 8 9]", nums)
	}
	if ls[0].Event.ID != "e1" || ls[4].Event.ID != "e4" || ls[4].Offset != int64(len(in)) {
		t.Fatalf("events %+v", ls)
	}
	errs := lineErrors(ls)
	want := []string{"line 5: invalid event: recipents: unknown field", "line 6: invalid event: truncated JSON", "line 8: invalid event: want a JSON object"}
	if len(errs) != len(want) {
		t.Fatalf("errors %q, want %q", errs, want)
	}
	for i := range want {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %q, want it to start %q", errs[i], want[i])
		}
	}
	var le *BatchLineError
	var inv *InvalidEventError
	if !errors.As(ls[1].Err, &le) || le.Line != 5 || !errors.As(ls[1].Err, &inv) || inv.Field != "recipents" {
		t.Fatalf("error %#v is not a *BatchLineError wrapping an *InvalidEventError", ls[1].Err)
	}
}

func TestReadJSONLinesTooLong(t *testing.T) {
	t.Parallel()
	big := `{"id": "e1", "type": "t", "body": "` + strings.Repeat("x", maxEventBytes) + `"}`
	in := big + "\n" + `{"id": "e2", "type": "t", "recipients": [{"id": "a", "email": "a@x"}]}` + "\n"
	ls, err := readAll(t, BatchJSONL, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Err == nil || !strings.Contains(ls[0].Err.Error(), "line 1: invalid event: line longer than") || ls[1].Event.ID != "e2" || ls[1].Line != 2 {
		t.Fatalf("lines %+v", lineErrors(ls))
	}
}

const csvHeader = "id,type,purpose,tenant,recipient_id,email,phone,device_token,url,channels,subject,body,html,data\n"

func TestReadCSV(t *testing.T) {
	t.Parallel()
	in := "\ufeff" + csvHeader +
		`e1,t,p,acme,ada,ada@x,+1555,tok,https://h/x,email sms,Hi,"two` + "\n" + `lines",<b>x</b>,"{""n"": 1}"` + "\n" + // lines 2-3
		"\n" + // skipped
		"e2,t,,,ben,ben@x,,,,,,,,\n" + // line 5
		"e3,t,,,cy\n" + // line 6: wrong cell count
		`e4,t,,,dan,dan@x,,,,,,,,[1]` + "\n" + // line 7: data not an object
		`e5,t,,,,eve@x,,,,,,,,` + "\n" + // line 8: no recipient id (found by Normalize)
		`e6,t,,,"fay,x"y",,,,,,,,,` + "\n" + // line 9: bare quote
		`e7,t,,,gus,gus@x,,,,,,,,` // line 10
	ls, err := readAll(t, BatchCSV, in)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, l := range ls {
		nums = append(nums, l.Line)
	}
	if !slices.Equal(nums, []int{2, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("line numbers %v\n%q", nums, lineErrors(ls))
	}
	e1 := ls[0].Event
	want := Event{ID: "e1", Type: "t", Purpose: "p", Tenant: "acme", Channels: []string{"email", "sms"},
		Recipients: []Recipient{{ID: "ada", Email: "ada@x", Phone: "+1555", DeviceToken: "tok", URL: "https://h/x"}},
		Subject:    "Hi", Body: "two\nlines", HTML: "<b>x</b>", Data: []byte(`{"n": 1}`)}
	if fmt.Sprint(e1) != fmt.Sprint(want) {
		t.Fatalf("row 1:\n got %+v\nwant %+v", e1, want)
	}
	if e2 := ls[1].Event; e2.ID != "e2" || e2.Purpose != "" || e2.Channels != nil || len(e2.Recipients) != 1 || e2.Recipients[0].Email != "ben@x" {
		t.Fatalf("row 2: %+v", e2)
	}
	errs := lineErrors(ls)
	for i, w := range []string{"line 6: 5 cells, but the header has 14 columns", "line 7: invalid event: data: want a JSON object", `line 9: CSV: extraneous or missing " in quoted-field`} {
		if i >= len(errs) || !strings.HasPrefix(errs[i], w) {
			t.Errorf("errors %q: want %q", errs, w)
		}
	}
	if ls[4].Err != nil || ls[4].Event.Recipients[0].ID != "" {
		t.Fatalf("line 8 should decode (Normalize rejects it): %+v", ls[4])
	}
	if ls[6].Event.ID != "e7" || ls[6].Offset != int64(len(in)) {
		t.Fatalf("last row %+v", ls[6])
	}
}

func TestReadCSVHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "line 1: empty file: a CSV batch file starts with a header row"},
		{"unknown", "id,type,recipient_id,emial,Colour\n", `line 1: CSV header: unknown column "emial", "colour" (the columns are id, type`},
		{"missing", "id,email\n", "line 1: CSV header: missing column type, recipient_id"},
		{"twice", "id,type,recipient_id,email,email\n", `line 1: CSV header: column "email" given twice`},
	} {
		_, err := NewBatchReader(strings.NewReader(tc.in), BatchCSV)
		var le *BatchLineError
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &le) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
	// Case and spaces in the header are forgiven; the minimum is enough.
	ls, err := readAll(t, BatchCSV, " ID , Type,RECIPIENT_ID,email\ne1,t,a,a@x\n")
	if err != nil || len(ls) != 1 || ls[0].Event.Recipients[0].ID != "a" {
		t.Fatalf("%v %+v", err, ls)
	}
}

// An unterminated quote is a bad line, not a file read into memory whole.
func TestReadCSVUnterminatedQuote(t *testing.T) {
	t.Parallel()
	in := "id,type,recipient_id,email\ne1,t,a,a@x\n" + `e2,t,"b,b@x` + "\n" + strings.Repeat("e3,t,c,c@x\n", 10)
	ls, err := readAll(t, BatchCSV, in)
	if err != nil || len(ls) != 2 || ls[1].Err == nil || !strings.HasPrefix(ls[1].Err.Error(), "line 3: CSV:") {
		t.Fatalf("%v %q", err, lineErrors(ls))
	}
	// Past the record limit the read stops with an error naming the line.
	in = "id,type,recipient_id,email\ne1,t,a,a@x\n" + `e2,t,"b` + strings.Repeat("y\n", maxEventBytes/2+10000)
	ls, err = readAll(t, BatchCSV, in)
	if err == nil || !strings.Contains(err.Error(), "longer than") || len(ls) != 1 {
		t.Fatalf("%v, %d lines", err, len(ls))
	}
}

// lines yields the events as batch lines numbered from 1.
func lines(evs ...Event) func(func(BatchLine) bool) {
	return func(yield func(BatchLine) bool) {
		for i, ev := range evs {
			if !yield(BatchLine{Line: i + 1, Event: ev}) {
				return
			}
		}
	}
}

func batchEvent(i int) Event {
	return Event{ID: fmt.Sprintf("evt_%d", i), Type: "notice", Channels: []string{"email"},
		Recipients: []Recipient{{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i)}}, Body: "hello"}
}

// rejects collects what OnReject is told.
type rejects struct {
	mu  sync.Mutex
	got []string
}

func (r *rejects) add(e *BatchLineError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e.Error())
}

func (r *rejects) sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.got)
	slices.Sort(out)
	return out
}

func countNotifications(t *testing.T, r *Relay) int64 {
	t.Helper()
	st, err := r.Status(context.Background())
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
		file                  string
		events, notifications int
	}{
		{"../testdata/batch_example.jsonl", 4, 5},
		{"../testdata/batch_example.csv", 3, 4},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			t.Parallel()
			r := setupRelay(t, Options{})
			run := func() BatchResult {
				f, err := os.Open(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				format, err := BatchFormatFor(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				br, err := NewBatchReader(f, format)
				if err != nil {
					t.Fatal(err)
				}
				var rej rejects
				res, err := r.AcceptBatch(context.Background(), br.Lines(), BatchOptions{OnReject: rej.add})
				if err == nil {
					err = br.Err()
				}
				if err != nil || len(rej.got) > 0 {
					t.Fatalf("%v %q", err, rej.got)
				}
				return res
			}
			first := run()
			if first != (BatchResult{Lines: tc.events, New: tc.events, Notifications: tc.notifications}) {
				t.Fatalf("first run %+v", first)
			}
			again := run()
			if again != (BatchResult{Lines: tc.events, Duplicate: tc.events}) {
				t.Fatalf("second run %+v", again)
			}
			if n := countNotifications(t, r); n != int64(tc.notifications) {
				t.Fatalf("%d notifications, want %d", n, tc.notifications)
			}
		})
	}
}

// A bad line is reported with its number and reason; every other line is
// accepted. A resend with different content is rejected alone.
func TestAcceptBatchBadLines(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
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
	br, err := NewBatchReader(strings.NewReader(in.String()), BatchJSONL)
	if err != nil {
		t.Fatal(err)
	}
	var rej rejects
	var progress []BatchProgress
	res, err := r.AcceptBatch(ctx, br.Lines(), BatchOptions{Concurrency: 4, OnReject: rej.add,
		Progress: func(p BatchProgress) { progress = append(progress, p) }})
	if err != nil || br.Err() != nil {
		t.Fatal(err, br.Err())
	}
	if res != (BatchResult{Lines: 50, New: 47, Notifications: 47, Rejected: 3}) {
		t.Fatalf("result %+v", res)
	}
	got := rej.sorted()
	if len(got) != 3 || !strings.HasPrefix(got[0], "line 17: invalid event: recipients[0].id: required") ||
		!strings.HasPrefix(got[1], "line 31: invalid event: malformed JSON") ||
		!strings.HasPrefix(got[2], `line 8: accept event "evt_7": event already accepted with different content`) {
		t.Fatalf("rejects %q", got)
	}
	last := progress[len(progress)-1]
	if len(progress) != 50 || last.BatchResult != res || last.Read != 50 || last.Bytes != int64(in.Len()) {
		t.Fatalf("%d progress calls, last %+v", len(progress), last)
	}
	if n := countNotifications(t, r); n != 48 {
		t.Fatalf("%d notifications, want 48", n)
	}
}

// CheckBatch writes nothing and finds every bad line, including those only
// Normalize finds and those that name a missing audience.
func TestCheckBatchWritesNothing(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{MaxRecipients: 2})
	ctx := context.Background()
	bad := batchEvent(3)
	bad.Recipients[0].ID = ""
	big := batchEvent(4)
	big.Channels = nil
	big.Recipients = append(big.Recipients, Recipient{ID: "b", Email: "b@x"}, Recipient{ID: "c", Email: "c@x"})
	aud := Event{ID: "a1", Type: "t", Audience: "nobody"}
	var rej rejects
	res, err := r.CheckBatch(ctx, lines(batchEvent(1), batchEvent(2), bad, big, aud, batchEvent(6)), BatchOptions{OnReject: rej.add})
	if err != nil {
		t.Fatal(err)
	}
	if res != (BatchResult{Lines: 6, Valid: 3, Rejected: 3}) {
		t.Fatalf("result %+v", res)
	}
	got := rej.sorted()
	if len(got) != 3 || !strings.Contains(got[0], "line 3: invalid event: recipients[0].id: required") ||
		!strings.Contains(got[1], "line 4: invalid event: recipients: 3 recipients, more than the limit of 2") ||
		!strings.Contains(got[2], `line 5: invalid event: audience: no audience "nobody"`) {
		t.Fatalf("rejects %q", got)
	}
	if n := countNotifications(t, r); n != 0 {
		t.Fatalf("CheckBatch wrote %d notifications", n)
	}
}

// A cancelled context stops the batch: what was settled is counted, the
// error says why, and a second run finishes without writing anything twice.
func TestAcceptBatchCancelledThenRerun(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	evs := make([]Event, 500)
	for i := range evs {
		evs[i] = batchEvent(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := r.AcceptBatch(ctx, lines(evs...), BatchOptions{Concurrency: 8, Progress: func(p BatchProgress) {
		if p.Lines == 100 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || res.Lines < 100 || res.Lines >= 500 {
		t.Fatalf("cancelled run: %+v, %v", res, err)
	}
	again, err := r.AcceptBatch(context.Background(), lines(evs...), BatchOptions{})
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
	r, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "r.db")})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	res, err := r.AcceptBatch(context.Background(), lines(batchEvent(1), batchEvent(2)), BatchOptions{})
	if !errors.Is(err, store.ErrClosed) || !strings.HasPrefix(err.Error(), "line ") || res.Accepted() != 0 {
		t.Fatalf("%+v, %v", res, err)
	}
}

// writeBatchFile writes n generated JSON Lines events to a file.
func writeBatchFile(t testing.TB, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, `{"id": "evt_%d", "type": "notice", "channels": ["email"], "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "subject": "Notice %d", "body": "hello"}`+"\n", i, i, i, i)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// 200,000 lines (5,000 under the race detector) stream through with
// bounded memory: the heap in use stays far below what holding the file
// (or its events) would take.
//
// Not parallel: HeapInuse is the process's, so the test runs while the
// parallel tests wait.
func TestAcceptBatchBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 lines")
	}
	n := 200_000
	if raceEnabled() {
		n = 5_000 // the race detector slows SQLite (pure Go) tenfold and more
	}
	path := writeBatchFile(t, n)
	st, _ := os.Stat(path)
	r := setupRelay(t, Options{Logger: testLogger(t, slog.LevelWarn)})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br, err := NewBatchReader(f, BatchJSONL)
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
	res, err := r.AcceptBatch(context.Background(), br.Lines(), BatchOptions{Progress: func(p BatchProgress) {
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
	if res != (BatchResult{Lines: n, New: n, Notifications: n}) {
		t.Fatalf("result %+v", res)
	}
	ws := r.store.Stats()
	t.Logf("%d lines (%d MiB) in %s: %.0f lines/s; heap in use %d MiB at start, peak %d MiB; %d commits (%.1f writes each, largest %d)",
		n, st.Size()>>20, took.Round(time.Millisecond), float64(n)/took.Seconds(), base>>20, peak>>20,
		ws.Commits, float64(ws.Writes)/float64(max(ws.Commits, 1)), ws.MaxBatch)
	if peak > 64<<20 {
		t.Fatalf("heap in use peaked at %d MiB for a %d MiB file: want under 64 MiB", peak>>20, st.Size()>>20)
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

// BenchmarkAcceptBatch measures lines per second on a fresh database.
func BenchmarkAcceptBatch(b *testing.B) {
	path := writeBatchFile(b, b.N)
	r, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "r.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	br, _ := NewBatchReader(f, BatchJSONL)
	b.ResetTimer()
	if _, err := r.AcceptBatch(context.Background(), br.Lines(), BatchOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

var _ io.Reader = (*recordCap)(nil)

// Accept a JSON Lines batch with one bad line, then run it again: the
// second run creates nothing.
func ExampleRelay_AcceptBatch() {
	dir, err := os.MkdirTemp("", "edgerelay-batch-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	r, err := Open(ctx, Options{Path: filepath.Join(dir, "relay.db")})
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
		br, err := NewBatchReader(strings.NewReader(file), BatchJSONL)
		if err != nil {
			panic(err)
		}
		res, err := r.AcceptBatch(ctx, br.Lines(), BatchOptions{
			OnReject: func(e *BatchLineError) { fmt.Println(e) },
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

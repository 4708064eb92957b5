package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// batchBody is the 200 body of POST /v1/events:batch.
type batchBody struct {
	Results []struct {
		Index  int             `json:"index"`
		Status int             `json:"status"`
		Result json.RawMessage `json:"result"`
	} `json:"results"`
}

// postBatch posts events as a batch under key and checks the 200.
func (b *bundle) postBatch(tb testing.TB, body, key string) (reply, batchBody) {
	tb.Helper()
	rep := b.do(tb, "POST", "/v1/events:batch", body, "Idempotency-Key", key)
	if rep.status != http.StatusOK {
		tb.Fatalf("batch: %s", rep)
	}
	return rep, decode[batchBody](tb, rep)
}

func wantStatuses(tb testing.TB, got batchBody, want ...int) {
	tb.Helper()
	if len(got.Results) != len(want) {
		tb.Fatalf("%d results, want %d", len(got.Results), len(want))
	}
	for i, w := range want {
		if r := got.Results[i]; r.Index != i || r.Status != w {
			tb.Errorf("result %d: index %d status %d, want %d: %s", i, r.Index, r.Status, w, r.Result)
		}
	}
}

// reserialise decodes a batch body and encodes it again with other white
// space and each event's keys in another order (json.Marshal of a map
// sorts them; the events were written in struct order).
func reserialise(tb testing.TB, body string) string {
	tb.Helper()
	var req struct{ Events []map[string]any }
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		tb.Fatal(err)
	}
	out, err := json.MarshalIndent(map[string]any{"events": req.Events}, "", "\t")
	if err != nil {
		tb.Fatal(err)
	}
	if string(out) == body {
		tb.Fatal("reserialised batch is the same bytes")
	}
	return string(out)
}

// A batch under an Idempotency-Key keeps the results that were final (2xx)
// and runs the others again: an event refused because its audience did not
// exist is accepted once it does, and the event accepted the first time is
// replayed byte for byte (still "duplicate": false), not accepted again.
func TestBatchRepeatRunsWhatWasNotFinal(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	good := jsonOf(t, receipt("evt_ok", 1))
	later := jsonOf(t, relay.Event{ID: "evt_team", Type: "incident", Channels: []string{"email"}, Audience: "oncall", Subject: "Down"})
	body := `{"events": [` + good + "," + later + `]}`

	_, first := b.postBatch(t, body, "batch-a")
	wantStatuses(t, first, 202, 400)
	if rep := b.do(t, "PUT", "/v1/audiences/oncall", jsonOf(t, map[string]any{"members": people(2)})); rep.status != http.StatusOK {
		t.Fatalf("PUT audience: %s", rep)
	}
	again, second := b.postBatch(t, body, "batch-a")
	wantStatuses(t, second, 202, 202)
	if !bytes.Equal(second.Results[0].Result, first.Results[0].Result) {
		t.Errorf("the accepted event was not replayed:\nfirst  %s\nsecond %s", first.Results[0].Result, second.Results[0].Result)
	}
	if res := decode[acceptBody](t, reply{body: second.Results[1].Result}); res.Duplicate || res.Count != 2 {
		t.Errorf("the event whose audience exists now: %+v, want accepted to 2", res)
	}
	if h := again.header.Get("Idempotent-Replayed"); h != "" {
		t.Errorf("a repeat that ran an event again says Idempotent-Replayed: %q", h)
	}
	// Now every result is final: the same batch, serialised otherwise, is
	// the last answer byte for byte.
	third, _ := b.postBatch(t, reserialise(t, body), "batch-a")
	if !bytes.Equal(third.body, again.body) || third.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-serialised repeat: %s (Idempotent-Replayed %q), want %s replayed", third, third.header.Get("Idempotent-Replayed"), again)
	}
	// Other events under the same key are another request.
	other := `{"events": [` + good + `]}`
	wantProblem(t, b.do(t, "POST", "/v1/events:batch", other, "Idempotency-Key", "batch-a"), http.StatusUnprocessableEntity, "idempotency-key-reused")
	if all := b.listAll(t); len(all) != 3 {
		t.Errorf("%d notifications, want 3 (1 + the audience's 2)", len(all))
	}
}

// A batch whose first run got nothing final stores nothing: a repeat runs
// it all (as a single event's 4xx is not stored), and a re-serialised
// batch is the same request as the original.
func TestBatchFingerprintAsDecoded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := `{"events": [` + jsonOf(t, receipt("evt_1", 1)) + "," + jsonOf(t, receipt("evt_2", 2)) + `]}`
	first, _ := b.postBatch(t, body, "k")
	second, _ := b.postBatch(t, reserialise(t, body), "k")
	if !bytes.Equal(first.body, second.body) || second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-serialised batch: %s, want the first answer %s replayed", second, first)
	}
	// The same events with one changed: another request.
	changed := `{"events": [` + jsonOf(t, receipt("evt_1", 1)) + "," + jsonOf(t, receipt("evt_3", 2)) + `]}`
	wantProblem(t, b.do(t, "POST", "/v1/events:batch", changed, "Idempotency-Key", "k"), http.StatusUnprocessableEntity, "idempotency-key-reused")
	// An undecodable event is fingerprinted by its bytes.
	bad := `{"events": [{"id": "x"}, ` + jsonOf(t, receipt("evt_4", 1)) + `]}`
	_, r1 := b.postBatch(t, bad, "k-bad")
	wantStatuses(t, r1, 400, 202)
	wantProblem(t, b.do(t, "POST", "/v1/events:batch", `{"events": [{"id": "y"}, `+jsonOf(t, receipt("evt_4", 1))+`]}`, "Idempotency-Key", "k-bad"),
		http.StatusUnprocessableEntity, "idempotency-key-reused")
}

// A batch is accepted with one commit, whatever its number of events.
func TestBatchOneCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var evs []string
	for i := range 20 {
		evs = append(evs, jsonOf(t, receipt(fmt.Sprintf("evt_%d", i), 1)))
	}
	before := b.st.Stats().Commits
	_, res := b.postBatch(t, `{"events": [`+strings.Join(evs, ",")+`]}`, "")
	for _, r := range res.Results {
		if r.Status != http.StatusAccepted {
			t.Fatalf("result %d: %d %s", r.Index, r.Status, r.Result)
		}
	}
	if got := b.st.Stats().Commits - before; got != 1 {
		t.Errorf("a batch of 20 events took %d commits, want 1", got)
	}
}

// tmpfsDir mounts a small tmpfs for a test (root only: CI runs as root).
func tmpfsDir(t *testing.T, size int64) string {
	t.Helper()
	base, err := os.MkdirTemp("", "edgerelay-api-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", size>>10), "tmpfs", base).CombinedOutput(); err != nil {
		t.Skipf("needs a tmpfs to fill (run as root, as CI does): mount: %v %s", err, bytes.TrimSpace(out))
	}
	// Registered after the relay's cleanups would be, so it runs last.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", base).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s; detaching it", base, err, out)
			exec.Command("umount", "-l", base).Run()
		}
	})
	return base
}

// fillDisk writes a file until the file system is full.
func fillDisk(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("fill the disk: %v", err)
			}
			return
		}
	}
}

// fullWhileExpanding is the SQLite store with one twist: while armed, the
// next fan-out chunk is written to a full disk (a real tmpfs, filled just
// before and emptied just after), as when a large event arrives as the
// disk runs out.
type fullWhileExpanding struct {
	*sqlite.Store
	armed  atomic.Bool
	fill   func()
	unfill func()
}

func (s *fullWhileExpanding) ExpandEvent(ctx context.Context, eventRow int64, from int, chunk []model.Target, now time.Time) (int, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.fill()
		defer s.unfill()
	}
	return s.Store.ExpandEvent(ctx, eventRow, from, chunk, now)
}

// The case: a batch of which one event was refused for a full disk
// (503 storage-unavailable, "retry with the same Idempotency-Key") and one
// accepted. The retry after the disk has room again replays the accepted
// event's answer and accepts the other; it must not replay the 503.
func TestBatchRetryAfterDiskFull(t *testing.T) {
	t.Parallel()
	dir := tmpfsDir(t, 16<<20)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "relay.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fs := &fullWhileExpanding{Store: st,
		fill:   func() { fillDisk(t, filler) },
		unfill: func() { os.Remove(filler) }}
	// Two notifications per commit: the large event's first two are written
	// with the batch, the rest in chunks after it.
	b := setup(t, options{Store: fs, Relay: relay.Options{Chunk: 2}})
	body := `{"events": [` + jsonOf(t, receipt("evt_small", 1)) + "," + jsonOf(t, receipt("evt_large", 6)) + `]}`

	fs.armed.Store(true)
	_, first := b.postBatch(t, body, "batch-disk")
	wantStatuses(t, first, 202, 503)
	var p struct{ Type string }
	if json.Unmarshal(first.Results[1].Result, &p); !strings.HasSuffix(p.Type, "/storage-unavailable") {
		t.Fatalf("the large event's result: %s, want storage-unavailable", first.Results[1].Result)
	}
	again, second := b.postBatch(t, body, "batch-disk")
	wantStatuses(t, second, 202, 202)
	if !bytes.Equal(second.Results[0].Result, first.Results[0].Result) {
		t.Errorf("the accepted event was not replayed:\nfirst  %s\nsecond %s", first.Results[0].Result, second.Results[0].Result)
	}
	if res := decode[acceptBody](t, reply{body: second.Results[1].Result}); res.Count != 6 {
		t.Errorf("the large event on retry: %+v, want its 6 notifications", res)
	}
	if all := b.listAll(t); len(all) != 7 {
		t.Errorf("%d notifications, want 7", len(all))
	}
	third, _ := b.postBatch(t, reserialise(t, body), "batch-disk")
	if !bytes.Equal(third.body, again.body) || third.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-serialised repeat: %s, want %s replayed", third, again)
	}
}

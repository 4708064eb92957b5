package storetest

import (
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func sources(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "PositionOnlyMovesForward", run: testSourcePosition},
		{name: "GapsSavedWithPosition", run: testSourceGaps},
		{name: "StatesListed", run: testSourceStates},
		{name: "RejectsSettledWithPosition", run: testSourceRejects},
		{name: "RejectRetriesAnswered", run: testSourceRejectRetries},
	})
}

// A source's position starts at 0 and only moves forward: a smaller save (a
// second tailer behind the first, a retried batch) leaves it, and saves
// racing in any order end at the largest. Positions are per source.
func testSourcePosition(t *testing.T, s store.Store) {
	pos := func(name string) int64 {
		t.Helper()
		st, err := s.SourceState(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return st.Position
	}
	save := func(name string, p int64) error {
		return s.SaveSourceState(t.Context(), name, model.SourceState{Position: p}, t0)
	}
	if p := pos("a"); p != 0 {
		t.Fatalf("new source at %d, want 0", p)
	}
	for _, step := range []struct{ save, want int64 }{{10, 10}, {5, 10}, {10, 10}, {20, 20}, {0, 20}} {
		if err := save("a", step.save); err != nil {
			t.Fatal(err)
		}
		if p := pos("a"); p != step.want {
			t.Fatalf("saved %d: at %d, want %d", step.save, p, step.want)
		}
	}
	if p := pos("b"); p != 0 {
		t.Fatalf("source b at %d: positions are per source", p)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := save("b", int64(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := pos("b"); p != 49 {
		t.Fatalf("after concurrent saves: %d, want 49", p)
	}
	if p := pos("a"); p != 20 {
		t.Fatalf("source a at %d after saves to b, want 20", p)
	}
}

// A source's gaps are saved with its position and read back whole, in id
// order: a save at the same position replaces them (a gap closed), a save
// behind the position changes neither (a second tailer behind the first).
func testSourceGaps(t *testing.T, s store.Store) {
	ctx := t.Context()
	since := t0.Add(-time.Minute).Truncate(time.Millisecond)
	state := func(name string) model.SourceState {
		t.Helper()
		st, err := s.SourceState(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	save := func(name string, st model.SourceState) {
		t.Helper()
		if err := s.SaveSourceState(ctx, name, st, t0); err != nil {
			t.Fatal(err)
		}
	}
	want := model.SourceState{Position: 40, Gaps: []model.SourceGap{
		{First: 3, Last: 3, Since: since, Mark: 1_700_000_000_123_456},
		{First: 11, Last: 17, Since: since.Add(time.Second)},
	}}
	// Saved out of order: read back in id order.
	save("a", model.SourceState{Position: 40, Gaps: []model.SourceGap{want.Gaps[1], want.Gaps[0]}})
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if got := state("b"); got.Position != 0 || len(got.Gaps) != 0 {
		t.Fatalf("source b: %+v; gaps are per source", got)
	}
	// Behind: neither position nor gaps change.
	save("a", model.SourceState{Position: 39})
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a save behind the position: %+v, want %+v", got, want)
	}
	// Same position, one gap closed and one split by a row that appeared.
	want.Gaps = []model.SourceGap{{First: 11, Last: 12, Since: since}, {First: 14, Last: 17, Since: since}}
	save("a", want)
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after closing gaps: %+v, want %+v", got, want)
	}
	// Forward, every gap closed.
	save("a", model.SourceState{Position: 50})
	if got := state("a"); got.Position != 50 || len(got.Gaps) != 0 {
		t.Fatalf("after closing every gap: %+v", got)
	}
}

// A batch's rejected rows are written with its state, in one transaction,
// and kept whether or not the state moved (a second tailer behind the
// first, a retry below the position); a row rejected again keeps its first
// time and counts one more.
func testSourceRejects(t *testing.T, s store.Store) {
	ctx := t.Context()
	t1 := t0.Add(time.Minute)
	settle := func(name string, set model.SourceSettle, now time.Time) {
		t.Helper()
		if err := s.SettleSource(ctx, name, set, now); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f model.SourceRejectFilter) []model.SourceReject {
		t.Helper()
		rs, err := s.SourceRejects(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	if rs := list(model.SourceRejectFilter{}); len(rs) != 0 {
		t.Fatalf("new store lists %+v", rs)
	}
	settle("a", model.SourceSettle{State: model.SourceState{Position: 10},
		Rejects: []model.SourceReject{{Row: 7, EventID: "ord_7", Reason: "invalid event: type: required"}}}, t0)
	if st, err := s.SourceState(ctx, "a"); err != nil || st.Position != 10 {
		t.Fatalf("state after a settle with a reject: %+v, %v; want position 10", st, err)
	}
	want := model.SourceReject{Source: "a", Row: 7, EventID: "ord_7", Reason: "invalid event: type: required", First: t0, Last: t0, Times: 1}
	if rs := list(model.SourceRejectFilter{Source: "a"}); !reflect.DeepEqual(rs, []model.SourceReject{want}) {
		t.Fatalf("listed %+v, want %+v", rs, want)
	}
	// Behind the position: the state stays, the reject is recorded.
	settle("a", model.SourceSettle{State: model.SourceState{Position: 5}, Rejects: []model.SourceReject{{Row: 3, Reason: "invalid event: not JSON"}}}, t0)
	if st, _ := s.SourceState(ctx, "a"); st.Position != 10 {
		t.Fatalf("position %d after a settle behind it, want 10", st.Position)
	}
	// Rejected again: new reason and time, first time kept.
	settle("a", model.SourceSettle{State: model.SourceState{Position: 10}, Rejects: []model.SourceReject{{Row: 7, EventID: "ord_7", Reason: "invalid event: recipients: required"}}}, t1)
	want.Reason, want.Last, want.Times = "invalid event: recipients: required", t1, 2
	settle("b", model.SourceSettle{State: model.SourceState{Position: 2}, Rejects: []model.SourceReject{{Row: 1, Reason: "x"}}}, t0)
	rs := list(model.SourceRejectFilter{})
	if len(rs) != 3 || rs[0].Row != 3 || !reflect.DeepEqual(rs[1], want) || rs[2].Source != "b" || rs[2].Row != 1 {
		t.Fatalf("every source's: %+v; want a/3, a/7 (%+v), b/1", rs, want)
	}
	// Pages in (source, row) order.
	if rs := list(model.SourceRejectFilter{AfterSource: "a", AfterRow: 3, Limit: 1}); len(rs) != 1 || rs[0].Row != 7 {
		t.Fatalf("page after a/3: %+v, want a/7", rs)
	}
	if rs := list(model.SourceRejectFilter{AfterSource: "a", AfterRow: 7}); len(rs) != 1 || rs[0].Source != "b" {
		t.Fatalf("page after a/7: %+v, want b/1", rs)
	}
	st, err := s.Status(ctx, t1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.SourceRejects, map[string]int64{"a": 2, "b": 1}) {
		t.Fatalf("status counts %v, want a:2 b:1", st.SourceRejects)
	}
}

// An operator asks for rows to be read again; the tailer's answer
// (accepted: the record goes; rejected again or gone: the record says so)
// clears the request it answers, not one made since. Drop removes records.
func testSourceRejectRetries(t *testing.T, s store.Store) {
	ctx := t.Context()
	t1, t2, t3 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	settle := func(set model.SourceSettle, now time.Time) {
		t.Helper()
		set.State = model.SourceState{Position: 20}
		if err := s.SettleSource(ctx, "a", set, now); err != nil {
			t.Fatal(err)
		}
	}
	get := func(row int64) *model.SourceReject {
		t.Helper()
		rs, err := s.SourceRejects(ctx, model.SourceRejectFilter{Source: "a"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Row == row {
				return &r
			}
		}
		return nil
	}
	requested := func() []int64 {
		t.Helper()
		rs, err := s.SourceRejects(ctx, model.SourceRejectFilter{Source: "a", Requested: true})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range rs {
			out = append(out, r.Row)
		}
		return out
	}
	settle(model.SourceSettle{Rejects: []model.SourceReject{{Row: 3, Reason: "r3"}, {Row: 7, Reason: "r7"}, {Row: 9, Reason: "r9"}}}, t0)
	got, err := s.RetrySourceRejects(ctx, "a", []int64{7, 99}, t1)
	if err != nil || !slices.Equal(got, []int64{7}) {
		t.Fatalf("retry 7, 99: %v, %v; want [7] (99 has no record)", got, err)
	}
	if r := get(7); r.RetryAt == nil || !r.RetryAt.Equal(t1) {
		t.Fatalf("row 7 after retry: %+v, want retry requested at %v", r, t1)
	}
	if got := requested(); !slices.Equal(got, []int64{7}) {
		t.Fatalf("requested: %v, want [7]", got)
	}
	if got, err := s.RetrySourceRejects(ctx, "b", nil, t1); err != nil || len(got) != 0 {
		t.Fatalf("retry every row of source b (none): %v, %v", got, err)
	}
	// Retried again (every row) while the tailer read row 7 for the first
	// request: its answer to t1 leaves the t2 request.
	if got, err := s.RetrySourceRejects(ctx, "a", nil, t2); err != nil || !slices.Equal(got, []int64{3, 7, 9}) {
		t.Fatalf("retry all: %v, %v; want [3 7 9]", got, err)
	}
	settle(model.SourceSettle{Rejects: []model.SourceReject{{Row: 7, Reason: "r7 again", RetryAt: &t1}}}, t2)
	if r := get(7); r.Times != 2 || r.Reason != "r7 again" || r.RetryAt == nil || !r.RetryAt.Equal(t2) {
		t.Fatalf("row 7 rejected again for the t1 request: %+v; want times 2, the t2 request kept", r)
	}
	// The answers to t2: 7 rejected again, 3 gone, 9 accepted.
	settle(model.SourceSettle{Rejects: []model.SourceReject{{Row: 7, Reason: "r7 thrice", RetryAt: &t2}},
		Gone: []model.SourceReject{{Row: 3, RetryAt: &t2}}, Accepted: []int64{9}}, t3)
	if r := get(7); r.Times != 3 || r.RetryAt != nil || r.GoneAt != nil || !r.Last.Equal(t3) || !r.First.Equal(t0) {
		t.Fatalf("row 7 after its answer: %+v; want times 3, no request, last %v, first %v", r, t3, t0)
	}
	if r := get(3); r == nil || r.RetryAt != nil || r.GoneAt == nil || !r.GoneAt.Equal(t3) || r.Reason != "r3" {
		t.Fatalf("row 3 gone: %+v; want gone at %v, reason kept, no request", r, t3)
	}
	if r := get(9); r != nil {
		t.Fatalf("row 9 accepted on retry is still recorded: %+v", r)
	}
	if got := requested(); len(got) != 0 {
		t.Fatalf("requested after the answers: %v", got)
	}
	// Retrying an accepted row finds no record: nothing to read again.
	if got, err := s.RetrySourceRejects(ctx, "a", []int64{9}, t3); err != nil || len(got) != 0 {
		t.Fatalf("retry of an accepted row: %v, %v; want none", got, err)
	}
	// Rejected again after it was gone: back, not gone.
	settle(model.SourceSettle{Rejects: []model.SourceReject{{Row: 3, Reason: "r3 back"}}}, t3)
	if r := get(3); r.GoneAt != nil || r.Reason != "r3 back" {
		t.Fatalf("row 3 rejected again: %+v; want not gone", r)
	}
	if got, err := s.DropSourceRejects(ctx, "a", []int64{3, 4}); err != nil || !slices.Equal(got, []int64{3}) {
		t.Fatalf("drop 3, 4: %v, %v; want [3]", got, err)
	}
	if got, err := s.DropSourceRejects(ctx, "a", nil); err != nil || !slices.Equal(got, []int64{7}) {
		t.Fatalf("drop all: %v, %v; want [7]", got, err)
	}
	if r := get(7); r != nil {
		t.Fatalf("row 7 dropped is still listed: %+v", r)
	}
}

// SourceStates lists every saved source with its position and gaps, as
// SourceState reads each; none saved, none listed.
func testSourceStates(t *testing.T, s store.Store) {
	ctx := t.Context()
	all, err := s.SourceStates(ctx)
	if err != nil || len(all) != 0 {
		t.Fatalf("no source saved: %v, %v; want none", all, err)
	}
	since := t0.Add(-time.Minute).Truncate(time.Millisecond)
	want := map[string]model.SourceState{
		"a": {Position: 10},
		"b": {Position: 30, Gaps: []model.SourceGap{{First: 3, Last: 4, Since: since, Mark: 7}, {First: 20, Last: 20, Since: since.Add(time.Second)}}},
	}
	for name, st := range want {
		if err := s.SaveSourceState(ctx, name, st, t0); err != nil {
			t.Fatal(err)
		}
	}
	all, err = s.SourceStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want) {
		t.Fatalf("listed %v, want %v", all, want)
	}
	for name, w := range want {
		got := all[name]
		if got.Position != w.Position || len(got.Gaps) != len(w.Gaps) {
			t.Fatalf("%s: listed %+v, want %+v", name, got, w)
		}
		for i := range w.Gaps {
			if g := got.Gaps[i]; g.First != w.Gaps[i].First || g.Last != w.Gaps[i].Last || !g.Since.Equal(w.Gaps[i].Since) || g.Mark != w.Gaps[i].Mark {
				t.Fatalf("%s: gap %d %+v, want %+v", name, i, g, w.Gaps[i])
			}
		}
	}
}

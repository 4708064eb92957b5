package storetest

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"edgerelay/store"
)

func sources(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "PositionOnlyMovesForward", run: testSourcePosition},
		{name: "GapsSavedWithPosition", run: testSourceGaps},
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
		return s.SaveSourceState(t.Context(), name, store.SourceState{Position: p}, t0)
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
	state := func(name string) store.SourceState {
		t.Helper()
		st, err := s.SourceState(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	save := func(name string, st store.SourceState) {
		t.Helper()
		if err := s.SaveSourceState(ctx, name, st, t0); err != nil {
			t.Fatal(err)
		}
	}
	want := store.SourceState{Position: 40, Gaps: []store.SourceGap{
		{First: 3, Last: 3, Since: since, Mark: 1_700_000_000_123_456},
		{First: 11, Last: 17, Since: since.Add(time.Second)},
	}}
	// Saved out of order: read back in id order.
	save("a", store.SourceState{Position: 40, Gaps: []store.SourceGap{want.Gaps[1], want.Gaps[0]}})
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if got := state("b"); got.Position != 0 || len(got.Gaps) != 0 {
		t.Fatalf("source b: %+v; gaps are per source", got)
	}
	// Behind: neither position nor gaps change.
	save("a", store.SourceState{Position: 39})
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a save behind the position: %+v, want %+v", got, want)
	}
	// Same position, one gap closed and one split by a row that appeared.
	want.Gaps = []store.SourceGap{{First: 11, Last: 12, Since: since}, {First: 14, Last: 17, Since: since}}
	save("a", want)
	if got := state("a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after closing gaps: %+v, want %+v", got, want)
	}
	// Forward, every gap closed.
	save("a", store.SourceState{Position: 50})
	if got := state("a"); got.Position != 50 || len(got.Gaps) != 0 {
		t.Fatalf("after closing every gap: %+v", got)
	}
}

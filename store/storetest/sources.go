package storetest

import (
	"sync"
	"testing"

	"edgerelay/store"
)

func sources(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "PositionOnlyMovesForward", run: testSourcePosition},
	})
}

// A source's position starts at 0 and only moves forward: a smaller save (a
// second tailer behind the first, a retried batch) leaves it, and saves
// racing in any order end at the largest. Positions are per source.
func testSourcePosition(t *testing.T, s store.Store) {
	pos := func(name string) int64 {
		t.Helper()
		p, err := s.SourcePosition(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := pos("a"); p != 0 {
		t.Fatalf("new source at %d, want 0", p)
	}
	for _, step := range []struct{ save, want int64 }{{10, 10}, {5, 10}, {10, 10}, {20, 20}, {0, 20}} {
		if err := s.SaveSourcePosition(t.Context(), "a", step.save, t0); err != nil {
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
			if err := s.SaveSourcePosition(t.Context(), "b", int64(i), t0); err != nil {
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

package sqlite

import (
	"context"
	"sync"
	"testing"
)

func TestSourcePositionOnlyMovesForward(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pos := func(name string) int64 {
		t.Helper()
		p, err := s.SourcePosition(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := pos("a"); p != 0 {
		t.Fatalf("new source at %d, want 0", p)
	}
	for _, step := range []struct{ save, want int64 }{{10, 10}, {5, 10}, {10, 10}, {20, 20}, {0, 20}} {
		if err := s.SaveSourcePosition(ctx, "a", step.save, t0); err != nil {
			t.Fatal(err)
		}
		if p := pos("a"); p != step.want {
			t.Fatalf("saved %d: at %d, want %d", step.save, p, step.want)
		}
	}
	if p := pos("b"); p != 0 {
		t.Fatalf("source b at %d: positions are per source", p)
	}
	// Saves racing in any order end at the largest.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := s.SaveSourcePosition(ctx, "b", int64(i), t0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := pos("b"); p != 49 {
		t.Fatalf("after concurrent saves: %d, want 49", p)
	}
	if n := count(t, s, `SELECT count(*) FROM source_positions`); n != 2 {
		t.Fatalf("%d position rows, want 2", n)
	}
}

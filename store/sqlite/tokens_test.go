package sqlite

import (
	"context"
	"edgerelay/store"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	if has, err := s.HasTokens(ctx); err != nil || has {
		t.Fatalf("HasTokens on a new store: %v, %v", has, err)
	}
	a, err := s.CreateToken(ctx, "default", "billing", "hash-a", t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateToken(ctx, "acme", "ops", "hash-b", t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || b.ID <= a.ID || a.Tenant != "default" || a.Name != "billing" || !a.CreatedAt.Equal(t0) {
		t.Fatalf("created %+v and %+v", a, b)
	}
	if has, err := s.HasTokens(ctx); err != nil || !has {
		t.Fatalf("HasTokens with two tokens: %v, %v", has, err)
	}

	got, err := s.TokenByHash(ctx, "hash-b")
	if err != nil || got != b {
		t.Fatalf("TokenByHash = %+v, %v; want %+v", got, err, b)
	}
	for _, h := range []string{"hash-c", ""} {
		if _, err := s.TokenByHash(ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TokenByHash(%q): %v, want ErrNotFound", h, err)
		}
	}
	// A hash is unique across tenants; an empty one is refused.
	if _, err := s.CreateToken(ctx, "other", "dup", "hash-a", t0); !errors.Is(err, store.ErrTokenExists) {
		t.Fatalf("duplicate hash: %v, want ErrTokenExists", err)
	}
	if _, err := s.CreateToken(ctx, "default", "empty", "", t0); err == nil {
		t.Fatal("empty hash accepted")
	}

	list, err := s.Tokens(ctx)
	if err != nil || len(list) != 2 || list[0] != a || list[1] != b {
		t.Fatalf("Tokens = %+v, %v", list, err)
	}

	if err := s.DeleteToken(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TokenByHash(ctx, "hash-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted token still found: %v", err)
	}
	if err := s.DeleteToken(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteToken(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if has, _ := s.HasTokens(ctx); has {
		t.Fatal("HasTokens after deleting every token")
	}
	if list, err := s.Tokens(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("Tokens when empty = %#v, %v; want an empty list", list, err)
	}
	// Ids are not reused (AUTOINCREMENT): a new token never answers to a
	// deleted one's id.
	c, err := s.CreateToken(ctx, "default", "again", "hash-a", t0)
	if err != nil || c.ID <= b.ID {
		t.Fatalf("recreated %+v, %v", c, err)
	}
}

func TestCreateTokenConcurrentSameHash(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, exists := 0, 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.CreateToken(context.Background(), "default", "t", "same", t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, store.ErrTokenExists):
				exists++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created != 1 || exists != 19 {
		t.Fatalf("created %d, exists %d; want 1 and 19", created, exists)
	}
}

package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func tokens(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "CreateLookupListDelete", run: testTokens},
		{name: "OneHashOnce", run: testTokenSameHashConcurrently},
	})
}

func sameToken(a, b model.Token) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Name == b.Name && a.CreatedAt.Equal(b.CreatedAt)
}

// Tokens are kept by hash: created, found by hash, listed oldest first,
// deleted (then found no more). A hash is unique across tenants; an empty
// one is refused; ids are never reused.
func testTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	if has, err := s.HasTokens(ctx); err != nil || has {
		t.Fatalf("HasTokens on a new store: %v, %v", has, err)
	}
	if list, err := s.Tokens(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("Tokens on a new store = %#v, %v; want an empty list", list, err)
	}
	a, err := s.CreateToken(ctx, "default", "billing", "hash-a", t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateToken(ctx, "acme", "ops", "hash-b", t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || b.ID == a.ID || a.Tenant != "default" || a.Name != "billing" || !a.CreatedAt.Equal(t0) || !b.CreatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("created %+v and %+v", a, b)
	}
	if has, err := s.HasTokens(ctx); err != nil || !has {
		t.Fatalf("HasTokens with two tokens: %v, %v", has, err)
	}
	if got, err := s.TokenByHash(ctx, "hash-b"); err != nil || !sameToken(got, b) {
		t.Fatalf("TokenByHash = %+v, %v; want %+v", got, err, b)
	}
	for _, h := range []string{"hash-c", ""} {
		_, err := s.TokenByHash(ctx, h)
		wantErr(t, "TokenByHash("+h+")", err, model.ErrNotFound)
	}
	_, err = s.CreateToken(ctx, "other", "dup", "hash-a", t0)
	wantErr(t, "a second token with one hash", err, model.ErrTokenExists)
	if _, err := s.CreateToken(ctx, "default", "empty", "", t0); err == nil {
		t.Fatal("a token with an empty hash was created")
	}
	if list, err := s.Tokens(ctx); err != nil || len(list) != 2 || !sameToken(list[0], a) || !sameToken(list[1], b) {
		t.Fatalf("Tokens = %+v, %v; want %+v, %+v", list, err, a, b)
	}

	if err := s.DeleteToken(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.TokenByHash(ctx, "hash-a")
	wantErr(t, "a deleted token", err, model.ErrNotFound)
	wantErr(t, "a second delete", s.DeleteToken(ctx, a.ID), model.ErrNotFound)
	wantErr(t, "deleting a token that never was", s.DeleteToken(ctx, b.ID+1000), model.ErrNotFound)
	if err := s.DeleteToken(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasTokens(ctx); err != nil || has {
		t.Fatalf("HasTokens after deleting every token: %v, %v", has, err)
	}
	if list, err := s.Tokens(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("Tokens when empty = %#v, %v; want an empty list", list, err)
	}
	// A new token never answers to a deleted one's id.
	c, err := s.CreateToken(ctx, "default", "again", "hash-a", t0)
	if err != nil || c.ID == a.ID || c.ID == b.ID {
		t.Fatalf("recreated %+v, %v; want an id not %d or %d", c, err, a.ID, b.ID)
	}
}

// Callers creating one hash at once: one token, the others ErrTokenExists.
func testTokenSameHashConcurrently(t *testing.T, s store.Store) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, exists := 0, 0
	for range 20 {
		wg.Go(func() {
			_, err := s.CreateToken(t.Context(), "default", "t", "same", t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, model.ErrTokenExists):
				exists++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 1 || exists != 19 {
		t.Fatalf("created %d, exists %d; want 1 and 19", created, exists)
	}
	if list, err := s.Tokens(t.Context()); err != nil || len(list) != 1 {
		t.Fatalf("Tokens = %+v, %v; want one", list, err)
	}
}

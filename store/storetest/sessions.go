package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func sessions(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "CreateFindEnd", run: testSessions},
		{name: "Prune", run: testPruneSessions},
	})
}

// A session is found by its id's hash until it expires or is deleted;
// deleting one twice is no error; an empty hash is refused.
func testSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := model.Session{IDHash: "hash-a", Tenant: "acme", TokenHash: "tok-a", Who: "console, token 1 (support) of tenant acme",
		CreatedAt: t0, ExpiresAt: t0.Add(12 * time.Hour)}
	open := model.Session{IDHash: "hash-open", Tenant: "beta", Who: "console, open on loopback, as tenant beta",
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	for _, ss := range []model.Session{a, open} {
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSession(ctx, model.Session{Tenant: "acme", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err == nil {
		t.Fatal("a session with an empty id hash was created")
	}
	if err := s.CreateSession(ctx, a); err == nil {
		t.Fatal("a second session with one id hash was created")
	}
	for _, want := range []model.Session{a, open} {
		got, err := s.Session(ctx, want.IDHash, t0.Add(time.Minute))
		if err != nil || got.IDHash != want.IDHash || got.Tenant != want.Tenant || got.TokenHash != want.TokenHash || got.Who != want.Who ||
			!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
			t.Fatalf("Session(%s) = %+v, %v; want %+v", want.IDHash, got, err, want)
		}
	}
	for _, tc := range []struct {
		what, hash string
		at         time.Time
	}{
		{"an unknown hash", "hash-c", t0},
		{"an empty hash", "", t0},
		{"at its expiry", "hash-open", t0.Add(time.Hour)},
		{"after its expiry", "hash-open", t0.Add(2 * time.Hour)},
	} {
		_, err := s.Session(ctx, tc.hash, tc.at)
		wantErr(t, "Session: "+tc.what, err, model.ErrNotFound)
	}
	for range 2 {
		if err := s.DeleteSession(ctx, "hash-a"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Session(ctx, "hash-a", t0)
	wantErr(t, "Session after DeleteSession", err, model.ErrNotFound)
	if got, err := s.Session(ctx, "hash-open", t0); err != nil || got.Tenant != "beta" {
		t.Fatalf("deleting one session touched another: %+v, %v", got, err)
	}
}

// PruneSessions deletes expired sessions, oldest first, at most limit at
// a time, and leaves live ones.
func testPruneSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 5 {
		ss := model.Session{IDHash: fmt.Sprintf("hash-%d", i), Tenant: "acme", TokenHash: "tok", Who: "w",
			CreatedAt: t0, ExpiresAt: t0.Add(time.Duration(i+1) * time.Hour)}
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(3 * time.Hour) // hash-0, -1, -2 have expired
	if n, err := s.PruneSessions(ctx, now, 2); err != nil || n != 2 {
		t.Fatalf("PruneSessions(limit 2) = %d, %v; want 2", n, err)
	}
	// The oldest went first: hash-2 expired last of the three and is left.
	if _, err := s.Session(ctx, "hash-2", t0); err != nil {
		t.Fatalf("PruneSessions did not take the oldest first: hash-2: %v", err)
	}
	if n, err := s.PruneSessions(ctx, now, 10); err != nil || n != 1 {
		t.Fatalf("PruneSessions again = %d, %v; want 1", n, err)
	}
	if n, err := s.PruneSessions(ctx, now, 0); err != nil || n != 0 {
		t.Fatalf("PruneSessions(limit 0) = %d, %v; want 0", n, err)
	}
	for _, h := range []string{"hash-3", "hash-4"} {
		if _, err := s.Session(ctx, h, now); err != nil {
			t.Fatalf("a live session was pruned: %s: %v", h, err)
		}
	}
	for _, h := range []string{"hash-0", "hash-1", "hash-2"} {
		_, err := s.Session(ctx, h, t0)
		wantErr(t, "a pruned session "+h, err, model.ErrNotFound)
	}
}

package sqlite

import (
	"bytes"
	"context"
	"edgerelay/store"
	"errors"
	"testing"
	"time"
)

func TestRequestResponseStoredAndReplayed(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	ttl := 24 * time.Hour
	k := store.RequestKey{Tenant: "default", Key: "k1", Fingerprint: "fp1"}

	if resp, err := s.LookupRequest(ctx, k, t0); resp != nil || err != nil {
		t.Fatalf("new key: %v, %v; want nothing stored", resp, err)
	}
	want := store.StoredResponse{Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}
	if err := s.SaveResponse(ctx, k, want, t0, ttl); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{t0, t0.Add(ttl - time.Millisecond)} {
		resp, err := s.LookupRequest(ctx, k, at)
		if err != nil || resp == nil || resp.Status != want.Status || resp.ContentType != want.ContentType || !bytes.Equal(resp.Body, want.Body) {
			t.Fatalf("lookup at +%s: %+v, %v; want %+v", at.Sub(t0), resp, err, want)
		}
	}
	// The same key for another request: refused while the key lives.
	other := store.RequestKey{Tenant: "default", Key: "k1", Fingerprint: "fp2"}
	if _, err := s.LookupRequest(ctx, other, t0.Add(time.Hour)); !errors.Is(err, store.ErrKeyReused) {
		t.Fatalf("other fingerprint: %v, want ErrKeyReused", err)
	}
	// Keys are per tenant.
	elsewhere := store.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp2"}
	if resp, err := s.LookupRequest(ctx, elsewhere, t0); resp != nil || err != nil {
		t.Fatalf("other tenant: %v, %v; want nothing", resp, err)
	}
	// A second save under a live key keeps the first answer.
	if err := s.SaveResponse(ctx, k, store.StoredResponse{Status: 202, Body: []byte("second")}, t0.Add(time.Second), ttl); err != nil {
		t.Fatal(err)
	}
	if resp, _ := s.LookupRequest(ctx, k, t0.Add(2*time.Second)); resp == nil || !bytes.Equal(resp.Body, want.Body) {
		t.Fatalf("after a second save: %+v, want the first answer", resp)
	}
	// Once expired the key is free: nothing to replay, and another request
	// may take it.
	if resp, err := s.LookupRequest(ctx, other, t0.Add(ttl)); resp != nil || err != nil {
		t.Fatalf("after expiry: %v, %v; want nothing", resp, err)
	}
	if err := s.SaveResponse(ctx, other, store.StoredResponse{Status: 201, Body: []byte("new")}, t0.Add(ttl), ttl); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.LookupRequest(ctx, other, t0.Add(ttl+time.Second)); err != nil || resp == nil || string(resp.Body) != "new" {
		t.Fatalf("the key reused after expiry: %+v, %v", resp, err)
	}
	if err := s.SaveResponse(ctx, k, want, t0, 0); err == nil {
		t.Fatal("save with ttl 0: no error")
	}
}

// A row an older version left in flight (its process died mid-request) is
// not an answer and does not block the key.
func TestRequestLegacyInFlightRowIgnored(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	k := store.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	err := s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, created_at, expires_at)
			VALUES ('default', 'k', 'other', 'in_flight', ?1, ?1, ?2)`, ms(t0.Add(time.Hour)), ms(t0.Add(24*time.Hour)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := s.LookupRequest(ctx, k, t0); resp != nil || err != nil {
		t.Fatalf("lookup over a legacy in-flight row: %v, %v; want nothing", resp, err)
	}
	if err := s.SaveResponse(ctx, k, store.StoredResponse{Status: 200, Body: []byte("ok")}, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.LookupRequest(ctx, k, t0); err != nil || resp == nil || string(resp.Body) != "ok" {
		t.Fatalf("after save: %+v, %v", resp, err)
	}
}

func TestPruneRequests(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	save := func(key string, ttl time.Duration) {
		t.Helper()
		k := store.RequestKey{Tenant: "default", Key: key, Fingerprint: "fp"}
		if err := s.SaveResponse(ctx, k, store.StoredResponse{Status: 200, Body: []byte("ok")}, t0, ttl); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		save(key, time.Hour)
	}
	save("later", 2*time.Hour)

	at := t0.Add(time.Hour)
	if n, err := s.PruneRequests(ctx, at, 0); err != nil || n != 0 {
		t.Fatalf("prune with limit 0: %d, %v; want 0", n, err)
	}
	if n, err := s.PruneRequests(ctx, at, 4); err != nil || n != 4 {
		t.Fatalf("first prune: %d, %v; want 4", n, err)
	}
	if n, err := s.PruneRequests(ctx, at, 100); err != nil || n != 2 {
		t.Fatalf("second prune: %d, %v; want 2", n, err)
	}
	if n, err := s.PruneRequests(ctx, at, 100); err != nil || n != 0 {
		t.Fatalf("third prune: %d, %v; want 0", n, err)
	}
	if got := count(t, s, `SELECT count(*) FROM request_keys WHERE key = 'later'`); got != 1 {
		t.Fatalf("the unexpired key is gone")
	}
}

package store

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestBeginRequestClaimAndReplay(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	lock, ttl := time.Minute, 24*time.Hour
	k := RequestKey{Tenant: "default", Key: "k1", Fingerprint: "fp1"}

	if resp, err := s.BeginRequest(ctx, k, t0, lock, ttl); resp != nil || err != nil {
		t.Fatalf("first begin: %v, %v; want a claim", resp, err)
	}
	// The same request again while the first runs, up to and including the
	// last millisecond of its lock.
	for _, at := range []time.Time{t0, t0.Add(lock)} {
		if _, err := s.BeginRequest(ctx, k, at, lock, ttl); !errors.Is(err, ErrKeyInFlight) {
			t.Fatalf("begin at %s while in flight: %v, want ErrKeyInFlight", at.Sub(t0), err)
		}
	}
	other := k
	other.Fingerprint = "fp2"
	if _, err := s.BeginRequest(ctx, other, t0, lock, ttl); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("different request while in flight: %v, want ErrKeyReused", err)
	}
	// The same key in another tenant is another key.
	elsewhere := RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp9"}
	if resp, err := s.BeginRequest(ctx, elsewhere, t0, lock, ttl); resp != nil || err != nil {
		t.Fatalf("same key in another tenant: %v, %v; want a claim", resp, err)
	}

	want := StoredResponse{Status: 202, ContentType: "application/json", Body: []byte(`{"id":"evt_1"}`)}
	if err := s.FinishRequest(ctx, k, want, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // replayed as often as asked, unchanged
		resp, err := s.BeginRequest(ctx, k, t0.Add(time.Hour), lock, ttl)
		if err != nil || resp == nil {
			t.Fatalf("begin after finish: %v, %v; want the stored response", resp, err)
		}
		if resp.Status != want.Status || resp.ContentType != want.ContentType || !bytes.Equal(resp.Body, want.Body) {
			t.Fatalf("replayed %+v, want %+v", *resp, want)
		}
	}
	if _, err := s.BeginRequest(ctx, other, t0.Add(time.Hour), lock, ttl); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("different request after finish: %v, want ErrKeyReused", err)
	}
	// The other tenant's claim is untouched by all of this.
	if _, err := s.BeginRequest(ctx, elsewhere, t0, lock, ttl); !errors.Is(err, ErrKeyInFlight) {
		t.Fatalf("other tenant's key: %v, want ErrKeyInFlight", err)
	}
}

func TestBeginRequestTakesOverAbandonedClaim(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	lock, ttl := time.Minute, time.Hour
	k := RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	if _, err := s.BeginRequest(ctx, k, t0, lock, ttl); err != nil {
		t.Fatal(err)
	}
	// The claimant died: one millisecond past its lock, the claim is
	// abandoned. A different request still may not have the key...
	past := t0.Add(lock + time.Millisecond)
	other := k
	other.Fingerprint = "other"
	if _, err := s.BeginRequest(ctx, other, past, lock, ttl); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("different request on an abandoned claim: %v, want ErrKeyReused", err)
	}
	// ...but the same one takes it over, with a fresh lock.
	if resp, err := s.BeginRequest(ctx, k, past, lock, ttl); resp != nil || err != nil {
		t.Fatalf("take over: %v, %v; want a claim", resp, err)
	}
	if _, err := s.BeginRequest(ctx, k, past.Add(lock), lock, ttl); !errors.Is(err, ErrKeyInFlight) {
		t.Fatalf("after take-over: %v, want ErrKeyInFlight", err)
	}
	var created, expires int64
	if err := s.rdb.QueryRow(`SELECT created_at, expires_at FROM request_keys WHERE key = 'k'`).Scan(&created, &expires); err != nil {
		t.Fatal(err)
	}
	if created != ms(past) || expires != ms(past.Add(ttl)) {
		t.Fatalf("take-over kept created %d expires %d, want %d %d", created, expires, ms(past), ms(past.Add(ttl)))
	}
	if err := s.FinishRequest(ctx, k, StoredResponse{Status: 200}, past.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := s.BeginRequest(ctx, k, past.Add(2*time.Second), lock, ttl)
	if err != nil || resp == nil || resp.Status != 200 || len(resp.Body) != 0 {
		t.Fatalf("replay after take-over: %+v, %v", resp, err)
	}
}

func TestBeginRequestAfterExpiry(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	lock, ttl := time.Minute, time.Hour
	k := RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	if _, err := s.BeginRequest(ctx, k, t0, lock, ttl); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRequest(ctx, k, StoredResponse{Status: 201, Body: []byte("first")}, t0); err != nil {
		t.Fatal(err)
	}
	other := k
	other.Fingerprint = "other"
	if _, err := s.BeginRequest(ctx, other, t0.Add(ttl-time.Millisecond), lock, ttl); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("a millisecond before expiry: %v, want ErrKeyReused", err)
	}
	// At expires_at the key is free: any request claims it afresh and the
	// old response is gone.
	if resp, err := s.BeginRequest(ctx, other, t0.Add(ttl), lock, ttl); resp != nil || err != nil {
		t.Fatalf("at expiry: %v, %v; want a claim", resp, err)
	}
	if _, err := s.BeginRequest(ctx, k, t0.Add(ttl), lock, ttl); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("the first request after the key was reclaimed: %v, want ErrKeyReused", err)
	}
	if err := s.FinishRequest(ctx, other, StoredResponse{Status: 202, Body: []byte("second")}, t0.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	resp, err := s.BeginRequest(ctx, other, t0.Add(ttl+time.Second), lock, ttl)
	if err != nil || resp == nil || resp.Status != 202 || string(resp.Body) != "second" {
		t.Fatalf("replay of the second claim: %+v, %v", resp, err)
	}

	// A lock still held is not broken at expiry (lock == ttl here).
	k2 := RequestKey{Tenant: "default", Key: "k2", Fingerprint: "fp"}
	if _, err := s.BeginRequest(ctx, k2, t0, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	k2other := k2
	k2other.Fingerprint = "other"
	if _, err := s.BeginRequest(ctx, k2other, t0.Add(time.Hour), lock, ttl); !errors.Is(err, ErrKeyInFlight) {
		t.Fatalf("expired key whose lock holds: %v, want ErrKeyInFlight", err)
	}
	if resp, err := s.BeginRequest(ctx, k2other, t0.Add(time.Hour+time.Millisecond), lock, ttl); resp != nil || err != nil {
		t.Fatalf("expired key whose lock ran out: %v, %v; want a claim", resp, err)
	}
}

func TestBeginRequestRejectsBadDurations(t *testing.T) {
	t.Parallel()
	s := setup(t)
	k := RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	for _, d := range [][2]time.Duration{{0, time.Hour}, {time.Hour, time.Minute}} {
		if _, err := s.BeginRequest(context.Background(), k, t0, d[0], d[1]); err == nil {
			t.Fatalf("lock %s ttl %s accepted", d[0], d[1])
		}
	}
}

func TestFinishAndReleaseNeedTheClaim(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	lock, ttl := time.Minute, time.Hour
	k := RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	if err := s.FinishRequest(ctx, k, StoredResponse{Status: 200}, t0); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("finish without a claim: %v, want ErrClaimLost", err)
	}
	if err := s.ReleaseRequest(ctx, k); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("release without a claim: %v, want ErrClaimLost", err)
	}
	if _, err := s.BeginRequest(ctx, k, t0, lock, ttl); err != nil {
		t.Fatal(err)
	}
	other := k
	other.Fingerprint = "other"
	if err := s.FinishRequest(ctx, other, StoredResponse{Status: 200}, t0); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("finish by another request: %v, want ErrClaimLost", err)
	}
	if err := s.ReleaseRequest(ctx, other); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("release by another request: %v, want ErrClaimLost", err)
	}
	// Released (the request failed with a 5xx): the retry runs again, even
	// with another body.
	if err := s.ReleaseRequest(ctx, k); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.BeginRequest(ctx, other, t0, lock, ttl); resp != nil || err != nil {
		t.Fatalf("begin after release: %v, %v; want a claim", resp, err)
	}
	if err := s.FinishRequest(ctx, other, StoredResponse{Status: 202, Body: []byte("x")}, t0); err != nil {
		t.Fatal(err)
	}
	// A stored response is neither finished twice nor released.
	if err := s.FinishRequest(ctx, other, StoredResponse{Status: 500}, t0); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("second finish: %v, want ErrClaimLost", err)
	}
	if err := s.ReleaseRequest(ctx, other); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("release of a done key: %v, want ErrClaimLost", err)
	}
	resp, err := s.BeginRequest(ctx, other, t0, lock, ttl)
	if err != nil || resp == nil || resp.Status != 202 {
		t.Fatalf("replay: %+v, %v", resp, err)
	}
}

// Fifty copies of one request at once: exactly one runs, the others are told
// it is in flight; once it is done, all fifty get its response.
func TestBeginRequestConcurrent(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	k := RequestKey{Tenant: "default", Key: "same", Fingerprint: "fp"}
	const n = 50
	race := func() (claims, inFlight, replays int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, err := s.BeginRequest(ctx, k, t0, time.Minute, time.Hour)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrKeyInFlight):
					inFlight++
				case err != nil:
					t.Error(err)
				case resp == nil:
					claims++
				default:
					replays++
				}
			}()
		}
		close(start)
		wg.Wait()
		return
	}
	if c, f, r := race(); c != 1 || f != n-1 || r != 0 {
		t.Fatalf("claims %d, in flight %d, replays %d; want 1, %d, 0", c, f, r, n-1)
	}
	if err := s.FinishRequest(ctx, k, StoredResponse{Status: 202}, t0); err != nil {
		t.Fatal(err)
	}
	if c, f, r := race(); c != 0 || f != 0 || r != n {
		t.Fatalf("after finish: claims %d, in flight %d, replays %d; want 0, 0, %d", c, f, r, n)
	}
}

func TestPruneRequests(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	begin := func(key string, lock, ttl time.Duration, finish bool) {
		t.Helper()
		k := RequestKey{Tenant: "default", Key: key, Fingerprint: "fp"}
		if _, err := s.BeginRequest(ctx, k, t0, lock, ttl); err != nil {
			t.Fatal(err)
		}
		if finish {
			if err := s.FinishRequest(ctx, k, StoredResponse{Status: 200, Body: []byte("ok")}, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		begin(key, time.Minute, time.Hour, true)
	}
	begin("abandoned", time.Minute, time.Hour, false) // expired and unlocked by t0+1h
	begin("locked", time.Hour, time.Hour, false)      // expired at t0+1h but its lock holds
	begin("later", time.Minute, 2*time.Hour, true)

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
	if got := count(t, s, `SELECT count(*) FROM request_keys WHERE key IN ('locked', 'later')`); got != 2 {
		t.Fatalf("%d of the locked and the unexpired keys left, want 2", got)
	}
	if got := count(t, s, `SELECT count(*) FROM request_keys`); got != 2 {
		t.Fatalf("%d keys left, want 2", got)
	}
	if n, err := s.PruneRequests(ctx, at.Add(time.Millisecond), 100); err != nil || n != 1 {
		t.Fatalf("prune once the lock ran out: %d, %v; want 1", n, err)
	}
}

package relay

import (
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// A request whose release or saved response never reached the store (the
// write failed: the database was down) leaves its claim in the store,
// owned by this process. This process runs nothing under the key, so the
// client's retry here takes the key over at once, not after RequestHold.
// A second request while the first still runs is told it is in progress.
func TestRequestKeyOfAFailedReleaseIsFreeHereAtOnce(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{RequestHold: time.Hour})
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	c, err := r.ClaimRequest(t.Context(), k)
	if err != nil || !c.Held() {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	if c, err := r.ClaimRequest(t.Context(), k); err != nil || c.Held() || c.Busy.IsZero() {
		t.Fatalf("a repeat while the first runs: %+v, %v; want busy", c, err)
	}
	r.endKey(k) // as when the release's write failed: the store still has the claim
	if c, err := r.ClaimRequest(t.Context(), k); err != nil || !c.Held() {
		t.Fatalf("the retry after a failed release: %+v, %v; want held at once", c, err)
	}
}

// A running request's claim is renewed, so it outlives its first hold; once
// the request ends the renewals stop. The clock is the relay's own, moved by
// the test; the test waits for a renewal to be seen, not for time to pass.
func TestRequestKeyRenewedWhileItsRequestRuns(t *testing.T) {
	t.Parallel()
	const hold = 150 * time.Millisecond // renewed every 50 ms of real time
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := setupRelay(t, Options{RequestHold: hold, Now: clock})
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	if c, err := r.ClaimRequest(t.Context(), k); err != nil || !c.Held() {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	start := clock()
	set := func(d time.Duration) { mu.Lock(); now = start.Add(d); mu.Unlock() }
	// Seen from another process: busy until when?
	other := model.RequestHold{Owner: "elsewhere/1/x"}
	busy := func(at time.Duration) time.Time {
		t.Helper()
		other.Now = start.Add(at)
		other.Until = other.Now.Add(hold)
		c, err := r.store.ClaimRequest(t.Context(), k, other)
		if err != nil || c.Held() {
			t.Fatalf("another process took the key of a running request: %+v, %v", c, err)
		}
		return c.Busy
	}
	set(100 * time.Millisecond)
	for !busy(100 * time.Millisecond).Equal(start.Add(250 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // until a renewal reads the moved clock
	}
	// Past the first hold's end, the renewed claim still holds.
	if until := busy(200 * time.Millisecond); until.Before(start.Add(250 * time.Millisecond)) {
		t.Fatalf("busy until %s", until)
	}
	if err := r.SaveResponse(t.Context(), k, model.StoredResponse{Status: 202, Body: []byte("x")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.requests.mu.Lock()
	n := len(r.requests.runs)
	r.requests.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests still tracked after the response was saved", n)
	}
}

package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// claims: an Idempotency-Key held by the request running under it, for
// every process sharing the store, until it completes or its hold lapses.
func claims(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "OneOfTwoAtOnceHoldsTheKey", run: testClaimOneOfTwo},
		{name: "CompletedIsReplayed", run: testClaimCompletedReplayed},
		{name: "ReleasedRunsAgainAtOnce", run: testClaimReleased},
		{name: "AbandonedLapses", run: testClaimLapses},
		{name: "OtherRequestUnderTheKeyIsRefused", run: testClaimOtherRequest},
		{name: "AbandonedOwnerIsTakenOverAtOnce", run: testClaimAbandonedOwner},
		{name: "RenewedByItsOwner", run: testClaimRenewed},
	})
}

// keyHold is a claim by process p1 for 10 s from now.
func keyHold(now time.Time) model.RequestHold {
	return model.RequestHold{Now: now, Until: now.Add(10 * time.Second), Owner: "p1"}
}

func claimKey(t *testing.T, s store.Store, k model.RequestKey, now time.Time) model.RequestClaim {
	t.Helper()
	c, err := s.ClaimRequest(t.Context(), k, keyHold(now))
	if err != nil {
		t.Fatalf("claim %q: %v", k.Key, err)
	}
	return c
}

// Of many requests with one key at once (many nodes), exactly one holds it;
// the others are told it is busy until the holder's claim lapses.
func testClaimOneOfTwo(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	var held, busy int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c, err := s.ClaimRequest(t.Context(), k, keyHold(t0))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("claim: %v", err)
			case c.Held():
				held++
			case c.Busy.Equal(t0.Add(10 * time.Second)):
				busy++
			default:
				t.Errorf("claim %+v: neither held nor busy until the holder's end", c)
			}
		})
	}
	wg.Wait()
	if held != 1 || busy != 7 {
		t.Fatalf("%d held, %d busy; want 1 and 7", held, busy)
	}
	// Another tenant's key of the same name is another key.
	if c := claimKey(t, s, model.RequestKey{Tenant: "beta", Key: "k1", Fingerprint: "fp1"}, t0); !c.Held() {
		t.Errorf("beta's k1: %+v, want held", c)
	}
}

// A completed request's response is replayed to a repeat, not run again.
func testClaimCompletedReplayed(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	if !claimKey(t, s, k, t0).Held() {
		t.Fatal("first claim not held")
	}
	resp := model.StoredResponse{Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}
	if err := s.SaveResponse(t.Context(), k, resp, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	c := claimKey(t, s, k, t0.Add(time.Minute))
	if c.Stored == nil || !sameResponse(c.Stored, resp) {
		t.Fatalf("repeat: %+v, want the stored response", c)
	}
	// Past the response's life the key is free again.
	if c := claimKey(t, s, k, t0.Add(2*time.Hour)); !c.Held() {
		t.Errorf("after the response expired: %+v, want held", c)
	}
}

// A request that saved no response (it failed) releases its claim: a retry
// runs at once, not after the hold.
func testClaimReleased(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	claimKey(t, s, k, t0)
	if err := s.ReleaseRequest(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if c := claimKey(t, s, k, t0.Add(time.Second)); !c.Held() {
		t.Errorf("after release: %+v, want held", c)
	}
	// Release leaves a completed response alone.
	resp := model.StoredResponse{Status: 202, Body: []byte("x")}
	s.SaveResponse(t.Context(), k, resp, t0.Add(time.Second), time.Hour)
	if err := s.ReleaseRequest(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if c := claimKey(t, s, k, t0.Add(2*time.Second)); c.Stored == nil {
		t.Errorf("a release removed a completed response: %+v", c)
	}
}

// A claim whose process died blocks the key until its hold lapses, not
// longer: then the next request under the key takes it.
func testClaimLapses(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	claimKey(t, s, k, t0)
	if c := claimKey(t, s, k, t0.Add(9*time.Second)); c.Held() {
		t.Fatal("a live claim was taken")
	}
	if c := claimKey(t, s, k, t0.Add(10*time.Second)); !c.Held() {
		t.Errorf("at the hold's end: %+v, want held", c)
	}
	// A lapsed claim is pruned like an expired response.
	if n, err := s.PruneRequests(t.Context(), t0.Add(time.Hour), 10); err != nil || n != 1 {
		t.Errorf("prune after the claim lapsed: %d, %v; want 1", n, err)
	}
}

// Another request (another fingerprint) under a key that is held or
// answered is ErrKeyReused.
func testClaimOtherRequest(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	claimKey(t, s, k, t0)
	other := k
	other.Fingerprint = "fp2"
	if _, err := s.ClaimRequest(t.Context(), other, keyHold(t0)); !errors.Is(err, model.ErrKeyReused) {
		t.Errorf("another request while held: %v, want ErrKeyReused", err)
	}
	s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 202, Body: []byte("x")}, t0, time.Hour)
	if _, err := s.ClaimRequest(t.Context(), other, keyHold(t0.Add(time.Minute))); !errors.Is(err, model.ErrKeyReused) {
		t.Errorf("another request after it was answered: %v, want ErrKeyReused", err)
	}
}

// A claim whose owner the caller knows is no longer running the request
// (a process that died, or the caller's own whose release failed) is taken
// over at once, by the same request only; a claim of another owner, or of
// a live one, still holds until it lapses.
func testClaimAbandonedOwner(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	claimKey(t, s, k, t0)
	h := model.RequestHold{Now: t0.Add(time.Second), Until: t0.Add(11 * time.Second), Owner: "p2", Abandoned: "p3"}
	c, err := s.ClaimRequest(t.Context(), k, h)
	if err != nil || c.Held() || c.Owner != "p1" {
		t.Fatalf("p1's live claim, abandoned p3 named: %+v, %v; want busy, owned by p1", c, err)
	}
	h.Abandoned = "p1"
	if c, err := s.ClaimRequest(t.Context(), k, h); err != nil || !c.Held() {
		t.Fatalf("p1 abandoned: %+v, %v; want held at once", c, err)
	}
	// Now p2 holds it: naming p1 again takes nothing.
	h.Owner, h.Now = "p4", t0.Add(2*time.Second)
	if c, err := s.ClaimRequest(t.Context(), k, h); err != nil || c.Held() || c.Owner != "p2" {
		t.Fatalf("after p2 took it: %+v, %v; want busy, owned by p2", c, err)
	}
}

// An owner's renewal keeps its claim past the first hold; another owner's
// renewal does nothing.
func testClaimRenewed(t *testing.T, s store.Store) {
	k := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp1"}
	claimKey(t, s, k, t0)
	if ok, err := s.RenewRequest(t.Context(), k, "p2", t0.Add(time.Hour)); err != nil || ok {
		t.Fatalf("p2 renews p1's claim: %v, %v; want false", ok, err)
	}
	if ok, err := s.RenewRequest(t.Context(), k, "p1", t0.Add(30*time.Second)); err != nil || !ok {
		t.Fatalf("p1 renews: %v, %v; want true", ok, err)
	}
	if c := claimKey(t, s, k, t0.Add(20*time.Second)); c.Held() || !c.Busy.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("past the first hold, renewed: %+v; want busy until t0+30s", c)
	}
	if c := claimKey(t, s, k, t0.Add(30*time.Second)); !c.Held() {
		t.Fatalf("at the renewed end: %+v; want held", c)
	}
	if err := s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 202, Body: []byte("x")}, t0.Add(31*time.Second), time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RenewRequest(t.Context(), k, "p1", t0.Add(time.Hour)); err != nil || ok {
		t.Fatalf("renewing a completed request: %v, %v; want false", ok, err)
	}
}

// leases: work one process at a time must do.
func leases(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "OneHolderAtATime", run: testLeaseOneHolder},
		{name: "RenewedByItsHolder", run: testLeaseRenewed},
		{name: "LapsedIsTakenOver", run: testLeaseLapsed},
		{name: "DroppedIsFree", run: testLeaseDropped},
	})
}

func hold(t *testing.T, s store.Store, name, holder string, now time.Time) bool {
	t.Helper()
	ok, err := s.HoldLease(t.Context(), name, holder, now, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// Of many processes taking one lease at once, exactly one holds it; other
// leases are independent.
func testLeaseOneHolder(t *testing.T, s store.Store) {
	var mu sync.Mutex
	holders := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ok, err := s.HoldLease(t.Context(), "schedules", string(rune('a'+i)), t0, 15*time.Second)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				holders++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if holders != 1 {
		t.Fatalf("%d holders, want 1", holders)
	}
	if !hold(t, s, "tail:app", "z", t0) {
		t.Error("another lease was not free")
	}
}

// The holder renews its lease before it lapses; meanwhile nobody else
// takes it.
func testLeaseRenewed(t *testing.T, s store.Store) {
	hold(t, s, "schedules", "a", t0)
	if !hold(t, s, "schedules", "a", t0.Add(10*time.Second)) {
		t.Fatal("the holder could not renew")
	}
	if hold(t, s, "schedules", "b", t0.Add(20*time.Second)) {
		t.Fatal("another took a renewed lease before it lapsed (renewed to +25s)")
	}
}

// A lease its holder stopped renewing (it died) goes to the next process
// that asks once it has lapsed, and the old holder has lost it.
func testLeaseLapsed(t *testing.T, s store.Store) {
	hold(t, s, "schedules", "a", t0)
	if !hold(t, s, "schedules", "b", t0.Add(15*time.Second)) {
		t.Fatal("a lapsed lease was not taken over")
	}
	if hold(t, s, "schedules", "a", t0.Add(16*time.Second)) {
		t.Fatal("the old holder took its lease back from the live new holder")
	}
}

// A dropped lease is free at once; a drop by another holder changes nothing.
func testLeaseDropped(t *testing.T, s store.Store) {
	hold(t, s, "schedules", "a", t0)
	if err := s.DropLease(t.Context(), "schedules", "b"); err != nil {
		t.Fatal(err)
	}
	if hold(t, s, "schedules", "b", t0.Add(time.Second)) {
		t.Fatal("another's drop freed the lease")
	}
	if err := s.DropLease(t.Context(), "schedules", "a"); err != nil {
		t.Fatal(err)
	}
	if !hold(t, s, "schedules", "b", t0.Add(time.Second)) {
		t.Fatal("a dropped lease was not free")
	}
}

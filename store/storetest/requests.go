package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func requests(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "StoredAndReplayed", run: testRequestStoredAndReplayed},
		{name: "ExpiryFreesTheKey", run: testRequestExpiry},
		{name: "PruneOnlyExpiredInLimits", run: testPruneRequests},
	})
}

func lookup(t *testing.T, s store.Store, k model.RequestKey, now time.Time) *model.StoredResponse {
	t.Helper()
	resp, err := s.LookupRequest(t.Context(), k, now)
	if err != nil {
		t.Fatalf("lookup %+v at %s: %v", k, now, err)
	}
	return resp
}

func sameResponse(got *model.StoredResponse, want model.StoredResponse) bool {
	return got != nil && got.Status == want.Status && got.ContentType == want.ContentType && bytes.Equal(got.Body, want.Body)
}

// A completed request's answer is kept under its key and replayed to a
// repeat; the same key for another request is refused while it lives;
// keys are per tenant; the first answer stays the answer.
func testRequestStoredAndReplayed(t *testing.T, s store.Store) {
	ttl := 24 * time.Hour
	k := model.RequestKey{Tenant: "default", Key: "k1", Fingerprint: "fp1"}
	if resp := lookup(t, s, k, t0); resp != nil {
		t.Fatalf("an unknown key: %+v, want nothing stored", resp)
	}
	want := model.StoredResponse{Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}
	if err := s.SaveResponse(t.Context(), k, want, t0, ttl); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{t0, t0.Add(ttl / 2), t0.Add(ttl - time.Millisecond)} {
		if resp := lookup(t, s, k, at); !sameResponse(resp, want) {
			t.Fatalf("lookup at +%s: %+v, want %+v", at.Sub(t0), resp, want)
		}
	}
	other := model.RequestKey{Tenant: "default", Key: "k1", Fingerprint: "fp2"}
	_, err := s.LookupRequest(t.Context(), other, t0.Add(time.Hour))
	wantErr(t, "the key with another fingerprint", err, model.ErrKeyReused)
	if resp := lookup(t, s, model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "fp2"}, t0); resp != nil {
		t.Fatalf("the key in another tenant: %+v, want nothing", resp)
	}
	if err := s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 202, Body: []byte("second")}, t0.Add(time.Second), ttl); err != nil {
		t.Fatal(err)
	}
	if resp := lookup(t, s, k, t0.Add(2*time.Second)); !sameResponse(resp, want) {
		t.Fatalf("after a second save: %+v, want the first answer", resp)
	}
	empty := model.RequestKey{Tenant: "default", Key: "empty", Fingerprint: "fp"}
	if err := s.SaveResponse(t.Context(), empty, model.StoredResponse{Status: 204}, t0, ttl); err != nil {
		t.Fatal(err)
	}
	if resp := lookup(t, s, empty, t0); resp == nil || resp.Status != 204 || len(resp.Body) != 0 {
		t.Fatalf("an empty answer replayed as %+v", resp)
	}
	if err := s.SaveResponse(t.Context(), k, want, t0, 0); err == nil {
		t.Fatal("a save with ttl 0: no error")
	}
}

// A key expires ttl after its answer was saved: from then nothing is
// replayed and another request may take it.
func testRequestExpiry(t *testing.T, s store.Store) {
	ttl := time.Hour
	k := model.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp1"}
	other := model.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp2"}
	if err := s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 200, Body: []byte("first")}, t0, ttl); err != nil {
		t.Fatal(err)
	}
	for _, key := range []model.RequestKey{k, other} {
		if resp := lookup(t, s, key, t0.Add(ttl)); resp != nil {
			t.Fatalf("%+v at expiry: %+v, want nothing", key, resp)
		}
	}
	if err := s.SaveResponse(t.Context(), other, model.StoredResponse{Status: 201, Body: []byte("new")}, t0.Add(ttl), ttl); err != nil {
		t.Fatal(err)
	}
	if resp := lookup(t, s, other, t0.Add(ttl+time.Second)); resp == nil || string(resp.Body) != "new" {
		t.Fatalf("the key taken after expiry: %+v", resp)
	}
	_, err := s.LookupRequest(t.Context(), k, t0.Add(ttl+time.Second))
	wantErr(t, "the first request after the key was taken again", err, model.ErrKeyReused)
}

// PruneRequests deletes at most limit keys per call, only expired ones.
func testPruneRequests(t *testing.T, s store.Store) {
	save := func(key string, ttl time.Duration) model.RequestKey {
		t.Helper()
		k := model.RequestKey{Tenant: "default", Key: key, Fingerprint: "fp"}
		if err := s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 200, Body: []byte("ok")}, t0, ttl); err != nil {
			t.Fatal(err)
		}
		return k
	}
	for i := range 6 {
		save(fmt.Sprint("k", i), time.Hour)
	}
	later := save("later", 2*time.Hour)

	at := t0.Add(time.Hour)
	for _, c := range []struct{ limit, want int }{{0, 0}, {4, 4}, {100, 2}, {100, 0}} {
		if n, err := s.PruneRequests(t.Context(), at, c.limit); err != nil || n != c.want {
			t.Fatalf("prune with limit %d: %d, %v; want %d", c.limit, n, err, c.want)
		}
	}
	if resp := lookup(t, s, later, at.Add(time.Minute)); resp == nil {
		t.Fatal("prune deleted a key that had not expired")
	}
	if n, err := s.PruneRequests(t.Context(), t0.Add(2*time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("prune once it expired: %d, %v; want 1", n, err)
	}
}

package storetest

import (
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/store"
)

// pauses: a provider's Retry-After, kept for every process.
func pauses(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "KeptUntilTheyEnd", run: testPausesKept},
		{name: "ALaterEndStays", run: testPausesLaterStays},
	})
}

func livePauses(t *testing.T, s store.Store, now time.Time) map[string]time.Time {
	t.Helper()
	m, err := s.ProviderPauses(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A pause is listed, by provider, until it ends, and not after; none is an
// empty list.
func testPausesKept(t *testing.T, s store.Store) {
	if m := livePauses(t, s, t0); len(m) != 0 {
		t.Fatalf("pauses before any: %v", m)
	}
	if err := s.PauseProvider(t.Context(), "resend", t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.PauseProvider(t.Context(), "fcm", t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	m := livePauses(t, s, t0)
	if len(m) != 2 || !m["resend"].Equal(t0.Add(30*time.Second)) || !m["fcm"].Equal(t0.Add(5*time.Second)) {
		t.Fatalf("pauses %v, want resend until +30s and fcm until +5s", m)
	}
	m = livePauses(t, s, t0.Add(5*time.Second))
	if _, ok := m["fcm"]; ok || len(m) != 1 {
		t.Fatalf("pauses at +5s %v, want only resend's (fcm's ended)", m)
	}
	if m := livePauses(t, s, t0.Add(30*time.Second)); len(m) != 0 {
		t.Fatalf("pauses at +30s %v, want none", m)
	}
}

// Of two pauses of one provider (two nodes hearing Retry-After), the later
// end stays, whichever came last.
func testPausesLaterStays(t *testing.T, s store.Store) {
	for _, d := range []time.Duration{20 * time.Second, 10 * time.Second} {
		if err := s.PauseProvider(t.Context(), "resend", t0.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	if m := livePauses(t, s, t0); !m["resend"].Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("pause ends %v, want +20s (the later one)", m["resend"])
	}
	if err := s.PauseProvider(t.Context(), "resend", t0.Add(40*time.Second)); err != nil {
		t.Fatal(err)
	}
	if m := livePauses(t, s, t0); !m["resend"].Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("pause ends %v, want +40s (extended)", m["resend"])
	}
}

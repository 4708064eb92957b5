package storetest

import (
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// A notification's own message (rendered at accept from a template) is
// what its claim carries and what a read shows, in the first chunk and in
// later ones alike; one without gets its event's message.
func testOwnMessage(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_msg", 4)
	all := in.First
	all[0].Message = []byte(`{"subject":"for r0"}`)
	all[2].Message = []byte(`{"subject":"for r2"}`)
	in.First = all[:2]
	a := accept(t, s, t0, in)[0]
	if got, err := s.ExpandEvent(t.Context(), a.EventRow, 2, all[2:], t0); err != nil || got != 4 {
		t.Fatalf("expand = %d, %v", got, err)
	}
	want := map[string]string{"r0": `{"subject":"for r0"}`, "r1": `{"subject":"hi"}`, "r2": `{"subject":"for r2"}`, "r3": `{"subject":"hi"}`}
	cs := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0.Add(time.Second), Lease: time.Minute})
	if len(cs) != 4 {
		t.Fatalf("claimed %d, want 4", len(cs))
	}
	for _, c := range cs {
		if string(c.Message) != want[c.Recipient] {
			t.Errorf("claim of %s carries %s, want %s", c.Recipient, c.Message, want[c.Recipient])
		}
		if n := notification(t, s, c.ID); string(n.Message) != want[c.Recipient] {
			t.Errorf("read of %s shows %s, want %s", c.Recipient, n.Message, want[c.Recipient])
		}
	}
}

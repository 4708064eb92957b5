package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Quarantine states how a fan-out that cannot go on is set aside: off the
// expander's work list, visible with its reason, released or dropped by an
// operator of its tenant.
func Quarantine(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("a quarantined fan-out leaves the work list until released", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		ev := model.NewEvent{Tenant: "acme", EventID: "big", Purpose: "p", Type: "t", Payload: []byte(`{}`), Message: []byte(`{}`),
			Fingerprint: "fp", Targets: 3}
		ts := []model.Target{{Key: "k0", Recipient: "r0", Channel: "email", Address: "a0"}}
		accs, errs, err := s.AcceptEvents(ctx, []model.AcceptInput{{Event: ev, First: ts}}, t0)
		if err != nil || errs[0] != nil {
			t.Fatal(err, errs[0])
		}
		row := accs[0].EventRow
		un, err := s.UnexpandedEvents(ctx, 10)
		if err != nil || len(un) != 1 || un[0].EventRow != row || un[0].Tenant != "acme" || un[0].EventID != "big" || un[0].Expanded != 1 || un[0].Targets != 3 {
			t.Fatalf("unexpanded %+v, %v", un, err)
		}
		if err := s.QuarantineEvent(ctx, row, "payload no longer decodes", t0); err != nil {
			t.Fatal(err)
		}
		if un, _ := s.UnexpandedEvents(ctx, 10); len(un) != 0 {
			t.Fatalf("a quarantined event is still on the work list: %+v", un)
		}
		qs, err := s.QuarantinedEvents(ctx, "", 0, 10)
		if err != nil || len(qs) != 1 {
			t.Fatalf("quarantined %+v, %v", qs, err)
		}
		if q := qs[0]; q.EventRow != row || q.Tenant != "acme" || q.EventID != "big" || q.Purpose != "p" || q.Type != "t" ||
			q.Expanded != 1 || q.Targets != 3 || q.Reason != "payload no longer decodes" || !q.At.Equal(t0) {
			t.Errorf("quarantined %+v", q)
		}
		if qs, _ := s.QuarantinedEvents(ctx, "beta", 0, 10); len(qs) != 0 {
			t.Errorf("another tenant sees it: %+v", qs)
		}
		st, err := s.Status(ctx, t0)
		if err != nil || st.Quarantined != 1 || len(st.QuarantinedIDs) != 1 || st.QuarantinedIDs[0] != row {
			t.Errorf("status %+v, %v", st, err)
		}
		n, err := s.Notification(ctx, "", accs[0].Notifications[0].ID, "")
		if err != nil || n.Quarantine == nil || n.Quarantine.EventRow != row {
			t.Errorf("its notification's quarantine: %+v, %v", n.Quarantine, err)
		}
		if err := s.ReleaseEvent(ctx, "beta", row); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("another tenant released it: %v", err)
		}
		if err := s.ReleaseEvent(ctx, "acme", row); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseEvent(ctx, "acme", row); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("released twice: %v", err)
		}
		if un, _ := s.UnexpandedEvents(ctx, 10); len(un) != 1 {
			t.Errorf("released, yet not on the work list: %+v", un)
		}
		// Dropped: its fan-out ends where it is, for good.
		s.QuarantineEvent(ctx, row, "again", t0)
		if _, err := s.DropEvent(ctx, "beta", row, t0); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("another tenant dropped it: %v", err)
		}
		dropped, err := s.DropEvent(ctx, "acme", row, t0)
		if err != nil || dropped != 2 {
			t.Fatalf("drop: %d, %v; want 2", dropped, err)
		}
		if un, _ := s.UnexpandedEvents(ctx, 10); len(un) != 0 {
			t.Errorf("a dropped fan-out is on the work list: %+v", un)
		}
		if qs, _ := s.QuarantinedEvents(ctx, "", 0, 10); len(qs) != 0 {
			t.Errorf("a dropped event is still quarantined: %+v", qs)
		}
		if _, err := s.DropEvent(ctx, "acme", row, t0); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("dropped twice: %v", err)
		}
		// A chunk that was on its way when the drop committed (an accept's
		// own fan-out, say) writes nothing: the dropped stay uncreated.
		before, _ := s.EventNotifications(ctx, row, -1, 10)
		late := []model.Target{{Key: "late-1", Recipient: "r1", Channel: "email", Address: "r1@example.com"}}
		if _, err := s.ExpandEvent(ctx, row, 1, late, t0); !errors.Is(err, model.ErrFanOutEnded) {
			t.Errorf("a chunk after the drop: %v; want ErrFanOutEnded", err)
		}
		if after, _ := s.EventNotifications(ctx, row, -1, 10); len(after) != len(before) {
			t.Errorf("a chunk after the drop wrote %d notifications", len(after)-len(before))
		}
	})
}

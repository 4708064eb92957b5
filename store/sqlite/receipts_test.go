package sqlite

import (
	"context"
	"edgerelay/store"
	"testing"
	"time"
)

// sentNotification makes one notification and records it sent by provider
// p with message id msg.
func sentNotification(t *testing.T, s *Store, p, msg string) int64 {
	t.Helper()
	ctx := context.Background()
	ev, ts := testEvent("evt_"+msg, 1)
	if _, err := s.AcceptEvent(ctx, ev, ts, t0); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, store.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %d", err, len(cs))
	}
	if _, err := recordOne(ctx, s, cs[0], store.Attempt{N: 1, Provider: p, StartedAt: t0, EndedAt: t0, Outcome: "sent", MessageID: msg},
		store.Decision{Status: store.StatusSent, NextAttemptAt: t0}); err != nil {
		t.Fatal(err)
	}
	return cs[0].ID
}

func status(t *testing.T, s *Store, id int64) string {
	t.Helper()
	n, err := s.Notification(context.Background(), "", id, "")
	if err != nil {
		t.Fatal(err)
	}
	return n.Status
}

func rcpt(msg, status, dedupe string) store.Receipt {
	if dedupe == "" {
		dedupe = msg + "/" + status
	}
	return store.Receipt{Provider: "twilio", MessageID: msg, Status: status, Dedupe: dedupe}
}

// The final status is a function of the set of receipts, whatever order
// they arrive in, and replays count once.
func TestReceiptsOrderAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		receipts []store.Receipt
		want     string
	}{
		{"sent then delivered", []store.Receipt{rcpt("m", "sent", ""), rcpt("m", "delivered", "")}, store.StatusDelivered},
		{"delivered then a late sent", []store.Receipt{rcpt("m", "delivered", ""), rcpt("m", "sent", "")}, store.StatusDelivered},
		{"bounced then a late delivered", []store.Receipt{rcpt("m", "bounced", ""), rcpt("m", "delivered", "")}, store.StatusBounced},
		{"delivered then bounced", []store.Receipt{rcpt("m", "delivered", ""), rcpt("m", "bounced", "")}, store.StatusBounced},
		{"failed after acceptance", []store.Receipt{rcpt("m", "failed", "")}, store.StatusBounced},
		{"complained implies delivered", []store.Receipt{rcpt("m", "complained", "")}, store.StatusDelivered},
		{"progress only", []store.Receipt{rcpt("m", "sent", "")}, store.StatusSent},
	} {
		s := setup(t)
		id := sentNotification(t, s, "twilio", "m")
		for _, r := range tc.receipts {
			if _, err := s.AddReceipts(ctx, []store.Receipt{r}, t0); err != nil {
				t.Fatal(err)
			}
		}
		// A replay of all of them changes nothing.
		n, err := s.AddReceipts(ctx, tc.receipts, t0)
		if err != nil || n != 0 {
			t.Fatalf("%s: replay added %d, %v", tc.name, n, err)
		}
		if got := status(t, s, id); got != tc.want {
			t.Errorf("%s: status %s, want %s", tc.name, got, tc.want)
		}
		full, _ := s.Notification(ctx, "", id, "")
		if len(full.Receipts) != len(tc.receipts) {
			t.Errorf("%s: %d receipts in the audit trail, want %d", tc.name, len(full.Receipts), len(tc.receipts))
		}
	}
}

// A receipt that arrives before its send is recorded is applied when the
// send is.
func TestReceiptBeforeSend(t *testing.T) {
	t.Parallel()
	s := setup(t)
	if n, err := s.AddReceipts(context.Background(), []store.Receipt{rcpt("early", "delivered", "")}, t0); err != nil || n != 1 {
		t.Fatalf("added %d, %v", n, err)
	}
	id := sentNotification(t, s, "twilio", "early")
	if got := status(t, s, id); got != store.StatusDelivered {
		t.Fatalf("status %s, want delivered", got)
	}
	// Another provider's receipt with the same message id does not touch it.
	other := sentNotification(t, s, "fcm", "m2")
	s.AddReceipts(context.Background(), []store.Receipt{{Provider: "twilio", MessageID: "m2", Status: "bounced", Dedupe: "x"}}, t0)
	if got := status(t, s, other); got != store.StatusSent {
		t.Fatalf("another provider's receipt moved it to %s", got)
	}
}

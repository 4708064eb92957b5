package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// A throttle's excess folded into a digest: the settlement that
// ends a notification skipped posts its message to the recipient's feed
// in the same transaction (Decision.Fold), once.

// testFoldPostsOnce: the settlement that applies posts one item, numbered
// next in its tenant's sequence and carrying the notification's own
// message; a redelivered settlement (the same claim again, a stale token
// after a lease was taken over) posts nothing; a second notification of
// the same event to the same recipient (another channel) adds no second
// item, and the event still counts once as unread.
func testFoldPostsOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	// An item before: the fold is numbered after it.
	before := newEvent("acme", "news", 0)
	before.Event.Feeds = []string{model.TenantFeed}
	accept(t, s, t0, before)
	in := model.AcceptInput{Event: model.NewEvent{Tenant: "acme", EventID: "promo", Purpose: "newsletter", Type: "newsletter",
		Payload: []byte(`{"id":"promo"}`), Message: []byte(`{"subject":"the event's"}`), Fingerprint: "fp:promo", Targets: 3},
		First: []model.Target{
			{Key: "promo/ada/email", Recipient: "ada", Channel: "email", Address: "ada@example.com", Message: []byte(`{"subject":"for ada"}`)},
			{Key: "promo/ada/sms", Recipient: "ada", Channel: "sms", Address: "+15550100"},
			{Key: "promo/bob/email", Recipient: "bob", Channel: "email", Address: "bob@example.com"},
		}}
	n := ids(accept(t, s, t0, in)[0])
	cs := claim(t, s, model.ClaimRequest{Limit: 3, Now: t0, Lease: time.Minute})
	if len(cs) != 3 {
		t.Fatalf("claimed %d, want 3", len(cs))
	}
	byID := map[int64]model.Claimed{}
	for _, c := range cs {
		byID[c.ID] = c
	}
	folded := func(c model.Claimed, feed string) model.Settlement {
		return model.Settlement{ID: c.ID, Token: c.Token, At: t0.Add(time.Second), Decision: model.Decision{
			Status: model.StatusSkipped, Reason: "skipped (throttled), folded into digest weekly", NextAttemptAt: t0, Fold: &model.Fold{Feed: feed}}}
	}
	ada := func() []model.FeedItem {
		t.Helper()
		items, _, err := s.FeedPage(ctx, "acme", "ada", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		return items
	}
	if !settle(t, s, folded(byID[n[0]], model.PersonalFeed("ada"))) {
		t.Fatal("the fold's settlement did not apply")
	}
	got := ada()
	if len(got) != 2 || got[0].Seq != 2 || got[0].Feed != "@ada" || got[0].EventID != "promo" {
		t.Fatalf("ada's feed %+v, want the folded promo at seq 2 above news", got)
	}
	var msg struct{ Subject string }
	if err := json.Unmarshal(got[0].Message, &msg); err != nil || msg.Subject != "for ada" {
		t.Fatalf("the folded item's message %s (%v), want the notification's own", got[0].Message, err)
	}
	if n := notification(t, s, n[0]); n.Status != model.StatusSkipped {
		t.Fatalf("the folded notification is %s", n.Status)
	}
	// Redelivered: the same claim settled again does not apply and posts
	// nothing.
	if settle(t, s, folded(byID[n[0]], model.PersonalFeed("ada"))) {
		t.Fatal("a second settlement of the same claim applied")
	}
	// Another channel of the same event to ada, folded too: the feed holds
	// the event once.
	if !settle(t, s, folded(byID[n[1]], model.PersonalFeed("ada"))) {
		t.Fatal("the sms fold did not apply")
	}
	if got := ada(); len(got) != 2 {
		t.Fatalf("ada's feed after a second fold of the event: %+v, want 2 items", got)
	}
	if c, err := s.UnreadCount(ctx, "acme", "ada"); err != nil || c != 2 {
		t.Fatalf("ada's unread count %d (%v), want 2", c, err)
	}
	// A stale token: bob's lease expired and another process claimed him
	// again; the first claim's fold changes nothing.
	bob := byID[n[2]]
	re := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute}) // nothing due
	if len(re) != 0 {
		t.Fatalf("claimed %d while leases are live", len(re))
	}
	exp := expired(t, s, t0.Add(2*time.Minute))
	if len(exp) != 1 || exp[0].ID != bob.ID {
		t.Fatalf("expired leases %v, want bob's", claimIDs(exp))
	}
	release(t, s, exp[0], t0)
	again := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(3 * time.Minute), Lease: time.Minute})
	if len(again) != 1 {
		t.Fatalf("reclaimed %d, want bob's", len(again))
	}
	if settle(t, s, folded(bob, model.PersonalFeed("bob"))) {
		t.Fatal("a fold under a stale token applied")
	}
	if items, _, err := s.FeedPage(ctx, "acme", "bob", 0, 10); err != nil || len(items) != 1 {
		t.Fatalf("bob's feed %+v (%v), want news only", items, err)
	}
	// The tenant's next item is numbered after the fold: no number twice.
	next := newEvent("acme", "later", 0)
	next.Event.Feeds = []string{model.TenantFeed}
	if a := accept(t, s, t0, next)[0]; len(a.FeedItems) != 1 || a.FeedItems[0].Seq != 3 {
		t.Fatalf("the next item %+v, want seq 3", a.FeedItems)
	}
	// A digest run begun now covers the fold.
	run, err := s.BeginJobRun(ctx, "weekly", "acme", t0, t0)
	if err != nil || run.UpperSeq != 3 {
		t.Fatalf("job run %+v (%v), want upper seq 3", run, err)
	}
}

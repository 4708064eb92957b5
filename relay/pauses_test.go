package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// A Retry-After heard by one process holds the provider in every process
// on the store: here a second relay on the same database, with its own
// provider of the same name, claims nothing for it while the first one's
// pause lasts, and keeps delivering on its other channels.
func TestRetryAfterPauseIsSeenByEveryProcess(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	var aCalls, bCalls atomic.Int32
	paused := &fakeProvider{name: "mail", send: func(*providers.Message) providers.Result {
		aCalls.Add(1)
		return providers.Result{Outcome: providers.Refused, HTTPStatus: 429, RetryAfter: time.Hour, Detail: "429 Too Many Requests"}
	}}
	a := setupRelayAt(t, path, Options{Routes: Routes{"email": {paused}}})
	first := acceptOne(t, a, "evt_1", "ada")
	runIdle(t, a, 0)
	if aCalls.Load() != 1 {
		t.Fatalf("%d calls on the first relay, want 1 (the 429)", aCalls.Load())
	}
	if n := notification(t, a, first); n.Status != model.StatusPending || len(n.AttemptLog) != 1 {
		t.Fatalf("after the 429: %s with %d attempts, want pending after 1", n.Status, len(n.AttemptLog))
	}

	mail := &fakeProvider{name: "mail", send: func(*providers.Message) providers.Result {
		bCalls.Add(1)
		return providers.Result{Outcome: providers.Sent}
	}}
	text := &fakeProvider{name: "text", send: func(*providers.Message) providers.Result { return providers.Result{Outcome: providers.Sent} }}
	b := setupRelayAt(t, path, Options{Routes: Routes{"email": {mail}, "sms": {text}}})
	// The email is due before the SMS: a dispatcher that did not know of the
	// pause would claim it first (or with the SMS).
	ben := acceptOne(t, b, "evt_2", "ben")
	acc, err := b.Accept(context.Background(), Event{ID: "evt_3", Type: "notice", Channels: []string{"sms"},
		Recipients: []Recipient{{ID: "cy", Phone: "+15550100"}}, Body: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, bound, "the SMS sent by the second relay", func() bool {
		return statusOf(t, b, acc.Notifications[0].ID) == model.StatusSent
	})
	if n := notification(t, b, ben); n.Status != model.StatusPending || len(n.AttemptLog) != 0 || bCalls.Load() != 0 {
		t.Fatalf("the second relay's email: %s, %d attempts, %d calls; want pending and never called while the provider is paused",
			n.Status, len(n.AttemptLog), bCalls.Load())
	}
}

package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// SuppressionKey is addrkey.Key (whose table test holds the spellings); here
// the relay's path on SQLite: an operator's entry for jörg@example.com
// stops events to its NFD and upper-case spellings before any call, and
// the list is looked up and lifted by any spelling.
func TestSuppressOtherSpellingsOfAnAddress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sent []string
	p := &fakeProvider{name: "mail", send: func(m *providers.Message) providers.Result {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, m.Address)
		return providers.Result{Outcome: providers.Sent}
	}}
	r := setupRelay(t, Options{Routes: Routes{"email": {p}}})
	ctx := context.Background()
	if _, err := r.Suppress(ctx, []model.Suppression{{Tenant: "default", Channel: "email", Address: "jörg@example.com",
		Reason: model.ReasonManual, Source: model.SourceAPI}}); err != nil {
		t.Fatal(err)
	}
	spellings := []string{"jo\u0308rg@example.com", "JÖRG@example.com", "JO\u0308RG@Example.COM"}
	var ids []int64
	for i, a := range spellings {
		acc := accept(t, r, Event{ID: "e" + string(rune('0'+i)), Type: "t", Channels: []string{"email"}, Subject: "s", Body: "b",
			Recipients: []Recipient{{ID: "jorg", Email: a}}})
		ids = append(ids, acc.Notifications[0].ID)
	}
	runIdle(t, r, time.Second)
	for i, id := range ids {
		if n := notification(t, r, id); n.Status != model.StatusSuppressed || n.Attempts != 0 {
			t.Errorf("to %q: %s after %d attempts, want suppressed", spellings[i], n.Status, n.Attempts)
		}
	}
	mu.Lock()
	if len(sent) != 0 {
		t.Errorf("sent to %q", sent)
	}
	mu.Unlock()
	es, err := r.Suppressions(ctx, model.SuppressionFilter{Tenant: "default", Channel: "email", Address: "JO\u0308RG@example.com"})
	if err != nil || len(es) != 1 || es[0].Address != "jörg@example.com" {
		t.Fatalf("lookup by another spelling: %+v, %v", es, err)
	}
	if err := r.Unsuppress(ctx, "default", "email", "Jo\u0308rg@example.com"); err != nil {
		t.Fatalf("lift by another spelling: %v", err)
	}
	// Not UTF-8: refused, on a channel without a shape check too.
	for _, c := range []string{"email", "chat"} {
		var se *SuppressionError
		if _, err := r.Suppress(ctx, []model.Suppression{{Tenant: "default", Channel: c, Address: "j\xf6rg@example.com",
			Reason: model.ReasonManual, Source: model.SourceAPI}}); !errors.As(err, &se) || se.Field != "address" {
			t.Errorf("%s address not UTF-8: %v, want a SuppressionError about the address", c, err)
		}
	}
}

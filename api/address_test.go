package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// What can only fail later is refused at the door: a 400 naming the field
// as the event wrote it, and nothing written.
func TestAddressesCheckedAtAccept(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tests := []struct {
		recipients, field, reason string
	}{
		{`[{"id": "a", "email": "a@example.com"}, {"id": "b", "email": "b@example.com"}, {"id": "c", "email": "not-an-email"}]`,
			"recipients[2].email", "not an email address"},
		{`[{"id": "a", "email": "bad@@example"}]`, "recipients[0].email", "not an email address"},
		{`[{"id": "a", "email": "Ada <ada@example.com>"}]`, "recipients[0].email", "bare address"},
		{`[{"id": "a", "phone": "12345"}]`, "recipients[0].phone", "not an E.164 phone number"},
		{`[{"id": "a", "email": "a@example.com"}, {"id": "b", "url": "ftp:/nope"}]`, "recipients[1].url", "not an http(s) URL"},
		{`[{"id": "a", "email": "a@example.com"}, {"id": "b", "addresses": {"sms": "+1"}}]`, "recipients[1].addresses.sms", "E.164"},
	}
	for i, tc := range tests {
		body := fmt.Sprintf(`{"id": "evt_%d", "type": "t", "recipients": %s}`, i, tc.recipients)
		p := wantProblem(t, b.do(t, "POST", "/v1/events", body), http.StatusBadRequest, "invalid-event")
		if p.Field != tc.field || !strings.Contains(p.Detail, tc.reason) {
			t.Errorf("%s: problem field %q detail %q, want %s: …%s…", tc.recipients, p.Field, p.Detail, tc.field, tc.reason)
		}
	}
	if n := len(b.listAll(t)); n != 0 {
		t.Errorf("%d notifications written, want none", n)
	}
	// An audience's members get the same check.
	p := wantProblem(t, b.do(t, "PUT", "/v1/audiences/team", `{"members": [{"id": "a", "email": "a@example.com"}, {"id": "b", "phone": "555-0100"}]}`),
		http.StatusBadRequest, "invalid-event")
	if p.Field != "members[1].phone" {
		t.Errorf("audience member: field %q, want members[1].phone", p.Field)
	}
	accepted(t, b.do(t, "POST", "/v1/events", `{"id": "ok", "type": "t", "recipients": [{"id": "a", "email": "a@example.com", "phone": "+15550100", "url": "https://hooks.example.com/in"}]}`))
}

// An event for a channel that no route serves (the tenant's or the
// defaults) is refused naming the channel and the routes.
func TestChannelWithoutRouteRefused(t *testing.T) {
	t.Parallel()
	mail := providers.NewLog(io.Discard, "log://mail")
	chat := providers.NewLog(io.Discard, "log://chat")
	b := setup(t, options{Relay: relay.Options{
		Routes:       relay.Routes{"email": {mail}},
		TenantRoutes: map[string]relay.Routes{"acme": {"chat": {chat}}},
	}})
	p := wantProblem(t, b.do(t, "POST", "/v1/events", `{"id": "e1", "type": "t", "recipients": [{"id": "a", "phone": "+15550100"}]}`),
		http.StatusBadRequest, "invalid-event")
	if p.Field != "recipients[0]" || !strings.Contains(p.Detail, `channel "sms" has no route (routes: email)`) {
		t.Errorf("problem field %q detail %q", p.Field, p.Detail)
	}
	p = wantProblem(t, b.do(t, "POST", "/v1/events", `{"id": "e2", "type": "t", "tenant": "acme", "channels": ["push"], "recipients": [{"id": "a", "device_token": "tok"}]}`),
		http.StatusBadRequest, "invalid-event")
	if p.Field != "recipients[0]" || !strings.Contains(p.Detail, `channel "push" has no route (routes: chat, email)`) {
		t.Errorf("tenant acme: problem field %q detail %q", p.Field, p.Detail)
	}
	// A batch refuses that event alone.
	rep := b.do(t, "POST", "/v1/events:batch", `{"events": [{"id": "e3", "type": "t", "recipients": [{"id": "a", "email": "a@example.com"}]},
		{"id": "e4", "type": "t", "recipients": [{"id": "a", "phone": "+15550100"}]}]}`)
	if !strings.Contains(rep.String(), `"status":202`) || !strings.Contains(rep.String(), `channel \"sms\" has no route`) {
		t.Errorf("batch: %s", rep)
	}
	accepted(t, b.do(t, "POST", "/v1/events", `{"id": "e5", "type": "t", "tenant": "acme", "channels": ["chat"], "recipients": [{"id": "a", "addresses": {"chat": "#ops"}}]}`))
	if n := len(b.listAll(t)); n != 2 {
		t.Errorf("%d notifications, want e3's and e5's", n)
	}
}

// Per-recipient webhooks end to end: a route with to=recipient delivers to
// the recipient's URL inside its allow-list; a URL outside it, or one a
// fixed-URL route would ignore, is a 400 naming recipients[0].url.
func TestRecipientWebhooks(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	var gotPath atomic.Value
	customer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotPath.Store(r.URL.Path)
		fmt.Fprint(w, `{"id":"c-1"}`)
	}))
	t.Cleanup(customer.Close)
	var fixedHits atomic.Int32
	fixed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fixedHits.Add(1) }))
	t.Cleanup(fixed.Close)
	// allow_private: the customer's test server listens on 127.0.0.1.
	perCustomer, err := providers.New("webhook+http://customers?to=recipient&allow=127.0.0.1&allow_private=true&name=customers")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := providers.New("webhook+" + fixed.URL + "/ops?name=ops")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{
		Routes:       relay.Routes{"webhook": {perCustomer}},
		TenantRoutes: map[string]relay.Routes{"internal": {"webhook": {ops}}},
	}})
	ev := func(id, tenant, url string) string {
		return fmt.Sprintf(`{"id": %q, "type": "t", "tenant": %q, "recipients": [{"id": "c42", "url": %q}]}`, id, tenant, url)
	}
	res := accepted(t, b.do(t, "POST", "/v1/events", ev("e1", "default", customer.URL+"/hooks/c42")))
	for _, tc := range []struct{ body, reason string }{
		{ev("e2", "default", "https://evil.example/x"), "not in the route's allow-list (127.0.0.1)"},
		{ev("e3", "default", "http://user:pw@127.0.0.1/x"), "userinfo"},
		{ev("e4", "internal", customer.URL+"/hooks/c42"), "posts to its own URL"},
	} {
		p := wantProblem(t, b.do(t, "POST", "/v1/events", tc.body), http.StatusBadRequest, "invalid-event")
		if p.Field != "recipients[0].url" || !strings.Contains(p.Detail, tc.reason) {
			t.Errorf("%s: problem field %q detail %q, want recipients[0].url: …%s…", tc.body, p.Field, p.Detail, tc.reason)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := b.r.RunUntilIdle(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	n, err := b.r.Notification(ctx, fmt.Sprint(res.Notifications[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != "sent" || hits.Load() != 1 || gotPath.Load() != "/hooks/c42" || fixedHits.Load() != 0 {
		t.Errorf("status %s, customer hits %d at %v, fixed route hits %d", n.Status, hits.Load(), gotPath.Load(), fixedHits.Load())
	}
}

package relay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// Each channel's addresses are checked at accept, and the error names the
// field as the event wrote it.
func TestAddressShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		r      Recipient
		field  string // "" when the address is fine
		reason string
	}{
		{"email", Recipient{ID: "a", Email: "ada@example.com"}, "", ""},
		{"email without a dot in the domain", Recipient{ID: "a", Email: "a@x"}, "", ""},
		{"email, plus and subdomain", Recipient{ID: "a", Email: "ada+receipts@mail.example.co.uk"}, "", ""},
		{"not an email", Recipient{ID: "a", Email: "not-an-email"}, "recipients[0].email", "not an email address"},
		{"two @", Recipient{ID: "a", Email: "bad@@example"}, "recipients[0].email", "not an email address"},
		{"display name", Recipient{ID: "a", Email: "Ada <ada@example.com>"}, "recipients[0].email", "bare address"},
		{"angle brackets", Recipient{ID: "a", Email: "<ada@example.com>"}, "recipients[0].email", "bare address"},
		{"a list", Recipient{ID: "a", Email: "ada@example.com, ben@example.com"}, "recipients[0].email", "not an email address"},
		{"email in addresses", Recipient{ID: "a", Addresses: map[string]string{"email": "nope"}}, "recipients[0].addresses.email", "not an email address"},

		{"phone", Recipient{ID: "a", Phone: "+15550100"}, "", ""},
		{"phone, 15 digits", Recipient{ID: "a", Phone: "+442071838750123"}, "", ""},
		{"phone without +", Recipient{ID: "a", Phone: "12345"}, "recipients[0].phone", "E.164"},
		{"phone without + but long", Recipient{ID: "a", Phone: "15550100"}, "recipients[0].phone", "E.164"},
		{"phone, 7 digits", Recipient{ID: "a", Phone: "+1555010"}, "recipients[0].phone", "E.164"},
		{"phone, 16 digits", Recipient{ID: "a", Phone: "+4420718387501234"}, "recipients[0].phone", "E.164"},
		{"phone starting with 0", Recipient{ID: "a", Phone: "+05550100"}, "recipients[0].phone", "E.164"},
		{"phone with spaces", Recipient{ID: "a", Phone: "+1 555 0100"}, "recipients[0].phone", "E.164"},
		{"sms in addresses", Recipient{ID: "a", Addresses: map[string]string{"sms": "555"}}, "recipients[0].addresses.sms", "E.164"},

		{"url", Recipient{ID: "a", URL: "https://hooks.example.com/in?x=1"}, "", ""},
		{"http url with port", Recipient{ID: "a", URL: "http://hooks.example.com:8080/"}, "", ""},
		{"ftp", Recipient{ID: "a", URL: "ftp:/nope"}, "recipients[0].url", "not an http(s) URL"},
		{"no host", Recipient{ID: "a", URL: "http:/nope"}, "recipients[0].url", "with a host"},
		{"relative", Recipient{ID: "a", URL: "/hooks/in"}, "recipients[0].url", "not an http(s) URL"},
		{"empty host", Recipient{ID: "a", URL: "https://:443/x"}, "recipients[0].url", "with a host"},
		{"does not parse", Recipient{ID: "a", URL: "https://h:port/"}, "recipients[0].url", "not a URL"},
		{"webhook in addresses: the provider's to judge (a fixed-URL webhook takes any text)", Recipient{ID: "a", Addresses: map[string]string{"webhook": "ops"}}, "", ""},

		{"push token: the provider's to judge", Recipient{ID: "a", DeviceToken: "anything:goes"}, "", ""},
		{"chat: the provider's to judge", Recipient{ID: "a", Addresses: map[string]string{"chat": "#ops"}}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ok := Recipient{ID: "first", Email: "first@example.com"}
			ev := Event{ID: "e", Type: "t", Recipients: []Recipient{ok, tc.r}}
			err := ev.Normalize(0)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Normalize: %v, want no error", err)
				}
				return
			}
			var inv *InvalidEventError
			// The second recipient: the index is the recipient's own.
			want := strings.Replace(tc.field, "recipients[0]", "recipients[1]", 1)
			if !errors.As(err, &inv) || inv.Field != want || !strings.Contains(inv.Reason, tc.reason) {
				t.Fatalf("Normalize: %v, want %s: …%s…", err, want, tc.reason)
			}
		})
	}
}

// checker is a provider that judges addresses.
type checker struct {
	fakeProvider
	refuse string // an address it refuses
}

func (c *checker) CheckAddress(channel, address string) error {
	if address == c.refuse {
		return errors.New("not for this provider")
	}
	return nil
}

var _ providers.AddressChecker = (*checker)(nil)

// A notification whose channel no route serves, for its tenant, is refused
// at accept, naming the channel and the routes there are; the first
// provider of a route may refuse an address; nothing of a refused event is
// written.
func TestAcceptChecksRoutes(t *testing.T) {
	t.Parallel()
	ok := func(m *providers.Message) providers.Result { return providers.Result{Outcome: providers.Sent} }
	mail := &checker{fakeProvider: fakeProvider{name: "mail", send: ok}, refuse: "blocked@example.com"}
	chat := &fakeProvider{name: "chat", send: ok}
	r := setupRelay(t, Options{
		Routes:       Routes{"email": {mail}},
		TenantRoutes: map[string]Routes{"acme": {"chat": {chat}}},
	})
	ctx := context.Background()
	tests := []struct {
		name  string
		ev    Event
		field string // "" when accepted
		want  string
	}{
		{"routed", Event{ID: "e1", Type: "t", Recipients: []Recipient{{ID: "a", Email: "a@example.com"}}}, "", ""},
		{"sms has no route",
			Event{ID: "e2", Type: "t", Recipients: []Recipient{{ID: "a", Email: "a@example.com"}, {ID: "b", Email: "b@example.com", Phone: "+15550100"}}},
			"recipients[1]", `channel "sms" has no route (routes: email)`},
		{"a channel listed by the event",
			Event{ID: "e3", Type: "t", Channels: []string{"chat"}, Recipients: []Recipient{{ID: "a", Addresses: map[string]string{"chat": "#ops"}}}},
			"recipients[0]", `channel "chat" has no route (routes: email)`},
		{"the tenant's route",
			Event{ID: "e4", Type: "t", Tenant: "acme", Channels: []string{"chat"}, Recipients: []Recipient{{ID: "a", Addresses: map[string]string{"chat": "#ops"}}}},
			"", ""},
		{"the tenant's routes and the defaults are listed",
			Event{ID: "e5", Type: "t", Tenant: "acme", Recipients: []Recipient{{ID: "a", Phone: "+15550100"}}},
			"recipients[0]", `channel "sms" has no route (routes: chat, email)`},
		{"the provider refuses the address",
			Event{ID: "e6", Type: "t", Recipients: []Recipient{{ID: "a", Email: "blocked@example.com"}}},
			"recipients[0].email", "not for this provider (provider mail)"},
	}
	for _, tc := range tests {
		_, err := r.Accept(ctx, tc.ev)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var inv *InvalidEventError
		if !errors.As(err, &inv) || inv.Field != tc.field || !strings.Contains(inv.Reason, tc.want) {
			t.Errorf("%s: %v, want %s: %s", tc.name, err, tc.field, tc.want)
			continue
		}
		tenant := tc.ev.Tenant
		if tenant == "" {
			tenant = "default"
		}
		if _, err := r.store.EventRow(ctx, tenant, tc.ev.ID, tc.ev.Type); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("%s: the refused event was written (%v)", tc.name, err)
		}
	}
}

// "*" is listed last, and an event is refused only when no route, "*"
// included, serves its channel.
func TestRouterChannels(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{name: "p"}
	rt, err := newRouter(Routes{"*": {p}, "sms": {p}, "email": {p}}, map[string]Routes{"acme": {"chat": {p}, "email": {p}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.channels("acme"), ", "); got != "chat, email, sms, *" {
		t.Errorf("acme: %s", got)
	}
	if got := strings.Join(rt.channels("other"), ", "); got != "email, sms, *" {
		t.Errorf("other: %s", got)
	}
	if len(rt.route("other", "pigeon")) == 0 {
		t.Error(`"*" does not serve an unlisted channel`)
	}
}

// An event stored before these checks (or by a version without them) is
// never checked again: its fan-out is finished from the stored payload,
// address and all, as it was accepted.
func TestStoredEventsAreNotRevalidated(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := context.Background()
	ev := Event{ID: "old", Type: "t", Tenant: "default", Purpose: "t",
		Recipients: []Recipient{{ID: "a", Email: "not-an-email"}, {ID: "b", Phone: "12345"}}}
	if err := ev.Normalize(0); err == nil {
		t.Fatal("the event passes Normalize: the test proves nothing")
	}
	rec, targets, err := ev.record()
	if err != nil {
		t.Fatal(err)
	}
	// Written with none of its fan-out, as by an accept cut short.
	accs, errs, err := r.store.AcceptEvents(ctx, []model.AcceptInput{{Event: rec}}, r.now())
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if err := r.finishFanOut(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := r.store.EventNotifications(ctx, accs[0].EventRow, -1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != len(targets) || len(ns) != 2 {
		t.Fatalf("the stored event fanned out to %d notifications, want %d", len(ns), len(targets))
	}
}

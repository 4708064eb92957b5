package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// Red-team findings in the API (templates, suppressions, preferences): each test showed a
// hole, failed until it was fixed, and keeps it fixed.

// A bad channel in POST /v1/recipients/{id}/links is the caller's error:
// it must be a 400 naming the field, not a 500 that says "safe to retry".
// Seen: {"channels": [""]} answers 500 (relay.UnsubscribeToken's "an
// unsubscribe link names one channel" goes to s.internal), and a channel
// no route or switch could ever name ("EMAIL\r\n") is signed into a link.
func TestRedteamLinksBadChannelIsA400(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Relay: prefOptions(providers.NewLog(io.Discard, "log://discard"))})
	for _, body := range []string{`{"channels": [""]}`, `{"channels": ["EMAIL\r\n"]}`} {
		rep := b.do(t, "POST", "/v1/recipients/ada/links", body)
		if rep.status != http.StatusBadRequest || !strings.Contains(string(rep.body), "channels[0]") {
			t.Errorf("links %s: got %s, want 400 naming channels[0]", body, rep)
		}
	}
}

// A template's currency and number helpers must refuse what they cannot
// format, as date does, rather than render a message with "NaN" or
// "+,Inf" in it: accept stores that message and every attempt sends it.
// Seen: currency of "1e20" (a decimal; 99999999999999999999 formats)
// renders "€NaN.00", of "Inf" "€NaN.00"; number of "Inf" renders "+,Inf",
// of "NaN" "NaN". The preview is the accept's code path (relay.Preview).
func TestRedteamTemplateHelpersRefuseWhatTheyCannotFormat(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	put := b.do(t, "PUT", "/v1/templates/bill/sms/en",
		`{"parts": {"text": "Amount {{currency .data.amount \"EUR\"}}, items {{number .data.n}}"}}`)
	if put.status != http.StatusCreated {
		t.Fatalf("PUT: %s", put)
	}
	// The control: an ordinary amount renders.
	ok := b.do(t, "POST", "/v1/templates/bill/sms/render",
		`{"recipient": {"id": "ada", "phone": "+4915112345678"}, "data": {"amount": "20.00", "n": 3}}`)
	if ok.status != http.StatusOK || !strings.Contains(string(ok.body), "€20.00") {
		t.Fatalf("control render: %s", ok)
	}
	for _, data := range []string{
		`{"amount": "1e20", "n": 1}`,
		`{"amount": "Inf", "n": 1}`,
		`{"amount": "1", "n": "Inf"}`,
		`{"amount": "1", "n": "NaN"}`,
	} {
		rep := b.do(t, "POST", "/v1/templates/bill/sms/render", `{"recipient": {"id": "ada", "phone": "+4915112345678"}, "data": `+data+`}`)
		if rep.status != http.StatusBadRequest {
			t.Errorf("render with %s: got %s, want 400 naming the helper", data, rep)
		}
	}
}

// A receipt is about one message of one tenant. Receipts are matched to
// notifications by provider and provider message id alone
// (store/sqlite/receipts.go applyReceipts, and suppressFromReceipts in
// store/sqlite/suppress.go), but on a per-recipient webhook route
// (to=recipient) the message id is whatever each customer's own server
// answered, so two customers' servers, of two tenants, that number their
// messages alike ("1") give two notifications one id. Seen: acme's
// customer reports a bounce of its message 1 (signed with the route's
// secret, which every receiver of the route has, as the README says);
// beta's notification, also message 1 at its own customer's server, turns
// bounced and beta's customer URL goes on beta's suppression list: one
// tenant's receipt blocks another tenant's address.
func TestRedteamReceiptOfOneTenantBouncesAnotherTenantsWebhook(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	acmeCustomer, betaCustomer := customerNumberingFrom1(t), customerNumberingFrom1(t)
	route, err := providers.New("webhook+http://customers?to=recipient&allow=127.0.0.1&allow_private=true&name=customers&secret=" + url.QueryEscape(secret))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"webhook": {route}}}})
	ev := func(id, tenant, to string) string {
		return fmt.Sprintf(`{"id": %q, "type": "order.shipped", "tenant": %q, "channels": ["webhook"], "body": "shipped", "recipients": [{"id": "c1", "url": %q}]}`, id, tenant, to)
	}
	acme := accepted(t, b.do(t, "POST", "/v1/events", ev("e1", "acme", acmeCustomer.URL+"/hooks"))).Notifications[0].ID
	beta := accepted(t, b.do(t, "POST", "/v1/events", ev("e1", "beta", betaCustomer.URL+"/hooks"))).Notifications[0].ID
	b.deliver(t)
	for _, id := range []string{acme, beta} {
		if n := b.wantState(t, id, model.StatusSent); n.ProviderMessageID != "1" {
			t.Fatalf("notification %s: message id %q, want 1 (its customer's answer)", id, n.ProviderMessageID)
		}
	}

	// acme's customer reports that its message 1 bounced: two
	// notifications have message id 1, so the receipt is about neither.
	wantReceived(t, b.postHook(t, "customers", secret, "rcpt_acme_1", time.Now(), `{"message_id": "1", "status": "bounced", "bounce": "hard"}`), 1, 1)
	noSuppression := func(when string) {
		t.Helper()
		for _, tc := range []struct{ tenant, url string }{{"acme", acmeCustomer.URL}, {"beta", betaCustomer.URL}} {
			rep := b.do(t, "GET", "/v1/suppressions?tenant="+tc.tenant, "")
			if rep.status != http.StatusOK || strings.Contains(string(rep.body), tc.url) {
				t.Errorf("%s's suppression list %s: %s, want it without its customer", tc.tenant, when, rep)
			}
		}
	}
	for _, id := range []string{acme, beta} {
		if n := b.notification(t, id); n.Status != model.StatusSent || len(n.Receipts) != 0 {
			t.Errorf("notification %s after a receipt about message 1 of two: %s with %d receipts, want sent with none", id, n.Status, len(n.Receipts))
		}
	}
	noSuppression("after a receipt naming a message id two notifications have")

	// Named by its webhook-id (the key it was sent with), the receipt is
	// about acme's notification alone; a receipt id beta's customer also
	// uses is not a replay of it.
	an := b.notification(t, acme)
	wantReceived(t, b.postHook(t, "customers", secret, "rcpt_1", time.Now(),
		fmt.Sprintf(`{"webhook_id": %q, "message_id": "1", "id": "r1", "status": "bounced", "bounce": "hard"}`, an.Key)), 1, 1)
	b.wantState(t, acme, model.StatusBounced, "customers/1/bounced")
	if n := b.notification(t, beta); n.Status != model.StatusSent || len(n.Receipts) != 0 {
		t.Errorf("beta's notification %s is %s with %d receipts after acme's customer's receipt, want sent with none", beta, n.Status, len(n.Receipts))
	}
	rep := b.do(t, "GET", "/v1/suppressions?tenant=beta", "")
	if rep.status != http.StatusOK || strings.Contains(string(rep.body), betaCustomer.URL) {
		t.Errorf("beta's suppression list after acme's customer's receipt: %s, want it without beta's customer", rep)
	}
	rep = b.do(t, "GET", "/v1/suppressions?tenant=acme", "")
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), acmeCustomer.URL) {
		t.Errorf("acme's suppression list after its customer's hard bounce: %s, want its customer on it", rep)
	}
	bn := b.notification(t, beta)
	wantReceived(t, b.postHook(t, "customers", secret, "rcpt_2", time.Now(),
		fmt.Sprintf(`{"webhook_id": %q, "id": "r1", "status": "delivered"}`, bn.Key)), 1, 1)
	b.wantState(t, beta, model.StatusDelivered, "customers/1/delivered")

	// A key that is no notification's, or a message id that is not the
	// key's, is refused and records nothing.
	for _, body := range []string{`{"webhook_id": "nope", "status": "bounced"}`,
		fmt.Sprintf(`{"webhook_id": %q, "message_id": "2", "status": "bounced"}`, bn.Key)} {
		if rep := b.postHook(t, "customers", secret, "rcpt_bad", time.Now(), body); rep.status != http.StatusBadRequest {
			t.Errorf("receipt %s: %s, want 400", body, rep)
		}
	}
	b.wantState(t, beta, model.StatusDelivered, "customers/1/delivered")

	// A receipt that comes before its send is recorded (a receiver that
	// reports at once) names the key and the message id; by the key alone
	// it is refused, since nothing yet says which message it is about.
	// Named so, it applies when the send is recorded, to that one alone,
	// though a third notification now has message id 1.
	early := accepted(t, b.do(t, "POST", "/v1/events", ev("e2", "beta", betaCustomer.URL+"/hooks"))).Notifications[0].ID
	en := b.notification(t, early)
	if rep := b.postHook(t, "customers", secret, "rcpt_early", time.Now(), fmt.Sprintf(`{"webhook_id": %q, "status": "delivered"}`, en.Key)); rep.status != http.StatusBadRequest ||
		!strings.Contains(string(rep.body), "not recorded yet") {
		t.Errorf("a receipt by key before its send: %s, want 400 saying the send is not recorded yet", rep)
	}
	wantReceived(t, b.postHook(t, "customers", secret, "rcpt_early", time.Now(),
		fmt.Sprintf(`{"webhook_id": %q, "message_id": "1", "status": "delivered"}`, en.Key)), 1, 1)
	b.deliver(t)
	b.wantState(t, early, model.StatusDelivered, "customers/1/delivered")
	b.wantState(t, beta, model.StatusDelivered, "customers/1/delivered")
	b.wantState(t, acme, model.StatusBounced, "customers/1/bounced")
}

// The same hole needs no secret: a tenant's own token is enough. acme
// posts an ARF complaint about its own notification (matched by its key
// within acme, as POST /v1/bounces promises); the receipt it records is
// applied by provider and message id (relay/suppress.go AddBounce →
// store AddReceipts), so beta's notification that its own customer's
// server also numbered 1 and beta's address is
// suppressed as a complaint.
func TestRedteamBounceReportOfOneTenantSuppressesAnotherTenantsWebhook(t *testing.T) {
	t.Parallel()
	acmeCustomer, betaCustomer := customerNumberingFrom1(t), customerNumberingFrom1(t)
	route, err := providers.New("webhook+http://customers?to=recipient&allow=127.0.0.1&allow_private=true&name=customers")
	if err != nil {
		t.Fatal(err)
	}
	const acmeTok, betaTok = "tok-acme-0123456789", "tok-beta-0123456789"
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"webhook": {route}}},
		Tokens: map[string]string{sha256hex(acmeTok): "acme", sha256hex(betaTok): "beta"}})
	ev := func(to string) string {
		return fmt.Sprintf(`{"id": "e1", "type": "order.shipped", "channels": ["webhook"], "body": "shipped", "recipients": [{"id": "c1", "url": %q}]}`, to)
	}
	acme := accepted(t, b.do(t, "POST", "/v1/events", ev(acmeCustomer.URL+"/hooks"), "Authorization", "Bearer "+acmeTok)).Notifications[0].ID
	beta := accepted(t, b.do(t, "POST", "/v1/events", ev(betaCustomer.URL+"/hooks"), "Authorization", "Bearer "+betaTok)).Notifications[0].ID
	b.deliver(t)
	an, err := b.r.Notification(t.Context(), acme)
	if err != nil {
		t.Fatal(err)
	}
	bn, err := b.r.Notification(t.Context(), beta)
	if err != nil {
		t.Fatal(err)
	}
	if an.Status != model.StatusSent || bn.Status != model.StatusSent || an.ProviderMessageID != "1" || bn.ProviderMessageID != "1" {
		t.Fatalf("after the sends: acme %s %q, beta %s %q; want both sent with message id 1", an.Status, an.ProviderMessageID, bn.Status, bn.ProviderMessageID)
	}
	raw, err := os.ReadFile("../bounce/testdata/arf-abuse.eml")
	if err != nil {
		t.Fatal(err)
	}
	arf := strings.ReplaceAll(string(raw), "<k%2Fnews%20001@example.com>", "<"+an.Key+"@example.com>")
	rep := b.do(t, "POST", "/v1/bounces", arf, message("Authorization", "Bearer "+acmeTok)...)
	if rep.status != http.StatusOK {
		t.Fatalf("acme's ARF report: %s", rep)
	}
	rep = b.do(t, "GET", "/v1/suppressions", "", "Authorization", "Bearer "+betaTok)
	if rep.status != http.StatusOK || strings.Contains(string(rep.body), betaCustomer.URL) {
		t.Errorf("beta's suppression list after acme's own report: %s, want it without beta's customer", rep)
	}
}

// customerNumberingFrom1 is a customer's webhook server that answers every
// message with id 1, as one that numbers its own messages from 1 does.
func customerNumberingFrom1(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "1"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

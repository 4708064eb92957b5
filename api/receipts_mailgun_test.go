package api_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

const mailgunSigningKey = "mailgun-webhook-signing-key"

// fakeMailgun is Mailgun's messages API on loopback: it answers each send
// with the id <N@mg.example.com> and keeps the forms it took.
type fakeMailgun struct {
	srv   *httptest.Server
	mu    sync.Mutex
	sends []url.Values
}

func newFakeMailgun(tb testing.TB) *fakeMailgun {
	f := &fakeMailgun{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		if user, pass, _ := r.BasicAuth(); r.URL.Path != "/v3/mg.example.com/messages" || user != "api" || pass != "key-test" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "Forbidden")
			return
		}
		f.mu.Lock()
		f.sends = append(f.sends, form)
		n := len(f.sends)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"<%d@mg.example.com>","message":"Queued. Thank you."}`, n)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

// key is the v:edgerelay-key of the n-th send (from 1).
func (f *fakeMailgun) key(tb testing.TB, n int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sends) < n {
		tb.Fatalf("%d sends, want at least %d", len(f.sends), n)
	}
	return f.sends[n-1].Get("v:edgerelay-key")
}

// mailgunWebhook is a webhook request as Mailgun documents it, signed here
// independently of the provider: hex HMAC-SHA256 under the signing key
// over the timestamp and the token.
func mailgunWebhook(key string, eventData string) string {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	token := "9b1f2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607182"
	mac := hmac.New(sha256.New, []byte(key))
	io.WriteString(mac, ts+token)
	return fmt.Sprintf(`{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":%s}`,
		ts, token, hex.EncodeToString(mac.Sum(nil)), eventData)
}

func email(id, addr string) relay.Event {
	return relay.Event{ID: id, Type: "invoice.paid", Channels: []string{"email"}, Subject: "Paid",
		Recipients: []relay.Recipient{{ID: "r-" + id, Email: addr}}, Body: "Thanks."}
}

// A Mailgun webhook event, signed, moves its notification: delivered is
// delivered; a permanent bounce is bounced and suppresses the address for
// the tenant. The event names its notification by the key the send put in
// v:edgerelay-key too, so it applies even without a message-id. Forgeries
// are refused and move nothing.
func TestMailgunReceipts(t *testing.T) {
	t.Parallel()
	fake := newFakeMailgun(t)
	mg, err := providers.New("mailgun+" + fake.srv.URL + "?domain=mg.example.com&from=relay%40mg.example.com&token=key-test" +
		"&name=mailgun&webhook_signing_key=" + mailgunSigningKey)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"email": {mg}}}})
	post := func(body string) reply {
		return b.do(t, "POST", "/v1/receipts/mailgun", body, "Content-Type", "application/json")
	}

	ada := b.acceptOne(t, email("evt_1", "ada@example.com"))
	b.deliver(t)
	if n := b.wantState(t, ada, model.StatusSent); n.ProviderMessageID != "1@mg.example.com" {
		t.Fatalf("provider message id %q, want the id without <>", n.ProviderMessageID)
	}
	delivered := `{"id":"ev-1","event":"delivered","timestamp":1738404000.25,"message":{"headers":{"message-id":"1@mg.example.com"}},` +
		`"user-variables":{"edgerelay-key":"` + fake.key(t, 1) + `"},"delivery-status":{"code":250,"message":"OK"}}`
	for _, forged := range []string{
		mailgunWebhook("not-the-key", delivered),
		strings.Replace(mailgunWebhook(mailgunSigningKey, delivered), `"token":"9`, `"token":"8`, 1),
		`{"event-data":` + delivered + `}`,
	} {
		wantProblem(t, post(forged), http.StatusUnauthorized, "bad-signature")
	}
	b.wantState(t, ada, model.StatusSent)
	wantReceived(t, post(mailgunWebhook(mailgunSigningKey, delivered)), 1, 1)
	b.wantState(t, ada, model.StatusDelivered, "mailgun/1@mg.example.com/delivered")
	// Mailgun retries a webhook: the same event again changes nothing.
	wantReceived(t, post(mailgunWebhook(mailgunSigningKey, delivered)), 1, 0)

	ben := b.acceptOne(t, email("evt_2", "ben@example.com"))
	b.deliver(t)
	b.wantState(t, ben, model.StatusSent)
	bounce := `{"id":"ev-2","event":"failed","severity":"permanent","reason":"bounce","timestamp":1738404100,` +
		`"message":{"headers":{}},"user-variables":{"edgerelay-key":"` + fake.key(t, 2) + `"},` +
		`"delivery-status":{"code":550,"message":"5.1.1 The email account that you tried to reach does not exist."}}`
	wantReceived(t, post(mailgunWebhook(mailgunSigningKey, bounce)), 1, 1)
	n := b.wantState(t, ben, model.StatusBounced, "mailgun/2@mg.example.com/bounced")
	// An event whose key and message-id name two different sends is
	// refused, not applied to either.
	crossed := strings.Replace(bounce, `"headers":{}`, `"headers":{"message-id":"1@mg.example.com"}`, 1)
	crossed = strings.Replace(crossed, `"ev-2"`, `"ev-3"`, 1)
	wantProblem(t, post(mailgunWebhook(mailgunSigningKey, crossed)), http.StatusBadRequest, "invalid-receipt")
	marks, err := b.r.Suppressions(context.Background(), model.SuppressionFilter{Tenant: n.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 1 || marks[0].Address != "ben@example.com" || marks[0].Channel != "email" {
		t.Errorf("suppressions %+v, want ben@example.com on email", marks)
	}
	b.wantState(t, ada, model.StatusDelivered, "mailgun/1@mg.example.com/delivered")
}

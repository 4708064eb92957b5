package api_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// The Twilio account the fake API and the signatures use.
const (
	twilioSID   = "ACxxx"
	twilioToken = "authtoken"
	twilioFrom  = "+15550100"
)

// fakeTwilio is Twilio's Messages API on loopback. It answers each send
// 201 with the sid set for its To number, and 400 (Twilio's 21211) for a
// number it was not told about.
type fakeTwilio struct {
	srv  *httptest.Server
	sids map[string]string // To → sid; read-only once serving

	mu    sync.Mutex
	sends []url.Values
	auth  []string // "user:pass" of each send, "" without basic auth
}

func newFakeTwilio(tb testing.TB, sids map[string]string) *fakeTwilio {
	tb.Helper()
	f := &fakeTwilio{sids: sids}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		user, pass, _ := r.BasicAuth()
		f.mu.Lock()
		f.sends = append(f.sends, form)
		f.auth = append(f.auth, user+":"+pass)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		sid, ok := f.sids[form.Get("To")]
		if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+twilioSID+"/Messages.json" || !ok {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"code": 21211, "message": "The 'To' number is not a valid phone number.", "status": 400}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"sid": "`+sid+`", "status": "queued", "to": "`+form.Get("To")+`"}`)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

// provider is a twilio provider named "twilio" pointed at the fake.
func (f *fakeTwilio) provider(tb testing.TB) providers.Provider {
	tb.Helper()
	host := strings.TrimPrefix(f.srv.URL, "http://")
	p, err := providers.New("twilio+http://" + twilioSID + ":" + twilioToken + "@" + host + "?from=%2B15550100&name=twilio")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func (f *fakeTwilio) sent() ([]url.Values, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sends), slices.Clone(f.auth)
}

// twilioSign is X-Twilio-Signature as Twilio documents it, written here
// independently of the provider: base64(HMAC-SHA1(auth token, the full URL
// followed by each POST parameter's name and value, sorted by name)).
func twilioSign(token, fullURL string, form url.Values) string {
	mac := hmac.New(sha1.New, []byte(token))
	io.WriteString(mac, fullURL)
	for _, k := range slices.Sorted(maps.Keys(form)) {
		for _, v := range form[k] {
			io.WriteString(mac, k+v)
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// twilioStatus is a status callback form, as Twilio posts it.
func twilioStatus(sid, status string, extra ...string) url.Values {
	form := url.Values{"MessageSid": {sid}, "SmsSid": {sid}, "MessageStatus": {status}, "SmsStatus": {status},
		"AccountSid": {twilioSID}, "From": {twilioFrom}, "ApiVersion": {"2010-04-01"}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	return form
}

// postTwilio posts form to /v1/receipts/twilio with sig as
// X-Twilio-Signature (none when sig is "").
func (b *bundle) postTwilio(tb testing.TB, form url.Values, sig string) reply {
	tb.Helper()
	hdr := []string{"Content-Type", "application/x-www-form-urlencoded"}
	if sig != "" {
		hdr = append(hdr, "X-Twilio-Signature", sig)
	}
	return b.do(tb, "POST", "/v1/receipts/twilio", form.Encode(), hdr...)
}

// signedTwilio posts form signed over the URL the API reconstructs: its
// own scheme and host (no PublicURL) and the path.
func (b *bundle) signedTwilio(tb testing.TB, form url.Values) reply {
	tb.Helper()
	return b.postTwilio(tb, form, twilioSign(twilioToken, b.srv.URL+"/v1/receipts/twilio", form))
}

// receiptsAnswer is the 200 body of POST /v1/receipts/{provider}.
type receiptsAnswer struct {
	Received int `json:"received"`
	New      int `json:"new"`
}

// wantReceived checks a 200 answer counting received and new receipts.
func wantReceived(tb testing.TB, rep reply, received, added int) {
	tb.Helper()
	if rep.status != http.StatusOK {
		tb.Fatalf("receipt: %s, want 200", rep)
	}
	if ct := rep.header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("Content-Type %q, want application/json", ct)
	}
	if got := decode[receiptsAnswer](tb, rep); got != (receiptsAnswer{Received: received, New: added}) {
		tb.Errorf("receipt answered %+v, want received %d, new %d", got, received, added)
	}
}

// sms is an SMS event to one phone number.
func sms(id, phone string) relay.Event {
	return relay.Event{ID: id, Type: "order.shipped", Channels: []string{"sms"},
		Recipients: []relay.Recipient{{ID: "r-" + id, Phone: phone}}, Body: "Your order has shipped."}
}

// acceptOne accepts ev, which must fan out to one notification, and
// returns that notification's id.
func (b *bundle) acceptOne(tb testing.TB, ev relay.Event) string {
	tb.Helper()
	res := accepted(tb, b.do(tb, "POST", "/v1/events", jsonOf(tb, ev)))
	if res.Count != 1 || len(res.Notifications) != 1 {
		tb.Fatalf("accept %s: %+v, want one notification", ev.ID, res)
	}
	return res.Notifications[0].ID
}

// deliver runs the dispatcher until nothing is due.
func (b *bundle) deliver(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := b.r.RunUntilIdle(ctx, time.Second); err != nil {
		tb.Fatalf("dispatch: %v", err)
	}
}

// notification reads one notification through the API.
func (b *bundle) notification(tb testing.TB, id string) model.Notification {
	tb.Helper()
	rep := b.do(tb, "GET", "/v1/notifications/"+id, "")
	if rep.status != http.StatusOK {
		tb.Fatalf("GET notification %s: %s", id, rep)
	}
	return decode[notification](tb, rep).Notification
}

// receiptStatuses lists a notification's receipts as provider/message/status.
func receiptStatuses(n model.Notification) []string {
	out := []string{}
	for _, r := range n.Receipts {
		out = append(out, r.Provider+"/"+r.MessageID+"/"+r.Status)
	}
	return out
}

// wantState checks a notification's status and receipts.
func (b *bundle) wantState(tb testing.TB, id string, status string, receipts ...string) model.Notification {
	tb.Helper()
	n := b.notification(tb, id)
	if got := receiptStatuses(n); n.Status != status || !slices.Equal(got, append([]string{}, receipts...)) {
		tb.Errorf("notification %s: %s with receipts %q, want %s with %q", id, n.Status, got, status, receipts)
	}
	return n
}

func TestTwilioReceipts(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, map[string]string{"+15550111": "SM1", "+15550122": "SM3"})
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}}}})

	id := b.acceptOne(t, sms("evt_1", "+15550111"))
	b.deliver(t)
	n := b.wantState(t, id, model.StatusSent)
	if n.Provider != "twilio" || n.ProviderMessageID != "SM1" {
		t.Fatalf("after the send: provider %q message id %q, want twilio and SM1 (%+v)", n.Provider, n.ProviderMessageID, n)
	}
	sends, auth := fake.sent()
	if len(sends) != 1 || sends[0].Get("To") != "+15550111" || sends[0].Get("From") != twilioFrom ||
		sends[0].Get("Body") != "Your order has shipped." || auth[0] != twilioSID+":"+twilioToken {
		t.Errorf("the fake API got %v with credentials %q", sends, auth)
	}

	// Forgeries are refused and record nothing.
	delivered := twilioStatus("SM1", "delivered")
	self := b.srv.URL + "/v1/receipts/twilio"
	for _, c := range []struct {
		name string
		form url.Values
		sig  string
	}{
		{"unsigned", delivered, ""},
		{"signed with another token", delivered, twilioSign("not-the-token", self, delivered)},
		{"signed for another URL", delivered, twilioSign(twilioToken, b.srv.URL+"/v1/receipts/other", delivered)},
		{"signed for https", delivered, twilioSign(twilioToken, strings.Replace(self, "http:", "https:", 1), delivered)},
		{"signed over other parameters", delivered, twilioSign(twilioToken, self, twilioStatus("SM1", "sent"))},
		{"signature not base64", delivered, "!!!"},
	} {
		p := wantProblem(t, b.postTwilio(t, c.form, c.sig), http.StatusUnauthorized, "bad-signature")
		if strings.Contains(p.Detail, twilioToken) {
			t.Errorf("%s: the problem quotes the auth token: %q", c.name, p.Detail)
		}
	}
	b.wantState(t, id, model.StatusSent)

	// sent, then delivered: delivered, with both receipts in the audit trail.
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM1", "sent")), 1, 1)
	b.wantState(t, id, model.StatusSent, "twilio/SM1/sent")
	wantReceived(t, b.signedTwilio(t, delivered), 1, 1)
	n = b.wantState(t, id, model.StatusDelivered, "twilio/SM1/sent", "twilio/SM1/delivered")
	for _, r := range n.Receipts {
		if r.ReceivedAt.IsZero() || r.At != nil {
			t.Errorf("receipt %+v: want a received_at and no at (Twilio does not say when)", r)
		}
	}
	// Twilio retries its callbacks: a replay is taken and changes nothing.
	wantReceived(t, b.signedTwilio(t, delivered), 1, 0)
	// A late "sent" (a replay here too) does not move it back.
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM1", "sent")), 1, 0)
	b.wantState(t, id, model.StatusDelivered, "twilio/SM1/sent", "twilio/SM1/delivered")

	// A second message: undelivered is a bounce, and the set of receipts,
	// not their order, decides: a new "sent" and even a "delivered" that
	// arrive later leave it bounced.
	id2 := b.acceptOne(t, sms("evt_2", "+15550122"))
	b.deliver(t)
	b.wantState(t, id2, model.StatusSent)
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM3", "undelivered", "ErrorCode", "30003")), 1, 1)
	n2 := b.wantState(t, id2, model.StatusBounced, "twilio/SM3/bounced")
	if len(n2.Receipts) == 1 && n2.Receipts[0].Detail != "undelivered 30003" {
		t.Errorf("bounce detail %q, want Twilio's words: undelivered 30003", n2.Receipts[0].Detail)
	}
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM3", "sent")), 1, 1)
	b.wantState(t, id2, model.StatusBounced, "twilio/SM3/bounced", "twilio/SM3/sent")
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM3", "delivered")), 1, 1)
	b.wantState(t, id2, model.StatusBounced, "twilio/SM3/bounced", "twilio/SM3/sent", "twilio/SM3/delivered")
	// The first message is untouched by the second's receipts.
	b.wantState(t, id, model.StatusDelivered, "twilio/SM1/sent", "twilio/SM1/delivered")
}

// A receipt can overtake the send it is about (the callback arrives while
// the relay is still recording Twilio's answer): it is kept, and applied
// when the send is recorded.
func TestTwilioReceiptBeforeSend(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, map[string]string{"+15550133": "SM2"})
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}}}})

	wantReceived(t, b.signedTwilio(t, twilioStatus("SM2", "delivered")), 1, 1)
	id := b.acceptOne(t, sms("evt_early", "+15550133"))
	b.deliver(t)
	n := b.wantState(t, id, model.StatusDelivered, "twilio/SM2/delivered")
	if n.ProviderMessageID != "SM2" {
		t.Errorf("provider message id %q, want SM2", n.ProviderMessageID)
	}
}

// Receipts come from providers, not tenants: on an API with tokens they
// need none, and the signature is still required.
func TestReceiptsNeedNoToken(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, nil)
	b := setup(t, options{Tokens: map[string]string{sha256hex("tok_acme"): "acme"},
		Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}}}})
	wantProblem(t, b.do(t, "GET", "/v1/notifications", ""), http.StatusUnauthorized, "unauthorized")
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM9", "delivered")), 1, 1)
	wantProblem(t, b.postTwilio(t, twilioStatus("SM9", "failed"), ""), http.StatusUnauthorized, "bad-signature")
	// A tenant's token is no substitute for the provider's signature.
	wantProblem(t, b.do(t, "POST", "/v1/receipts/twilio", twilioStatus("SM9", "failed").Encode(),
		"Content-Type", "application/x-www-form-urlencoded", "Authorization", "Bearer tok_acme"),
		http.StatusUnauthorized, "bad-signature")
}

// Behind a proxy the signature covers the public URL Twilio called, not
// the one the API was reached on.
func TestTwilioReceiptPublicURL(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, map[string]string{"+15550144": "SM4"})
	b := setup(t, options{
		Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}}},
		API:   api.Options{PublicURL: "https://relay.example.com/"},
	})
	id := b.acceptOne(t, sms("evt_proxy", "+15550144"))
	b.deliver(t)

	sent := twilioStatus("SM4", "sent")
	wantProblem(t, b.postTwilio(t, sent, twilioSign(twilioToken, b.srv.URL+"/v1/receipts/twilio", sent)),
		http.StatusUnauthorized, "bad-signature")
	wantReceived(t, b.postTwilio(t, sent, twilioSign(twilioToken, "https://relay.example.com/v1/receipts/twilio", sent)), 1, 1)
	// Twilio signs the URL as configured in the console: with the default
	// port spelled out, it must still verify.
	delivered := twilioStatus("SM4", "delivered")
	wantReceived(t, b.postTwilio(t, delivered, twilioSign(twilioToken, "https://relay.example.com:443/v1/receipts/twilio", delivered)), 1, 1)
	b.wantState(t, id, model.StatusDelivered, "twilio/SM4/sent", "twilio/SM4/delivered")
}

// newSecret returns a Standard Webhooks secret: whsec_ and 32 random bytes.
func newSecret(tb testing.TB) string {
	tb.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		tb.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// postHook posts body to /v1/receipts/{name} signed under secret as
// webhook-id id at ts.
func (b *bundle) postHook(tb testing.TB, name, secret, id string, ts time.Time, body string) reply {
	tb.Helper()
	sig, err := providers.SignStandardWebhook(secret, id, ts, []byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	return b.do(tb, "POST", "/v1/receipts/"+name, body,
		"webhook-id", id, "webhook-timestamp", strconv.FormatInt(ts.Unix(), 10), "webhook-signature", sig)
}

func TestWebhookReceipts(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	var verifyErrs []error
	var mu sync.Mutex
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// The relay signs what it sends with the same secret.
		if err := providers.VerifyStandardWebhook(secret, r.Header, body, time.Now(), 0); err != nil {
			mu.Lock()
			verifyErrs = append(verifyErrs, err)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "msg_1"}`)
	}))
	t.Cleanup(receiver.Close)
	hooks, err := providers.New("webhook+" + receiver.URL + "/hook?secret=" + url.QueryEscape(secret) + "&name=hooks")
	if err != nil {
		t.Fatal(err)
	}
	// The same receiver without a secret: it can take no receipts.
	plain, err := providers.New("webhook+" + receiver.URL + "/plain?name=plain")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"*": {hooks}, "push": {plain}}}})

	id := b.acceptOne(t, receipt("evt_1", 1))
	b.deliver(t)
	n := b.wantState(t, id, model.StatusSent)
	if n.Provider != "hooks" || n.ProviderMessageID != "msg_1" {
		t.Fatalf("after the send: provider %q message id %q, want hooks and msg_1", n.Provider, n.ProviderMessageID)
	}
	mu.Lock()
	if len(verifyErrs) > 0 {
		t.Errorf("the receiver could not verify the relay's signature: %v", verifyErrs)
	}
	mu.Unlock()

	bounced := `{"message_id": "msg_1", "status": "bounced", "detail": "mailbox full"}`
	now := time.Now()
	// Refused: stale, from the future, under another secret, unsigned, tampered.
	wantProblem(t, b.postHook(t, "hooks", secret, "rcpt_1", now.Add(-10*time.Minute), bounced), http.StatusUnauthorized, "bad-signature")
	wantProblem(t, b.postHook(t, "hooks", secret, "rcpt_1", now.Add(10*time.Minute), bounced), http.StatusUnauthorized, "bad-signature")
	wantProblem(t, b.postHook(t, "hooks", newSecret(t), "rcpt_1", now, bounced), http.StatusUnauthorized, "bad-signature")
	wantProblem(t, b.do(t, "POST", "/v1/receipts/hooks", bounced), http.StatusUnauthorized, "bad-signature")
	sig, err := providers.SignStandardWebhook(secret, "rcpt_1", now, []byte(bounced))
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do(t, "POST", "/v1/receipts/hooks", strings.Replace(bounced, "bounced", "delivered", 1),
		"webhook-id", "rcpt_1", "webhook-timestamp", strconv.FormatInt(now.Unix(), 10), "webhook-signature", sig),
		http.StatusUnauthorized, "bad-signature")
	b.wantState(t, id, model.StatusSent)

	wantReceived(t, b.postHook(t, "hooks", secret, "rcpt_1", now, bounced), 1, 1)
	n = b.wantState(t, id, model.StatusBounced, "hooks/msg_1/bounced")
	if len(n.Receipts) == 1 && n.Receipts[0].Detail != "mailbox full" {
		t.Errorf("receipt detail %q, want the receiver's", n.Receipts[0].Detail)
	}
	// An array, with receipt ids and times: a delivered after a bounce
	// leaves it bounced; the same receipt id again is a replay.
	batch := `[{"id": "rcpt_2", "message_id": "msg_1", "status": "delivered", "at": "2025-01-02T15:04:05Z"},
		{"id": "rcpt_2", "message_id": "msg_1", "status": "delivered", "at": "2025-01-02T15:04:05Z"}]`
	wantReceived(t, b.postHook(t, "hooks", secret, "batch_1", now, batch), 2, 1)
	n = b.wantState(t, id, model.StatusBounced, "hooks/msg_1/bounced", "hooks/msg_1/delivered")
	if len(n.Receipts) == 2 && (n.Receipts[1].At == nil || !n.Receipts[1].At.Equal(time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC))) {
		t.Errorf("receipt at %v, want 2025-01-02T15:04:05Z", n.Receipts[1].At)
	}

	// Signed but malformed: 400, nothing recorded.
	for _, body := range []string{
		`not json`,
		`{"message_id": "msg_1", "status": "lost"}`,
		`{"status": "delivered"}`,
		`{"message_id": "msg_1", "status": "delivered", "at": "yesterday"}`,
		`[{"message_id": "msg_1", "status": "delivered"}, {"message_id": "msg_1"}]`,
		`{"message_id": "msg_1", "status": "delivered"`,
	} {
		wantProblem(t, b.postHook(t, "hooks", secret, "rcpt_bad", now, body), http.StatusBadRequest, "invalid-receipt")
	}
	b.wantState(t, id, model.StatusBounced, "hooks/msg_1/bounced", "hooks/msg_1/delivered")

	// A webhook without a secret refuses every receipt, signed or not.
	wantProblem(t, b.postHook(t, "plain", secret, "rcpt_3", now, bounced), http.StatusUnauthorized, "bad-signature")
	wantProblem(t, b.do(t, "POST", "/v1/receipts/plain", bounced), http.StatusUnauthorized, "bad-signature")
}

func TestReceiptsRefused(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, nil)
	b := setup(t, options{
		Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}, "*": {providers.NewLog(io.Discard, "console")}}},
		API:   api.Options{MaxBody: 4096},
	})
	delivered := twilioStatus("SM1", "delivered")
	sig := twilioSign(twilioToken, b.srv.URL+"/v1/receipts/twilio", delivered)
	form := []string{"Content-Type", "application/x-www-form-urlencoded", "X-Twilio-Signature", sig}

	// No such provider, or one that takes no receipts: 404, whatever the body.
	for _, name := range []string{"nope", "console", "Twilio"} {
		p := wantProblem(t, b.do(t, "POST", "/v1/receipts/"+name, delivered.Encode(), form...), http.StatusNotFound, "not-found")
		if !strings.Contains(p.Detail, "receipts") {
			t.Errorf("%s: detail %q", name, p.Detail)
		}
	}
	rep := b.do(t, "GET", "/v1/receipts/twilio", "")
	wantProblem(t, rep, http.StatusMethodNotAllowed, "method-not-allowed")
	if rep.header.Get("Allow") != "POST" {
		t.Errorf("GET receipts: Allow %q, want POST", rep.header.Get("Allow"))
	}

	// Malformed bodies are 400.
	for _, f := range []url.Values{
		{"MessageStatus": {"delivered"}},
		{"MessageSid": {"SM1"}},
		{"AccountSid": {twilioSID}},
	} {
		wantProblem(t, b.signedTwilio(t, f), http.StatusBadRequest, "invalid-receipt")
	}
	wantProblem(t, b.do(t, "POST", "/v1/receipts/twilio", "MessageSid=%zz&MessageStatus=delivered", form...),
		http.StatusBadRequest, "invalid-receipt")
	// Larger than MaxBody: 413 before any parsing.
	big := twilioStatus("SM1", "delivered", "Body", strings.Repeat("x", 8192))
	wantProblem(t, b.signedTwilio(t, big), http.StatusRequestEntityTooLarge, "too-large")

	// Nothing of the above was recorded: the first real delivered is new.
	wantReceived(t, b.signedTwilio(t, delivered), 1, 1)
}

func TestReceiptMetrics(t *testing.T) {
	t.Parallel()
	fake := newFakeTwilio(t, map[string]string{"+15550155": "SM5"})
	b := setup(t, options{Metrics: true, Relay: relay.Options{Routes: relay.Routes{"sms": {fake.provider(t)}}}})
	id := b.acceptOne(t, sms("evt_m", "+15550155"))
	b.deliver(t)

	wantReceived(t, b.signedTwilio(t, twilioStatus("SM5", "sent")), 1, 1)
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM5", "delivered")), 1, 1)
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM5", "delivered")), 1, 0)
	wantProblem(t, b.postTwilio(t, twilioStatus("SM5", "delivered"), ""), http.StatusUnauthorized, "bad-signature")
	b.wantState(t, id, model.StatusDelivered, "twilio/SM5/sent", "twilio/SM5/delivered")
	// The request counter is bumped after each answer went out: wait for
	// all six requests so far (accept, three receipts, the refused one,
	// the GET above).
	b.logs.waitRequests(t, 6)

	text := string(b.do(t, "GET", "/metrics", "").body)
	for _, want := range []string{
		// Replays count: the metric is what providers sent.
		"\nedgerelay_receipts_total{provider=\"twilio\",status=\"delivered\"} 2\n",
		"\nedgerelay_receipts_total{provider=\"twilio\",status=\"sent\"} 1\n",
		"\nedgerelay_http_requests_total{code=\"200\",route=\"POST /v1/receipts/{provider}\"} 3\n",
		"\nedgerelay_http_requests_total{code=\"401\",route=\"POST /v1/receipts/{provider}\"} 1\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	// A refused receipt is no receipt.
	if strings.Contains(text, `edgerelay_receipts_total{provider="twilio",status="bounced"}`) {
		t.Errorf("metrics count a bounce nobody sent")
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
}

package providers

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	twilioSID   = "AC0123456789abcdef"
	twilioToken = "tw-auth-s3cret"
)

// twilioRequest is one request as the fake Twilio saw it.
type twilioRequest struct {
	path   string
	header http.Header
	user   string
	pass   string
	form   url.Values
}

// twilioBundle is a fake Twilio API: answer decides each response (n
// counts from 1); the default is a 201 with a message sid.
type twilioBundle struct {
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []twilioRequest
	answer func(w http.ResponseWriter, r *http.Request, n int)
}

func (b *twilioBundle) requests() []twilioRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]twilioRequest(nil), b.seen...)
}

// setupTwilio starts a fake Twilio and builds a provider for it; extra
// is added to the URL's query (from=… by default).
func setupTwilio(t *testing.T, query string, answer func(w http.ResponseWriter, r *http.Request, n int)) (*Twilio, *twilioBundle) {
	t.Helper()
	b := &twilioBundle{answer: answer}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			t.Errorf("request body %q: %v", body, err)
		}
		c := twilioRequest{path: r.URL.Path, header: r.Header.Clone(), form: form}
		c.user, c.pass, _ = r.BasicAuth()
		b.mu.Lock()
		b.seen = append(b.seen, c)
		n := len(b.seen)
		b.mu.Unlock()
		if b.answer != nil {
			b.answer(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"sid":"SM%03d","status":"queued"}`, n)
	}))
	t.Cleanup(b.srv.Close)
	if query == "" {
		query = "from=%2B15550100"
	}
	p := newProvider(t, "twilio+http://"+twilioSID+":"+twilioToken+"@"+b.srv.Listener.Addr().String()+"?"+query)
	return p.(*Twilio), b
}

func smsMessage(key string) *Message {
	m := testMessage(key)
	m.Channel, m.Address, m.Body = "sms", "+15550199", "Your code is 1234"
	return m
}

// noSecret fails the test if r carries the auth token.
func noSecret(t *testing.T, r Result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(r.Response, s) || strings.Contains(r.Detail, s) {
			t.Errorf("result leaks %q: detail %q, response %q", s, r.Detail, r.Response)
		}
	}
}

func TestTwilioSend(t *testing.T) {
	t.Parallel()
	p, b := setupTwilio(t, "from=%2B15550100&status_callback=https%3A%2F%2Frelay.example.com%2Freceipts%2Ftwilio", nil)
	if p.HonoursKeys() {
		t.Error("HonoursKeys() = true by default; Twilio documents no idempotency for sending")
	}
	r := send(p, smsMessage("notif-7"))
	if r.Outcome != Sent || r.MessageID != "SM001" || r.HTTPStatus != 201 {
		t.Fatalf("got %s id=%q status=%d (%s)", r.Outcome, r.MessageID, r.HTTPStatus, r.Detail)
	}
	c := b.requests()[0]
	if want := "/2010-04-01/Accounts/" + twilioSID + "/Messages.json"; c.path != want {
		t.Errorf("path = %q, want %q", c.path, want)
	}
	if c.user != twilioSID || c.pass != twilioToken {
		t.Errorf("basic auth = %q:%q", c.user, c.pass)
	}
	for _, h := range []string{"Idempotency-Key", "I-Twilio-Idempotency-Token"} {
		if got := c.header.Get(h); got != "notif-7" {
			t.Errorf("%s = %q, want the message key", h, got)
		}
	}
	if got := c.header.Get("Content-Type"); got != "application/x-www-form-urlencoded" {
		t.Errorf("Content-Type = %q", got)
	}
	want := url.Values{"To": {"+15550199"}, "From": {"+15550100"}, "Body": {"Your code is 1234"},
		"StatusCallback": {"https://relay.example.com/receipts/twilio"}}
	if c.form.Encode() != want.Encode() {
		t.Errorf("form = %v, want %v", c.form, want)
	}
}

func TestTwilioMessagingService(t *testing.T) {
	t.Parallel()
	p, b := setupTwilio(t, "messaging_service=MG0001&idempotency=honoured", nil)
	if !p.HonoursKeys() {
		t.Error("HonoursKeys() = false with idempotency=honoured")
	}
	m := smsMessage("k")
	m.Body = "" // SMS has no subject: the subject stands in
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("got %s (%s)", r.Outcome, r.Detail)
	}
	c := b.requests()[0]
	want := url.Values{"To": {"+15550199"}, "MessagingServiceSid": {"MG0001"}, "Body": {"Paid"}}
	if c.form.Encode() != want.Encode() {
		t.Errorf("form = %v, want %v", c.form, want)
	}
}

func TestTwilioNothingToSend(t *testing.T) {
	t.Parallel()
	p, b := setupTwilio(t, "", nil)
	noAddress, empty := smsMessage("k"), smsMessage("k")
	noAddress.Address = ""
	empty.Subject, empty.Body = "", ""
	for _, m := range []*Message{noAddress, empty, smsMessage("")} {
		if r := send(p, m); r.Outcome != Refused || !r.Permanent {
			t.Errorf("got %s permanent=%v (%s), want Refused permanent", r.Outcome, r.Permanent, r.Detail)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestTwilioClassification(t *testing.T) {
	t.Parallel()
	twErr := func(status, code int, msg string) string {
		return fmt.Sprintf(`{"code": %d, "message": %q, "more_info": "https://www.twilio.com/docs/errors/%d", "status": %d}`, code, msg, code, status)
	}
	cases := []struct {
		name       string
		status     int
		body       string
		retryAfter string
		outcome    Outcome
		permanent  bool
		invalid    bool
		wait       time.Duration
		detail     string
	}{
		{"invalid To", 400, twErr(400, 21211, "Invalid 'To' Phone Number: +1555"), "", Refused, true, true, 0, "twilio 21211 Invalid 'To' Phone Number"},
		{"not mobile", 400, twErr(400, 21614, "'To' number is not a valid mobile number"), "", Refused, true, true, 0, "twilio 21614"},
		{"unsubscribed", 400, twErr(400, 21610, "Attempt to send to unsubscribed recipient"), "", Refused, true, false, 0, "twilio 21610"},
		{"region", 400, twErr(400, 21408, "Permission to send an SMS has not been enabled for the region"), "", Refused, true, false, 0, "twilio 21408"},
		{"too many requests", 429, twErr(429, 20429, "Too Many Requests"), "7", Refused, false, false, 7 * time.Second, "twilio 20429"},
		{"20429 under another status", 400, twErr(400, 20429, "Too Many Requests"), "", Refused, false, false, 0, "twilio 20429"},
		{"bad credentials", 401, twErr(401, 20003, "Authenticate"), "", Refused, true, false, 0, "check the account SID and auth token"},
		{"unavailable", 503, twErr(503, 20503, "Service Unavailable"), "3", Refused, false, false, 3 * time.Second, "twilio 20503"},
		{"server error", 500, twErr(500, 20500, "Internal Server Error"), "", Unknown, false, false, 0, "twilio 20500"},
		{"bad gateway, no JSON", 502, "<html>bad gateway</html>", "", Unknown, false, false, 0, "502 Bad Gateway"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, _ := setupTwilio(t, "", func(w http.ResponseWriter, r *http.Request, n int) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			})
			r := send(p, smsMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.InvalidAddress != c.invalid || r.RetryAfter != c.wait || r.HTTPStatus != c.status {
				t.Errorf("got %s permanent=%v invalid=%v wait=%v status=%d; want %s permanent=%v invalid=%v wait=%v status=%d",
					r.Outcome, r.Permanent, r.InvalidAddress, r.RetryAfter, r.HTTPStatus, c.outcome, c.permanent, c.invalid, c.wait, c.status)
			}
			if !strings.Contains(r.Detail, c.detail) {
				t.Errorf("detail %q, want it to contain %q", r.Detail, c.detail)
			}
			if r.Response != c.body {
				t.Errorf("response %q, want the body", r.Response)
			}
			noSecret(t, r, twilioToken)
		})
	}
}

// An answer lost after Twilio read the request is Unknown; the retry
// carries the same key in both headers.
func TestTwilioLostAnswer(t *testing.T) {
	t.Parallel()
	p, b := setupTwilio(t, "", func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"sid":"SM-retry"}`)
	})
	m := smsMessage("notif-lost")
	if r := send(p, m); r.Outcome != Unknown || r.Permanent || !strings.Contains(r.Detail, "connection closed before the answer") {
		t.Fatalf("first call: got %s permanent=%v (%s), want Unknown", r.Outcome, r.Permanent, r.Detail)
	}
	m.Attempt = 2
	if r := send(p, m); r.Outcome != Sent || r.MessageID != "SM-retry" {
		t.Fatalf("retry: got %s id=%q (%s)", r.Outcome, r.MessageID, r.Detail)
	}
	reqs := b.requests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	for i, c := range reqs {
		for _, h := range []string{"Idempotency-Key", "I-Twilio-Idempotency-Token"} {
			if got := c.header.Get(h); got != "notif-lost" {
				t.Errorf("request %d: %s = %q, want notif-lost", i+1, h, got)
			}
		}
	}
}

func TestTwilioURL(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "twilio+https://"+twilioSID+":"+twilioToken+"@api.twilio.com?from=%2B15550100&timeout=3s").(*Twilio)
	if p.Name() != "twilio://api.twilio.com" || p.HonoursKeys() || p.timeout != 3*time.Second {
		t.Errorf("Name() = %q, HonoursKeys() = %v, timeout %v", p.Name(), p.HonoursKeys(), p.timeout)
	}
	if want := "https://api.twilio.com/2010-04-01/Accounts/" + twilioSID + "/Messages.json"; p.url != want {
		t.Errorf("calls %q, want %q", p.url, want)
	}

	base := "twilio+https://" + twilioSID + ":" + twilioToken + "@api.twilio.com"
	cases := []struct{ url, want string }{
		{base, `missing parameter "from"`},
		{base + "?from=", `parameter "from" is empty`},
		{base + "?messaging_service=XX1", `parameter "messaging_service"`},
		{base + "?from=%2B1555&status_callback=relay.example.com%2Fr", `parameter "status_callback"`},
		{base + "?from=%2B1555&token=abc", `parameter "token"`},
		{base + "?from=%2B1555&form=x", `unknown parameter "form"`},
		{base + "/2010-04-01?from=%2B1555", "no path"},
		{base + "?from=%2B1555&idempotency=maybe", `parameter "idempotency"`},
		{"twilio+https://api.twilio.com?from=%2B1555", "missing credentials"},
		{"twilio+https://" + twilioSID + "@api.twilio.com?from=%2B1555", "missing credentials"},
	}
	for _, c := range cases {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q) = %v, want an error naming %s", c.url, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), twilioToken) {
			t.Errorf("New(%q) error leaks the auth token: %v", c.url, err)
		}
	}
}

// twilioSign computes a signature the way Twilio documents it, apart from
// the code under test: the URL, then each POST parameter's name and value
// in name order, HMAC-SHA1 keyed with the auth token, base64.
func twilioSign(token, rawURL string, names []string, form url.Values) string {
	s := rawURL
	for _, k := range names { // already sorted by the caller
		s += k + form.Get(k)
	}
	mac := hmac.New(sha1.New, []byte(token))
	io.WriteString(mac, s)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// The example from Twilio's security docs, as their libraries test it.
func TestTwilioSignatureVector(t *testing.T) {
	t.Parallel()
	const rawURL = "https://mycompany.com/myapp.php?foo=1&bar=2"
	form := url.Values{
		"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
		"From": {"+12349013030"}, "To": {"+18005551212"},
	}
	const want = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
	if got := twilioSign("12345", rawURL, []string{"CallSid", "Caller", "Digits", "From", "To"}, form); got != want {
		t.Fatalf("independent signature = %q, want the documented %q", got, want)
	}
	if got := twilioSignature("12345", rawURL, form); got != want {
		t.Errorf("twilioSignature = %q, want %q", got, want)
	}
}

// statusCallback builds a signed status callback request.
func statusCallback(t *testing.T, token, rawURL string, form url.Values) (*http.Request, []byte) {
	t.Helper()
	body := form.Encode()
	r := httptest.NewRequest(http.MethodPost, rawURL, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	names := slices.Sorted(maps.Keys(form))
	r.Header.Set("X-Twilio-Signature", twilioSign(token, rawURL, names, form))
	return r, []byte(body)
}

func TestTwilioReceiptSignature(t *testing.T) {
	t.Parallel()
	p, _ := setupTwilio(t, "", nil)
	const cb = "https://relay.example.com/receipts/twilio?route=sms"
	form := url.Values{
		"AccountSid": {twilioSID}, "MessageSid": {"SM001"}, "MessageStatus": {"delivered"},
		"To": {"+15550199"}, "From": {"+15550100"}, "ApiVersion": {"2010-04-01"},
	}

	r, body := statusCallback(t, twilioToken, cb, form)
	got, err := p.ParseReceipts(r, body, cb)
	if err != nil || len(got) != 1 || got[0].MessageID != "SM001" || got[0].Status != ReceiptDelivered {
		t.Fatalf("valid callback: %+v, %v", got, err)
	}

	// Signed with the default port spelled out; verified against the URL
	// without it, as Twilio's libraries allow.
	r, body = statusCallback(t, twilioToken, "https://relay.example.com:443/receipts/twilio?route=sms", form)
	if _, err := p.ParseReceipts(r, body, cb); err != nil {
		t.Errorf("port variant: %v", err)
	}

	r, body = statusCallback(t, twilioToken, cb, form)
	tampered := strings.Replace(string(body), "delivered", "undelivered", 1)
	if _, err := p.ParseReceipts(r, []byte(tampered), cb); !errors.Is(err, ErrBadSignature) {
		t.Errorf("tampered param: err = %v, want ErrBadSignature", err)
	}
	if _, err := p.ParseReceipts(r, body, cb+"&x=1"); !errors.Is(err, ErrBadSignature) {
		t.Errorf("other URL: err = %v, want ErrBadSignature", err)
	}
	r, body = statusCallback(t, "another-token", cb, form)
	if _, err := p.ParseReceipts(r, body, cb); !errors.Is(err, ErrBadSignature) {
		t.Errorf("other token: err = %v, want ErrBadSignature", err)
	}
	r.Header.Del("X-Twilio-Signature")
	if _, err := p.ParseReceipts(r, body, cb); !errors.Is(err, ErrBadSignature) {
		t.Errorf("no signature: err = %v, want ErrBadSignature", err)
	}

	// Signed but not a status callback: an error, not a signature error.
	junk := url.Values{"Foo": {"bar"}}
	r, body = statusCallback(t, twilioToken, cb, junk)
	if _, err := p.ParseReceipts(r, body, cb); err == nil || errors.Is(err, ErrBadSignature) {
		t.Errorf("no MessageSid: err = %v, want a parse error", err)
	}
}

func TestTwilioReceipts(t *testing.T) {
	t.Parallel()
	p, _ := setupTwilio(t, "", nil)
	const cb = "https://relay.example.com/receipts/twilio"
	cases := []struct {
		status, errorCode string
		want              ReceiptStatus
		detail            string
		bounce            Bounce // what it says about the number: only dead-number codes suppress it
	}{
		{"queued", "", ReceiptSent, "queued", BounceDefault},
		{"accepted", "", ReceiptSent, "accepted", BounceDefault},
		{"sending", "", ReceiptSent, "sending", BounceDefault},
		{"sent", "", ReceiptSent, "sent", BounceDefault},
		{"delivered", "", ReceiptDelivered, "delivered", BounceDefault},
		{"read", "", ReceiptDelivered, "read", BounceDefault},
		{"undelivered", "30003", ReceiptBounced, "undelivered 30003", BounceNone},
		{"undelivered", "30005", ReceiptBounced, "undelivered 30005", BounceHard},
		{"undelivered", "30006", ReceiptBounced, "undelivered 30006", BounceHard},
		{"failed", "30008", ReceiptFailed, "failed 30008", BounceNone},
		{"failed", "21211", ReceiptFailed, "failed 21211", BounceHard},
		{"some_new_status", "", ReceiptSent, "some_new_status", BounceDefault},
	}
	for _, c := range cases {
		form := url.Values{"MessageSid": {"SM9"}, "MessageStatus": {c.status}, "AccountSid": {twilioSID}}
		if c.errorCode != "" {
			form.Set("ErrorCode", c.errorCode)
		}
		r, body := statusCallback(t, twilioToken, cb, form)
		got, err := p.ParseReceipts(r, body, cb)
		if err != nil {
			t.Errorf("%s: %v", c.status, err)
			continue
		}
		want := Receipt{MessageID: "SM9", Status: c.want, Detail: c.detail, Bounce: c.bounce}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s %s: got %+v, want [%+v]", c.status, c.errorCode, got, want)
		}
	}

	// Older callbacks name the fields SmsSid and SmsStatus.
	r, body := statusCallback(t, twilioToken, cb, url.Values{"SmsSid": {"SM8"}, "SmsStatus": {"sent"}})
	if got, err := p.ParseReceipts(r, body, cb); err != nil || len(got) != 1 || got[0].MessageID != "SM8" || got[0].Status != ReceiptSent {
		t.Errorf("legacy names: %+v, %v", got, err)
	}
}

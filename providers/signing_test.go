package providers

import (
	"bytes"
	"encoding/base64"
	"errors"
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
)

// The specification's published test vector, as the standard-webhooks
// repository's libraries test it (libraries/go/webhook_test.go,
// TestWebhookSign, and the other languages' equivalents).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignStandardWebhookVector(t *testing.T) {
	t.Parallel()
	got, err := SignStandardWebhook(vectorSecret, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	if got != vectorSignature {
		t.Errorf("signature = %q, want %q", got, vectorSignature)
	}
	// Only whole seconds are signed.
	if got, _ := SignStandardWebhook(vectorSecret, vectorID, time.Unix(vectorTimestamp, 999_999_999), []byte(vectorPayload)); got != vectorSignature {
		t.Errorf("signature at a fractional second = %q, want %q", got, vectorSignature)
	}
}

func TestSignStandardWebhookErrors(t *testing.T) {
	t.Parallel()
	ts := time.Unix(vectorTimestamp, 0)
	for _, c := range []struct{ secret, id, want string }{
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", vectorID, "not a Standard Webhooks secret"},
		{"whsec_not*base64", vectorID, "not valid base64"},
		{vectorSecret, "", "empty webhook-id"},
		{vectorSecret, "msg.1", "contains '.'"},
	} {
		if _, err := SignStandardWebhook(c.secret, c.id, ts, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SignStandardWebhook(%q, %q): %v, want %q", c.secret, c.id, err, c.want)
		}
	}
}

func vectorHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp))
	h.Set("webhook-signature", sig)
	return h
}

func TestVerifyStandardWebhook(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTimestamp, 0)
	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	dotSig := signature(mustDecode(t, vectorSecret), "msg.1", strconv.Itoa(vectorTimestamp), []byte(vectorPayload))
	cases := []struct {
		name   string
		secret string
		header http.Header
		body   string
		now    time.Time
		tol    time.Duration
		want   string // "" for success
	}{
		{name: "vector", header: vectorHeader(vectorSignature)},
		{name: "one of several", header: vectorHeader("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,abc  " + vectorSignature + " v2,xyz")},
		{name: "another version only", header: vectorHeader("v1a," + strings.TrimPrefix(vectorSignature, "v1,")), want: "no v1 signature"},
		{name: "wrong signature", header: vectorHeader("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="), want: "no v1 signature"},
		{name: "tampered body", header: vectorHeader(vectorSignature), body: `{"test": 2432232315}`, want: "no v1 signature"},
		{name: "other secret", secret: otherSecret, header: vectorHeader(vectorSignature), want: "no v1 signature"},
		{name: "no id", header: without(vectorHeader(vectorSignature), "webhook-id"), want: "no webhook-id header"},
		{name: "no timestamp", header: without(vectorHeader(vectorSignature), "webhook-timestamp"), want: "no webhook-timestamp header"},
		{name: "no signature", header: without(vectorHeader(vectorSignature), "webhook-signature"), want: "no webhook-signature header"},
		{name: "id with a dot", header: with(vectorHeader(dotSig), "webhook-id", "msg.1"), want: "contains '.'"},
		{name: "signed timestamp", header: with(vectorHeader(vectorSignature), "webhook-timestamp", "+1614265330"), want: "is not Unix seconds"},
		{name: "text timestamp", header: with(vectorHeader(vectorSignature), "webhook-timestamp", "yesterday"), want: "is not Unix seconds"},
		{name: "at the edge, old", header: vectorHeader(vectorSignature), now: at.Add(5 * time.Minute)},
		{name: "at the edge, new", header: vectorHeader(vectorSignature), now: at.Add(-5 * time.Minute)},
		{name: "stale", header: vectorHeader(vectorSignature), now: at.Add(5*time.Minute + time.Second), want: "5m1s old"},
		{name: "future", header: vectorHeader(vectorSignature), now: at.Add(-5*time.Minute - time.Second), want: "in the future"},
		{name: "own tolerance", header: vectorHeader(vectorSignature), now: at.Add(time.Hour), tol: 2 * time.Hour},
		{name: "tighter tolerance", header: vectorHeader(vectorSignature), now: at.Add(2 * time.Second), tol: time.Second, want: "2s old"},
	}
	for _, c := range cases {
		secret, body, now := c.secret, c.body, c.now
		if secret == "" {
			secret = vectorSecret
		}
		if body == "" {
			body = vectorPayload
		}
		if now.IsZero() {
			now = at
		}
		err := VerifyStandardWebhook(secret, c.header, []byte(body), now, c.tol)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: verified, want %q", c.name, c.want)
		case c.want != "" && (!errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want ErrBadSignature with %q", c.name, err, c.want)
		}
	}
	// A bad secret is the verifier's own fault, not the sender's.
	err := VerifyStandardWebhook("whsec_short", vectorHeader(vectorSignature), []byte(vectorPayload), at, 0)
	if err == nil || errors.Is(err, ErrBadSignature) {
		t.Errorf("invalid secret: %v, want an error other than ErrBadSignature", err)
	}
}

func mustDecode(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := decodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func without(h http.Header, k string) http.Header { h.Del(k); return h }

func with(h http.Header, k, v string) http.Header { h.Set(k, v); return h }

// A receiver verifying with VerifyStandardWebhook accepts every attempt,
// each with the message key as webhook-id and a fresh timestamp.
func TestWebhookSignedRoundTrip(t *testing.T) {
	t.Parallel()
	type seen struct {
		header http.Header
		err    error
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := VerifyStandardWebhook(vectorSecret, r.Header, body, time.Now(), StandardWebhookTolerance)
		mu.Lock()
		got = append(got, seen{r.Header.Clone(), err})
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"id":"wh_1"}`)
	}))
	t.Cleanup(srv.Close)
	p := newProvider(t, "webhook+"+srv.URL+"/hook?token=tk&secret="+url.QueryEscape(vectorSecret))
	m := testMessage("er1_0123abcd")
	for range 2 {
		if r := send(p, m); r.Outcome != Sent || r.MessageID != "wh_1" {
			t.Fatalf("got %s id=%q (%s): %s", r.Outcome, r.MessageID, r.Detail, r.Response)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("receiver saw %d requests, want 2", len(got))
	}
	for _, s := range got {
		if s.err != nil {
			t.Errorf("receiver: %v", s.err)
		}
		if id := s.header.Get("webhook-id"); id != m.Key {
			t.Errorf("webhook-id = %q, want the message key %q", id, m.Key)
		}
		if k := s.header.Get("Idempotency-Key"); k != m.Key {
			t.Errorf("Idempotency-Key = %q", k)
		}
		if a := s.header.Get("Authorization"); a != "Bearer tk" {
			t.Errorf("Authorization = %q: the URL's token must still be sent", a)
		}
		ts, err := strconv.ParseInt(s.header.Get("webhook-timestamp"), 10, 64)
		if d := time.Since(time.Unix(ts, 0)); err != nil || d < -time.Second || d > time.Minute {
			t.Errorf("webhook-timestamp = %q, want about now", s.header.Get("webhook-timestamp"))
		}
	}
}

// Without a secret nothing changes: no Standard Webhooks headers.
func TestWebhookUnsigned(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{"id":"x"}`)
	p := newProvider(t, "webhook+"+srv.URL+"/hook")
	if r := send(p, testMessage("k1")); r.Outcome != Sent {
		t.Fatalf("got %s (%s)", r.Outcome, r.Detail)
	}
	for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		if v := seen()[0].header.Get(k); v != "" {
			t.Errorf("%s = %q on an unsigned webhook", k, v)
		}
	}
}

// A key the signed content cannot carry is refused before any request.
func TestWebhookSignedKeyWithDot(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{}`)
	p := newProvider(t, "webhook+"+srv.URL+"/hook?secret="+url.QueryEscape(vectorSecret))
	r := send(p, testMessage("tenant.key"))
	if r.Outcome != Refused || !r.Permanent || len(seen()) != 0 {
		t.Errorf("got %s permanent=%v after %d requests, want a permanent refusal and none", r.Outcome, r.Permanent, len(seen()))
	}
}

func TestWebhookSecretProblems(t *testing.T) {
	t.Parallel()
	plus := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xef, 0xbe}, 8)) // "++++…"
	cases := []struct {
		secret string // as written in the URL
		hidden string // must not appear in the error
		want   string
	}{
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjU", `parameter "secret": not a Standard Webhooks secret (expected whsec_ followed by base64)`},
		{"whsec_MfKQ9r8G*KYqrTwjUPD8IL", "MfKQ9r8G", `parameter "secret": the part after whsec_ is not valid base64`},
		{"whsec_" + plus, "", `not valid base64 (write + as %2B in a URL)`},
		{"whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen byte key")), "c2l4dGVlbi", `parameter "secret": decodes to 16 bytes; Standard Webhooks secrets are 24 to 64 bytes`},
		{"whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 65)), "AQEBAQEB", `decodes to 65 bytes`},
		{"", "", `parameter "secret": not a Standard Webhooks secret`},
	}
	for _, c := range cases {
		_, err := New("webhook+https://hooks.example.com/in?secret=" + c.secret)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("secret %q: %v, want %q", c.secret, err, c.want)
			continue
		}
		if c.hidden != "" && strings.Contains(err.Error(), c.hidden) {
			t.Errorf("secret %q: error leaks it: %v", c.secret, err)
		}
	}
	// Escaped, the same secret works.
	newProvider(t, "webhook+https://hooks.example.com/in?secret=whsec_"+url.QueryEscape(plus))
}

// signedReceipt is a receipts request signed with secret at ts.
func signedReceipt(t *testing.T, secret, id string, ts time.Time, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/receipts/webhook", strings.NewReader(body))
	sig, err := SignStandardWebhook(secret, id, ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("webhook-id", id)
	r.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set("webhook-signature", sig)
	return r
}

func TestWebhookParseReceipts(t *testing.T) {
	t.Parallel()
	w := newProvider(t, "webhook+https://hooks.example.com/in?secret="+url.QueryEscape(vectorSecret)).(*Webhook)
	now := time.Now()
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

	one := `{"id":"rcpt_1","message_id":"wh_1","status":"delivered","at":"2025-03-04T05:06:07Z","detail":"250 ok","extra":true}`
	got, err := w.ParseReceipts(signedReceipt(t, vectorSecret, "msg_1", now, one), []byte(one), "https://relay.example/v1/receipts/webhook")
	if err != nil {
		t.Fatal(err)
	}
	want := Receipt{ID: "rcpt_1", MessageID: "wh_1", Status: ReceiptDelivered, At: at, Detail: "250 ok"}
	if len(got) != 1 || got[0] != want {
		t.Errorf("one receipt: got %+v, want %+v", got, want)
	}

	many := ` [{"message_id":"wh_1","status":"sent"},{"message_id":"wh_2","status":"bounced","detail":"550 no such user"}]`
	got, err = w.ParseReceipts(signedReceipt(t, vectorSecret, "msg_2", now, many), []byte(many), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Receipt{MessageID: "wh_1", Status: ReceiptSent}) ||
		got[1] != (Receipt{MessageID: "wh_2", Status: ReceiptBounced, Detail: "550 no such user"}) {
		t.Errorf("array: got %+v", got)
	}

	// bounce says what a bounce means for the address.
	soft := `[{"message_id":"wh_3","status":"bounced","bounce":"soft"},{"message_id":"wh_4","status":"bounced","bounce":"none"},{"message_id":"wh_5","status":"failed","bounce":"hard"}]`
	got, err = w.ParseReceipts(signedReceipt(t, vectorSecret, "msg_11", now, soft), []byte(soft), "")
	if err != nil || len(got) != 3 || got[0].Bounce != BounceSoft || got[1].Bounce != BounceNone || got[2].Bounce != BounceHard {
		t.Errorf("bounce: got %+v, %v", got, err)
	}

	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	refused := []struct {
		name string
		req  *http.Request
		body string
		sig  bool // an ErrBadSignature
		want string
	}{
		{"unsigned", httptest.NewRequest(http.MethodPost, "/", strings.NewReader(one)), one, true, "no webhook-id header"},
		{"other secret", signedReceipt(t, otherSecret, "msg_3", now, one), one, true, "no v1 signature"},
		{"stale", signedReceipt(t, vectorSecret, "msg_4", now.Add(-6*time.Minute), one), one, true, "old"},
		{"body changed", signedReceipt(t, vectorSecret, "msg_5", now, one), strings.Replace(one, "delivered", "bounced", 1), true, "no v1 signature"},
		{"not JSON", signedReceipt(t, vectorSecret, "msg_6", now, "delivered"), "delivered", false, "expected a JSON object or array"},
		{"bad JSON", signedReceipt(t, vectorSecret, "msg_7", now, `{"message_id":`), `{"message_id":`, false, "receipt:"},
		{"no message id", signedReceipt(t, vectorSecret, "msg_8", now, `{"status":"sent"}`), `{"status":"sent"}`, false, `missing "message_id"`},
		{"bad status", signedReceipt(t, vectorSecret, "msg_9", now, `[{"message_id":"a","status":"sent"},{"message_id":"b","status":"opened"}]`),
			`[{"message_id":"a","status":"sent"},{"message_id":"b","status":"opened"}]`, false, `receipt 1: "status": "opened" is not one of`},
		{"bad time", signedReceipt(t, vectorSecret, "msg_10", now, `{"message_id":"a","status":"failed","at":"yesterday"}`),
			`{"message_id":"a","status":"failed","at":"yesterday"}`, false, `"at": "yesterday" is not an RFC 3339 time`},
		{"bad bounce", signedReceipt(t, vectorSecret, "msg_12", now, `{"message_id":"a","status":"bounced","bounce":"maybe"}`),
			`{"message_id":"a","status":"bounced","bounce":"maybe"}`, false, `"bounce": "maybe" is not one of hard, soft, none`},
	}
	for _, c := range refused {
		_, err := w.ParseReceipts(c.req, []byte(c.body), "")
		if err == nil || errors.Is(err, ErrBadSignature) != c.sig || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q (ErrBadSignature: %v)", c.name, err, c.want, c.sig)
		}
	}
}

// Without a secret anyone could forge a receipt: all are refused, signed
// or not.
func TestWebhookReceiptsNeedSecret(t *testing.T) {
	t.Parallel()
	w := newProvider(t, "webhook+https://hooks.example.com/in").(*Webhook)
	body := `{"message_id":"wh_1","status":"delivered"}`
	_, err := w.ParseReceipts(signedReceipt(t, vectorSecret, "msg_1", time.Now(), body), []byte(body), "")
	if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "secret=whsec_") {
		t.Errorf("got %v, want ErrBadSignature naming the missing secret", err)
	}
}

func ExampleVerifyStandardWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	sent := time.Unix(1614265330, 0)
	sig, _ := SignStandardWebhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", sent, body)
	fmt.Println(sig)

	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", sig)
	fmt.Println(VerifyStandardWebhook(secret, h, body, sent.Add(time.Minute), StandardWebhookTolerance))
	fmt.Println(VerifyStandardWebhook(secret, h, body, sent.Add(time.Hour), StandardWebhookTolerance))
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// <nil>
	// receipt signature missing or invalid: webhook-timestamp is 1h0m0s old (tolerance 5m0s)
}

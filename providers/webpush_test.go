package providers

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"
)

// writeVAPIDKey writes a fresh VAPID key file and returns its path and
// public key.
func writeVAPIDKey(t *testing.T) (path, public string) {
	t.Helper()
	pemBytes, public, err := GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "vapid.pem")
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, public
}

// browserSub is a browser's side of a subscription: its key pair and auth
// secret, and the subscription JSON it would hand the app.
type browserSub struct {
	priv *ecdh.PrivateKey
	auth []byte
	json string
}

func newBrowserSub(t *testing.T, endpoint string) browserSub {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	enc := base64.RawURLEncoding
	b, err := json.Marshal(map[string]any{"endpoint": endpoint, "expirationTime": nil,
		"keys": map[string]string{"p256dh": enc.EncodeToString(priv.PublicKey().Bytes()), "auth": enc.EncodeToString(auth)}})
	if err != nil {
		t.Fatal(err)
	}
	return browserSub{priv: priv, auth: auth, json: string(b)}
}

// pushRequest is one request as the push service stand-in saw it.
type pushRequest struct {
	path   string
	header http.Header
	body   []byte
}

// pushService stands in for a push service (RFC 8030): it keeps each
// request and answers 201 Created with the message's Location, or what
// answer says.
type pushService struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []pushRequest
	answer func(w http.ResponseWriter) bool // true: answered
}

func startPushService(t *testing.T) *pushService {
	s := &pushService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, pushRequest{r.URL.Path, r.Header.Clone(), body})
		n, answer := len(s.reqs), s.answer
		s.mu.Unlock()
		if answer != nil && answer(w) {
			return
		}
		w.Header().Set("Location", fmt.Sprintf("%s/m/%d", s.URL, n))
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *pushService) requests() []pushRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pushRequest(nil), s.reqs...)
}

// webPushURL is a provider URL for loopback endpoints.
func webPushURL(key, extra string) string {
	u := "webpush+http://push?allow_private=true&subject=mailto:ops%40example.com&vapid_key=" + url.QueryEscape(key)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// browserDecrypt has an implementation independent of the provider (Python's
// cryptography, testdata/webpush_decrypt.py) decrypt a push message body
// as the subscription's browser would and verify its VAPID Authorization.
func browserDecrypt(t *testing.T, sub browserSub, body []byte, authorization string) map[string]any {
	t.Helper()
	if err := exec.Command("python3", "-c", "import cryptography").Run(); err != nil {
		testserver.Unavailable(t, "webpush", "python3 with cryptography not found: apt-get install python3-cryptography to decrypt independently")
	}
	enc := base64.RawURLEncoding
	in := map[string]string{"ua_private": enc.EncodeToString(sub.priv.Bytes()), "auth": enc.EncodeToString(sub.auth),
		"body": enc.EncodeToString(body)}
	if authorization != "" {
		in["authorization"] = authorization
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "testdata/webpush_decrypt.py")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser-side decryption failed: %v: %s", err, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decryptor printed %q: %v", out, err)
	}
	return got
}

// The encryption reproduces RFC 8291's worked example byte for byte, given
// its ephemeral key and salt, and the independent decryptor reads the
// example back: both sides agree with the RFC, not only with each other.
func TestWebPushRFC8291Example(t *testing.T) {
	t.Parallel()
	dec := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	as, err := ecdh.P256().NewPrivateKey(dec("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
	if err != nil {
		t.Fatal(err)
	}
	uaPriv, err := ecdh.P256().NewPrivateKey(dec("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	if err != nil {
		t.Fatal(err)
	}
	auth := dec("BTBZMqHH6r4Tts7J_aSIgg")
	const want = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
	got, err := sealWebPush(as, dec("DGv6ra1nlYgDCS1FRnbzlw"), uaPriv.PublicKey(), auth, []byte("When I grow up, I want to be a watermelon"))
	if err != nil {
		t.Fatal(err)
	}
	if g := base64.RawURLEncoding.EncodeToString(got); g != want {
		t.Errorf("ciphertext\n%s\nwant RFC 8291 §5's\n%s", g, want)
	}
	d := browserDecrypt(t, browserSub{priv: uaPriv, auth: auth}, dec(want), "")
	if d["plaintext"] != "When I grow up, I want to be a watermelon" {
		t.Errorf("the decryptor read the RFC's example as %q", d["plaintext"])
	}
}

// A message reaches the subscription's endpoint as a browser takes it: the
// independent decryptor opens the body and verifies the VAPID JWT with
// the key the app subscribed with; TTL and Urgency follow the message's
// type, Topic the key; a retry sends the same bytes.
func TestWebPushDelivers(t *testing.T) {
	t.Parallel()
	svc := startPushService(t)
	keyFile, public := writeVAPIDKey(t)
	p := newProvider(t, webPushURL(keyFile, "ttl=24h,invoice.paid:5m&urgency=low,invoice.paid:high")).(*WebPush)
	clock := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	p.now = clock.Now
	sub := newBrowserSub(t, svc.URL+"/push/sub-1")
	m := testMessage("er1_webpush")
	m.Channel, m.Address = "webpush", sub.json
	m.Subject, m.Body, m.Data = "Paid ✓", "Invoice 42 is paid.", json.RawMessage(`{"invoice":42,"url":"/i/42"}`)
	if err := p.CheckAddress(m.Channel, m.Address); err != nil {
		t.Fatalf("CheckAddress: %v", err)
	}

	r := send(p, m)
	if r.Outcome != Sent || r.MessageID != svc.URL+"/m/1" {
		t.Fatalf("got %s id %q (%s)", r.Outcome, r.MessageID, r.Detail)
	}
	reqs := svc.requests()
	if len(reqs) != 1 || reqs[0].path != "/push/sub-1" {
		t.Fatalf("push service saw %+v", reqs)
	}
	h := reqs[0].header
	for name, want := range map[string]string{
		"Content-Encoding": "aes128gcm", "Content-Type": "application/octet-stream",
		"Ttl": "300", "Urgency": "high", "Idempotency-Key": "er1_webpush", "Topic": webPushTopic("er1_webpush"),
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if topic := h.Get("Topic"); len(topic) != 32 || strings.Trim(topic, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		t.Errorf("Topic %q: want at most 32 characters of the URL-safe base64 alphabet", topic)
	}

	d := browserDecrypt(t, sub, reqs[0].body, h.Get("Authorization"))
	var payload map[string]any
	if err := json.Unmarshal([]byte(d["plaintext"].(string)), &payload); err != nil {
		t.Fatalf("plaintext %q: %v", d["plaintext"], err)
	}
	want := map[string]any{"key": "er1_webpush", "notification_id": "n_0000000000042", "type": "invoice.paid",
		"title": "Paid ✓", "body": "Invoice 42 is paid.", "data": map[string]any{"invoice": 42.0, "url": "/i/42"}}
	if fmt.Sprint(payload) != fmt.Sprint(want) {
		t.Errorf("decrypted %v\nwant %v", payload, want)
	}
	if d["k"] != public {
		t.Errorf("Authorization k=%v, want the public key keygen printed, %s", d["k"], public)
	}
	claims := d["claims"].(map[string]any)
	exp := int64(claims["exp"].(float64))
	if claims["aud"] != svc.URL || claims["sub"] != "mailto:ops@example.com" ||
		exp <= clock.Now().Unix() || exp > clock.Now().Add(24*time.Hour).Unix() {
		t.Errorf("JWT claims %v: want aud %s, sub mailto:ops@example.com, exp within 24 h", claims, svc.URL)
	}

	// Another type takes the defaults.
	m2 := *m
	m2.Type = "digest.weekly"
	if r := send(p, &m2); r.Outcome != Sent {
		t.Fatalf("second send: %+v", r)
	}
	// The same message again is the same body (a retry is recognisably
	// the same message), under the cached JWT.
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("retry: %+v", r)
	}
	reqs = svc.requests()
	if h := reqs[1].header; h.Get("Ttl") != "86400" || h.Get("Urgency") != "low" {
		t.Errorf("type digest.weekly: TTL %q Urgency %q, want the defaults 86400 and low", h.Get("Ttl"), h.Get("Urgency"))
	}
	if !bytes.Equal(reqs[2].body, reqs[0].body) {
		t.Error("the retry's body differs from the first attempt's")
	}
	if bytes.Equal(reqs[1].body[:16], reqs[0].body[:16]) {
		t.Error("two different payloads share a salt")
	}
	if reqs[2].header.Get("Authorization") != reqs[0].header.Get("Authorization") {
		t.Error("the JWT was signed again within its life")
	}
	// Past its renewal time, a new JWT.
	clock.Advance(vapidLife - vapidRenewBefore)
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("after the clock moved: %+v", r)
	}
	reqs = svc.requests()
	if reqs[3].header.Get("Authorization") == reqs[0].header.Get("Authorization") {
		t.Error("a JWT was reused past its renewal time")
	}
	d = browserDecrypt(t, sub, reqs[3].body, reqs[3].header.Get("Authorization"))
	if exp := int64(d["claims"].(map[string]any)["exp"].(float64)); exp != clock.Now().Add(vapidLife).Unix() {
		t.Errorf("renewed JWT exp %d, want %d", exp, clock.Now().Add(vapidLife).Unix())
	}
}

// The push service's answers, classified: 404 and 410 end the
// subscription; 429 pauses with its Retry-After, and WNS's 406 backs off;
// VAPID refusals are permanent but leave the subscription alone.
func TestWebPushAnswers(t *testing.T) {
	t.Parallel()
	keyFile, _ := writeVAPIDKey(t)
	for _, c := range []struct {
		status     int
		retryAfter string
		outcome    Outcome
		permanent  bool
		invalid    bool
		detail     string
	}{
		{201, "", Sent, false, false, ""},
		{202, "", Sent, false, false, ""},
		{400, "", Refused, true, false, ""},
		{401, "", Refused, true, false, "VAPID"},
		{403, "", Refused, true, false, "applicationServerKey"},
		{404, "", Refused, true, true, "expired or was unsubscribed"},
		{410, "", Refused, true, true, "expired or was unsubscribed"},
		{413, "", Refused, true, false, "smaller payload"},
		// WNS (Edge) says 406 for its throttle limit.
		{406, "", Refused, false, false, "throttle limit"},
		{429, "30", Refused, false, false, ""},
		{500, "", Unknown, false, false, ""},
		{503, "", Refused, false, false, ""},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			t.Parallel()
			svc := startPushService(t)
			svc.answer = func(w http.ResponseWriter) bool {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				if c.status < 300 {
					w.Header().Set("Location", "/m/x")
				}
				w.WriteHeader(c.status)
				return true
			}
			p := newProvider(t, webPushURL(keyFile, ""))
			m := testMessage("k")
			m.Address = newBrowserSub(t, svc.URL+"/push/1").json
			r := send(p, m)
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.InvalidAddress != c.invalid || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("%d: %s permanent=%v invalid=%v (%s); want %s permanent=%v invalid=%v, detail with %q",
					c.status, r.Outcome, r.Permanent, r.InvalidAddress, r.Detail, c.outcome, c.permanent, c.invalid, c.detail)
			}
			if c.status == 406 && !r.Overloaded {
				t.Error("406: not overloaded")
			}
			if c.status == 429 && (r.RetryAfter != 30*time.Second || !r.Overloaded) {
				t.Errorf("429: RetryAfter %s overloaded %v, want 30s and overloaded", r.RetryAfter, r.Overloaded)
			}
			if c.outcome == Sent && r.MessageID != "/m/x" {
				t.Errorf("message id %q, want the Location", r.MessageID)
			}
		})
	}
}

// A payload too large for a push message is refused for good before any
// request: no push service would take it.
func TestWebPushPayloadTooLarge(t *testing.T) {
	t.Parallel()
	svc := startPushService(t)
	keyFile, _ := writeVAPIDKey(t)
	p := newProvider(t, webPushURL(keyFile, ""))
	m := testMessage("k")
	m.Address = newBrowserSub(t, svc.URL+"/push/1").json
	m.Body = strings.Repeat("x", webPushMaxPayload)
	r := send(p, m)
	if r.Outcome != Refused || !r.Permanent || r.InvalidAddress || !strings.Contains(r.Detail, "more than the 3993") {
		t.Errorf("got %+v", r)
	}
	// The largest that fits is sent, in a body of at most 4096 bytes.
	plain, _ := json.Marshal(webPushPayload{Key: m.Key, NotificationID: m.NotificationID, Type: m.Type, Title: m.Subject})
	m.Body = strings.Repeat("x", webPushMaxPayload-len(plain))
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("largest payload: %+v", r)
	}
	if reqs := svc.requests(); len(reqs) != 1 || len(reqs[0].body) > 4096 {
		t.Errorf("push service saw %d requests (body %d bytes)", len(reqs), len(reqs[len(reqs)-1].body))
	}
}

// Addresses are checked at accept, each refusal naming what is wrong; the
// endpoint obeys the per-recipient webhooks' SSRF rules.
func TestWebPushAddresses(t *testing.T) {
	t.Parallel()
	keyFile, _ := writeVAPIDKey(t)
	strict := newProvider(t, "webpush+https://push?subject=mailto:ops%40example.com&vapid_key="+url.QueryEscape(keyFile)).(*WebPush)
	listed := newProvider(t, "webpush+https://push?allow=fcm.googleapis.com,*.push.apple.com&subject=mailto:ops%40example.com&vapid_key="+url.QueryEscape(keyFile)).(*WebPush)
	good := newBrowserSub(t, "https://fcm.googleapis.com/fcm/send/abc")
	with := func(change func(map[string]any)) string {
		var s map[string]any
		json.Unmarshal([]byte(good.json), &s)
		change(s)
		b, _ := json.Marshal(s)
		return string(b)
	}
	keys := func(s map[string]any) map[string]any { return s["keys"].(map[string]any) }
	for _, c := range []struct {
		p       *WebPush
		address string
		want    string // "" for accepted
	}{
		{strict, good.json, ""},
		{listed, good.json, ""},
		{listed, with(func(s map[string]any) { s["endpoint"] = "https://web.push.apple.com/QGx" }), ""},
		{listed, with(func(s map[string]any) { s["endpoint"] = "https://updates.push.services.mozilla.com/wpush/v2/x" }), "not in the route's allow-list"},
		{strict, "https://fcm.googleapis.com/fcm/send/abc", "not a push subscription: want its JSON"},
		{strict, with(func(s map[string]any) { delete(s, "endpoint") }), "without an endpoint"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "http://fcm.googleapis.com/x" }), "not an https URL"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "https://127.0.0.1/x" }), "127.0.0.1 is not a public address"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "https://[::1]/x" }), "::1 is not a public address"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "https://169.254.169.254/x" }), "not a public address"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "https://localhost/x" }), "loopback name"},
		{strict, with(func(s map[string]any) { s["endpoint"] = "https://u:p@fcm.googleapis.com/x" }), "userinfo"},
		{strict, with(func(s map[string]any) { keys(s)["p256dh"] = "BCVx" }), "keys.p256dh: want the URL-safe base64 of a 65-byte"},
		{strict, with(func(s map[string]any) {
			keys(s)["p256dh"] = base64.RawURLEncoding.EncodeToString(append([]byte{4}, make([]byte, 64)...))
		}), "not a point on P-256"},
		{strict, with(func(s map[string]any) { keys(s)["auth"] = "AAAA" }), "keys.auth: want the URL-safe base64 of 16 bytes"},
		{strict, with(func(s map[string]any) { delete(s, "keys") }), "keys.p256dh"},
	} {
		err := c.p.CheckAddress("webpush", c.address)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.address, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.address, err, c.want)
		}
	}
	// Padded base64 (as some libraries store it) is the same key.
	padded := with(func(s map[string]any) { keys(s)["auth"] = keys(s)["auth"].(string) + "==" })
	if err := strict.CheckAddress("webpush", padded); err != nil {
		t.Errorf("padded auth: %v", err)
	}
}

// Without allow_private, an endpoint whose name resolves to loopback is
// refused when the connection is made (no DNS rebinding past the check),
// for good, and the push service stand-in sees nothing.
func TestWebPushRefusesPrivateAtDial(t *testing.T) {
	t.Parallel()
	svc := startPushService(t)
	keyFile, _ := writeVAPIDKey(t)
	p := newProvider(t, "webpush+http://push?subject=mailto:ops%40example.com&vapid_key="+url.QueryEscape(keyFile)).(*WebPush)
	p.dialer.Resolver = fakeDNS(t, map[string][]netip.Addr{"push.example": loopback4})
	_, port, _ := strings.Cut(svc.Listener.Addr().String(), ":")
	m := testMessage("k")
	m.Address = newBrowserSub(t, "http://push.example:"+port+"/push/1").json
	if err := p.CheckAddress("webpush", m.Address); err != nil {
		t.Fatalf("CheckAddress: %v", err)
	}
	r := send(p, m)
	if r.Outcome != Refused || !r.Permanent || r.InvalidAddress || !strings.Contains(r.Detail, "the relay refused to connect") {
		t.Errorf("got %s permanent=%v invalid=%v (%s)", r.Outcome, r.Permanent, r.InvalidAddress, r.Detail)
	}
	if n := len(svc.requests()); n != 0 {
		t.Errorf("the loopback push service saw %d requests", n)
	}
}

// Bad provider URLs are refused, each naming what is wrong.
func TestWebPushURLErrors(t *testing.T) {
	t.Parallel()
	keyFile, _ := writeVAPIDKey(t)
	notPEM := filepath.Join(t.TempDir(), "vapid.txt")
	os.WriteFile(notPEM, []byte("not pem"), 0o600)
	k := url.QueryEscape(keyFile)
	base := "webpush+https://push?subject=mailto:a%40b.c&vapid_key=" + k
	for raw, want := range map[string]string{
		"webpush+https://push?subject=mailto:a%40b.c":                                      `missing parameter "vapid_key"`,
		"webpush+https://push?subject=mailto:a%40b.c&vapid_key=/nonexistent":               `parameter "vapid_key": open /nonexistent`,
		"webpush+https://push?subject=mailto:a%40b.c&vapid_key=" + url.QueryEscape(notPEM): `parameter "vapid_key": not a PEM file`,
		"webpush+https://push?vapid_key=" + k:                                              `parameter "subject"`,
		"webpush+https://push?subject=ops%40example.com&vapid_key=" + k:                    `parameter "subject": want a mailto: or https: URL`,
		base + "&ttl=soon":                        `parameter "ttl": "soon": not a Go duration`,
		base + "&ttl=1h,2h":                       `parameter "ttl": two defaults`,
		base + "&ttl=a:1h,a:2h":                   `parameter "ttl": type "a" given twice`,
		base + "&ttl=:1h":                         `has no type before the colon`,
		base + "&urgency=urgent":                  `parameter "urgency": "urgent": not very-low, low, normal or high`,
		base + "&idempotency=honoured":            `push services take no idempotency key`,
		base + "&token=t":                         `remove the userinfo and token`,
		base + "&allow=https://x":                 `parameter "allow"`,
		base + "&allow_private=yes":               `parameter "allow_private"`,
		base + "&secret=whsec_x":                  `unknown parameter "secret"`,
		"webpush+https://?vapid_key=" + k:         "missing host",
		base + "&ttl=0&urgency=very-low,otp:high": "",
	} {
		_, err := New(raw)
		switch {
		case want == "" && err != nil:
			t.Errorf("New(%s): %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("New(%s) = %v, want an error with %s", raw, err, want)
		}
	}
}

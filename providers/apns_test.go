package providers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	apnsKeyID  = "ABC123DEFG"
	apnsTeamID = "DEF123GHIJ"
	apnsTopic  = "com.example.app"
	apnsToken  = "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"
)

// apnsRequest is one request as the APNs stand-in saw it.
type apnsRequest struct {
	proto  int
	path   string
	header http.Header
	body   map[string]any
	iat    int64 // the provider token's
	jwt    string
}

// apnsBundle is an APNs stand-in: HTTP/2 over TLS on loopback, which
// checks every request as APNs does (the ES256 provider token against the
// key's public half, its kid and iss, its age; the headers APNs requires)
// and refuses a bad one with APNs's own 403 or 400 reasons. answer, when
// set, replaces the 200 for the n-th request (from 1).
type apnsBundle struct {
	t     *testing.T
	srv   *httptest.Server
	key   *ecdsa.PrivateKey
	p8    string
	ca    string
	clock *fakeClock
	// conns are the stand-in's connections, so that a case can drop one.
	conns sync.Map // remote address → net.Conn

	mu     sync.Mutex
	reqs   []apnsRequest
	answer func(w http.ResponseWriter, r *http.Request, n int) bool
}

func newAPNsBundle(t *testing.T) *apnsBundle {
	t.Helper()
	b := &apnsBundle{t: t, clock: &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	var err error
	if b.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(b.key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b.p8 = filepath.Join(dir, "AuthKey_"+apnsKeyID+".p8")
	if err := os.WriteFile(b.p8, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.EnableHTTP2 = true
	b.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-certificate case's handshake errors
	b.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Store(c.RemoteAddr().String(), c)
		}
	}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	b.ca = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(b.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// url is the provider URL for the stand-in, with extra parameters.
func (b *apnsBundle) url(extra string) string {
	u := "apns://" + b.srv.Listener.Addr().String() + "?key=" + url.QueryEscape(b.p8) + "&key_id=" + apnsKeyID +
		"&team_id=" + apnsTeamID + "&topic=" + apnsTopic + "&ca=" + url.QueryEscape(b.ca)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func (b *apnsBundle) provider(extra string) *APNs {
	b.t.Helper()
	p := newProvider(b.t, b.url(extra)).(*APNs)
	p.now = b.clock.Now
	return p
}

func (b *apnsBundle) requests() []apnsRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]apnsRequest(nil), b.reqs...)
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (b *apnsBundle) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	refuse := func(status int, reason string) {
		w.Header().Set("apns-id", r.Header.Get("apns-id"))
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"reason":%q}`, reason)
	}
	req := apnsRequest{proto: r.ProtoMajor, path: r.URL.Path, header: r.Header.Clone()}
	json.Unmarshal(raw, &req.body)
	// The provider token, checked as APNs checks it.
	jwt, ok := strings.CutPrefix(r.Header.Get("Authorization"), "bearer ")
	parts := strings.Split(jwt, ".")
	if !ok || len(parts) != 3 {
		refuse(403, "MissingProviderToken")
		return
	}
	var header map[string]string
	var claims struct {
		Iss string `json:"iss"`
		Iat int64  `json:"iat"`
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if decodeSegment(parts[0], &header) != nil || decodeSegment(parts[1], &claims) != nil || err != nil || len(sig) != 64 ||
		header["alg"] != "ES256" || header["kid"] != apnsKeyID || claims.Iss != apnsTeamID ||
		!ecdsa.Verify(&b.key.PublicKey, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		b.t.Errorf("APNs stand-in: bad provider token %s %v %+v", jwt, header, claims)
		refuse(403, "InvalidProviderToken")
		return
	}
	if age := b.clock.Now().Sub(time.Unix(claims.Iat, 0)); age >= time.Hour || age < 0 {
		refuse(403, "ExpiredProviderToken")
		return
	}
	req.iat, req.jwt = claims.Iat, jwt
	switch {
	case r.Method != http.MethodPost:
		refuse(405, "MethodNotAllowed")
		return
	case !strings.HasPrefix(r.URL.Path, "/3/device/"):
		refuse(404, "BadPath")
		return
	case r.Header.Get("apns-topic") != apnsTopic:
		refuse(400, "BadTopic")
		return
	case !uuidRE.MatchString(r.Header.Get("apns-id")):
		refuse(400, "BadMessageId")
		return
	case len(r.Header.Get("apns-collapse-id")) > 64:
		refuse(400, "BadCollapseId")
		return
	}
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	n, answer := len(b.reqs), b.answer
	b.mu.Unlock()
	if answer != nil && answer(w, r, n) {
		return
	}
	w.Header().Set("apns-id", r.Header.Get("apns-id"))
	w.WriteHeader(http.StatusOK)
}

func setupAPNs(t *testing.T, extra string) (*APNs, *apnsBundle) {
	t.Helper()
	b := newAPNsBundle(t)
	return b.provider(extra), b
}

func apnsMessage(key string) *Message {
	m := testMessage(key)
	m.Channel, m.Address = "push", apnsToken
	return m
}

// A notification reaches the stand-in over HTTP/2 with a provider token
// the key verifies, with the headers APNs takes, per type; a retry is the
// same apns-id and collapse id.
func TestAPNsDelivers(t *testing.T) {
	t.Parallel()
	p, b := setupAPNs(t, "ttl=24h,otp.login:0&priority=10,digest.weekly:5")
	m := apnsMessage("er1_apns")
	m.Data = json.RawMessage(`{"invoice":42}`)
	if err := p.CheckAddress("push", m.Address); err != nil {
		t.Fatalf("CheckAddress: %v", err)
	}
	r := send(p, m)
	wantID := apnsID("er1_apns")
	if r.Outcome != Sent || r.MessageID != wantID || r.HTTPStatus != 200 {
		t.Fatalf("got %s %d id %q (%s), want sent with id %s", r.Outcome, r.HTTPStatus, r.MessageID, r.Detail, wantID)
	}
	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("stand-in saw %d requests", len(reqs))
	}
	q := reqs[0]
	if q.proto != 2 || q.path != "/3/device/"+apnsToken {
		t.Errorf("HTTP/%d %s, want HTTP/2 /3/device/TOKEN", q.proto, q.path)
	}
	for name, want := range map[string]string{
		"apns-topic": apnsTopic, "apns-push-type": "alert", "apns-priority": "10", "apns-id": wantID,
		"apns-collapse-id": apnsCollapseID("er1_apns"), "content-type": "application/json",
		"apns-expiration": strconv.FormatInt(b.clock.Now().Add(24*time.Hour).Unix(), 10),
	} {
		if got := q.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if q.iat != b.clock.Now().Unix() {
		t.Errorf("token iat %d, want the clock's %d", q.iat, b.clock.Now().Unix())
	}
	want := map[string]any{"aps": map[string]any{"alert": map[string]any{"title": "Paid", "body": "Thanks."}},
		"key": "er1_apns", "notification_id": "n_0000000000042", "type": "invoice.paid", "data": map[string]any{"invoice": 42.0}}
	if fmt.Sprint(q.body) != fmt.Sprint(want) {
		t.Errorf("payload %v\nwant %v", q.body, want)
	}

	// Per type: no storing for otp.login, priority 5 for digest.weekly.
	otp := apnsMessage("er1_otp")
	otp.Type = "otp.login"
	digest := apnsMessage("er1_digest")
	digest.Type = "digest.weekly"
	for _, m := range []*Message{otp, digest, m} {
		if r := send(p, m); r.Outcome != Sent {
			t.Fatalf("%s: %+v", m.Type, r)
		}
	}
	reqs = b.requests()
	if h := reqs[1].header; h.Get("apns-expiration") != "0" || h.Get("apns-priority") != "10" {
		t.Errorf("otp.login: expiration %q priority %q, want 0 and 10", h.Get("apns-expiration"), h.Get("apns-priority"))
	}
	if h := reqs[2].header; h.Get("apns-priority") != "5" || h.Get("apns-id") == wantID {
		t.Errorf("digest.weekly: priority %q, apns-id %q; want 5 and an id of its own", h.Get("apns-priority"), h.Get("apns-id"))
	}
	if h := reqs[3].header; h.Get("apns-id") != wantID || h.Get("apns-collapse-id") != apnsCollapseID("er1_apns") {
		t.Errorf("the retry's apns-id %q collapse id %q, want the first attempt's", h.Get("apns-id"), h.Get("apns-collapse-id"))
	}
}

// The provider token is signed again only within Apple's limits: reused
// for 20 minutes and more, replaced before it is an hour old, and replaced
// after an ExpiredProviderToken only once it is 20 minutes old.
func TestAPNsTokenRefresh(t *testing.T) {
	t.Parallel()
	p, b := setupAPNs(t, "")
	t0 := b.clock.Now()
	expireNext := false
	var mu sync.Mutex
	b.answer = func(w http.ResponseWriter, r *http.Request, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		if expireNext {
			expireNext = false
			w.WriteHeader(403)
			io.WriteString(w, `{"reason":"ExpiredProviderToken"}`)
			return true
		}
		return false
	}
	sendAt := func(after time.Duration, wantOutcome Outcome) int64 {
		t.Helper()
		b.clock.Advance(t0.Add(after).Sub(b.clock.Now()))
		if r := send(p, apnsMessage("k")); r.Outcome != wantOutcome {
			t.Fatalf("at +%s: %s (%s), want %s", after, r.Outcome, r.Detail, wantOutcome)
		}
		reqs := b.requests()
		return reqs[len(reqs)-1].iat
	}
	first := sendAt(0, Sent)
	if got := sendAt(39*time.Minute, Sent); got != first {
		t.Errorf("at +39m a new token (iat %d), want the first (%d)", got, first)
	}
	renewed := sendAt(40*time.Minute, Sent)
	if renewed != t0.Add(40*time.Minute).Unix() {
		t.Errorf("at +40m token iat %d, want a new one at +40m", renewed)
	}
	// APNs calls a 5-minute-old token expired: it is kept (a new one now
	// would be TooManyProviderTokenUpdates), and the call is retryable.
	mu.Lock()
	expireNext = true
	mu.Unlock()
	if got := sendAt(45*time.Minute, Refused); got != renewed {
		t.Errorf("the expired answer's token iat %d, want %d", got, renewed)
	}
	if got := sendAt(46*time.Minute, Sent); got != renewed {
		t.Errorf("5 minutes after a new token, another (iat %d)", got)
	}
	// At 25 minutes old, the same answer drops it: the next call signs anew.
	mu.Lock()
	expireNext = true
	mu.Unlock()
	sendAt(65*time.Minute, Refused)
	if got := sendAt(65*time.Minute+time.Second, Sent); got != t0.Add(65*time.Minute+time.Second).Unix() {
		t.Errorf("after ExpiredProviderToken on a 25-minute-old token, iat %d, want a new token", got)
	}
}

// APNs's answers, classified by their reason.
func TestAPNsAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status     int
		reason     string
		outcome    Outcome
		permanent  bool
		invalid    bool
		overloaded bool
	}{
		{400, "BadDeviceToken", Refused, true, true, false},
		{400, "BadExpirationDate", Refused, true, false, false},
		{400, "DeviceTokenNotForTopic", Refused, true, false, false},
		{400, "PayloadEmpty", Refused, true, false, false},
		{400, "IdleTimeout", Refused, false, false, false},
		{403, "InvalidProviderToken", Refused, true, false, false},
		{403, "ExpiredProviderToken", Refused, false, false, false},
		{404, "BadPath", Refused, true, false, false},
		{405, "MethodNotAllowed", Refused, true, false, false},
		{410, "Unregistered", Refused, true, true, false},
		{410, "ExpiredToken", Refused, true, true, false},
		{410, "", Refused, true, true, false},
		{413, "PayloadTooLarge", Refused, true, false, false},
		{429, "TooManyRequests", Refused, false, false, false},
		{429, "TooManyProviderTokenUpdates", Refused, false, false, true},
		{500, "InternalServerError", Unknown, false, false, false},
		{503, "ServiceUnavailable", Refused, false, false, true},
		{503, "Shutdown", Refused, false, false, true},
	} {
		t.Run(fmt.Sprint(c.status, c.reason), func(t *testing.T) {
			t.Parallel()
			p, b := setupAPNs(t, "")
			b.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
				if c.status == 429 {
					w.Header().Set("Retry-After", "30")
				}
				w.WriteHeader(c.status)
				if c.reason != "" {
					fmt.Fprintf(w, `{"reason":%q,"timestamp":1700000000000}`, c.reason)
				}
				return true
			}
			r := send(p, apnsMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.InvalidAddress != c.invalid ||
				r.Overloaded != c.overloaded || r.HTTPStatus != c.status || !strings.Contains(r.Detail, c.reason) {
				t.Errorf("got %s permanent=%v invalid=%v overloaded=%v %d (%s); want %s permanent=%v invalid=%v overloaded=%v",
					r.Outcome, r.Permanent, r.InvalidAddress, r.Overloaded, r.HTTPStatus, r.Detail, c.outcome, c.permanent, c.invalid, c.overloaded)
			}
			// One device's limit pauses nobody else; the provider's does.
			if wantPause := c.status == 429 && c.overloaded; (r.RetryAfter == 30*time.Second) != wantPause {
				t.Errorf("RetryAfter %s, want a pause: %v", r.RetryAfter, wantPause)
			}
		})
	}
}

// A call whose answer is lost after APNs read it is unknown: the stream
// reset, the connection closed; one that never reached it is refused.
func TestAPNsLostAnswers(t *testing.T) {
	t.Parallel()
	t.Run("stream reset after the request", func(t *testing.T) {
		t.Parallel()
		p, b := setupAPNs(t, "")
		b.answer = func(http.ResponseWriter, *http.Request, int) bool { panic(http.ErrAbortHandler) }
		if r := send(p, apnsMessage("k")); r.Outcome != Unknown {
			t.Errorf("got %s (%s), want unknown", r.Outcome, r.Detail)
		}
	})
	t.Run("connection closed after the request", func(t *testing.T) {
		t.Parallel()
		p, b := setupAPNs(t, "")
		b.answer = func(_ http.ResponseWriter, r *http.Request, _ int) bool {
			c, ok := b.conns.Load(r.RemoteAddr)
			if !ok {
				t.Error("no connection for", r.RemoteAddr)
			} else {
				c.(net.Conn).Close()
			}
			<-r.Context().Done()
			return true
		}
		if r := send(p, apnsMessage("k")); r.Outcome != Unknown || len(b.requests()) != 1 {
			t.Errorf("got %s (%s), want unknown", r.Outcome, r.Detail)
		}
	})
	t.Run("timeout after the request", func(t *testing.T) {
		t.Parallel()
		p, b := setupAPNs(t, "timeout=300ms")
		b.answer = func(_ http.ResponseWriter, r *http.Request, _ int) bool { <-r.Context().Done(); return true }
		if r := send(p, apnsMessage("k")); r.Outcome != Unknown || !strings.Contains(r.Detail, "timeout after the request was written") {
			t.Errorf("got %s (%s), want unknown", r.Outcome, r.Detail)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		b := newAPNsBundle(t)
		raw := b.url("")
		b.srv.Close()
		p := newProvider(t, raw)
		if r := send(p, apnsMessage("k")); r.Outcome != Refused || r.Permanent {
			t.Errorf("got %s permanent=%v (%s), want a retryable refusal", r.Outcome, r.Permanent, r.Detail)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		b := newAPNsBundle(t)
		p := newProvider(t, strings.Replace(b.url(""), "&ca="+url.QueryEscape(b.ca), "", 1))
		if r := send(p, apnsMessage("k")); r.Outcome != Refused || len(b.requests()) != 0 {
			t.Errorf("got %s (%s), want refused before any request", r.Outcome, r.Detail)
		}
	})
}

// Device tokens are checked at accept; a background push carries
// content-available and no alert; a payload over 4 KB is refused before
// any request.
func TestAPNsAddressesAndPayloads(t *testing.T) {
	t.Parallel()
	p, b := setupAPNs(t, "push_type=background")
	for addr, ok := range map[string]bool{
		apnsToken: true, strings.ToUpper(apnsToken): true, apnsToken + "00": true,
		"": false, apnsToken[:63]: false, "fcm-device-token-1": false, apnsToken[:62] + "zz": false,
	} {
		if err := p.CheckAddress("push", addr); (err == nil) != ok {
			t.Errorf("CheckAddress(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
	m := apnsMessage("k")
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("%+v", r)
	}
	q := b.requests()[0]
	if aps := fmt.Sprint(q.body["aps"]); aps != "map[content-available:1]" || q.header.Get("apns-push-type") != "background" || q.header.Get("apns-priority") != "5" {
		t.Errorf("background: aps %s, push type %q, priority %q", aps, q.header.Get("apns-push-type"), q.header.Get("apns-priority"))
	}
	m.Body = strings.Repeat("x", apnsMaxPayload)
	m.Data = json.RawMessage(`{"big":"` + strings.Repeat("y", apnsMaxPayload) + `"}`)
	if r := send(p, m); r.Outcome != Refused || !r.Permanent || !strings.Contains(r.Detail, "more than the 4096") || len(b.requests()) != 1 {
		t.Errorf("large payload: %+v", r)
	}
	m = apnsMessage("k")
	m.Address = "not-a-token"
	if r := send(p, m); r.Outcome != Refused || !r.Permanent || len(b.requests()) != 1 {
		t.Errorf("bad token: %+v", r)
	}
}

// Bad provider URLs are refused, each naming what is wrong.
func TestAPNsURLErrors(t *testing.T) {
	t.Parallel()
	b := newAPNsBundle(t)
	k := url.QueryEscape(b.p8)
	base := "apns://api.push.apple.com?key=" + k + "&key_id=" + apnsKeyID + "&team_id=" + apnsTeamID + "&topic=" + apnsTopic
	for raw, want := range map[string]string{
		"apns://api.push.apple.com?key_id=" + apnsKeyID + "&team_id=" + apnsTeamID + "&topic=t": `missing parameter "key"`,
		strings.Replace(base, k, url.QueryEscape(b.ca), 1):                                      `parameter "key": a "CERTIFICATE" block`,
		strings.Replace(base, "key_id="+apnsKeyID, "key_id=abc", 1):                             `parameter "key_id": "abc" is not 10 capital letters`,
		strings.Replace(base, "&team_id="+apnsTeamID, "", 1):                                    `parameter "team_id"`,
		strings.Replace(base, "&topic="+apnsTopic, "", 1):                                       `missing parameter "topic"`,
		base + "&push_type=loud":                                                                `parameter "push_type": "loud"`,
		base + "&priority=7":                                                                    `parameter "priority": "7": not 10, 5 or 1`,
		base + "&push_type=background&priority=5,a:10":                                          `push_type=background must be 5 or 1`,
		base + "&ttl=-1h":              `parameter "ttl"`,
		base + "&ca=/nonexistent":      `parameter "ca"`,
		base + "&idempotency=honoured": `APNs does not dedupe`,
		base + "&token=x":              `remove the userinfo and token`,
		strings.Replace(base, "apple.com?", "apple.com/3/device?", 1): "take no path",
		base + "&push_type=voip&priority=10,digest:5&ttl=1h,otp:0":    "",
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

package providers

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	fcmProject = "demo-project"
	fcmEmail   = "relay@demo-project.iam.gserviceaccount.com"
)

// fcmKey is one RSA key for all FCM tests: generating one per test would
// cost more than the tests.
var fcmKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fcmRequest is one send as the fake FCM saw it.
type fcmRequest struct {
	path   string
	header http.Header
	body   map[string]any
}

// fcmBundle is a fake FCM and a fake OAuth token endpoint. The token
// endpoint checks each JWT as Google would (signature, iss, aud, scope,
// lifetime) and issues tokens tok-1, tok-2 …; FCM accepts only tokens it
// issued. tokenAnswer and answer, when set, replace the default answers.
type fcmBundle struct {
	t           *testing.T
	clock       *fakeClock
	tokenSrv    *httptest.Server
	fcmSrv      *httptest.Server
	tokenURL    string
	credentials string

	mu          sync.Mutex
	issued      []string
	sends       []fcmRequest
	tokenAnswer func(w http.ResponseWriter, r *http.Request) bool // true: answered
	answer      func(w http.ResponseWriter, r *http.Request, n int)
}

func (b *fcmBundle) tokenRequests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.issued)
}

func (b *fcmBundle) requests() []fcmRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]fcmRequest(nil), b.sends...)
}

// newFCMBundle starts the fake servers and writes a service account file
// whose token_uri is the fake token endpoint.
func newFCMBundle(t *testing.T) *fcmBundle {
	t.Helper()
	b := &fcmBundle{t: t, clock: &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	b.tokenSrv = httptest.NewServer(http.HandlerFunc(b.serveToken))
	t.Cleanup(b.tokenSrv.Close)
	b.tokenURL = b.tokenSrv.URL + "/token"
	b.fcmSrv = httptest.NewServer(http.HandlerFunc(b.serveFCM))
	t.Cleanup(b.fcmSrv.Close)
	b.credentials = writeServiceAccount(t, map[string]string{"project_id": fcmProject, "token_uri": b.tokenURL})
	return b
}

// writeServiceAccount writes a service account file with fields replaced
// or, when set to "", removed.
func writeServiceAccount(t *testing.T, fields map[string]string) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(fcmKey())
	if err != nil {
		t.Fatal(err)
	}
	sa := map[string]string{
		"type": "service_account", "project_id": fcmProject, "private_key_id": "kid-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": fcmEmail, "client_id": "1234", "token_uri": "https://oauth2.googleapis.com/token",
	}
	for k, v := range fields {
		if v == "" {
			delete(sa, k)
		} else {
			sa[k] = v
		}
	}
	b, err := json.Marshal(sa)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "service-account.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// provider builds an FCM provider for the bundle with extra query
// parameters, on the bundle's clock.
func (b *fcmBundle) provider(extra string) *FCM {
	b.t.Helper()
	raw := "fcm+" + b.fcmSrv.URL + "?credentials=" + url.QueryEscape(b.credentials)
	if extra != "" {
		raw += "&" + extra
	}
	p := newProvider(b.t, raw).(*FCM)
	p.now = b.clock.Now
	return p
}

func setupFCM(t *testing.T) (*FCM, *fcmBundle) {
	t.Helper()
	b := newFCMBundle(t)
	return b.provider(""), b
}

func (b *fcmBundle) serveToken(w http.ResponseWriter, r *http.Request) {
	if b.tokenAnswer != nil && b.tokenAnswer(w, r) {
		return
	}
	refuse := func(format string, args ...any) {
		b.t.Errorf("token endpoint: "+format, args...)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":%q}`, fmt.Sprintf(format, args...))
	}
	if err := r.ParseForm(); err != nil {
		refuse("form: %v", err)
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		refuse("grant_type %q", g)
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		refuse("assertion has %d parts", len(parts))
		return
	}
	var header map[string]string
	var claims struct {
		Iss, Scope, Aud string
		Iat, Exp        int64
	}
	if err := decodeSegment(parts[0], &header); err != nil || header["alg"] != "RS256" || header["kid"] != "kid-1" {
		refuse("header %v (%v)", header, err)
		return
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		refuse("claims: %v", err)
		return
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err != nil || rsa.VerifyPKCS1v15(&fcmKey().PublicKey, crypto.SHA256, sum[:], sig) != nil {
		refuse("bad JWT signature")
		return
	}
	now := b.clock.Now().Unix()
	switch {
	case claims.Iss != fcmEmail:
		refuse("iss %q", claims.Iss)
	case claims.Scope != "https://www.googleapis.com/auth/firebase.messaging":
		refuse("scope %q", claims.Scope)
	case claims.Aud != b.tokenURL:
		refuse("aud %q, want %q", claims.Aud, b.tokenURL)
	case claims.Iat != now || claims.Exp != now+3600:
		refuse("iat %d exp %d, want %d and an hour later", claims.Iat, claims.Exp, now)
	default:
		b.mu.Lock()
		tok := fmt.Sprintf("tok-%d", len(b.issued)+1)
		b.issued = append(b.issued, tok)
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3600,"token_type":"Bearer"}`, tok)
	}
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (b *fcmBundle) serveFCM(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		b.t.Error(err)
	}
	c := fcmRequest{path: r.URL.Path, header: r.Header.Clone()}
	if err := json.Unmarshal(raw, &c.body); err != nil {
		b.t.Errorf("FCM request body %q: %v", raw, err)
	}
	b.mu.Lock()
	b.sends = append(b.sends, c)
	n := len(b.sends)
	known := false
	for _, tok := range b.issued {
		known = known || r.Header.Get("Authorization") == "Bearer "+tok
	}
	b.mu.Unlock()
	if !known {
		b.t.Errorf("FCM request with Authorization %q, not a token the endpoint issued", r.Header.Get("Authorization"))
	}
	if b.answer != nil {
		b.answer(w, r, n)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"name":"projects/%s/messages/0:%d"}`, fcmProject, n)
}

func pushMessage(key string) *Message {
	m := testMessage(key)
	m.Channel, m.Address = "push", "device-token-abc"
	return m
}

// noCredentials fails the test if r carries an access token or key.
func noCredentials(t *testing.T, r Result) {
	t.Helper()
	der, _ := x509.MarshalPKCS8PrivateKey(fcmKey())
	keyText := base64.StdEncoding.EncodeToString(der)[:40]
	for _, s := range []string{"tok-", "Bearer", keyText, "assertion", "eyJ"} {
		if strings.Contains(r.Response, s) || strings.Contains(r.Detail, s) {
			t.Errorf("result leaks %q: detail %q, response %q", s, r.Detail, r.Response)
		}
	}
}

func TestFCMSend(t *testing.T) {
	t.Parallel()
	p, b := setupFCM(t)
	if p.HonoursKeys() {
		t.Error("HonoursKeys() = true; FCM v1 has no idempotency key")
	}
	m := pushMessage("notif-9")
	m.Data = json.RawMessage(`{"invoice":"inv_1","amount":12.5,"paid":true,"none":null,"lines":[{"sku":"a"}],"meta":{"b":1,"a":"x"}}`)
	r := send(p, m)
	if r.Outcome != Sent || r.HTTPStatus != 200 || r.MessageID != "projects/demo-project/messages/0:1" {
		t.Fatalf("got %s id=%q status=%d (%s: %s)", r.Outcome, r.MessageID, r.HTTPStatus, r.Detail, r.Response)
	}
	c := b.requests()[0]
	if want := "/v1/projects/demo-project/messages:send"; c.path != want {
		t.Errorf("path = %q, want %q", c.path, want)
	}
	if got := c.header.Get("Authorization"); got != "Bearer tok-1" {
		t.Errorf("Authorization = %q", got)
	}
	if got := c.header.Get("Idempotency-Key"); got != "notif-9" {
		t.Errorf("Idempotency-Key = %q", got)
	}
	want := map[string]any{"message": map[string]any{
		"token":        "device-token-abc",
		"notification": map[string]any{"title": "Paid", "body": "Thanks."},
		"data": map[string]any{
			"invoice": "inv_1", "amount": "12.5", "paid": "true", "none": "null",
			"lines": `[{"sku":"a"}]`, "meta": `{"b":1,"a":"x"}`,
		},
	}}
	if !reflect.DeepEqual(c.body, want) {
		t.Errorf("body = %v\nwant   %v", c.body, want)
	}

	// No subject or body: a data-only message, no notification block.
	m.Subject, m.Body, m.Data = "", "", nil
	send(p, m)
	if got := b.requests()[1].body["message"]; !reflect.DeepEqual(got, map[string]any{"token": "device-token-abc"}) {
		t.Errorf("data-only message = %v", got)
	}
}

func TestFCMNothingToSend(t *testing.T) {
	t.Parallel()
	p, b := setupFCM(t)
	noToken, badData := pushMessage("k"), pushMessage("k")
	noToken.Address = ""
	badData.Data = json.RawMessage(`[1,2]`)
	for _, m := range []*Message{noToken, badData, pushMessage("")} {
		if r := send(p, m); r.Outcome != Refused || !r.Permanent {
			t.Errorf("got %s permanent=%v (%s), want Refused permanent", r.Outcome, r.Permanent, r.Detail)
		}
	}
	if n, tr := len(b.requests()), b.tokenRequests(); n != 0 || tr != 0 {
		t.Errorf("FCM saw %d requests, the token endpoint %d; want none", n, tr)
	}
}

func fcmErr(code int, status, errorCode, msg string) string {
	details := ""
	if errorCode != "" {
		details = fmt.Sprintf(`,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":%q}]`, errorCode)
	}
	return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"status":%q%s}}`, code, msg, status, details)
}

func TestFCMClassification(t *testing.T) {
	t.Parallel()
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
		{"unregistered", 404, fcmErr(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."), "", Refused, true, true, 0, "UNREGISTERED"},
		{"bare 404", 404, `Not Found`, "", Refused, true, false, 0, "check the project"},
		{"invalid argument", 400, fcmErr(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"), "", Refused, true, false, 0, "INVALID_ARGUMENT: The registration token"},
		{"unauthenticated", 401, fcmErr(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."), "", Refused, true, false, 0, "credentials"},
		{"permission denied", 403, fcmErr(403, "PERMISSION_DENIED", "", "Permission 'cloudmessaging.messages.create' denied"), "", Refused, true, false, 0, "credentials"},
		{"sender mismatch", 403, fcmErr(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"), "", Refused, true, false, 0, "another Firebase project"},
		{"apns auth", 401, fcmErr(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "Auth error from APNS or Web Push Service"), "", Refused, true, false, 0, "APNs"},
		{"quota", 429, fcmErr(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded"), "30", Refused, false, false, 30 * time.Second, "QUOTA_EXCEEDED"},
		{"unavailable", 503, fcmErr(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."), "5", Refused, false, false, 5 * time.Second, "UNAVAILABLE"},
		{"internal", 500, fcmErr(500, "INTERNAL", "INTERNAL", "Internal error encountered."), "", Unknown, false, false, 0, "INTERNAL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newFCMBundle(t)
			b.answer = func(w http.ResponseWriter, r *http.Request, n int) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}
			r := send(b.provider(""), pushMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.InvalidAddress != c.invalid || r.RetryAfter != c.wait || r.HTTPStatus != c.status {
				t.Errorf("got %s permanent=%v invalid=%v wait=%v status=%d; want %s permanent=%v invalid=%v wait=%v status=%d",
					r.Outcome, r.Permanent, r.InvalidAddress, r.RetryAfter, r.HTTPStatus, c.outcome, c.permanent, c.invalid, c.wait, c.status)
			}
			if !strings.Contains(r.Detail, c.detail) {
				t.Errorf("detail %q, want it to contain %q", r.Detail, c.detail)
			}
			noCredentials(t, r)
		})
	}
}

func TestFCMLostAnswer(t *testing.T) {
	t.Parallel()
	b := newFCMBundle(t)
	b.answer = func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
			return
		}
		io.WriteString(w, `{"name":"projects/demo-project/messages/0:retry"}`)
	}
	p := b.provider("")
	m := pushMessage("notif-lost")
	if r := send(p, m); r.Outcome != Unknown || !strings.Contains(r.Detail, "connection closed before the answer") {
		t.Fatalf("first call: got %s (%s), want Unknown", r.Outcome, r.Detail)
	}
	m.Attempt = 2
	if r := send(p, m); r.Outcome != Sent || r.MessageID != "projects/demo-project/messages/0:retry" {
		t.Fatalf("retry: got %s id=%q (%s)", r.Outcome, r.MessageID, r.Detail)
	}
	reqs := b.requests()
	if len(reqs) != 2 {
		t.Fatalf("FCM saw %d requests, want 2", len(reqs))
	}
	for i, c := range reqs {
		if got := c.header.Get("Idempotency-Key"); got != "notif-lost" {
			t.Errorf("request %d: Idempotency-Key = %q", i+1, got)
		}
	}
	if n := b.tokenRequests(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

func TestFCMTokenCache(t *testing.T) {
	t.Parallel()
	p, b := setupFCM(t)
	for range 3 {
		if r := send(p, pushMessage("k")); r.Outcome != Sent {
			t.Fatalf("got %s (%s)", r.Outcome, r.Detail)
		}
	}
	if n := b.tokenRequests(); n != 1 {
		t.Fatalf("%d token requests for 3 sends, want 1", n)
	}
	// The token lasts an hour and is replaced a minute before it ends.
	b.clock.Advance(58*time.Minute + 59*time.Second)
	send(p, pushMessage("k"))
	if n := b.tokenRequests(); n != 1 {
		t.Errorf("%d token requests 58m59s in, want still 1", n)
	}
	b.clock.Advance(time.Second)
	send(p, pushMessage("k"))
	if n := b.tokenRequests(); n != 2 {
		t.Errorf("%d token requests 59m in, want 2", n)
	}
	reqs := b.requests()
	if got := reqs[len(reqs)-1].header.Get("Authorization"); got != "Bearer tok-2" {
		t.Errorf("after the refresh Authorization = %q, want the new token", got)
	}
}

// Concurrent sends share one token request.
func TestFCMTokenConcurrent(t *testing.T) {
	t.Parallel()
	p, b := setupFCM(t)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if r := send(p, pushMessage("k")); r.Outcome != Sent {
				t.Errorf("got %s (%s)", r.Outcome, r.Detail)
			}
		})
	}
	wg.Wait()
	if n := b.tokenRequests(); n != 1 {
		t.Errorf("%d token requests for 16 concurrent sends, want 1", n)
	}
}

// FCM refusing a token drops it from the cache.
func TestFCMUnauthorizedDropsToken(t *testing.T) {
	t.Parallel()
	b := newFCMBundle(t)
	b.answer = func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, fcmErr(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."))
			return
		}
		io.WriteString(w, `{"name":"projects/demo-project/messages/0:2"}`)
	}
	p := b.provider("")
	if r := send(p, pushMessage("k")); r.Outcome != Refused || !r.Permanent {
		t.Fatalf("got %s permanent=%v, want Refused permanent", r.Outcome, r.Permanent)
	}
	if r := send(p, pushMessage("k")); r.Outcome != Sent {
		t.Fatalf("got %s (%s)", r.Outcome, r.Detail)
	}
	if n := b.tokenRequests(); n != 2 {
		t.Errorf("%d token requests, want a fresh one after the 401", n)
	}
}

// No access token, no send: Refused, never Unknown, and FCM is not called.
func TestFCMTokenFailure(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String() + "/token"
	closed.Close()

	cases := []struct {
		name      string
		answer    func(w http.ResponseWriter, r *http.Request) bool
		tokenURL  string
		permanent bool
		wait      time.Duration
		detail    string
	}{
		{"rejected", func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
			return true
		}, "", true, 0, "invalid_grant: Invalid JWT Signature."},
		{"unauthorized client", func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized_client"}`)
			return true
		}, "", true, 0, "check the service account credentials"},
		{"unavailable", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Retry-After", "9")
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}, "", false, 9 * time.Second, "503"},
		{"server error", func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusInternalServerError)
			return true
		}, "", false, 0, "500"},
		{"no access_token", func(w http.ResponseWriter, r *http.Request) bool {
			io.WriteString(w, `{"token_type":"Bearer"}`)
			return true
		}, "", false, 0, "without an access_token"},
		{"lost answer", func(w http.ResponseWriter, r *http.Request) bool {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return true
		}, "", false, 0, "request failed"},
		{"connection refused", nil, closedURL, false, 0, "request failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newFCMBundle(t)
			b.tokenAnswer = c.answer
			extra := ""
			if c.tokenURL != "" {
				extra = "token_url=" + url.QueryEscape(c.tokenURL)
			}
			r := send(b.provider(extra), pushMessage("k"))
			if r.Outcome != Refused || r.Permanent != c.permanent || r.RetryAfter != c.wait || r.HTTPStatus != 0 {
				t.Errorf("got %s permanent=%v wait=%v status=%d (%s); want Refused permanent=%v wait=%v, no status",
					r.Outcome, r.Permanent, r.RetryAfter, r.HTTPStatus, r.Detail, c.permanent, c.wait)
			}
			if !strings.HasPrefix(r.Detail, "oauth token: ") || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("detail %q, want oauth token: …%s…", r.Detail, c.detail)
			}
			noCredentials(t, r)
			if n := len(b.requests()); n != 0 {
				t.Errorf("FCM saw %d requests, want none", n)
			}
		})
	}
}

func TestFCMURL(t *testing.T) {
	t.Parallel()
	b := newFCMBundle(t)

	// token_url overrides the file's token_uri, and is the JWT's audience.
	b.credentials = writeServiceAccount(t, map[string]string{"token_uri": "http://127.0.0.1:1/never"})
	p := b.provider("token_url=" + url.QueryEscape(b.tokenURL) + "&project=other-project&timeout=2s")
	if p.Name() != "fcm://"+b.fcmSrv.Listener.Addr().String() || p.HonoursKeys() || p.timeout != 2*time.Second {
		t.Errorf("Name() = %q, HonoursKeys() = %v, timeout %v", p.Name(), p.HonoursKeys(), p.timeout)
	}
	if r := send(p, pushMessage("k")); r.Outcome != Sent {
		t.Errorf("with token_url: got %s (%s)", r.Outcome, r.Detail)
	}
	if got := b.requests()[0].path; got != "/v1/projects/other-project/messages:send" {
		t.Errorf("path = %q, want the project parameter's", got)
	}

	p = newProvider(t, "fcm+https://fcm.googleapis.com?credentials="+url.QueryEscape(writeServiceAccount(t, nil))).(*FCM)
	if p.url != "https://fcm.googleapis.com/v1/projects/demo-project/messages:send" || p.tokenURL != "https://oauth2.googleapis.com/token" {
		t.Errorf("defaults: calls %q, tokens from %q", p.url, p.tokenURL)
	}

	good := url.QueryEscape(writeServiceAccount(t, nil))
	base := "fcm+https://fcm.googleapis.com?credentials="
	noProject := url.QueryEscape(writeServiceAccount(t, map[string]string{"project_id": ""}))
	noTokenURI := url.QueryEscape(writeServiceAccount(t, map[string]string{"token_uri": ""}))
	notSA := url.QueryEscape(writeServiceAccount(t, map[string]string{"type": "authorized_user"}))
	badKey := url.QueryEscape(writeServiceAccount(t, map[string]string{"private_key": "-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n"}))
	notJSON := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(notJSON, []byte("private-key-material"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ url, want string }{
		{"fcm+https://fcm.googleapis.com?project=p", `missing parameter "credentials"`},
		{base + url.QueryEscape(filepath.Join(t.TempDir(), "missing.json")), `parameter "credentials"`},
		{base + url.QueryEscape(notJSON), `parameter "credentials": not a service account JSON file`},
		{base + notSA, `parameter "credentials": type is "authorized_user"`},
		{base + badKey, `parameter "credentials": private_key`},
		{base + noProject, `missing parameter "project"`},
		{base + noTokenURI, `missing parameter "token_url"`},
		{base + good + "&token_url=oauth2.googleapis.com", `parameter "token_url"`},
		{base + good + "&idempotency=honoured", `parameter "idempotency"`},
		{base + good + "&token=abc", `parameter "credentials"`},
		{"fcm+https://user:hunter2@fcm.googleapis.com?credentials=" + good, "remove the userinfo"},
		{base + good + "&projet=p", `unknown parameter "projet"`},
		{"fcm+https://fcm.googleapis.com/v1?credentials=" + good, "no path"},
	}
	for _, c := range cases {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q) = %v, want an error naming %s", c.url, err, c.want)
			continue
		}
		for _, s := range []string{"hunter2", "private-key-material", "not-a-key"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("New(%q) error leaks %q: %v", c.url, s, err)
			}
		}
	}
}

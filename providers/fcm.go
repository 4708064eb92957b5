package providers

import (
	"bytes"
	"context"
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
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

var _ Provider = (*FCM)(nil)

var fcmKind = &Kind{
	Name: "fcm", Schemes: httpSchemes("fcm"),
	URLs: []string{"fcm+https://fcm.googleapis.com?project=P&credentials=/path/sa.json"},
	Summary: "FCM HTTP v1 with a service-account OAuth2 token (cached); `UNREGISTERED` fails the notification " +
		"and marks the token invalid, so it is not tried again",
	Params: []Param{
		{"credentials", "the service account's JSON key file, read when the provider is built"},
		{"project", "the Firebase project id (default: the file's `project_id`)"},
		{"token_url", "the OAuth2 token endpoint (default: the file's `token_uri`)"},
		paramConcurrency, paramIdempotency, paramName, paramTimeout},
	Keys:      "no: FCM has none (`idempotency=honoured` is refused)",
	Example:   "fcm+https://fcm.googleapis.com?project=demo&credentials=/etc/edgerelay/fcm.json",
	explained: []string{"token"},
	build:     newFCMURL,
}

const (
	fcmScope     = "https://www.googleapis.com/auth/firebase.messaging"
	fcmGrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
	// fcmRefreshBefore is how long before its expiry an access token is
	// replaced, so that none expires between being read and being used.
	fcmRefreshBefore = time.Minute
	// fcmAssertionLife is the JWT's lifetime; Google accepts at most an hour.
	fcmAssertionLife = time.Hour
)

// FCM sends push notifications through Firebase Cloud Messaging's HTTP v1
// API (fcm+https://, fcm+http:// for tests). Build it with New:
//
//	fcm+https://fcm.googleapis.com?project=PROJECT&credentials=/etc/edgerelay/service-account.json
//
// It authenticates as a service account: a JWT signed with the account's
// key is exchanged at the token endpoint (token_url, else the file's
// token_uri) for an access token, cached until a minute before it expires.
// project defaults to the file's project_id.
//
// HonoursKeys is false and idempotency=honoured is refused: FCM v1 takes
// no idempotency key (the request has no such field and the API documents
// no header), so a repeated send is a repeated notification. The key still
// goes out as Idempotency-Key, as from every HTTP provider, for proxies and
// logs.
type FCM struct {
	*httpEndpoint
	project  string
	tokenURL string // also the JWT's audience
	email    string // the service account, the JWT's issuer
	keyID    string
	key      *rsa.PrivateKey

	now func() time.Time // tests move the clock

	// refresh admits one token request at a time; a channel rather than a
	// mutex so that a Send waiting for it still honours its context.
	refresh chan struct{}
	mu      sync.Mutex // guards token and expires
	token   string
	expires time.Time
}

type serviceAccount struct {
	Type         string `json:"type"`
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`
}

func newFCMURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "fcm")
	if problem != "" {
		return nil, problem
	}
	switch {
	case e.honours:
		return nil, `parameter "idempotency": FCM v1 has no idempotency key, so it cannot be honoured (use none)`
	case e.token != "" || e.basic:
		return nil, `fcm authenticates with the service account in parameter "credentials": remove the userinfo and token`
	case u.Path != "" && u.Path != "/":
		return nil, "fcm URLs take no path: the API path is built from the project (fcm+https://fcm.googleapis.com?project=…)"
	}
	path := q.Get("credentials")
	if path == "" {
		return nil, `missing parameter "credentials" (the service account JSON file, e.g. credentials=/etc/edgerelay/fcm.json)`
	}
	sa, problem := readServiceAccount(path)
	if problem != "" {
		return nil, `parameter "credentials": ` + problem
	}
	p := &FCM{httpEndpoint: e, email: sa.ClientEmail, keyID: sa.PrivateKeyID, now: time.Now, refresh: make(chan struct{}, 1)}
	if p.key, problem = parseRSAKey(sa.PrivateKey); problem != "" {
		return nil, `parameter "credentials": ` + problem
	}
	p.project = sa.ProjectID
	if q.Has("project") {
		p.project = q.Get("project")
	}
	if p.project == "" {
		return nil, `missing parameter "project" (the Firebase project id; the credentials file names none)`
	}
	p.tokenURL = sa.TokenURI
	if q.Has("token_url") {
		p.tokenURL = q.Get("token_url")
	}
	if p.tokenURL == "" {
		return nil, `missing parameter "token_url" (the credentials file has no token_uri)`
	}
	if t, err := url.Parse(p.tokenURL); err != nil || (t.Scheme != "https" && t.Scheme != "http") || t.Host == "" {
		return nil, `parameter "token_url" (or the file's token_uri): not an absolute http(s) URL`
	}
	e.url = strings.TrimSuffix(e.url, "/") + "/v1/projects/" + url.PathEscape(p.project) + "/messages:send"
	return p, ""
}

// readServiceAccount reads a service account key file. Its problems never
// quote the file: it holds a private key.
func readServiceAccount(path string) (serviceAccount, string) {
	var sa serviceAccount
	b, err := os.ReadFile(path)
	if err != nil {
		return sa, err.Error()
	}
	if err := json.Unmarshal(b, &sa); err != nil {
		return sa, "not a service account JSON file"
	}
	switch {
	case sa.Type != "service_account":
		return sa, fmt.Sprintf(`type is %q, want "service_account"`, sa.Type)
	case sa.ClientEmail == "":
		return sa, "no client_email"
	case sa.PrivateKey == "":
		return sa, "no private_key"
	}
	return sa, ""
}

func parseRSAKey(pemText string) (*rsa.PrivateKey, string) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, "private_key is not PEM"
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Sprintf("private_key is a %q block, want PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, "private_key does not parse"
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, "private_key is not an RSA key"
	}
	return rk, ""
}

type fcmNotification struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type fcmMessage struct {
	Token        string            `json:"token"`
	Notification *fcmNotification  `json:"notification,omitempty"`
	Data         map[string]string `json:"data,omitempty"`
}

type fcmError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type      string `json:"@type"`
			ErrorCode string `json:"errorCode"`
		} `json:"details"`
	} `json:"error"`
}

func (p *FCM) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no device token"}
	}
	data, problem := fcmData(m.Data)
	if problem != "" {
		return Result{Outcome: Refused, Permanent: true, Detail: problem}
	}
	msg := fcmMessage{Token: m.Address, Data: data}
	if m.Subject != "" || m.Body != "" {
		msg.Notification = &fcmNotification{Title: m.Subject, Body: m.Body}
	}
	body, err := json.Marshal(map[string]fcmMessage{"message": msg})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	req, fail, ok := keyedRequest(ctx, p.url, m.Key, "application/json", body)
	if !ok {
		return fail
	}
	token, fail, ok := p.accessToken(ctx)
	if !ok {
		return fail
	}
	req.Header.Set("Authorization", "Bearer "+token)
	r := fcmResult(doHTTP(ctx, p.client, req, "name"))
	if r.HTTPStatus == http.StatusUnauthorized {
		// The token was refused: the next Send fetches another.
		p.mu.Lock()
		if p.token == token {
			p.token = ""
		}
		p.mu.Unlock()
	}
	return r
}

// fcmData flattens Message.Data for FCM, whose data map is string to
// string: strings go as they are, other values as their JSON text.
func fcmData(raw json.RawMessage) (map[string]string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, ""
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, "message data is not a JSON object (FCM data is a string map)"
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		var s string
		if v[0] == '"' && json.Unmarshal(v, &s) == nil {
			out[k] = s
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return nil, "message data is not valid JSON"
		}
		out[k] = b.String()
	}
	return out, ""
}

// fcmResult refines the shared classification with FCM's error code.
//
// A bare 404 does not mark the address dead: a wrong project or base URL
// answers 404 to every token, and only the UNREGISTERED code says the
// token itself is gone (Firebase's Admin SDKs read it the same way).
func fcmResult(r Result) Result {
	if r.HTTPStatus == 0 || r.Outcome == Sent {
		return r
	}
	var fe fcmError
	var code string
	if json.Unmarshal([]byte(r.Response), &fe) == nil {
		for _, d := range fe.Error.Details {
			if d.Type == fcmErrorType && d.ErrorCode != "" {
				code = d.ErrorCode
				break
			}
		}
		switch {
		case code != "":
			r.Detail += ": " + code
		case fe.Error.Status != "":
			r.Detail += ": " + fe.Error.Status
		}
		if fe.Error.Message != "" {
			r.Detail += ": " + fe.Error.Message
		}
	}
	switch {
	case code == "UNREGISTERED":
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
		r.Detail += " (the device token is no longer registered)"
	case code == "QUOTA_EXCEEDED", code == "UNAVAILABLE":
		// Not processed: FCM asks for a retry after backing off.
		r.Outcome, r.Permanent = Refused, false
	case code == "SENDER_ID_MISMATCH":
		r.Detail += " (the device token belongs to another Firebase project)"
	case code == "THIRD_PARTY_AUTH_ERROR":
		r.Detail += " (the APNs or web push credentials in the Firebase project were rejected)"
	case r.HTTPStatus == http.StatusUnauthorized, r.HTTPStatus == http.StatusForbidden:
		r.Detail += " (check the service account credentials and their access to the project)"
	case r.HTTPStatus == http.StatusNotFound:
		r.Detail += " (check the project)"
	}
	return r
}

// accessToken returns a cached access token, or fetches one. Failing to
// get one is Refused: FCM was never called.
func (p *FCM) accessToken(ctx context.Context) (string, Result, bool) {
	if t, ok := p.cached(); ok {
		return t, Result{}, true
	}
	select {
	case p.refresh <- struct{}{}:
	case <-ctx.Done():
		return "", Result{Outcome: Refused, Response: ctx.Err().Error(), Detail: "oauth token: " + ctx.Err().Error() + " while waiting for a refresh"}, false
	}
	defer func() { <-p.refresh }()
	// Whoever held the refresh before may have just stored a token.
	if t, ok := p.cached(); ok {
		return t, Result{}, true
	}
	return p.fetchToken(ctx)
}

func (p *FCM) cached() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token, p.token != "" && p.now().Before(p.expires)
}

type tokenAnswer struct {
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
	// OAuth errors (RFC 6749 §5.2).
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// fetchToken exchanges a signed JWT for an access token. Its answer is
// never put in a Result: it holds the token.
func (p *FCM) fetchToken(ctx context.Context) (string, Result, bool) {
	now := p.now()
	refused := func(permanent bool, detail, response string) (string, Result, bool) {
		return "", Result{Outcome: Refused, Permanent: permanent, Detail: "oauth token: " + detail, Response: response}, false
	}
	assertion, err := p.assertion(now)
	if err != nil {
		return refused(true, "cannot sign the JWT", err.Error())
	}
	form := url.Values{"grant_type": {fcmGrantType}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return refused(true, "cannot build request", err.Error())
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "edgerelay")
	resp, err := p.client.Do(req)
	if err != nil {
		return refused(false, "request failed", truncate([]byte(err.Error())))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRead))
	if err != nil {
		return refused(false, "answer unreadable", truncate([]byte(err.Error())))
	}
	var a tokenAnswer
	jsonErr := json.Unmarshal(body, &a)
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		if jsonErr != nil || a.AccessToken == "" {
			return refused(false, strconv.Itoa(code)+" without an access_token", "")
		}
		expires := now.Add(time.Duration(a.ExpiresIn)*time.Second - fcmRefreshBefore)
		p.mu.Lock()
		p.token, p.expires = a.AccessToken, expires
		p.mu.Unlock()
		return a.AccessToken, Result{}, true
	}
	detail := resp.Status
	if a.Error != "" {
		detail += ": " + a.Error
		if a.Description != "" {
			detail += ": " + a.Description
		}
	}
	// The token endpoint saying no to the credentials is permanent like
	// FCM's own 401; its throttling and outages are not.
	if code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 {
		answered := time.Now()
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			answered = t
		}
		r := Result{Outcome: Refused, Detail: "oauth token: " + detail, Response: truncate(body)}
		r.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), answered)
		return "", r, false
	}
	return refused(true, detail+" (check the service account credentials and token_url)", truncate(body))
}

// assertion is the JWT a service account presents for an access token.
func (p *FCM) assertion(now time.Time) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": p.keyID})
	if err != nil {
		return "", err
	}
	claims, err := json.Marshal(map[string]any{
		"iss": p.email, "scope": fcmScope, "aud": p.tokenURL,
		"iat": now.Unix(), "exp": now.Add(fcmAssertionLife).Unix(),
	})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signed + "." + enc.EncodeToString(sig), nil
}

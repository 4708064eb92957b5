package providers

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	_ Provider       = (*APNs)(nil)
	_ AddressChecker = (*APNs)(nil)
)

var apnsKind = &Kind{
	Name: "apns", Schemes: []string{"apns"},
	URLs: []string{"apns://api.push.apple.com?key=/path/AuthKey_KEYID.p8&key_id=KEYID&team_id=TEAMID&topic=BUNDLE_ID",
		"apns://api.sandbox.push.apple.com?…"},
	Summary: "Apple Push Notification service over HTTP/2 with token auth (an ES256 JWT from the `.p8` key, signed again " +
		"every 40 minutes: Apple refuses one older than an hour and more than one new one per 20 minutes); the address " +
		"is the device token (hex). Sent: 200 (`apns-id` is the message id). Refused for good and the token suppressed: " +
		"410 `Unregistered` or `ExpiredToken`, 400 `BadDeviceToken`. Refused for good: other 400s, 403 (the key, team or " +
		"topic), 405, 413, a payload over 4 KB. Refused, retried: 429 `TooManyRequests` (that device) and " +
		"`TooManyProviderTokenUpdates`, 503, 403 `ExpiredProviderToken` (a new JWT first), 400 `IdleTimeout`. Unknown: " +
		"500, a lost answer",
	Params: []Param{
		{"key", "the token signing key Apple issued, the `.p8` file (PEM, P-256), read when the provider is built"},
		{"key_id", "the key's 10-character Key ID (the JWT's `kid`)"},
		{"team_id", "the 10-character Team ID of the developer account (the JWT's `iss`)"},
		{"topic", "the app's bundle ID (`apns-topic`); with `push_type=voip`, `complication` or `fileprovider` " +
			"Apple wants the matching suffix (`.voip` …)"},
		{"push_type", "`apns-push-type`: `alert` (default: title and body shown), `background` (content-available, " +
			"priority 5), or another Apple names (`voip`, `complication`, `fileprovider`, `mdm`, `location`, `liveactivity`, `pushtotalk`, `widgets`, `controls`)"},
		{"priority", "`apns-priority`, `10` (at once), `5` (as power allows) or `1` (low), with per-type overrides: " +
			"`10,digest.weekly:5` (default `10`, `5` for `background`)"},
		{"ttl", "how long APNs keeps an undelivered notification (`apns-expiration`), a Go duration with per-type " +
			"overrides as for priority: `24h,otp.login:5m` (default `24h`; `0`: one delivery try, not stored)"},
		{"ca", "a PEM file of the CAs to trust instead of the system's (a private stand-in for APNs)"},
		paramConcurrency, paramIdempotency, paramName, paramTimeout},
	Keys: "no: APNs does not dedupe (`idempotency=honoured` is refused); `apns-id` is a UUID derived from the key, so a " +
		"repeat is recognisable as one, and `apns-collapse-id`, also from the key, makes a repeat replace the " +
		"notification it repeats on the device",
	Example:   "apns://api.push.apple.com?key=/etc/edgerelay/AuthKey_ABC123DEFG.p8&key_id=ABC123DEFG&team_id=DEF123GHIJ&topic=com.example.app",
	explained: []string{"token"},
	build:     newAPNsURL,
}

// APNs sends to Apple devices through the APNs provider API (HTTP/2,
// apns://api.push.apple.com, or api.sandbox.push.apple.com for
// development builds), authenticated with a provider token: an ES256 JWT
// signed with the team's .p8 key. Build it with New. The address is the
// device token the app registered, in hex.
//
// What APNs's answers mean (its reason, in the JSON body, decides):
//
//	200                              sent; apns-id is the message id
//	410 Unregistered, ExpiredToken   refused for good; the token is dead and suppressed
//	400 BadDeviceToken               refused for good; the token is suppressed (a development token
//	                                 sent to production, or the reverse, reads the same: mind the host)
//	400 IdleTimeout                  refused, retried (the request was not processed)
//	other 400, 403, 404, 405, 413    refused for good
//	403 ExpiredProviderToken         refused, retried with a new JWT
//	429 TooManyRequests              refused, retried (too many to that one device: the provider is neither slowed nor paused)
//	429 TooManyProviderTokenUpdates  refused, retried
//	503 ServiceUnavailable, Shutdown refused, retried
//	500, no answer after the request was written   unknown
//
// APNs does not dedupe on apns-id, so HonoursKeys is false. apns-id is
// derived from the notification's key (a name-based UUID), and so is
// apns-collapse-id: a repeat after an unknown outcome carries the same
// apns-id, and replaces the notification it repeats on the device instead
// of adding one.
type APNs struct {
	*httpEndpoint
	key      *ecdsa.PrivateKey
	keyID    string
	teamID   string
	topic    string
	pushType string
	priority perType[string]
	ttl      perType[time.Duration]

	now func() time.Time // tests move the clock
	mu  sync.Mutex       // guards jwt and signed
	jwt string
	// signed is when jwt was signed (its iat).
	signed time.Time
}

const (
	// apnsJWTRenew is the age at which the provider token is signed
	// again. Apple refuses a token older than an hour and answers
	// TooManyProviderTokenUpdates to more than one new token per 20
	// minutes: 40 minutes keeps clear of both, with room for clock skew.
	apnsJWTRenew = 40 * time.Minute
	// apnsJWTMinAge is the youngest token an ExpiredProviderToken answer
	// may replace (Apple's 20 minutes between updates).
	apnsJWTMinAge = 20 * time.Minute
	// apnsMaxPayload is the largest payload APNs takes (VoIP's 5 KB is
	// not used: every push type is held to 4 KB).
	apnsMaxPayload = 4096
)

// apnsTokenRE is a device token as apps get it: hex, an even number of
// digits (32 bytes today; Apple warns the length may change).
var apnsTokenRE = regexp.MustCompile(`^([0-9a-fA-F]{2}){16,256}$`)

// apnsIDRE is the 10-character Key ID or Team ID Apple issues.
var apnsIDRE = regexp.MustCompile(`^[A-Z0-9]{10}$`)

var apnsPushTypes = []string{"alert", "background", "voip", "complication", "fileprovider", "mdm", "location",
	"liveactivity", "pushtotalk", "widgets", "controls"}

func newAPNsURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "apns")
	if problem != "" {
		return nil, problem
	}
	switch {
	case e.honours:
		return nil, `parameter "idempotency": APNs does not dedupe on apns-id, so it cannot be honoured (use none)`
	case e.token != "" || e.basic:
		return nil, `apns authenticates with the .p8 key in parameter "key": remove the userinfo and token`
	case u.Path != "" && u.Path != "/":
		return nil, "apns URLs take no path: the API path is built from the device token (apns://api.push.apple.com?…)"
	}
	p := &APNs{httpEndpoint: e, now: time.Now}
	path := q.Get("key")
	if path == "" {
		return nil, `missing parameter "key" (the .p8 token signing key from Apple, e.g. key=/etc/edgerelay/AuthKey_ABC123DEFG.p8)`
	}
	if p.key, problem = readP256Key(path, " (the .p8 file Apple lets you download once)"); problem != "" {
		return nil, `parameter "key": ` + problem
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"key_id", &p.keyID}, {"team_id", &p.teamID}} {
		*f.to = q.Get(f.name)
		if !apnsIDRE.MatchString(*f.to) {
			return nil, fmt.Sprintf(`parameter %q: %q is not 10 capital letters and digits, as Apple's developer account shows it`, f.name, *f.to)
		}
	}
	if p.topic = q.Get("topic"); p.topic == "" {
		return nil, `missing parameter "topic" (the app's bundle ID, e.g. topic=com.example.app)`
	}
	p.pushType = "alert"
	if q.Has("push_type") {
		p.pushType = q.Get("push_type")
		if !slices.Contains(apnsPushTypes, p.pushType) {
			return nil, fmt.Sprintf(`parameter "push_type": %q is not one of %v`, p.pushType, apnsPushTypes)
		}
	}
	defPriority := "10"
	if p.pushType == "background" {
		defPriority = "5"
	}
	if p.priority, problem = parsePerType("priority", cmp.Or(q.Get("priority"), defPriority), defPriority, parseAPNsPriority); problem != "" {
		return nil, problem
	}
	if p.pushType == "background" {
		for _, v := range append([]string{p.priority.def}, slices.Collect(maps.Values(p.priority.byType))...) {
			if v == "10" {
				return nil, `parameter "priority": push_type=background must be 5 or 1 (APNs refuses 10 for background pushes)`
			}
		}
	}
	if p.ttl, problem = parsePerType("ttl", cmp.Or(q.Get("ttl"), "24h"), 24*time.Hour, parseTTL); problem != "" {
		return nil, problem
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if q.Has("ca") {
		pemBytes, err := os.ReadFile(q.Get("ca"))
		if err != nil {
			return nil, `parameter "ca": ` + err.Error()
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pemBytes) {
			return nil, `parameter "ca": no PEM certificate in the file`
		}
	}
	e.tlsConfig = cfg
	e.url = "https://" + u.Host + "/3/device/"
	e.client = newHTTP2Client(e)
	return p, ""
}

func parseAPNsPriority(v string) (string, string) {
	switch v {
	case "10", "5", "1":
		return v, ""
	}
	return "", "not 10, 5 or 1"
}

// newHTTP2Client is a client that speaks HTTP/2 only, over the endpoint's
// dialer and TLS settings. APNs takes nothing else, and one connection
// carries many calls at once, as Apple asks providers to keep it.
func newHTTP2Client(e *httpEndpoint) *http.Client {
	protocols := new(http.Protocols)
	protocols.SetHTTP2(true)
	tr := &http.Transport{
		Proxy: nil, // as newClient: never a proxy from the environment
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return e.dial(ctx, network, addr)
		},
		TLSClientConfig:     e.tlsConfig,
		TLSHandshakeTimeout: e.timeout,
		Protocols:           protocols,
		ForceAttemptHTTP2:   true,
		IdleConnTimeout:     time.Hour,
		HTTP2: &http.HTTP2Config{
			// A connection that went quiet is pinged, so that a dead one is
			// found before a call waits out its timeout on it.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     10 * time.Second,
		},
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       e.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckAddress says at accept whether address is a device token.
func (p *APNs) CheckAddress(_, address string) error {
	if !apnsTokenRE.MatchString(address) {
		return errors.New("not an APNs device token (want the token's hex digits, 64 for the tokens Apple issues today)")
	}
	return nil
}

type apnsAlert struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type apnsAps struct {
	Alert            *apnsAlert `json:"alert,omitempty"`
	ContentAvailable int        `json:"content-available,omitempty"`
}

type apnsPayload struct {
	Aps            apnsAps         `json:"aps"`
	Key            string          `json:"key"`
	NotificationID string          `json:"notification_id"`
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data,omitempty"`
}

type apnsError struct {
	Reason    string `json:"reason"`
	Timestamp int64  `json:"timestamp"`
}

func (p *APNs) Send(ctx context.Context, m *Message) Result {
	if err := p.CheckAddress(m.Channel, m.Address); err != nil {
		return Result{Outcome: Refused, Permanent: true, Detail: err.Error()}
	}
	pl := apnsPayload{Key: m.Key, NotificationID: m.NotificationID, Type: m.Type, Data: m.Data}
	if p.pushType == "background" {
		pl.Aps.ContentAvailable = 1
	} else if m.Subject != "" || m.Body != "" {
		pl.Aps.Alert = &apnsAlert{Title: m.Subject, Body: m.Body}
	}
	body, err := json.Marshal(pl)
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	if len(body) > apnsMaxPayload {
		return Result{Outcome: Refused, Permanent: true, Detail: fmt.Sprintf(
			"the payload is %d bytes, more than the %d APNs takes: shorten the subject, body or data", len(body), apnsMaxPayload)}
	}
	req, fail, ok := keyedRequest(ctx, p.url+m.Address, m.Key, "application/json", body)
	if !ok {
		return fail
	}
	jwt, signed, err := p.token()
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot sign the provider token"}
	}
	id := apnsID(m.Key)
	h := req.Header
	h.Set("Authorization", "bearer "+jwt)
	h.Set("apns-id", id)
	h.Set("apns-topic", p.topic)
	h.Set("apns-push-type", p.pushType)
	h.Set("apns-priority", p.priority.of(m.Type))
	h.Set("apns-collapse-id", apnsCollapseID(m.Key))
	expiration := "0"
	if ttl := p.ttl.of(m.Type); ttl > 0 {
		expiration = strconv.FormatInt(p.now().Add(ttl).Unix(), 10)
	}
	h.Set("apns-expiration", expiration)
	r, header := doHTTP2(ctx, p.client, req)
	r = apnsResult(r)
	if r.Outcome == Sent {
		// The id is apns-id, never in the body (which APNs leaves empty):
		// a note that the body held none would contradict it.
		r.MessageID = id
		if got := header.Get("apns-id"); got != "" {
			r.MessageID = got
		}
		r.Detail = strings.TrimSuffix(r.Detail, ", no message id")
	}
	if r.HTTPStatus == http.StatusForbidden && r.Response != "" && apnsReason(r.Response) == "ExpiredProviderToken" {
		p.expire(jwt, signed)
	}
	return r
}

// token returns the provider token, signing a new one when the cached one
// is apnsJWTRenew old.
func (p *APNs) token() (string, time.Time, error) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.jwt != "" && now.Sub(p.signed) < apnsJWTRenew {
		return p.jwt, p.signed, nil
	}
	enc := base64.RawURLEncoding
	header, err := json.Marshal(map[string]string{"alg": "ES256", "kid": p.keyID})
	if err != nil {
		return "", time.Time{}, err
	}
	claims, err := json.Marshal(map[string]any{"iss": p.teamID, "iat": now.Unix()})
	if err != nil {
		return "", time.Time{}, err
	}
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sig, err := signES256(p.key, signing)
	if err != nil {
		return "", time.Time{}, err
	}
	p.jwt, p.signed = signing+"."+enc.EncodeToString(sig), now
	return p.jwt, p.signed, nil
}

// expire drops jwt after APNs called it expired, unless it is younger than
// Apple's 20 minutes between updates (a new one would be refused as
// TooManyProviderTokenUpdates; the clock is more likely wrong).
func (p *APNs) expire(jwt string, signed time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.jwt == jwt && p.now().Sub(signed) >= apnsJWTMinAge {
		p.jwt = ""
	}
}

// apnsID is the apns-id for a key: a name-based UUID (version 5, RFC 9562
// §5.5), the same on every attempt.
func apnsID(key string) string {
	// The URL namespace, with the name "edgerelay:" + key.
	ns := [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte("edgerelay:" + key))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	x := hex.EncodeToString(u)
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// apnsCollapseID is the apns-collapse-id for a key: at most 64 bytes, the
// same on every attempt.
func apnsCollapseID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func apnsReason(body string) string {
	var e apnsError
	if json.Unmarshal([]byte(body), &e) != nil {
		return ""
	}
	return e.Reason
}

// apnsResult refines the shared classification with APNs's reason.
func apnsResult(r Result) Result {
	if r.HTTPStatus == 0 || r.Outcome == Sent {
		return r
	}
	reason := apnsReason(r.Response)
	if reason != "" {
		r.Detail += ": " + reason
	}
	switch reason {
	case "Unregistered", "ExpiredToken":
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
		r.Detail += " (the device token is no longer active for the topic)"
	case "BadDeviceToken":
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
		r.Detail += " (a malformed token, or one of the other environment: development tokens go to api.sandbox.push.apple.com)"
	case "IdleTimeout":
		// APNs closed an idle connection and did not process the request.
		r.Outcome, r.Permanent = Refused, false
	case "ExpiredProviderToken":
		// A new token goes with the retry (expire).
		r.Outcome, r.Permanent = Refused, false
		r.Detail += " (a new provider token goes with the retry; if it keeps coming, check the clock)"
	case "TooManyRequests":
		// Too many notifications to this one device: the others are not
		// to be slowed down or paused for it.
		r.Outcome, r.Permanent, r.Overloaded, r.RetryAfter = Refused, false, false, 0
	case "TooManyProviderTokenUpdates":
		r.Outcome, r.Permanent = Refused, false
	case "DeviceTokenNotForTopic", "TopicDisallowed", "BadTopic":
		r.Detail += " (check parameter topic: the app's bundle ID)"
	case "InvalidProviderToken", "MissingProviderToken", "BadEnvironmentKeyInToken", "UnrelatedKeyIdInToken":
		r.Detail += " (check parameters key, key_id and team_id, and the host's environment)"
	}
	if reason == "" && r.HTTPStatus == http.StatusGone {
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
		r.Detail += " (the device token is no longer active for the topic)"
	}
	return r
}

// doHTTP2 is doHTTP for an HTTP/2 exchange, which also returns the
// answer's header. A request counts as written once the transport
// reports it written: HTTP/2 frames a request whole, and a peer acts on a
// stream only once it has ended, so a request the transport did not
// finish writing was not acted on. (doHTTP's count of failed writes on the
// connection does not apply: the connection carries other calls' frames.)
func doHTTP2(ctx context.Context, client *http.Client, req *http.Request) (Result, http.Header) {
	if client.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, client.Timeout)
		defer cancel()
		c := *client
		c.Timeout = 0
		client = &c
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	resp, err := client.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err != nil {
		return transportResult(err, wrote.Load()), nil
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxRead))
	return responseResult(resp, body, readErr, nil), resp.Header
}

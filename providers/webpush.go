package providers

import (
	"bytes"
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	_ Provider       = (*WebPush)(nil)
	_ AddressChecker = (*WebPush)(nil)
)

var webPushKind = &Kind{
	Name: "webpush", Schemes: httpSchemes("webpush"),
	URLs: []string{"webpush+https://NAME?vapid_key=/path/vapid.pem&subject=mailto:ops@example.com"},
	Summary: "Web Push to browsers (RFC 8030), the payload encrypted `aes128gcm` (RFC 8291), VAPID-signed " +
		"(RFC 8292); the address is the subscription's JSON (`JSON.stringify(subscription)`: endpoint, " +
		"`keys.p256dh`, `keys.auth`). Sent: 2xx (the `Location` is the message id). Refused for good and the " +
		"subscription suppressed: 404, 410. Refused for good: other 4xx (400, 401, 403 VAPID, 413 too large), " +
		"a payload over 4 KB, an endpoint the allow-list or the address rules refuse. Refused, retried: 429 " +
		"(`Retry-After` pauses the provider), 406 (WNS, Edge's push service, for its throttle limit), 503, 408, 409. Unknown: 500, 502, 504, a lost answer",
	Params: []Param{
		{"vapid_key", "the VAPID private key file (PEM, P-256), made by `edgerelay webpush keygen`, which prints the " +
			"public key for `PushManager.subscribe`'s `applicationServerKey`"},
		{"subject", "the VAPID contact, a `mailto:` or `https:` URL the push service may use to reach the sender"},
		{"ttl", "how long the push service keeps an undelivered message, a Go duration, with per-type overrides: " +
			"`24h,otp.login:5m` (default `24h`; `0` delivers only to a browser that is online)"},
		{"urgency", "`very-low`, `low`, `normal` or `high`, with per-type overrides as for ttl: " +
			"`normal,security.alert:high` (default `normal`)"},
		{"allow", "the hosts subscription endpoints may name, comma-separated, as for a per-recipient webhook " +
			"(default `*`: any public host)"},
		{"allow_private", "`true`: endpoints may reach loopback, private and other non-public addresses " +
			"(refused by default, on the address each connection resolves to)"},
		paramConcurrency, paramIdempotency, paramName, paramTimeout},
	Keys: "no: push services take no key (`idempotency=honoured` is refused); the `Topic` header, from the key, " +
		"makes a repeat replace an undelivered earlier copy at the push service, and the payload's `key` lets the " +
		"service worker pass it as `showNotification`'s `tag`, so a repeat replaces the shown notification",
	Example:   "webpush+https://push?vapid_key=/etc/edgerelay/vapid.pem&subject=mailto:ops@example.com",
	explained: []string{"token"},
	build:     newWebPushURL,
}

// WebPush delivers to browsers' push subscriptions (webpush+https://NAME;
// webpush+http:// also calls http endpoints, for tests and private push
// services). Build it with New. A recipient's address is the subscription
// as the browser gives it, the JSON of PushSubscription.toJSON():
//
//	{"endpoint":"https://fcm.googleapis.com/fcm/send/…","keys":{"p256dh":"BNc…","auth":"tBH…"}}
//
// Each message is one POST to the endpoint (RFC 8030) whose body is the
// notification as JSON (key, notification_id, type, title, body, data),
// encrypted for the subscription (RFC 8291, aes128gcm, one record), with a
// VAPID JWT (RFC 8292, ES256) for the endpoint's origin.
//
// What the push service's answers mean:
//
//	2xx                     sent; the Location header is the message id
//	404, 410                refused for good; the subscription is dead and suppressed
//	400, 401, 403, 413 …    refused for good (a VAPID key the subscription was not made with is 401 or 403)
//	429, 503                refused, retried; Retry-After pauses the provider
//	406                     refused, retried (WNS's throttle limit)
//	408, 409, 425           refused, retried
//	500, 502, 504, no answer after the request was written   unknown
//
// Push services take no idempotency key, so HonoursKeys is false. Two
// things narrow what a repeat costs: the Topic header is derived from the
// key, so a repeat replaces an earlier copy the push service still holds
// (the browser was offline); and an attempt encrypts the same payload to
// the same bytes (the ephemeral key and salt are derived from the VAPID
// key, the notification's key and the payload), so a repeat is the same
// message, which a service worker that passes data.key as the
// notification's tag shows once.
type WebPush struct {
	*httpEndpoint
	recipients *recipientURLs
	vapid      *ecdsa.PrivateKey
	vapidPub   string // base64url of the uncompressed point, the k= of Authorization
	seedKey    []byte // derives each message's ephemeral key and salt
	subject    string
	ttl        perType[time.Duration]
	urgency    perType[string]

	now func() time.Time // tests move the clock
	mu  sync.Mutex       // guards jwts
	// jwts caches a signed JWT per push service origin.
	jwts map[string]vapidJWT
}

type vapidJWT struct {
	token   string
	expires time.Time
}

const (
	// webPushMaxBody is the largest body every push service must take
	// (RFC 8030 §7.2: at least 4096 octets); the record is one of 4096.
	webPushMaxBody = 4096
	// webPushHeader is the aes128gcm header: salt, record size, key id
	// length, and the key id (the sender's ephemeral public key).
	webPushHeader = 16 + 4 + 1 + 65
	// webPushMaxPayload is the most plaintext that fits: the body less the
	// header, the padding delimiter and the GCM tag.
	webPushMaxPayload = webPushMaxBody - webPushHeader - 1 - 16
	// vapidLife is the JWT's lifetime: RFC 8292 allows at most 24 hours.
	vapidLife = 12 * time.Hour
	// vapidRenewBefore replaces a cached JWT well before it expires, so
	// that none expires in flight or under a push service's clock skew.
	vapidRenewBefore = time.Hour
	// vapidCacheMax bounds the JWT cache: origins come from recipients'
	// addresses, and a flood of made-up ones must not grow it without end.
	vapidCacheMax = 256
)

// perType is a setting with per-type overrides: "24h,otp.login:5m".
type perType[T any] struct {
	def    T
	byType map[string]T
}

func (p perType[T]) of(typ string) T {
	if v, ok := p.byType[typ]; ok {
		return v
	}
	return p.def
}

// parsePerType reads a default and TYPE:VALUE overrides, comma-separated.
func parsePerType[T any](param, raw string, def T, parse func(string) (T, string)) (perType[T], string) {
	p := perType[T]{def: def, byType: map[string]T{}}
	sawDefault := false
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		typ, val, typed := strings.Cut(item, ":")
		if !typed {
			typ, val = "", item
		}
		v, problem := parse(strings.TrimSpace(val))
		if problem != "" {
			return p, fmt.Sprintf("parameter %q: %q: %s", param, item, problem)
		}
		switch typ = strings.TrimSpace(typ); {
		case !typed && sawDefault:
			return p, fmt.Sprintf("parameter %q: two defaults (a value without TYPE: is the default; give it once)", param)
		case !typed:
			p.def, sawDefault = v, true
		case typ == "":
			return p, fmt.Sprintf("parameter %q: %q has no type before the colon", param, item)
		default:
			if _, dup := p.byType[typ]; dup {
				return p, fmt.Sprintf("parameter %q: type %q given twice", param, typ)
			}
			p.byType[typ] = v
		}
	}
	return p, ""
}

func parseTTL(v string) (time.Duration, string) {
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, "not a Go duration of 0 or more (try 24h or 5m)"
	}
	return d, ""
}

func parseUrgency(v string) (string, string) {
	switch v {
	case "very-low", "low", "normal", "high":
		return v, ""
	}
	return "", "not very-low, low, normal or high"
}

func newWebPushURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "webpush")
	if problem != "" {
		return nil, problem
	}
	switch {
	case e.honours:
		return nil, `parameter "idempotency": push services take no idempotency key, so it cannot be honoured (use none)`
	case e.token != "" || e.basic:
		return nil, "webpush authenticates with VAPID (parameter \"vapid_key\"): remove the userinfo and token, " +
			"which every push service would receive"
	}
	p := &WebPush{httpEndpoint: e, now: time.Now, jwts: map[string]vapidJWT{}}
	path := q.Get("vapid_key")
	if path == "" {
		return nil, `missing parameter "vapid_key" (the VAPID private key file; make one with: edgerelay webpush keygen --out /etc/edgerelay/vapid.pem)`
	}
	if p.vapid, problem = ReadVAPIDKey(path); problem != "" {
		return nil, `parameter "vapid_key": ` + problem
	}
	pub, err := p.vapid.PublicKey.Bytes()
	if err != nil {
		return nil, `parameter "vapid_key": ` + err.Error()
	}
	p.vapidPub = base64.RawURLEncoding.EncodeToString(pub)
	priv, err := p.vapid.Bytes()
	if err != nil {
		return nil, `parameter "vapid_key": ` + err.Error()
	}
	if p.seedKey, err = hkdf.Key(sha256.New, priv, nil, "edgerelay webpush payload seed", 32); err != nil {
		return nil, `parameter "vapid_key": ` + err.Error()
	}
	p.subject = q.Get("subject")
	if sub, err := url.Parse(p.subject); p.subject == "" || err != nil ||
		!(sub.Scheme == "mailto" && sub.Opaque != "" || sub.Scheme == "https" && sub.Host != "") {
		return nil, `parameter "subject": want a mailto: or https: URL to reach the sender by ` +
			`(subject=mailto:ops@example.com); push services may refuse a JWT without one`
	}
	if p.ttl, problem = parsePerType("ttl", cmp.Or(q.Get("ttl"), "24h"), 24*time.Hour, parseTTL); problem != "" {
		return nil, problem
	}
	if p.urgency, problem = parsePerType("urgency", cmp.Or(q.Get("urgency"), "normal"), "normal", parseUrgency); problem != "" {
		return nil, problem
	}
	rq := url.Values{"allow": {"*"}}
	for _, k := range []string{"allow", "allow_private"} {
		if q.Has(k) {
			rq.Set(k, q.Get(k))
		}
	}
	if p.recipients, problem = parseRecipientURLs(u.Scheme == "webpush+https", rq); problem != "" {
		return nil, problem
	}
	if !p.recipients.private {
		e.publicOnly()
	}
	return p, ""
}

// ReadVAPIDKey reads a VAPID private key: a PEM file holding a P-256 key
// (PKCS #8 or SEC 1), as GenerateVAPIDKey writes it. Its problems never
// quote the file.
func ReadVAPIDKey(path string) (*ecdsa.PrivateKey, string) {
	return readP256Key(path, " (make one with edgerelay webpush keygen)")
}

// readP256Key reads a PEM file holding a P-256 private key, PKCS #8 or
// SEC 1 (a VAPID key, an APNs .p8); hint follows the PEM complaint.
func readP256Key(path, hint string) (*ecdsa.PrivateKey, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, "not a PEM file" + hint
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Sprintf("a %q block, want PRIVATE KEY (a P-256 key)", block.Type)
	}
	if err != nil {
		return nil, "the key does not parse"
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, "not a P-256 (prime256v1) EC key, which ES256 requires"
	}
	return ek, ""
}

// GenerateVAPIDKey makes a VAPID key pair: the private key as PEM (PKCS
// #8) and the public key as the URL-safe base64 of its uncompressed point,
// the applicationServerKey an app passes to PushManager.subscribe.
func GenerateVAPIDKey() (privatePEM []byte, public string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, "", err
	}
	pub, err := VAPIDPublicKey(k)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), pub, nil
}

// VAPIDPublicKey is k's public key as PushManager.subscribe takes it.
func VAPIDPublicKey(k *ecdsa.PrivateKey) (string, error) {
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(pub), nil
}

// subscription is a browser's push subscription, PushSubscription.toJSON().
type subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`

	target *url.URL
	ua     *ecdh.PublicKey
	uaRaw  []byte
	auth   []byte
}

// parseSubscription reads and checks an address: a subscription the
// route's rules let it call.
func (p *WebPush) parseSubscription(address string) (*subscription, error) {
	var s subscription
	if err := json.Unmarshal([]byte(address), &s); err != nil {
		return nil, errors.New(`not a push subscription: want its JSON, {"endpoint":"https://…","keys":{"p256dh":"…","auth":"…"}} (JSON.stringify(subscription) in the browser)`)
	}
	if s.Endpoint == "" {
		return nil, errors.New("push subscription without an endpoint")
	}
	t, err := p.recipients.admit(s.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("push subscription endpoint: %w", err)
	}
	s.target = t
	if s.uaRaw, err = decodeB64URL(s.Keys.P256dh); err != nil || len(s.uaRaw) != 65 {
		return nil, errors.New("push subscription keys.p256dh: want the URL-safe base64 of a 65-byte P-256 public key")
	}
	if s.ua, err = ecdh.P256().NewPublicKey(s.uaRaw); err != nil {
		return nil, errors.New("push subscription keys.p256dh: not a point on P-256")
	}
	if s.auth, err = decodeB64URL(s.Keys.Auth); err != nil || len(s.auth) != 16 {
		return nil, errors.New("push subscription keys.auth: want the URL-safe base64 of 16 bytes")
	}
	return &s, nil
}

// decodeB64URL decodes URL-safe base64 with or without padding, as
// browsers and libraries write it.
func decodeB64URL(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// CheckAddress says at accept whether address is a subscription this
// route would call.
func (p *WebPush) CheckAddress(_, address string) error {
	_, err := p.parseSubscription(address)
	return err
}

type webPushPayload struct {
	Key            string          `json:"key"`
	NotificationID string          `json:"notification_id"`
	Type           string          `json:"type"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Data           json.RawMessage `json:"data"`
}

func (p *WebPush) Send(ctx context.Context, m *Message) Result {
	s, err := p.parseSubscription(m.Address)
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: err.Error()}
	}
	plain, err := json.Marshal(webPushPayload{Key: m.Key, NotificationID: m.NotificationID, Type: m.Type,
		Title: m.Subject, Body: m.Body, Data: m.Data})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	if len(plain) > webPushMaxPayload {
		return Result{Outcome: Refused, Permanent: true, Detail: fmt.Sprintf(
			"the payload is %d bytes as JSON, more than the %d a push message holds encrypted: shorten the subject, body or data",
			len(plain), webPushMaxPayload)}
	}
	body, err := p.encrypt(s, m.Key, plain)
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encrypt the payload"}
	}
	jwt, err := p.jwt(s.target)
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot sign the VAPID JWT"}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Encoding", "aes128gcm")
	h.Set("TTL", strconv.FormatInt(int64(p.ttl.of(m.Type)/time.Second), 10))
	h.Set("Urgency", p.urgency.of(m.Type))
	h.Set("Topic", webPushTopic(m.Key))
	h.Set("Authorization", "vapid t="+jwt+", k="+p.vapidPub)
	r, header := p.postWith(ctx, postSpec{target: s.target.String(), key: m.Key, body: body, header: h, ownAuth: true})
	return webPushResult(r, header)
}

// webPushTopic is the Topic for a key: at most 32 characters of the URL-safe
// base64 alphabet (RFC 8030 §5.4), the same on every attempt.
func webPushTopic(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:])[:32]
}

// webPushResult refines the shared classification with what push
// services' answers mean.
func webPushResult(r Result, header http.Header) Result {
	switch {
	case r.Outcome == Sent:
		// RFC 8030 §5: the message's id is its Location; the body says
		// nothing, so a note that it held no id would contradict it.
		if loc := header.Get("Location"); loc != "" {
			r.MessageID = loc
			r.Detail = strings.TrimSuffix(r.Detail, ", no message id")
		}
	case r.HTTPStatus == http.StatusNotFound, r.HTTPStatus == http.StatusGone:
		// The endpoint is the subscription: its absence is the
		// subscription's end (expired or unsubscribed), never a wrong base
		// URL of ours.
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
		r.Detail += " (the push subscription has expired or was unsubscribed)"
	case r.HTTPStatus == http.StatusUnauthorized, r.HTTPStatus == http.StatusForbidden:
		r.Detail += " (the push service refused the VAPID JWT: check vapid_key and subject, and that the " +
			"subscription was made with this key's public key as applicationServerKey)"
	case r.HTTPStatus == http.StatusRequestEntityTooLarge:
		r.Detail += " (the push service takes a smaller payload)"
	case r.HTTPStatus == http.StatusNotAcceptable:
		// Windows' push service (WNS, Edge's) documents 406 as "exceeded
		// its throttle limit: send with a delay", where RFC 8030's
		// services say 429. Nothing was sent; later it will be.
		r.Outcome, r.Permanent, r.Overloaded = Refused, false, true
		r.Detail += " (the push service's throttle limit: retried later)"
	}
	return r
}

// encrypt seals plain for s as one aes128gcm record (RFC 8291 §3.4, RFC
// 8188 §2). The ephemeral key and the salt are derived from the seed key,
// the notification's key, the subscription and the payload: a retry sends
// the same bytes, and no two payloads share a key and nonce.
func (p *WebPush) encrypt(s *subscription, key string, plain []byte) ([]byte, error) {
	mac := hmac.New(sha256.New, p.seedKey)
	for _, part := range [][]byte{[]byte(key), []byte(s.Endpoint), s.uaRaw, s.auth, plain} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		mac.Write(n[:])
		mac.Write(part)
	}
	seed := mac.Sum(nil)
	salt, err := hkdf.Expand(sha256.New, seed, "salt", 16)
	if err != nil {
		return nil, err
	}
	var as *ecdh.PrivateKey
	for i := 0; as == nil; i++ {
		d, err := hkdf.Expand(sha256.New, seed, "ecdh "+strconv.Itoa(i), 32)
		if err != nil {
			return nil, err
		}
		// A scalar outside [1, n-1] (odds about 2^-32) is refused: the
		// next is tried.
		if as, err = ecdh.P256().NewPrivateKey(d); err != nil && i >= 16 {
			return nil, err
		}
	}
	return sealWebPush(as, salt, s.ua, s.auth, plain)
}

// sealWebPush is the encryption itself, given the sender's ephemeral key
// and the salt (RFC 8291 §5 gives an example of both).
func sealWebPush(as *ecdh.PrivateKey, salt []byte, ua *ecdh.PublicKey, auth, plain []byte) ([]byte, error) {
	shared, err := as.ECDH(ua)
	if err != nil {
		return nil, err
	}
	asPub := as.PublicKey().Bytes()
	// RFC 8291 §3.3: the auth secret and both public keys into the IKM.
	info := "WebPush: info\x00" + string(ua.Bytes()) + string(asPub)
	ikm, err := hkdf.Key(sha256.New, shared, auth, info, 32)
	if err != nil {
		return nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(salt)
	binary.Write(&out, binary.BigEndian, uint32(webPushMaxBody))
	out.WriteByte(byte(len(asPub)))
	out.Write(asPub)
	// The last (and only) record ends with the delimiter 2, no padding.
	record := append(append([]byte(nil), plain...), 2)
	return gcm.Seal(out.Bytes(), nonce, record, nil), nil
}

// jwt returns a VAPID JWT for target's origin, cached until an hour before
// it expires.
func (p *WebPush) jwt(target *url.URL) (string, error) {
	aud := target.Scheme + "://" + target.Host
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if j, ok := p.jwts[aud]; ok && now.Before(j.expires.Add(-vapidRenewBefore)) {
		return j.token, nil
	}
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256"}`))
	exp := now.Add(vapidLife)
	claims, err := json.Marshal(map[string]any{"aud": aud, "exp": exp.Unix(), "sub": p.subject})
	if err != nil {
		return "", err
	}
	signed := header + "." + enc.EncodeToString(claims)
	sig, err := signES256(p.vapid, signed)
	if err != nil {
		return "", err
	}
	token := signed + "." + enc.EncodeToString(sig)
	if len(p.jwts) >= vapidCacheMax {
		clear(p.jwts)
	}
	p.jwts[aud] = vapidJWT{token: token, expires: exp}
	return token, nil
}

// signES256 signs a JWS signing input with ES256: the signature is r and s,
// 32 bytes each (RFC 7518 §3.4), not ASN.1.
func signES256(k *ecdsa.PrivateKey, signingInput string) ([]byte, error) {
	sum := sha256.Sum256([]byte(signingInput))
	r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
	if err != nil {
		return nil, err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return sig, nil
}

package providers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var (
	_ Provider         = (*Mailgun)(nil)
	_ ReceiptParser    = (*Mailgun)(nil)
	_ CommercialSender = (*Mailgun)(nil)
)

// mailgunHosts are Mailgun's API hosts by region.
var mailgunHosts = map[string]string{"api.mailgun.net": "US", "api.eu.mailgun.net": "EU"}

var mailgunKind = &Kind{
	Name: "mailgun", Schemes: httpSchemes("mailgun"),
	URLs: []string{"mailgun+https://api.mailgun.net?domain=D&from=ADDR&token=KEY", "mailgun+https://api.eu.mailgun.net?…"},
	Summary: "the Mailgun messages API, US (`api.mailgun.net`) or EU (`api.eu.mailgun.net`) region (form, basic auth " +
		"`api:KEY`); each message carries `v:edgerelay-key` (its key) and the URL's `o:tag`s; 400 for the `to` " +
		"address marks it invalid, 401, 402, 404 (domain) fail, 429 and 503 retry, 500/502/504 are unknown. Webhook " +
		"events signed with the webhook signing key are receipts: `delivered`, `opened` and `clicked` delivered, " +
		"`failed` permanent a bounce (`bounce`, `suppress-bounce`) or a failure, temporary progress, `complained` a complaint",
	Params: []Param{
		{"domain", "the Mailgun sending domain (`mg.example.com`): the API path is `/v3/DOMAIN/messages`"},
		{"from", "the sender, an address with or without a display name (percent-encoded)"},
		{"token", "the Mailgun API key (a domain sending key will do), sent as basic auth `api:KEY`"},
		{"tag", "up to 3 comma-separated tags, each sent as `o:tag` (Mailgun's analytics and webhooks show them)"},
		{"webhook_signing_key", "the HTTP webhook signing key from Mailgun's dashboard: receipts posted to " +
			"`/v1/receipts/NAME` are taken only when signed with it (HMAC-SHA256 over timestamp and token)"},
		paramListUnsubscribe,
		paramConcurrency, paramName, paramTimeout},
	Keys: "no: Mailgun takes none; a resend after an unknown outcome queues a second message " +
		"(another id), with the same `v:edgerelay-key`, so its receipts name the same notification",
	Example: "mailgun+https://api.mailgun.net?domain=mg.example.com&from=Acme+%3Cno-reply%40mg.example.com%3E&token=key-123",
	build:   newMailgunURL,
}

// Mailgun sends email through Mailgun's messages API
// (mailgun+https://api.mailgun.net?domain=…, or api.eu.mailgun.net for the
// EU region; mailgun+http:// for tests). Build it with New.
//
// Each message is a form POST to /v3/DOMAIN/messages with from, to,
// subject, text (made from the HTML when there is none), html, o:tag per
// tag, h:Auto-Submitted and, where the message has one,
// h:List-Unsubscribe and h:List-Unsubscribe-Post, and v:edgerelay-key,
// the notification's key, which Mailgun hands back in every webhook event
// as user-variables: a receipt names its notification by it.
//
// The answers, as Mailgun documents them:
//
//	200 {"id": "<…>", "message": "Queued. Thank you."}  sent (MessageID = the id without <>,
//	                                                    as webhook events name it)
//	400 'to' parameter is not a valid address         refused for good, address invalid
//	400 other                                         refused for good
//	401 Forbidden (the key), 402 (the account),        refused for good
//	    403, 404 Domain not found, 413
//	429, 503                                          refused, retried (Retry-After); overloaded
//	500, 502, 504, no answer after the request        unknown: it may have been queued
//	    was written
//
// Mailgun takes no idempotency key, so HonoursKeys is always false.
type Mailgun struct {
	*httpEndpoint
	from       string
	tags       []string
	signingKey string // webhook_signing_key, "" when receipts are refused
	unsub      listUnsubscribe
}

func (p *Mailgun) SetCommercial(types []string) { p.unsub.SetCommercial(types) }
func (p *Mailgun) Unsubscribes() bool           { return p.unsub.Unsubscribes() }

// mailgunDomain is what a sending domain may look like.
var mailgunDomain = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$`)

func newMailgunURL(u *url.URL, q url.Values) (Provider, string) {
	const shape = "mailgun+https://api.mailgun.net?domain=mg.example.com&from=…&token=KEY"
	if u.User != nil {
		return nil, `mailgun URLs take the API key in parameter "token", not in userinfo (` + shape + ")"
	}
	if u.Path != "" && u.Path != "/" {
		return nil, "mailgun URLs take no path: the API path is built from the domain (" + shape + ")"
	}
	if host := strings.ToLower(u.Hostname()); strings.HasSuffix(host, "mailgun.net") && mailgunHosts[host] == "" {
		return nil, fmt.Sprintf("%q is not a Mailgun API host: api.mailgun.net (US) or api.eu.mailgun.net (EU)", u.Hostname())
	}
	// The key travels as basic auth, not as a bearer token.
	key := q.Get("token")
	q.Del("token")
	if key == "" {
		return nil, `missing parameter "token" (the Mailgun API key; ` + shape + ")"
	}
	e, problem := parseEndpoint(u, q, "mailgun")
	if problem != "" {
		return nil, problem
	}
	e.user, e.pass, e.basic = "api", key, true
	domain := q.Get("domain")
	if !mailgunDomain.MatchString(domain) {
		return nil, `missing or bad parameter "domain" (the Mailgun sending domain, e.g. domain=mg.example.com)`
	}
	e.url = strings.TrimSuffix(e.url, "/") + "/v3/" + domain + "/messages"
	if !q.Has("name") {
		e.name = "mailgun://" + u.Host + "/" + domain
	}
	from := q.Get("from")
	if from == "" {
		return nil, `missing parameter "from" (the sender, e.g. from=no-reply%40mg.example.com)`
	}
	if _, err := mail.ParseAddress(from); err != nil {
		return nil, fmt.Sprintf(`parameter "from": %q is not an email address: %v`, from, err)
	}
	p := &Mailgun{httpEndpoint: e, from: from}
	if q.Has("tag") {
		p.tags = strings.Split(q.Get("tag"), ",")
		if len(p.tags) > 3 {
			return nil, `parameter "tag": Mailgun takes at most 3 tags per message`
		}
		for _, t := range p.tags {
			if t == "" || len(t) > 128 || strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
				return nil, `parameter "tag": each tag is 1 to 128 printable ASCII characters, without spaces`
			}
		}
	}
	if q.Has("webhook_signing_key") {
		if p.signingKey = q.Get("webhook_signing_key"); p.signingKey == "" {
			return nil, `parameter "webhook_signing_key" is empty`
		}
	}
	if problem := p.unsub.parse(q); problem != "" {
		return nil, problem
	}
	return p, ""
}

// mailgunKeyVar is the user variable that carries a message's key.
const mailgunKeyVar = "edgerelay-key"

func (p *Mailgun) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient address"}
	}
	if _, err := mail.ParseAddress(m.Address); err != nil {
		// One mailbox, or nothing: a list ("a@x, b@y") would fan out.
		return Result{Outcome: Refused, Permanent: true, InvalidAddress: true, Response: err.Error(),
			Detail: "recipient is not a single email address"}
	}
	form := url.Values{"from": {p.from}, "to": {m.Address}, "subject": {m.Subject}, "v:" + mailgunKeyVar: {m.Key}}
	if text := textPart(m); text != "" {
		form.Set("text", text)
	}
	if m.HTML != "" {
		form.Set("html", m.HTML)
	}
	if form.Get("text") == "" && m.HTML == "" {
		// Mailgun refuses a message with neither; say so without a call.
		return Result{Outcome: Refused, Permanent: true, Detail: "empty message (no text, no HTML)"}
	}
	for _, t := range p.tags {
		form.Add("o:tag", t)
	}
	for _, h := range p.unsub.headers(m) {
		form.Set("h:"+h.name, h.value)
	}
	req, fail, ok := keyedRequest(ctx, p.url, m.Key, "application/x-www-form-urlencoded", []byte(form.Encode()))
	if !ok {
		return fail
	}
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(p.user, p.pass)
	r := mailgunResult(doHTTP(ctx, p.client, req, "id"))
	// Webhook events name the message by its Message-ID header, without
	// the angle brackets the send's answer has.
	r.MessageID = strings.TrimSuffix(strings.TrimPrefix(r.MessageID, "<"), ">")
	return r
}

// mailgunBadTo is Mailgun's 400 for a recipient it cannot send to at all.
var mailgunBadTo = regexp.MustCompile(`(?i)'?to'? parameter is not a valid address`)

// mailgunResult refines the shared classification with Mailgun's error
// body, {"message": "…"} (401's is the text "Forbidden").
func mailgunResult(r Result) Result {
	if r.HTTPStatus < 400 {
		return r
	}
	var e struct {
		Message string `json:"message"`
	}
	switch {
	case json.Unmarshal([]byte(r.Response), &e) == nil && e.Message != "":
		addReason(&r, e.Message)
	case r.HTTPStatus == http.StatusUnauthorized:
		r.Detail += " (check the API key and the region: a key of the EU region is refused by api.mailgun.net)"
	}
	if r.HTTPStatus == http.StatusBadRequest && mailgunBadTo.MatchString(e.Message) {
		r.InvalidAddress = true
	}
	return r
}

// MailgunReceiptTolerance is how old a webhook event's signed timestamp
// may be. Mailgun retries a webhook it could not deliver for 8 hours; an
// event already taken is deduplicated by its id, so the window only has
// to keep very old captures out.
const MailgunReceiptTolerance = 12 * time.Hour

// mailgunWebhook is one webhook request: the signature and the event,
// read only once the signature holds.
type mailgunWebhook struct {
	Signature struct {
		Timestamp json.RawMessage `json:"timestamp"`
		Token     string          `json:"token"`
		Signature string          `json:"signature"`
		// ParentSignature is there for a subaccount's events: the same
		// HMAC under the primary account's signing key.
		ParentSignature string `json:"parent-signature"`
	} `json:"signature"`
	EventData json.RawMessage `json:"event-data"`
}

// mailgunEvent is a webhook's event-data.
type mailgunEvent struct {
	ID        string  `json:"id"`
	Event     string  `json:"event"`
	Timestamp float64 `json:"timestamp"`
	Severity  string  `json:"severity"`
	Reason    string  `json:"reason"`
	Message   struct {
		Headers struct {
			MessageID string `json:"message-id"`
		} `json:"headers"`
	} `json:"message"`
	UserVariables  map[string]any `json:"user-variables"`
	DeliveryStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"delivery-status"`
}

// ParseReceipts reads one Mailgun webhook event (the JSON webhooks, with
// "signature" and "event-data"). It verifies the signature as Mailgun
// documents it: HMAC-SHA256, keyed with the webhook signing key, over the
// timestamp and the token concatenated, in hex (for a subaccount's event,
// its signature or its parent-signature, the primary account's); the timestamp must be
// within MailgunReceiptTolerance. Without a webhook_signing_key every
// receipt is refused: anyone who can reach edgerelay could forge one.
func (p *Mailgun) ParseReceipts(_ *http.Request, body []byte, _ string) ([]Receipt, error) {
	if p.signingKey == "" {
		return nil, fmt.Errorf("%w: %s takes no receipts without webhook_signing_key (Mailgun's HTTP webhook signing key), since unsigned ones could come from anyone", ErrBadSignature, p.Name())
	}
	var w mailgunWebhook
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, errors.New("mailgun receipt: not a webhook event (a JSON object with signature and event-data)")
	}
	ts, sig := string(bytes.Trim(w.Signature.Timestamp, `"`)), w.Signature
	// A subaccount's event is signed with its own key and, as
	// parent-signature, with the primary account's: either key may be the
	// one configured.
	if !p.signed(ts, sig.Token, sig.Signature) && (sig.ParentSignature == "" || !p.signed(ts, sig.Token, sig.ParentSignature)) {
		return nil, ErrBadSignature
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: signature timestamp %q is not a number", ErrBadSignature, ts)
	}
	if age := time.Since(time.Unix(secs, 0)); age > MailgunReceiptTolerance || age < -5*time.Minute {
		return nil, fmt.Errorf("%w: signed %s ago, outside the %s Mailgun events may take", ErrBadSignature, age.Round(time.Second), MailgunReceiptTolerance)
	}
	var ev mailgunEvent
	if json.Unmarshal(w.EventData, &ev) != nil || ev.Event == "" {
		return nil, errors.New(`mailgun receipt: no "event-data" object with an "event"`)
	}
	rc := Receipt{ID: ev.ID, MessageID: strings.Trim(ev.Message.Headers.MessageID, "<>")}
	if k, ok := ev.UserVariables[mailgunKeyVar].(string); ok {
		rc.Key = k
	}
	if rc.MessageID == "" && rc.Key == "" {
		return nil, errors.New(`mailgun receipt: the event names no message (no message-id, no user variable ` + mailgunKeyVar + ")")
	}
	if ev.Timestamp > 0 && !math.IsInf(ev.Timestamp, 0) {
		sec, frac := math.Modf(ev.Timestamp)
		rc.At = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	}
	rc.Status, rc.Bounce = mailgunStatus(ev.Event, ev.Severity, ev.Reason)
	rc.Detail = ev.Event
	for _, s := range []string{ev.Severity, ev.Reason} {
		if s != "" {
			rc.Detail += " " + s
		}
	}
	if ev.DeliveryStatus.Code != 0 {
		rc.Detail += " " + strconv.Itoa(ev.DeliveryStatus.Code)
	}
	if ev.DeliveryStatus.Message != "" {
		rc.Detail += ": " + ev.DeliveryStatus.Message
	}
	return []Receipt{rc}, nil
}

// signed reports whether sig is the hex HMAC-SHA256 of timestamp+token
// under the signing key.
func (p *Mailgun) signed(timestamp, token, sig string) bool {
	if timestamp == "" || token == "" || sig == "" {
		return false
	}
	mac := hmac.New(sha256.New, []byte(p.signingKey))
	mac.Write([]byte(timestamp + token))
	want := hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(strings.ToLower(sig)))
}

// mailgunStatus maps an event onto a receipt status and what it says
// about the address. Events this code does not know count as progress.
func mailgunStatus(event, severity, reason string) (ReceiptStatus, Bounce) {
	switch event {
	case "delivered", "opened", "clicked":
		// An open or a click is a recipient who has the message.
		return ReceiptDelivered, BounceDefault
	case "complained":
		return ReceiptComplained, BounceDefault
	case "failed":
		if severity != "permanent" {
			// Mailgun keeps trying (for 8 hours; then a permanent
			// failed with reason "old").
			return ReceiptSent, BounceNone
		}
		switch reason {
		case "bounce", "suppress-bounce":
			// The receiving server refused the address, now or before
			// (Mailgun's own bounce list).
			return ReceiptBounced, BounceHard
		case "suppress-complaint":
			return ReceiptComplained, BounceDefault
		default:
			// old, generic, esp-block, suppress-unsubscribe …: not sent,
			// and nothing said about the address being dead.
			return ReceiptFailed, BounceNone
		}
	default: // accepted, unsubscribed, stored …
		return ReceiptSent, BounceDefault
	}
}

package providers

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

var (
	_ Provider      = (*Twilio)(nil)
	_ ReceiptParser = (*Twilio)(nil)
)

var twilioKind = &Kind{
	Name: "twilio", Schemes: httpSchemes("twilio"),
	URLs: []string{"twilio+https://SID:TOKEN@api.twilio.com?from=%2B1555…"},
	Summary: "the Twilio Messages API (form, basic auth with the account SID and auth token); error codes classified (" +
		twilioDeadCodes() + " invalid number: failed and the number marked invalid); status callbacks are receipts",
	Params: []Param{
		{"from", "the sender, a phone number (`%2B` for +) or an alphanumeric sender id"},
		{"messaging_service", "a Messaging Service SID (`MG…`), instead of or beside `from`"},
		{"status_callback", "where Twilio posts delivery status, an absolute http(s) URL (percent-encoded), " +
			"e.g. this relay's `/v1/receipts/NAME`"},
		paramConcurrency, paramIdempotency, paramName, paramTimeout},
	Keys: "no (Twilio documents none for sends); the key still goes out in `I-Twilio-Idempotency-Token` and " +
		"`Idempotency-Key`, for an account or proxy known to dedupe (`idempotency=honoured`)",
	Example:   "twilio+https://AC0123:auth-token@api.twilio.com?from=%2B15550100",
	explained: []string{"token"},
	build:     newTwilioURL,
}

// Twilio sends SMS through Twilio's Messages API (twilio+https://,
// twilio+http:// for tests). Build it with New:
//
//	twilio+https://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com?from=%2B15550100
//	twilio+https://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com?messaging_service=MG…&status_callback=https%3A%2F%2Frelay.example.com%2Freceipts%2Ftwilio
//
// The host is the API's base (tests point it at loopback); the path
// /2010-04-01/Accounts/{AccountSid}/Messages.json is built from the SID.
//
// Idempotency defaults to none. Twilio documents sending an SMS as a POST
// that is not idempotent (error 20500: "sending an SMS … not idempotent; if
// you retry … a customer may receive multiple messages"), and the
// I-Twilio-Idempotency-Token header is documented as one Twilio puts on its
// own webhooks for receivers to dedupe, not as one the Messages API honours.
// The key is still sent in that header and in Idempotency-Key: it costs
// nothing, and idempotency=honoured is there for an account or a proxy that
// is known to dedupe on it.
type Twilio struct {
	*httpEndpoint
	from           string
	service        string // MessagingServiceSid
	statusCallback string
}

// twilioError is the body of a Twilio API error.
type twilioError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status"`
}

// twilioDeadNumbers are the error codes that say the To number itself
// cannot take an SMS, whoever sends it: the relay may stop sending to it.
// 21610 (the recipient replied STOP) is not among them: it is about this
// sender, and the recipient can undo it by replying START.
var twilioDeadNumbers = map[int]string{
	21211: "invalid To number",
	21614: "To number is not a mobile number",
	21635: "To number is a landline",
}

// twilioDeadCodes lists twilioDeadNumbers' codes for the docs: "21211, 21614, 21635".
func twilioDeadCodes() string {
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(twilioDeadNumbers)) {
		codes = append(codes, strconv.Itoa(c))
	}
	return strings.Join(codes, ", ")
}

func newTwilioURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "twilio")
	if problem != "" {
		return nil, problem
	}
	const shape = "twilio+https://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com"
	switch {
	case e.token != "":
		return nil, `parameter "token": twilio authenticates with the account SID and auth token as userinfo (` + shape + ")"
	case !e.basic || e.user == "" || e.pass == "":
		return nil, "missing credentials: put the account SID and auth token in the userinfo (" + shape + ")"
	case u.Path != "" && u.Path != "/":
		return nil, "twilio URLs take no path: the API path is built from the account SID (" + shape + ")"
	}
	p := &Twilio{httpEndpoint: e}
	e.url = strings.TrimSuffix(e.url, "/") + "/2010-04-01/Accounts/" + url.PathEscape(e.user) + "/Messages.json"
	if q.Has("from") {
		if p.from = q.Get("from"); p.from == "" {
			return nil, `parameter "from" is empty`
		}
	}
	if q.Has("messaging_service") {
		// Values other than from are not echoed: Redact hides them too.
		if p.service = q.Get("messaging_service"); !strings.HasPrefix(p.service, "MG") {
			return nil, `parameter "messaging_service": expected a Messaging Service SID (MG…)`
		}
	}
	if p.from == "" && p.service == "" {
		return nil, `missing parameter "from" (the sender, e.g. from=%2B15550100) or "messaging_service" (MG…)`
	}
	if q.Has("status_callback") {
		p.statusCallback = q.Get("status_callback")
		if cb, err := url.Parse(p.statusCallback); err != nil || (cb.Scheme != "https" && cb.Scheme != "http") || cb.Host == "" {
			return nil, `parameter "status_callback": not an absolute http(s) URL (percent-encode it)`
		}
	}
	return p, ""
}

func (p *Twilio) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient phone number"}
	}
	// SMS has no subject: a message with only a subject sends that.
	text := m.Body
	if text == "" {
		text = m.Subject
	}
	if text == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "empty message (no body, no subject)"}
	}
	form := url.Values{"To": {m.Address}, "Body": {text}}
	if p.from != "" {
		form.Set("From", p.from)
	}
	if p.service != "" {
		form.Set("MessagingServiceSid", p.service)
	}
	if p.statusCallback != "" {
		form.Set("StatusCallback", p.statusCallback)
	}
	req, fail, ok := keyedRequest(ctx, p.url, m.Key, "application/x-www-form-urlencoded", []byte(form.Encode()))
	if !ok {
		return fail
	}
	req.Header.Set("I-Twilio-Idempotency-Token", m.Key)
	req.SetBasicAuth(p.user, p.pass)
	return twilioResult(doHTTP(ctx, p.client, req, "sid"))
}

// twilioResult refines the shared classification with Twilio's error code.
func twilioResult(r Result) Result {
	if r.HTTPStatus == 0 || r.Outcome == Sent {
		return r
	}
	var te twilioError
	if json.Unmarshal([]byte(r.Response), &te) == nil && te.Code != 0 {
		r.Detail += fmt.Sprintf(": twilio %d %s", te.Code, te.Message)
	}
	switch {
	case te.Code == 20429 || r.HTTPStatus == http.StatusTooManyRequests:
		// Twilio: a request answered 429 "is never processed and is always
		// safe to retry".
		r.Outcome, r.Permanent, r.Overloaded = Refused, false, true
	case r.HTTPStatus == http.StatusUnauthorized:
		r.Detail += " (check the account SID and auth token)"
	case r.Outcome == Refused && r.Permanent:
		if why, dead := twilioDeadNumbers[te.Code]; dead {
			r.InvalidAddress = true
			r.Detail += " (" + why + ")"
		}
	}
	return r
}

// ParseReceipts reads one Twilio message status callback. It verifies
// X-Twilio-Signature with the auth token over rawURL (the StatusCallback
// URL exactly as Twilio called it) and the POST parameters. Twilio gives no
// id for the callback itself, so Receipt.ID is empty and dedupe falls to
// MessageSid and status.
func (p *Twilio) ParseReceipts(r *http.Request, body []byte, rawURL string) ([]Receipt, error) {
	sig := r.Header.Get("X-Twilio-Signature")
	if sig == "" {
		return nil, ErrBadSignature
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("twilio receipt: body is not form-encoded: %w", err)
	}
	if !p.signedBy(rawURL, form, sig) {
		return nil, ErrBadSignature
	}
	sid, status := form.Get("MessageSid"), form.Get("MessageStatus")
	if sid == "" { // the names older callbacks use
		sid = form.Get("SmsSid")
	}
	if status == "" {
		status = form.Get("SmsStatus")
	}
	if sid == "" || status == "" {
		return nil, errors.New("twilio receipt: no MessageSid or MessageStatus")
	}
	detail := status
	code := form.Get("ErrorCode")
	if code != "" {
		detail += " " + code
	}
	rc := Receipt{MessageID: sid, Status: twilioStatus(status), Detail: detail}
	if rc.Status == ReceiptBounced || rc.Status == ReceiptFailed {
		// Only the codes that say the number itself is dead suppress it;
		// most undelivered ones (30003, a handset switched off) do not.
		rc.Bounce = BounceNone
		if n, err := strconv.Atoi(code); err == nil && (twilioDeadReceipts[n] || twilioDeadNumbers[n] != "") {
			rc.Bounce = BounceHard
		}
	}
	return []Receipt{rc}, nil
}

// twilioDeadReceipts are the status-callback error codes that say the To
// number cannot take messages: 30005 unknown destination handset, 30006
// landline or unreachable carrier.
var twilioDeadReceipts = map[int]bool{30005: true, 30006: true}

// twilioStatus maps a MessageStatus onto a receipt status. Statuses this
// code does not know count as progress: recorded, but they move nothing.
func twilioStatus(s string) ReceiptStatus {
	switch s {
	case "delivered", "read":
		return ReceiptDelivered
	case "undelivered":
		return ReceiptBounced
	case "failed", "canceled":
		return ReceiptFailed
	default: // accepted, scheduled, queued, sending, sent …
		return ReceiptSent
	}
}

// signedBy reports whether sig is Twilio's signature of rawURL and form.
// Like Twilio's own libraries it also tries rawURL with the default port
// added or removed, since what Twilio signs depends on how the URL was
// configured.
func (p *Twilio) signedBy(rawURL string, form url.Values, sig string) bool {
	for _, u := range twilioURLVariants(rawURL) {
		if hmac.Equal([]byte(twilioSignature(p.pass, u, form)), []byte(sig)) {
			return true
		}
	}
	return false
}

// twilioSignature is base64(HMAC-SHA1(authToken, URL followed by each POST
// parameter's name and value, sorted by name)).
func twilioSignature(authToken, rawURL string, form url.Values) string {
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(rawURL))
	for _, k := range slices.Sorted(maps.Keys(form)) {
		for _, v := range slices.Sorted(slices.Values(form[k])) {
			mac.Write([]byte(k))
			mac.Write([]byte(v))
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// twilioURLVariants is rawURL, then rawURL with its scheme's default port
// removed if it names it, or added if it names none.
func twilioURLVariants(rawURL string) []string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return []string{rawURL}
	}
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	if def == "" {
		return []string{rawURL}
	}
	alt := *u
	if host, port, err := net.SplitHostPort(u.Host); err == nil {
		if port != def {
			return []string{rawURL}
		}
		alt.Host = host
		if strings.Contains(host, ":") {
			alt.Host = "[" + host + "]"
		}
	} else {
		alt.Host = net.JoinHostPort(strings.Trim(u.Host, "[]"), def)
	}
	return []string{rawURL, alt.String()}
}

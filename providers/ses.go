package providers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

var (
	_ Provider      = (*SES)(nil)
	_ ReceiptParser = (*SES)(nil)
)

var sesKind = &Kind{
	Name: "ses", Schemes: httpSchemes("ses"),
	URLs: []string{"ses+https://ACCESS_KEY_ID:SECRET@email.REGION.amazonaws.com?from=ADDR[&configuration_set=…]"},
	Summary: "Amazon SES v2 `SendEmail` (JSON, signed with SigV4 for the URL's region); each message carries the " +
		"email tag `edgerelay-key` (its key); `MessageRejected`, `MailFromDomainNotVerified`, `AccountSuspended`, " +
		"`SendingPaused`, `NotFound` and 403 (the credentials) fail, `LimitExceeded`, 429 and 503 retry, 500 is unknown. " +
		"SES's bounces, complaints and deliveries through SNS are receipts, taken only with a valid SNS signature: " +
		"a `Permanent` bounce is hard, `Transient` soft",
	Params: []Param{
		{"from", "the sender, a verified identity's address, with or without a display name (percent-encoded)"},
		{"region", "the AWS region to sign for (default: from the host, `email.REGION.amazonaws.com`)"},
		{"configuration_set", "the SES configuration set to send with (its event destinations publish bounces, complaints and deliveries)"},
		{"session_token", "a temporary credential's session token, sent as `X-Amz-Security-Token`"},
		{"sns_topic_arn", "the SNS topic SES publishes this sender's bounces, complaints and deliveries to: receipts posted to " +
			"`/v1/receipts/NAME` are taken only from it, and only with a valid SNS signature (a subscription to it is confirmed)"},
		{"sns_cert_host", "the hosts an SNS signing certificate and subscription URL may be on, comma-separated, `*` standing " +
			"for one label (default `sns.*.amazonaws.com,sns.*.amazonaws.com.cn`: SNS's, the China regions' too)"},
		{"sns_ca", "a PEM file of the CAs to trust, instead of the system's, when fetching SNS signing certificates and " +
			"confirming subscriptions (a private stand-in for SNS, such as `edgerelay sim`'s)"},
		paramListUnsubscribe,
		paramConcurrency, paramName, paramTimeout},
	Keys: "no: SendEmail takes none; a resend after an unknown outcome sends a second message " +
		"(another MessageId), with the same `edgerelay-key` tag",
	Example: "ses+https://AKIAEXAMPLE:secret@email.us-east-1.amazonaws.com?from=no-reply%40example.com",
	build:   newSESURL,
}

// SES sends email with Amazon SES v2's SendEmail
// (POST /v2/email/outbound-emails), signed with Signature Version 4 by the
// AWS SDK's signer, for the region the host names
// (email.REGION.amazonaws.com) or the region parameter. Build it with New;
// the access key id and secret are the URL's userinfo.
//
// The body is a Simple message: subject, a text part (made from the HTML
// when there is none), the HTML, and Auto-Submitted and List-Unsubscribe in
// its Headers; the email tag edgerelay-key holds the notification's key,
// which SES's event publishing hands back.
//
// The answers, as SES documents them (the error's name is in
// X-Amzn-ErrorType, its words in the body's message):
//
//	200 {"MessageId": "…"}                     sent (MessageID = it)
//	400 MessageRejected, BadRequest,            refused for good
//	    MailFromDomainNotVerified,
//	    AccountSuspended, SendingPaused
//	400 LimitExceeded                          refused, retried; overloaded
//	403 (signature, key, token: the            refused for good
//	    credentials or the region)
//	404 NotFound (the configuration set)       refused for good
//	429 TooManyRequests, 503                   refused, retried; overloaded
//	500, 502, 504, no answer after the         unknown: it may have been sent
//	    request was written
//
// SES takes no idempotency key, so HonoursKeys is always false.
type SES struct {
	*httpEndpoint
	from      string
	region    string
	configSet string
	creds     aws.Credentials
	signer    *v4.Signer
	unsub     listUnsubscribe
	// now dates each signature; tests may fix it.
	now func() time.Time
	sns snsVerifier
}

var _ CommercialSender = (*SES)(nil)

func (p *SES) SetCommercial(types []string) { p.unsub.SetCommercial(types) }
func (p *SES) Unsubscribes() bool           { return p.unsub.Unsubscribes() }

// sesHost is SES's endpoint host, whose second label is the region.
var sesHost = regexp.MustCompile(`^email\.([a-z]{2}(-[a-z]+)+-[0-9]+)\.amazonaws\.com(\.cn)?$`)

// sesRegion is what an AWS region name looks like.
var sesRegion = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

func newSESURL(u *url.URL, q url.Values) (Provider, string) {
	const shape = "ses+https://ACCESS_KEY_ID:SECRET@email.us-east-1.amazonaws.com?from=…"
	if u.Path != "" && u.Path != "/" {
		return nil, "ses URLs take no path: the API path is SendEmail's (" + shape + ")"
	}
	e, problem := parseEndpoint(u, q, "ses")
	if problem != "" {
		return nil, problem
	}
	if !e.basic || e.user == "" || e.pass == "" {
		return nil, "missing credentials: put the access key id and secret access key in the userinfo, the secret percent-encoded (" + shape + ")"
	}
	p := &SES{httpEndpoint: e, creds: aws.Credentials{AccessKeyID: e.user, SecretAccessKey: e.pass, Source: "provider URL"},
		signer: v4.NewSigner(), now: time.Now}
	// The credentials sign; they are never sent as basic auth.
	e.user, e.pass, e.basic = "", "", false
	switch m := sesHost.FindStringSubmatch(strings.ToLower(u.Hostname())); {
	case q.Has("region"):
		if p.region = q.Get("region"); !sesRegion.MatchString(p.region) {
			return nil, fmt.Sprintf(`parameter "region": %q is not an AWS region (e.g. us-east-1, eu-west-1)`, p.region)
		}
	case m != nil:
		p.region = m[1]
	default:
		return nil, `missing parameter "region": the host is not email.REGION.amazonaws.com, so say which region to sign for`
	}
	e.url = strings.TrimSuffix(e.url, "/") + "/v2/email/outbound-emails"
	if !q.Has("name") {
		e.name = "ses://" + u.Host
	}
	if p.from = q.Get("from"); p.from == "" {
		return nil, `missing parameter "from" (the sender, a verified identity, e.g. from=no-reply%40example.com)`
	}
	if _, err := mail.ParseAddress(p.from); err != nil {
		return nil, fmt.Sprintf(`parameter "from": %q is not an email address: %v`, p.from, err)
	}
	if q.Has("configuration_set") {
		if p.configSet = q.Get("configuration_set"); p.configSet == "" || len(p.configSet) > 64 ||
			strings.Trim(p.configSet, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			return nil, `parameter "configuration_set": a configuration set's name is 1 to 64 letters, digits, _ and -`
		}
	}
	if q.Has("session_token") {
		if p.creds.SessionToken = q.Get("session_token"); p.creds.SessionToken == "" {
			return nil, `parameter "session_token" is empty`
		}
	}
	if problem := p.unsub.parse(q); problem != "" {
		return nil, problem
	}
	if problem := p.sns.parse(q, e.timeout); problem != "" {
		return nil, problem
	}
	return p, ""
}

type sesContent struct {
	Data    string `json:"Data"`
	Charset string `json:"Charset"`
}

type sesBody struct {
	Text *sesContent `json:"Text,omitempty"`
	HTML *sesContent `json:"Html,omitempty"`
}

type sesHeader struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

type sesTag struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

type sesRequest struct {
	FromEmailAddress string `json:"FromEmailAddress"`
	Destination      struct {
		ToAddresses []string `json:"ToAddresses"`
	} `json:"Destination"`
	Content struct {
		Simple struct {
			Subject sesContent  `json:"Subject"`
			Body    sesBody     `json:"Body"`
			Headers []sesHeader `json:"Headers,omitempty"`
		} `json:"Simple"`
	} `json:"Content"`
	ConfigurationSetName string   `json:"ConfigurationSetName,omitempty"`
	EmailTags            []sesTag `json:"EmailTags,omitempty"`
}

// sesTagValue is what SES takes as an email tag's value.
var sesTagValue = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// sesKeyTag is the email tag that carries a message's key.
const sesKeyTag = "edgerelay-key"

func (p *SES) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient address"}
	}
	if _, err := mail.ParseAddress(m.Address); err != nil {
		return Result{Outcome: Refused, Permanent: true, InvalidAddress: true, Response: err.Error(),
			Detail: "recipient is not a single email address"}
	}
	var b sesRequest
	b.FromEmailAddress = p.from
	b.Destination.ToAddresses = []string{m.Address}
	s := &b.Content.Simple
	s.Subject = sesContent{m.Subject, "UTF-8"}
	if text := textPart(m); text != "" {
		s.Body.Text = &sesContent{text, "UTF-8"}
	}
	if m.HTML != "" {
		s.Body.HTML = &sesContent{m.HTML, "UTF-8"}
	}
	if s.Body.Text == nil && s.Body.HTML == nil {
		return Result{Outcome: Refused, Permanent: true, Detail: "empty message (no text, no HTML)"}
	}
	for _, h := range p.unsub.headers(m) {
		s.Headers = append(s.Headers, sesHeader{h.name, h.value})
	}
	b.ConfigurationSetName = p.configSet
	if sesTagValue.MatchString(m.Key) {
		b.EmailTags = []sesTag{{sesKeyTag, m.Key}}
	}
	body, err := json.Marshal(b)
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	req, fail, ok := keyedRequest(ctx, p.url, m.Key, "application/json", body)
	if !ok {
		return fail
	}
	req.Header.Set("Accept", "application/json")
	sum := sha256.Sum256(body)
	if err := p.signer.SignHTTP(ctx, p.creds, req, hex.EncodeToString(sum[:]), "ses", p.region, p.now().UTC()); err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot sign the request (SigV4)"}
	}
	tap := &headerTap{rt: p.client.Transport}
	c := *p.client
	c.Transport = tap
	return sesResult(doHTTP(ctx, &c, req, "MessageId"), tap.header)
}

// sesResult refines the shared classification with the error's name
// (X-Amzn-ErrorType, "Name:namespace", or the body's __type or code) and
// its message.
func sesResult(r Result, h http.Header) Result {
	if r.HTTPStatus < 400 {
		return r
	}
	var e struct {
		Type    string `json:"__type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Upper   string `json:"Message"`
	}
	isJSON := json.Unmarshal([]byte(r.Response), &e) == nil
	name := h.Get("X-Amzn-ErrorType")
	if name == "" {
		name = e.Type
	}
	if name == "" {
		name = e.Code
	}
	// "MessageRejected:http://internal.amazon.com/coral/…", or a shape id
	// "com.amazonaws.sesv2#MessageRejected".
	name, _, _ = strings.Cut(name, ":")
	if i := strings.LastIndexByte(name, '#'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimSuffix(name, "Exception")
	msg := e.Message
	if msg == "" {
		msg = e.Upper
	}
	switch {
	case name != "" && isJSON && msg != "":
		addReason(&r, name+": "+msg)
	case name != "":
		addReason(&r, name)
	}
	switch name {
	case "LimitExceeded":
		// A sending quota: later, the same request goes through.
		r.Outcome, r.Permanent, r.Overloaded = Refused, false, true
	case "Throttling", "TooManyRequests":
		r.Outcome, r.Permanent, r.Overloaded = Refused, false, true
	}
	if r.HTTPStatus == http.StatusForbidden {
		r.Detail += " (check the access key, the secret and the region)"
	}
	return r
}

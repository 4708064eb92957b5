package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// An emailPreset speaks one email API's dialect on an email-http URL
// (preset=postmark|resend|sendgrid): its request body, its auth header,
// where its answer keeps the message id, and what its error bodies mean
// beyond the status code.
type emailPreset struct {
	// path is the API's send endpoint, called when the URL has no path.
	path string
	// honours: the API documents Idempotency-Key support. It is the
	// default for HonoursKeys; the URL's idempotency parameter overrides it.
	honours bool
	// tokenHint says what the token parameter must hold.
	tokenHint string
	// ownAuth: the token travels in header() rather than as a bearer token.
	ownAuth bool
	header  func(h http.Header, token string)
	body    func(e envelope, c content) any
	idKeys  []string
	// idHeader is the response header that holds the message id, for an
	// API that answers with an empty body.
	idHeader string
	// classify refines a non-2xx Result from the error body, which
	// r.Response holds.
	classify func(r *Result)
}

// presetNames lists the presets in the order errors name them.
var presetNames = []string{"postmark", "resend", "sendgrid"}

var emailPresets = map[string]*emailPreset{
	// Postmark: POST /email, X-Postmark-Server-Token. No idempotency keys.
	"postmark": {
		path: "/email", tokenHint: "a Postmark server token", ownAuth: true,
		header: func(h http.Header, token string) { h.Set("X-Postmark-Server-Token", token) },
		body: func(e envelope, c content) any {
			b := postmarkBody{From: e.fromRaw, To: e.toRaw, Subject: c.subject, TextBody: c.text, HTMLBody: c.html, MessageStream: e.stream}
			for _, h := range c.headers {
				b.Headers = append(b.Headers, postmarkHeader{h.name, h.value})
			}
			return b
		},
		idKeys:   []string{"MessageID"},
		classify: classifyPostmark,
	},
	// Resend: POST /emails, bearer token. Idempotency-Key is documented
	// (kept 24 hours, longer than the relay's default max age).
	"resend": {
		path: "/emails", honours: true, tokenHint: "a Resend API key",
		body: func(e envelope, c content) any {
			return emailBody{From: e.fromRaw, To: []string{e.toRaw}, Subject: c.subject, Text: c.text, HTML: c.html, Headers: c.headerMap()}
		},
		idKeys:   []string{"id"},
		classify: classifyResend,
	},
	// SendGrid v3: POST /v3/mail/send, bearer token, 202 with an empty
	// body and the id in X-Message-Id. No idempotency keys.
	"sendgrid": {
		path: "/v3/mail/send", tokenHint: "a SendGrid API key",
		body:     sendgridRequest,
		idHeader: "X-Message-Id",
		classify: classifySendGrid,
	},
}

// preset applies the URL's preset parameter; "" keeps the generic shape.
// explicitIdempotency reports whether the URL set the idempotency
// parameter, which then stands over the preset's default.
func (p *EmailHTTP) preset(name string, explicitIdempotency bool) string {
	if name == "" {
		return ""
	}
	ps, ok := emailPresets[name]
	if !ok {
		return fmt.Sprintf(`parameter "preset": unknown preset %q (choices: %s)`, name, strings.Join(presetNames, ", "))
	}
	if p.basic {
		return fmt.Sprintf(`preset %s authenticates with parameter "token" (%s), not with userinfo`, name, ps.tokenHint)
	}
	if p.token == "" {
		return fmt.Sprintf(`preset %s needs parameter "token" (%s)`, name, ps.tokenHint)
	}
	// An explicit idempotency parameter has already set honours; only the
	// default is the preset's to give.
	if !explicitIdempotency && ps.honours {
		p.honours = true
	}
	if u, err := url.Parse(p.url); err == nil && (u.Path == "" || u.Path == "/") {
		// A URL naming only the API's host means its send endpoint.
		u.Path, u.RawPath = ps.path, ""
		p.url = u.String()
	}
	p.dialect = ps
	return ""
}

// envelope is a message's sender and recipient, as the URL and the
// message wrote them and as parsed.
type envelope struct {
	fromRaw, toRaw string
	from, to       *mail.Address
	// stream is the Postmark message stream (message_stream), "" for the
	// server's default transactional one.
	stream string
}

// sendPreset sends m in the preset's dialect.
func (p *EmailHTTP) sendPreset(ctx context.Context, m *Message) Result {
	ps := p.dialect
	to, err := mail.ParseAddress(m.Address)
	if err != nil {
		// One mailbox, or nothing: a list ("a@x, b@y") would fan out.
		return Result{Outcome: Refused, Permanent: true, InvalidAddress: true, Response: err.Error(),
			Detail: "recipient is not a single email address"}
	}
	from, err := mail.ParseAddress(p.from) // checked when the URL was parsed
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "sender is not an email address"}
	}
	body, err := json.Marshal(ps.body(envelope{fromRaw: p.from, toRaw: m.Address, from: from, to: to, stream: p.stream}, p.content(m)))
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	h := http.Header{}
	h.Set("Accept", "application/json")
	if ps.header != nil {
		ps.header(h, p.token)
	}
	r, respHeader := p.postWith(ctx, postSpec{key: m.Key, body: body, header: h, ownAuth: ps.ownAuth, idKeys: ps.idKeys})
	switch {
	case r.Outcome == Sent && ps.idHeader != "":
		// The id travels in a header, so a body cut short or not JSON
		// (SendGrid's is empty by contract) loses nothing: the note that
		// it gave no id would contradict the id recorded beside it.
		if r.MessageID = respHeader.Get(ps.idHeader); r.MessageID != "" {
			r.Detail = strings.TrimSuffix(r.Detail, ", no message id")
		}
	case r.HTTPStatus >= 400 && ps.classify != nil:
		ps.classify(&r)
	}
	return r
}

type postmarkBody struct {
	From     string           `json:"From"`
	To       string           `json:"To"`
	Subject  string           `json:"Subject"`
	TextBody string           `json:"TextBody,omitempty"`
	HTMLBody string           `json:"HtmlBody,omitempty"`
	Headers  []postmarkHeader `json:"Headers,omitempty"`
	// MessageStream names a stream of the server ("outbound", the
	// default transactional one, when left out); bulk mail belongs on a
	// broadcast stream.
	MessageStream string `json:"MessageStream,omitempty"`
}

// postmarkHeader is one of Postmark's custom headers: "Headers" is a list
// of {"Name", "Value"}.
type postmarkHeader struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

// classifyPostmark reads Postmark's {"ErrorCode", "Message"}.
func classifyPostmark(r *Result) {
	var e struct {
		ErrorCode int    `json:"ErrorCode"`
		Message   string `json:"Message"`
	}
	if json.Unmarshal([]byte(r.Response), &e) != nil || e.ErrorCode == 0 {
		return
	}
	addReason(r, "ErrorCode "+strconv.Itoa(e.ErrorCode)+": "+e.Message)
	switch e.ErrorCode {
	case 406:
		// Inactive recipient: a hard bounce, a spam complaint or a manual
		// suppression. Postmark will refuse the address until someone
		// reactivates it.
		r.Outcome, r.Permanent, r.InvalidAddress = Refused, true, true
	case 300:
		// Invalid email request: the message itself is malformed.
		r.Outcome, r.Permanent = Refused, true
	case 429:
		r.Outcome, r.Permanent = Refused, false
	case 100:
		// Maintenance: the API took nothing in.
		r.Outcome, r.Permanent = Refused, false
	}
}

// classifyResend reads Resend's {"name", "message", "statusCode"}. The
// status code already says most of it (422 validation_error permanent,
// 429 rate_limit_exceeded and the quotas retryable, 409
// concurrent_idempotent_requests retryable).
func classifyResend(r *Result) {
	var e struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(r.Response), &e) != nil || e.Name == "" {
		return
	}
	addReason(r, e.Name+": "+e.Message)
	if e.Name == "invalid_idempotent_request" {
		// The key was used before with another body: an earlier attempt
		// reached Resend and may have been sent. Retrying cannot settle it.
		r.Outcome, r.Permanent = Unknown, true
	}
}

type sendgridAddress struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

type sendgridContent struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

type sendgridPersonalization struct {
	To []sendgridAddress `json:"to"`
}

// sendgridBody is v3 mail/send's. headers is the message-level object of
// names and string values (SendGrid refuses only its reserved ones: To,
// From, Subject, Reply-To, CC, BCC, Content-Type, Content-Transfer-Encoding,
// DKIM-Signature, Received, x-sg-id, x-sg-eid).
type sendgridBody struct {
	Personalizations []sendgridPersonalization `json:"personalizations"`
	From             sendgridAddress           `json:"from"`
	Subject          string                    `json:"subject"`
	Content          []sendgridContent         `json:"content"`
	Headers          map[string]string         `json:"headers,omitempty"`
}

func sendgridRequest(e envelope, c content) any {
	b := sendgridBody{From: sendgridAddress{Email: e.from.Address, Name: e.from.Name}, Subject: c.subject, Headers: c.headerMap()}
	b.Personalizations = []sendgridPersonalization{{To: []sendgridAddress{{Email: e.to.Address, Name: e.to.Name}}}}
	// text/plain must come first; an empty value is refused, so a part is
	// left out when empty (HTML whose text is empty), unless there would
	// be none.
	if c.text != "" || c.html == "" {
		b.Content = append(b.Content, sendgridContent{"text/plain", c.text})
	}
	if c.html != "" {
		b.Content = append(b.Content, sendgridContent{"text/html", c.html})
	}
	return b
}

// sendgridRecipient is the field SendGrid names when the recipient's
// address is what it refused.
var sendgridRecipient = regexp.MustCompile(`^personalizations\.\d+\.to\.\d+\.email$`)

// classifySendGrid reads SendGrid's {"errors": [{"message", "field"}]}.
// A 400 is permanent whatever it says; one naming the recipient's address
// marks the address invalid.
func classifySendGrid(r *Result) {
	var e struct {
		Errors []struct {
			Message string `json:"message"`
			Field   any    `json:"field"`
		} `json:"errors"`
	}
	if json.Unmarshal([]byte(r.Response), &e) != nil || len(e.Errors) == 0 {
		return
	}
	var reasons []string
	for _, x := range e.Errors {
		field, _ := x.Field.(string)
		if field != "" {
			reasons = append(reasons, field+": "+x.Message)
		} else {
			reasons = append(reasons, x.Message)
		}
		if r.HTTPStatus == http.StatusBadRequest && sendgridRecipient.MatchString(field) {
			r.InvalidAddress = true
		}
	}
	addReason(r, strings.Join(reasons, "; "))
}

// addReason appends the provider's own words to r.Detail, kept short.
func addReason(r *Result, reason string) {
	const max = 200
	if len(reason) > max {
		i := max
		for i > 0 && !utf8.RuneStart(reason[i]) {
			i--
		}
		reason = reason[:i] + "…"
	}
	r.Detail += ": " + reason
}

// postSpec is one POST that httpEndpoint.post cannot express.
type postSpec struct {
	// target is where to POST instead of the endpoint's URL (a webhook
	// recipient's own URL).
	target string
	key    string
	body   []byte
	// header is set over the defaults.
	header http.Header
	// ownAuth: header carries the credentials; the URL's token or
	// userinfo is not sent as Authorization.
	ownAuth bool
	idKeys  []string
}

// postWith is httpEndpoint.post with the extras of s; it also returns the
// answer's header (nil without an answer).
func (e *httpEndpoint) postWith(ctx context.Context, s postSpec) (Result, http.Header) {
	target := e.url
	if s.target != "" {
		target = s.target
	}
	req, fail, ok := keyedRequest(ctx, target, s.key, "application/json", s.body)
	if !ok {
		return fail, nil
	}
	if !s.ownAuth {
		switch {
		case e.token != "":
			req.Header.Set("Authorization", "Bearer "+e.token)
		case e.basic:
			req.SetBasicAuth(e.user, e.pass)
		}
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	tap := &headerTap{rt: e.client.Transport}
	c := *e.client
	c.Transport = tap
	return doHTTP(ctx, &c, req, s.idKeys...), tap.header
}

// headerTap keeps the answer's header, which doHTTP does not return.
// RoundTrip runs on the caller's goroutine, so no lock is needed.
type headerTap struct {
	rt     http.RoundTripper
	header http.Header
}

func (t *headerTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if resp != nil {
		t.header = resp.Header
	}
	return resp, err
}

package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"strconv"
)

var _ Provider = (*EmailHTTP)(nil)

var emailHTTPKind = &Kind{
	Name: "email-http", Schemes: httpSchemes("email-http"),
	URLs:    []string{"email-http+https://host/path?from=ADDR[&preset=resend|postmark|sendgrid]"},
	Summary: "a JSON email API: the shape Resend and its imitators share, or a preset's",
	Params: httpParams(
		Param{"from", "the sender, an address with or without a display name (`Acme <no-reply@acme.test>`, percent-encoded)"},
		Param{"preset", "one of " + codeList(presetNames) + ", which sets that API's request shape, auth header, " +
			"message id and error classification; a URL without a path calls the API's send endpoint. " +
			"Every shape carries a text part (made from the HTML when there is none) and `Auto-Submitted`, " +
			"`List-Unsubscribe` and `List-Unsubscribe-Post` in the API's field for headers " +
			"(Postmark's `Headers`, Resend's, SendGrid's and the generic `headers`); Message-ID and Date are the API's"},
		paramListUnsubscribe,
		Param{"message_stream", "preset postmark only: the Postmark message stream to send on (`broadcast` for a broadcast stream; " +
			"Postmark's default transactional stream when left out). Postmark wants bulk mail on a broadcast stream: " +
			"route commercial types to a second provider with this set"}),
	Keys:    "Resend yes; Postmark, SendGrid and the generic shape no",
	Example: "email-http+https://api.resend.com?from=Acme+%3Cno-reply%40acme.test%3E&preset=resend&token=re_123",
	build:   newEmailHTTPURL,
}

// EmailHTTP sends email through a JSON API of the shape Resend and its
// imitators share (email-http+http://, email-http+https://), or in the
// dialect of the API the URL's preset parameter names (presets.go). Build
// it with New; the sender comes from the URL's from parameter.
//
// Every message carries Auto-Submitted, a text part (made from the HTML
// when the message has none) and, on mail of an optional category or a
// commercial type, List-Unsubscribe and List-Unsubscribe-Post, each in the
// API's own field for headers. Message-ID and Date stay the API's.
type EmailHTTP struct {
	*httpEndpoint
	from    string
	dialect *emailPreset // nil: the generic shape
	unsub   listUnsubscribe
	stream  string // Postmark's MessageStream (message_stream)
}

var _ CommercialSender = (*EmailHTTP)(nil)

func (p *EmailHTTP) SetCommercial(types []string) { p.unsub.SetCommercial(types) }
func (p *EmailHTTP) Unsubscribes() bool           { return p.unsub.Unsubscribes() }

// emailBody is the generic shape, and Resend's: headers is an object of
// names and string values (Resend's "headers").
type emailBody struct {
	From    string            `json:"from"`
	To      []string          `json:"to"`
	Subject string            `json:"subject"`
	Text    string            `json:"text"`
	HTML    string            `json:"html,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// content is what a message says, as every email API takes it: the text
// part and the headers the relay adds. It follows from the message alone,
// so every attempt under one key sends the same body (json.Marshal writes
// struct fields in order and map keys sorted).
type content struct {
	subject, text, html string
	headers             []mailHeader
}

func (p *EmailHTTP) content(m *Message) content {
	return content{subject: m.Subject, text: textPart(m), html: m.HTML, headers: p.unsub.headers(m)}
}

// headerMap is c's headers as the JSON object Resend and SendGrid take.
func (c content) headerMap() map[string]string {
	if len(c.headers) == 0 {
		return nil
	}
	h := make(map[string]string, len(c.headers))
	for _, x := range c.headers {
		h[x.name] = x.value
	}
	return h
}

func (p *EmailHTTP) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient address"}
	}
	if p.dialect != nil {
		return p.sendPreset(ctx, m)
	}
	c := p.content(m)
	body, err := json.Marshal(emailBody{From: p.from, To: []string{m.Address}, Subject: c.subject, Text: c.text, HTML: c.html, Headers: c.headerMap()})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	return p.post(ctx, m.Key, body, "id", "MessageID", "message_id")
}

func newEmailHTTPURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "email-http")
	if problem != "" {
		return nil, problem
	}
	from := q.Get("from")
	if from == "" {
		return nil, `missing parameter "from" (the sender, e.g. from=no-reply%40example.com)`
	}
	if _, err := mail.ParseAddress(from); err != nil {
		return nil, fmt.Sprintf(`parameter "from": %q is not an email address: %v`, from, err)
	}
	p := &EmailHTTP{httpEndpoint: e, from: from}
	if problem := p.preset(q.Get("preset"), q.Has("idempotency")); problem != "" {
		return nil, problem
	}
	if problem := p.unsub.parse(q); problem != "" {
		return nil, problem
	}
	if q.Has("message_stream") {
		if q.Get("preset") != "postmark" {
			return nil, `parameter "message_stream" is Postmark's (preset=postmark); this URL's preset is ` + strconv.Quote(q.Get("preset"))
		}
		if p.stream = q.Get("message_stream"); p.stream == "" {
			return nil, `parameter "message_stream": empty (name a stream of the Postmark server, e.g. broadcast, or leave it out)`
		}
	}
	return p, ""
}

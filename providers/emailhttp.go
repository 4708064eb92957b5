package providers

import (
	"context"
	"encoding/json"
)

var _ Provider = (*EmailHTTP)(nil)

// EmailHTTP sends email through a JSON API of the shape Resend and its
// imitators share (email-http+http://, email-http+https://), or in the
// dialect of the API the URL's preset parameter names (presets.go). Build
// it with New; the sender comes from the URL's from parameter.
type EmailHTTP struct {
	*httpEndpoint
	from    string
	dialect *emailPreset // nil: the generic shape
}

type emailBody struct {
	From    string   `json:"from"`
	To      []string `json:"to"`
	Subject string   `json:"subject"`
	Text    string   `json:"text"`
	HTML    string   `json:"html,omitempty"`
}

func (p *EmailHTTP) Send(ctx context.Context, m *Message) Result {
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient address"}
	}
	if p.dialect != nil {
		return p.sendPreset(ctx, m)
	}
	body, err := json.Marshal(emailBody{From: p.from, To: []string{m.Address}, Subject: m.Subject, Text: m.Body, HTML: m.HTML})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	return p.post(ctx, m.Key, body, "id", "MessageID", "message_id")
}

package providers

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
)

var _ Provider = (*Slack)(nil)

// Slack takes no token and no idempotency: it has no use for a token beside
// the URL, and does not honour keys whatever the URL says.
var slackKind = &Kind{
	Name: "slack", Schemes: httpSchemes("slack"),
	URLs: []string{"slack+https://hooks.slack.com/services/…"},
	Summary: "Slack incoming webhooks (the path is the secret and is never printed); subject and body posted as text, " +
		"Slack markup escaped",
	Params:  []Param{paramConcurrency, paramName, paramTimeout},
	Keys:    "no: Slack takes none",
	Example: "slack+https://hooks.slack.com/services/T000/B000/XXXXXXXX",
	build:   newSlackURL,
}

// Slack posts each message to a Slack incoming webhook
// (slack+https://hooks.slack.com/services/T…/B…/…). The webhook is bound to
// one channel, so Message.Address is not used. Build it with New; it takes
// the parameters timeout and name.
//
// The URL's path is its credential: whoever has it can post to the
// channel. Name shows only the host, and nothing here quotes the path.
//
// Incoming webhooks take no idempotency key and answer with no message
// id, so HonoursKeys is always false: after an Unknown, a resend may post
// twice.
type Slack struct {
	*httpEndpoint
}

func newSlackURL(u *url.URL, q url.Values) (Provider, string) {
	if u.User != nil {
		return nil, "slack URLs take no credentials (the webhook URL's path is its secret)"
	}
	if u.Path == "" || u.Path == "/" {
		return nil, "missing path (a Slack webhook URL looks like https://hooks.slack.com/services/T…/B…/…)"
	}
	e, problem := parseEndpoint(u, q, "slack")
	if problem != "" {
		return nil, problem
	}
	if !q.Has("name") {
		e.name = "slack://" + u.Host
	}
	return &Slack{httpEndpoint: e}, ""
}

// slackEscaper escapes what Slack would read as markup: "<!channel>" in a
// message body must not notify a whole channel.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func (s *Slack) Send(ctx context.Context, m *Message) Result {
	text := m.Body
	if m.Subject != "" {
		text = m.Subject + "\n" + m.Body
	}
	if strings.TrimSpace(text) == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "nothing to post: the message has no subject and no body"}
	}
	body, err := json.Marshal(struct {
		Text string `json:"text"`
	}{slackEscaper.Replace(text)})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	// post sends an Idempotency-Key like every HTTP provider; Slack
	// ignores it.
	r := s.post(ctx, m.Key, body)
	switch {
	case r.Outcome == Sent:
		// Slack answers "ok", which is not JSON and carries no id: nothing
		// worth noting.
		r.Detail, _, _ = strings.Cut(r.Detail, ";")
	case r.HTTPStatus >= 400:
		// Slack's error bodies are one word: no_service (404),
		// invalid_token (403), channel_is_archived (410), invalid_payload
		// (400), rate_limited (429), rollup_error (500). The status code
		// already classifies them.
		if w := strings.TrimSpace(r.Response); w != "" && len(w) <= 64 && strings.Trim(w, "abcdefghijklmnopqrstuvwxyz_") == "" {
			r.Detail += ": " + w
		}
	}
	return r
}

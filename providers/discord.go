package providers

import (
	"context"
	"encoding/json"
	"math"
	"net/url"
	"strings"
	"time"
)

var _ Provider = (*Discord)(nil)

var discordKind = &Kind{
	Name: "discord", Schemes: httpSchemes("discord"),
	URLs: []string{"discord+https://discord.com/api/webhooks/ID/TOKEN"},
	Summary: "Discord webhooks (the path is the secret and is never printed), called with `wait=true` so that " +
		"the answer is the posted message and its id; subject and body posted as `content` with every mention " +
		"disabled; 400, 401, 403 and 404 (Unknown Webhook) fail, 429 waits `retry_after`, 503 retries, 500/502/504 are unknown",
	Params: []Param{
		{"thread_id", "post in this thread of the webhook's channel (a thread or a forum post), passed on to Discord"},
		paramConcurrency, paramName, paramTimeout},
	Keys: "no: Discord takes none; a resend after an unknown outcome posts a second message " +
		"(another message id, the same text)",
	Example: "discord+https://discord.com/api/webhooks/123456789012345678/XXXXsecretXXXX",
	build:   newDiscordURL,
}

// Discord posts each message to a Discord webhook
// (discord+https://discord.com/api/webhooks/ID/TOKEN). The webhook is
// bound to one channel, so Message.Address is not used. Build it with New.
//
// The token in the path is the credential: Name shows only the host and
// Redact hides the path.
//
// Every call carries wait=true: without it Discord answers 204 before the
// message is saved, and "a message that is not saved does not return an
// error", so a 2xx would not mean posted. With it the answer is the
// message, whose id becomes Result.MessageID.
//
// The answers, as Discord documents them:
//
//	200 message object              sent (MessageID = its id)
//	400 50035 Invalid Form Body,    refused for good (the message as sent
//	    50006 Cannot send an empty   can never be posted: too long, empty)
//	    message
//	401 50027 Invalid Webhook Token refused for good
//	403 50013 Missing Permissions   refused for good
//	404 10015 Unknown Webhook       refused for good (the webhook was deleted)
//	429 {"retry_after": seconds}    refused, retried after the larger of
//	                                 retry_after and Retry-After; overloaded
//	503                             refused, retried
//	500, 502, 504, no answer after  unknown: the message may have been posted
//	    the request was written
//
// No answer marks an address invalid: the webhook is the route's, not a
// recipient's, so a dead webhook fails the notification and says so.
//
// Discord takes no idempotency key (the Idempotency-Key header goes out
// and is ignored), so HonoursKeys is always false: after an unknown, a
// resend may post twice.
type Discord struct {
	*httpEndpoint
}

func newDiscordURL(u *url.URL, q url.Values) (Provider, string) {
	const shape = "a Discord webhook URL looks like https://discord.com/api/webhooks/ID/TOKEN"
	if u.User != nil {
		return nil, "discord URLs take no credentials (the webhook URL's token is its secret; " + shape + ")"
	}
	if !discordWebhookPath(u.Path) {
		return nil, "the path is not a webhook's /webhooks/ID/TOKEN (" + shape + ")"
	}
	e, problem := parseEndpoint(u, q, "discord")
	if problem != "" {
		return nil, problem
	}
	target, _ := url.Parse(e.url) // built by parseEndpoint from a parsed URL
	tq := url.Values{"wait": {"true"}}
	if q.Has("thread_id") {
		v := q.Get("thread_id")
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return nil, `parameter "thread_id": want a thread's id, a number such as 1234567890123456789`
		}
		tq.Set("thread_id", v)
	}
	target.RawQuery = tq.Encode()
	e.url = target.String()
	if !q.Has("name") {
		e.name = "discord://" + u.Host
	}
	return &Discord{httpEndpoint: e}, ""
}

// discordWebhookPath reports whether p ends in /webhooks/ID/TOKEN, the
// execute-webhook route (after /api or /api/vN).
func discordWebhookPath(p string) bool {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	n := len(parts)
	return n >= 3 && parts[n-3] == "webhooks" && parts[n-2] != "" && strings.Trim(parts[n-2], "0123456789") == "" && parts[n-1] != ""
}

// discordBody is the execute-webhook JSON. allowed_mentions with an empty
// parse list means nothing in content pings anyone: "@everyone" or "<@id>"
// in a notification's body must not notify a whole server.
type discordBody struct {
	Content         string          `json:"content"`
	AllowedMentions discordMentions `json:"allowed_mentions"`
}

type discordMentions struct {
	Parse []string `json:"parse"`
}

func (d *Discord) Send(ctx context.Context, m *Message) Result {
	text := chatText(m)
	if strings.TrimSpace(text) == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "nothing to post: the message has no subject and no body"}
	}
	body, err := json.Marshal(discordBody{Content: text, AllowedMentions: discordMentions{Parse: []string{}}})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	return discordResult(d.post(ctx, m.Key, body, "id"))
}

// chatText is what a chat message says: the subject on its own line, then
// the body.
func chatText(m *Message) string {
	if m.Subject == "" {
		return m.Body
	}
	if m.Body == "" {
		return m.Subject
	}
	return m.Subject + "\n" + m.Body
}

// discordResult refines the shared classification with Discord's error
// body, {"message", "code"}, and a 429's retry_after.
func discordResult(r Result) Result {
	if r.HTTPStatus < 400 {
		return r
	}
	var e struct {
		Message    string   `json:"message"`
		Code       int      `json:"code"`
		RetryAfter *float64 `json:"retry_after"`
		Global     bool     `json:"global"`
	}
	if json.Unmarshal([]byte(r.Response), &e) != nil {
		return r
	}
	if e.Message != "" {
		reason := e.Message
		if e.Code != 0 {
			reason = itoa(e.Code) + " " + reason
		}
		if e.Global {
			reason += " (global rate limit)"
		}
		addReason(&r, reason)
	}
	if r.HTTPStatus == 429 && e.RetryAfter != nil && *e.RetryAfter > 0 {
		// Seconds, with a fraction; waiting a little longer than asked is
		// harmless, a little shorter earns another 429.
		if d := secondsUp(*e.RetryAfter); d > r.RetryAfter {
			r.RetryAfter = d
		}
	}
	return r
}

// secondsUp is s seconds as a Duration rounded up to the millisecond,
// clamped to a day: a provider's wait beyond that is a bug, not advice.
func secondsUp(s float64) time.Duration {
	const most = 24 * time.Hour
	if s >= most.Seconds() || math.IsNaN(s) {
		return most
	}
	return time.Duration(math.Ceil(s*1000)) * time.Millisecond
}

package providers

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

var _ Provider = (*Telegram)(nil)

var telegramKind = &Kind{
	Name: "telegram", Schemes: httpSchemes("telegram"),
	URLs: []string{"telegram+https://api.telegram.org?token=BOT_TOKEN[&chat_id=…]"},
	Summary: "the Telegram Bot API's `sendMessage`, as plain text (no parse mode, so nothing in it is markup); " +
		"to each recipient's chat id, or to the URL's `chat_id`; 403 (the bot blocked, kicked or never started), " +
		"400 chat not found and a group moved to a supergroup fail and mark the chat invalid; " +
		"429 waits `parameters.retry_after`",
	Params: []Param{
		{"token", "the bot's token from @BotFather (`123456:ABC…`); it goes in the request path and is never printed"},
		{"chat_id", "send every message to this chat (a number, or `@channelusername`) instead of each recipient's address"},
		paramConcurrency, paramName, paramTimeout},
	Keys: "no: the Bot API takes none; a resend after an unknown outcome posts a second message " +
		"(another message_id in the same chat)",
	Example: "telegram+https://api.telegram.org?token=123456%3AABC-DEF&chat_id=-1001234567890",
	build:   newTelegramURL,
}

// Telegram sends each message with the Bot API's sendMessage
// (telegram+https://api.telegram.org?token=…). The recipient's address is
// the chat id (a number, negative for groups, or @channelusername for a
// public channel), unless the URL's chat_id sends everything to one chat.
//
// The text goes without parse_mode: Telegram reads nothing in it as
// markup, so a notification cannot format, link or hide anything.
//
// The answers, as the Bot API documents them ({"ok": false, "error_code",
// "description", "parameters"}; the descriptions are Telegram's words):
//
//	200 {"ok": true, "result": Message}   sent (MessageID = chat/message_id)
//	400 Bad Request: chat not found       refused for good, chat marked invalid
//	400 with migrate_to_chat_id           refused for good, chat marked invalid
//	                                       (the group is a supergroup now; the
//	                                       detail names its new id)
//	400 other (message is too long, …)    refused for good
//	401 Unauthorized, 404 Not Found       refused for good (the token is wrong)
//	403 Forbidden: bot was blocked by the refused for good, chat marked invalid
//	    user, user is deactivated, bot
//	    was kicked from the group, bot is
//	    not a member, bot can't initiate
//	    conversation with a user
//	403 other                             refused for good
//	429 parameters.retry_after            refused, retried after it (or
//	                                       Retry-After, the longer); overloaded
//	503                                   refused, retried
//	500, 502, 504, no answer after the    unknown: the message may have been sent
//	    request was written
//
// A chat is marked invalid only when it is the recipient's address: with
// chat_id in the URL, the chat is the route's and the notification fails.
//
// The Bot API takes no idempotency key (the Idempotency-Key header goes out
// and is ignored), so HonoursKeys is always false.
type Telegram struct {
	*httpEndpoint
	chat string // the URL's chat_id, "" for each recipient's address
}

// telegramChat is what the Bot API takes as a chat_id: an integer, or
// @ and a public channel's or group's username.
var telegramChat = regexp.MustCompile(`^(-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{3,31})$`)

func newTelegramURL(u *url.URL, q url.Values) (Provider, string) {
	const shape = "telegram+https://api.telegram.org?token=123456%3AABC…"
	if u.User != nil {
		return nil, `telegram URLs take no userinfo: the bot token goes in parameter "token" (` + shape + ")"
	}
	if u.Path != "" && u.Path != "/" {
		return nil, "telegram URLs take no path: the API path is built from the token (" + shape + ")"
	}
	// The token is the path's, not a bearer token: parseEndpoint must not
	// see it.
	token := q.Get("token")
	q.Del("token")
	switch {
	case token == "":
		return nil, `missing parameter "token" (the bot's token from @BotFather; ` + shape + ")"
	case !strings.Contains(token, ":") || strings.ContainsAny(token, "/?#% "):
		// Not quoted: a token pasted wrong is still mostly a secret.
		return nil, `parameter "token": not a bot token (a token looks like 123456:ABC-DEF…, with ":" percent-encoded as %3A or not)`
	}
	e, problem := parseEndpoint(u, q, "telegram")
	if problem != "" {
		return nil, problem
	}
	e.url = strings.TrimSuffix(e.url, "/") + "/bot" + token + "/sendMessage"
	if !q.Has("name") {
		e.name = "telegram://" + u.Host
	}
	p := &Telegram{httpEndpoint: e}
	if q.Has("chat_id") {
		if p.chat = q.Get("chat_id"); !telegramChat.MatchString(p.chat) {
			return nil, `parameter "chat_id": not a chat id (a number such as -1001234567890, or @channelusername)`
		}
	}
	return p, ""
}

// telegramBody is sendMessage's JSON. chat_id is a number when it is one:
// the Bot API takes an "Integer or String".
type telegramBody struct {
	ChatID any    `json:"chat_id"`
	Text   string `json:"text"`
}

func (p *Telegram) Send(ctx context.Context, m *Message) Result {
	chat := p.chat
	if chat == "" {
		chat = strings.TrimSpace(m.Address)
		if !telegramChat.MatchString(chat) {
			return Result{Outcome: Refused, Permanent: true, InvalidAddress: chat != "",
				Detail: "recipient's address is not a Telegram chat id (a number, or @channelusername)"}
		}
	}
	text := chatText(m)
	if strings.TrimSpace(text) == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "nothing to send: the message has no subject and no body"}
	}
	var id any = chat
	if n, err := strconv.ParseInt(chat, 10, 64); err == nil {
		id = n
	}
	body, err := json.Marshal(telegramBody{ChatID: id, Text: text})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	r := telegramResult(p.post(ctx, m.Key, body), p.chat == "")
	if r.Outcome == Sent {
		r.MessageID = telegramMessageID(r.Response, chat)
	}
	return r
}

// telegramMessageID is chat/message_id from a sendMessage answer, "" when
// the answer holds none: a message_id is unique only within its chat.
func telegramMessageID(body, chat string) string {
	var a struct {
		Result struct {
			MessageID json.Number `json:"message_id"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(body), &a) != nil || a.Result.MessageID == "" {
		return ""
	}
	return chat + "/" + a.Result.MessageID.String()
}

// telegramDeadChat are the 403 descriptions that say this bot cannot
// reach the chat until its user or admins act: blocked, deleted, kicked,
// never started.
var telegramDeadChat = []string{
	"bot was blocked by the user",
	"user is deactivated",
	"bot was kicked from",
	"bot is not a member of",
	"bot can't initiate conversation",
}

// telegramResult refines the shared classification with the Bot API's
// error body. ownChat says the chat is the recipient's address, which a
// dead chat then marks invalid.
func telegramResult(r Result, ownChat bool) Result {
	if r.HTTPStatus < 400 {
		return r
	}
	var e struct {
		Description string `json:"description"`
		Parameters  struct {
			RetryAfter      int         `json:"retry_after"`
			MigrateToChatID json.Number `json:"migrate_to_chat_id"`
		} `json:"parameters"`
	}
	if json.Unmarshal([]byte(r.Response), &e) != nil {
		return r
	}
	if e.Description != "" {
		addReason(&r, e.Description)
	}
	desc := strings.ToLower(e.Description)
	dead := false
	switch {
	case r.HTTPStatus == 429:
		if d := secondsUp(float64(e.Parameters.RetryAfter)); e.Parameters.RetryAfter > 0 && d > r.RetryAfter {
			r.RetryAfter = d
		}
	case e.Parameters.MigrateToChatID != "":
		// The group became a supergroup with another id; the old one
		// takes nothing more.
		r.Outcome, r.Permanent, dead = Refused, true, true
		r.Detail += " (the chat is now " + e.Parameters.MigrateToChatID.String() + ")"
	case r.HTTPStatus == 400 && strings.Contains(desc, "chat not found"):
		r.Outcome, r.Permanent, dead = Refused, true, true
	case r.HTTPStatus == 403:
		dead = containsAny(desc, telegramDeadChat)
	case r.HTTPStatus == 401, r.HTTPStatus == 404:
		// The Bot API answers a wrong token with 401, a malformed one
		// with 404.
		r.Detail += " (check the bot token)"
	}
	r.InvalidAddress = dead && ownChat && r.Outcome == Refused && r.Permanent
	return r
}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

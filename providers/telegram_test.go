package providers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// telegramToken stands for a bot token; it travels in the request path.
const telegramToken = "123456:AAXXXXsecretXXXX"

// telegramSent is what sendMessage answers: the message it sent.
const telegramSent = `{"ok":true,"result":{"message_id":42,"from":{"id":123456,"is_bot":true,"first_name":"Relay"},"chat":{"id":-1001234567890,"title":"ops","type":"supergroup"},"date":1767225600,"text":"Paid\nThanks."}}`

func telegramURL(base, extra string) string {
	u := "telegram+" + base + "?token=" + url.QueryEscape(telegramToken)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func TestTelegramRequest(t *testing.T) {
	t.Parallel()
	srv, seen := scriptedAPI(t, scriptedAnswer{200, telegramSent, map[string]string{"Content-Type": "application/json"}})
	perRecipient := newProvider(t, telegramURL(srv.URL, ""))
	oneChat := newProvider(t, telegramURL(srv.URL, "chat_id=%40relay_alerts"))
	if perRecipient.HonoursKeys() || oneChat.HonoursKeys() {
		t.Error("HonoursKeys() = true: the Bot API takes no idempotency key")
	}
	toGroup := testMessage("k1")
	toGroup.Address = "-1001234567890"
	toUser := testMessage("k2")
	toUser.Address, toUser.Subject, toUser.Body = " 987654321 ", "", "<b>not bold</b> *nor this*"
	for _, c := range []struct {
		p    Provider
		m    *Message
		body string
		id   string
	}{
		{perRecipient, toGroup, `{"chat_id":-1001234567890,"text":"Paid\nThanks."}`, "-1001234567890/42"},
		// No parse_mode: the text is sent as written, markup and all.
		{perRecipient, toUser, `{"chat_id":987654321,"text":"<b>not bold</b> *nor this*"}`, "987654321/42"},
		// The URL's chat wins over the recipient's address.
		{oneChat, testMessage("k3"), `{"chat_id":"@relay_alerts","text":"Paid\nThanks."}`, "@relay_alerts/42"},
	} {
		r := send(c.p, c.m)
		if r.Outcome != Sent || r.HTTPStatus != 200 || r.MessageID != c.id {
			t.Errorf("%s: got %s status=%d detail %q id=%q, want id %q", c.m.Key, r.Outcome, r.HTTPStatus, r.Detail, r.MessageID, c.id)
		}
		reqs := seen()
		q := reqs[len(reqs)-1]
		if q.method != http.MethodPost || q.path != "/bot"+telegramToken+"/sendMessage" {
			t.Errorf("called %s %s", q.method, q.path)
		}
		if ct, auth := q.header.Get("Content-Type"), q.header.Get("Authorization"); ct != "application/json" || auth != "" {
			t.Errorf("Content-Type %q, Authorization %q: the token belongs in the path only", ct, auth)
		}
		if !sameJSON(t, q.body, c.body) {
			t.Errorf("%s: body %s, want %s", c.m.Key, q.body, c.body)
		}
	}
	// What cannot be sent is refused without a call; a malformed address
	// is marked invalid, as no retry can mend it.
	before := len(seen())
	empty := testMessage("k4")
	empty.Address, empty.Subject, empty.Body = "42", "", " "
	email := testMessage("k5") // ada@example.com
	none := testMessage("k6")
	none.Address = ""
	for _, c := range []struct {
		m       *Message
		invalid bool
	}{{empty, false}, {email, true}, {none, false}} {
		if r := send(perRecipient, c.m); r.Outcome != Refused || !r.Permanent || r.InvalidAddress != c.invalid {
			t.Errorf("%s: got %s permanent=%v invalid=%v (%s)", c.m.Key, r.Outcome, r.Permanent, r.InvalidAddress, r.Detail)
		}
	}
	if n := len(seen()); n != before {
		t.Errorf("%d calls for messages that cannot be sent", n-before)
	}
}

func TestTelegramOutcomes(t *testing.T) {
	t.Parallel()
	tgErr := func(code int, desc, params string) string {
		b := `{"ok":false,"error_code":` + itoa(code) + `,"description":"` + desc + `"`
		if params != "" {
			b += `,"parameters":` + params
		}
		return b + "}"
	}
	for _, c := range []struct {
		answer    scriptedAnswer
		outcome   Outcome
		permanent bool
		invalid   bool // when the chat is the recipient's address
		after     time.Duration
		detail    string
	}{
		{scriptedAnswer{403, tgErr(403, "Forbidden: bot was blocked by the user", ""), nil}, Refused, true, true, 0, "403 Forbidden: Forbidden: bot was blocked by the user"},
		{scriptedAnswer{403, tgErr(403, "Forbidden: user is deactivated", ""), nil}, Refused, true, true, 0, "user is deactivated"},
		{scriptedAnswer{403, tgErr(403, "Forbidden: bot was kicked from the supergroup chat", ""), nil}, Refused, true, true, 0, "kicked"},
		{scriptedAnswer{403, tgErr(403, "Forbidden: bot can't initiate conversation with a user", ""), nil}, Refused, true, true, 0, "initiate"},
		{scriptedAnswer{403, tgErr(403, "Forbidden: bot can't send messages to bots", ""), nil}, Refused, true, false, 0, "messages to bots"},
		{scriptedAnswer{400, tgErr(400, "Bad Request: chat not found", ""), nil}, Refused, true, true, 0, "chat not found"},
		{scriptedAnswer{400, tgErr(400, "Bad Request: group chat was upgraded to a supergroup chat", `{"migrate_to_chat_id":-1009876543210}`), nil},
			Refused, true, true, 0, "(the chat is now -1009876543210)"},
		{scriptedAnswer{400, tgErr(400, "Bad Request: message is too long", ""), nil}, Refused, true, false, 0, "message is too long"},
		{scriptedAnswer{401, tgErr(401, "Unauthorized", ""), nil}, Refused, true, false, 0, "401 Unauthorized: Unauthorized (check the bot token)"},
		{scriptedAnswer{404, tgErr(404, "Not Found", ""), nil}, Refused, true, false, 0, "(check the bot token)"},
		{scriptedAnswer{429, tgErr(429, "Too Many Requests: retry after 7", `{"retry_after":7}`), nil}, Refused, false, false, 7 * time.Second, "retry after 7"},
		{scriptedAnswer{429, tgErr(429, "Too Many Requests: retry after 2", `{"retry_after":2}`), map[string]string{"Retry-After": "9"}}, Refused, false, false, 9 * time.Second, "retry after 2"},
		{scriptedAnswer{500, tgErr(500, "Internal Server Error", ""), nil}, Unknown, false, false, 0, "500 Internal Server Error"},
		{scriptedAnswer{502, "<html>bad gateway</html>", nil}, Unknown, false, false, 0, "502 Bad Gateway"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, false, 0, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			m := testMessage("k")
			m.Address = "987654321"
			for _, fixed := range []bool{false, true} {
				extra := "timeout=5s"
				if fixed {
					extra += "&chat_id=987654321"
				}
				r := send(newProvider(t, telegramURL(srv.URL, extra)), m)
				// A chat the URL names is the route's: it fails the
				// notification but marks no recipient's address.
				invalid := c.invalid && !fixed
				if r.Outcome != c.outcome || r.Permanent != c.permanent || r.RetryAfter != c.after || !strings.Contains(r.Detail, c.detail) || r.InvalidAddress != invalid {
					t.Errorf("chat_id in URL %v: got %s permanent=%v retry-after=%v invalid-address=%v detail %q", fixed, r.Outcome, r.Permanent, r.RetryAfter, r.InvalidAddress, r.Detail)
				}
				if r.HTTPStatus == 429 && !r.Overloaded {
					t.Error("a 429 is not marked overloaded")
				}
			}
		})
	}
}

// The token is the bot's credential: Name, problems and errors never show
// it.
func TestTelegramURL(t *testing.T) {
	t.Parallel()
	p := newProvider(t, telegramURL("https://api.telegram.org", ""))
	if p.Name() != "telegram://api.telegram.org" {
		t.Errorf("Name() = %q", p.Name())
	}
	if e := p.(*Telegram).httpEndpoint; e.url != "https://api.telegram.org/bot"+telegramToken+"/sendMessage" || e.token != "" || e.timeout != defaultTimeout {
		t.Errorf("calls %q (bearer %q) with timeout %v", e.url, e.token, e.timeout)
	}
	for _, c := range []struct{ url, want string }{
		{"telegram+https://api.telegram.org", `missing parameter "token"`},
		{"telegram+https://api.telegram.org?token=", `missing parameter "token"`},
		{"telegram+https://api.telegram.org?token=XXXXsecretXXXX", `parameter "token": not a bot token`},
		{"telegram+https://api.telegram.org/bot1/sendMessage?token=" + telegramToken, "telegram URLs take no path"},
		{"telegram+https://u:XXXXsecretXXXX@api.telegram.org?token=" + telegramToken, "telegram URLs take no userinfo"},
		{telegramURL("https://api.telegram.org", "chat_id=ops"), `parameter "chat_id": not a chat id`},
		{telegramURL("https://api.telegram.org", "parse_mode=HTML"), `unknown parameter "parse_mode" (supported: chat_id, concurrency, name, timeout, token)`},
		{telegramURL("https://api.telegram.org", "idempotency=honoured"), `unknown parameter "idempotency"`},
		{telegramURL("https://api.telegram.org", "timeout=soon"), `parameter "timeout": "soon" is not a positive Go duration`},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s) = %v, want %q", Redact(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("New(%s): the error quotes the token: %v", Redact(c.url), err)
		}
	}
}

package providers

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// discordPath stands for a Discord webhook's path: its id and its token,
// the secret.
const discordPath = "/api/webhooks/123456789012345678/XXXXsecretXXXX"

// discordMessage is what Discord answers a wait=true execute: the message.
const discordMessage = `{"id":"1234567890123456789","type":0,"content":"Paid\nThanks.","channel_id":"99","webhook_id":"123456789012345678"}`

func TestDiscordRequest(t *testing.T) {
	t.Parallel()
	srv, seen := scriptedAPI(t, scriptedAnswer{200, discordMessage, map[string]string{"Content-Type": "application/json"}})
	p := newProvider(t, "discord+"+srv.URL+discordPath)
	if p.HonoursKeys() {
		t.Error("HonoursKeys() = true: Discord webhooks take no idempotency key")
	}
	withBodyOnly := testMessage("k2")
	withBodyOnly.Subject = ""
	hostile := testMessage("k3")
	hostile.Subject, hostile.Body = "Alert @everyone", "ping <@123> and <@&456> @here"
	for _, c := range []struct {
		m    *Message
		body string
	}{
		{testMessage("k1"), `{"content":"Paid\nThanks.","allowed_mentions":{"parse":[]}}`},
		{withBodyOnly, `{"content":"Thanks.","allowed_mentions":{"parse":[]}}`},
		// The text goes as written; the empty parse list is what keeps
		// Discord from pinging anyone it names.
		{hostile, `{"content":"Alert @everyone\nping <@123> and <@&456> @here","allowed_mentions":{"parse":[]}}`},
	} {
		r := send(p, c.m)
		if r.Outcome != Sent || r.HTTPStatus != 200 || r.MessageID != "1234567890123456789" {
			t.Errorf("%s: got %s status=%d detail %q id=%q", c.m.Key, r.Outcome, r.HTTPStatus, r.Detail, r.MessageID)
		}
		reqs := seen()
		q := reqs[len(reqs)-1]
		if q.method != http.MethodPost || q.path != discordPath {
			t.Errorf("called %s %s", q.method, q.path)
		}
		if ct, auth := q.header.Get("Content-Type"), q.header.Get("Authorization"); ct != "application/json" || auth != "" {
			t.Errorf("Content-Type %q, Authorization %q", ct, auth)
		}
		if !sameJSON(t, q.body, c.body) {
			t.Errorf("%s: body %s, want %s", c.m.Key, q.body, c.body)
		}
	}
	empty := testMessage("k4")
	empty.Subject, empty.Body = "", " "
	before := len(seen())
	if r := send(p, empty); r.Outcome != Refused || !r.Permanent || len(seen()) != before {
		t.Errorf("empty message: got %s permanent=%v", r.Outcome, r.Permanent)
	}
}

// Without wait=true Discord answers before the message is saved: every
// call must carry it, and thread_id when the URL names a thread.
func TestDiscordQuery(t *testing.T) {
	t.Parallel()
	queries := make(chan url.Values, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(discordMessage))
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ extra, want string }{
		{"", "wait=true"},
		{"?thread_id=555", "thread_id=555&wait=true"},
	} {
		if r := send(newProvider(t, "discord+"+srv.URL+discordPath+c.extra), testMessage("k")); r.Outcome != Sent {
			t.Fatalf("%q: %+v", c.extra, r)
		}
		if q := (<-queries).Encode(); q != c.want {
			t.Errorf("%q: called with query %q, want %q", c.extra, q, c.want)
		}
	}
}

func TestDiscordOutcomes(t *testing.T) {
	t.Parallel()
	discordErr := func(code int, msg string) string {
		return `{"message":"` + msg + `","code":` + itoa(code) + `}`
	}
	for _, c := range []struct {
		answer    scriptedAnswer
		outcome   Outcome
		permanent bool
		after     time.Duration
		detail    string
	}{
		{scriptedAnswer{400, `{"message":"Invalid Form Body","code":50035,"errors":{"content":{"_errors":[{"code":"BASE_TYPE_MAX_LENGTH","message":"Must be 2000 or fewer in length."}]}}}`, nil},
			Refused, true, 0, "400 Bad Request: 50035 Invalid Form Body"},
		{scriptedAnswer{400, discordErr(50006, "Cannot send an empty message"), nil}, Refused, true, 0, "50006 Cannot send an empty message"},
		{scriptedAnswer{401, discordErr(50027, "Invalid Webhook Token"), nil}, Refused, true, 0, "401 Unauthorized: 50027 Invalid Webhook Token"},
		{scriptedAnswer{403, discordErr(50013, "Missing Permissions"), nil}, Refused, true, 0, "50013 Missing Permissions"},
		{scriptedAnswer{404, discordErr(10015, "Unknown Webhook"), nil}, Refused, true, 0, "404 Not Found: 10015 Unknown Webhook"},
		// retry_after is seconds with a fraction, rounded up; with a
		// Retry-After too, the longer wait wins.
		{scriptedAnswer{429, `{"message":"You are being rate limited.","retry_after":2.5,"global":false}`, nil},
			Refused, false, 2500 * time.Millisecond, "429 Too Many Requests: You are being rate limited."},
		{scriptedAnswer{429, `{"message":"You are being rate limited.","retry_after":0.0012,"global":true}`, map[string]string{"Retry-After": "3"}},
			Refused, false, 3 * time.Second, "(global rate limit)"},
		{scriptedAnswer{429, `{"message":"You are being rate limited.","retry_after":64.57,"global":false}`, map[string]string{"Retry-After": "1"}},
			Refused, false, 64570 * time.Millisecond, "rate limited"},
		{scriptedAnswer{500, `{"message":"500: Internal Server Error","code":0}`, nil}, Unknown, false, 0, "500 Internal Server Error"},
		{scriptedAnswer{502, "<html>bad gateway</html>", nil}, Unknown, false, 0, "502 Bad Gateway"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, 0, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			r := send(newProvider(t, "discord+"+srv.URL+discordPath+"?timeout=5s"), testMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.RetryAfter != c.after || !strings.Contains(r.Detail, c.detail) || r.InvalidAddress {
				t.Errorf("got %s permanent=%v retry-after=%v invalid-address=%v detail %q", r.Outcome, r.Permanent, r.RetryAfter, r.InvalidAddress, r.Detail)
			}
			if r.HTTPStatus == 429 && !r.Overloaded {
				t.Error("a 429 is not marked overloaded")
			}
			if strings.Contains(r.Detail, "<html>") {
				t.Errorf("detail quotes an HTML body: %q", r.Detail)
			}
		})
	}
}

// The token in the path is the webhook's credential: Name never shows it.
func TestDiscordName(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "discord+https://discord.com"+discordPath)
	if p.Name() != "discord://discord.com" {
		t.Errorf("Name() = %q", p.Name())
	}
	if e := p.(*Discord).httpEndpoint; e.url != "https://discord.com"+discordPath+"?wait=true" || e.timeout != defaultTimeout {
		t.Errorf("calls %q with timeout %v", e.url, e.timeout)
	}
	p = newProvider(t, "discord+https://discord.com"+discordPath+"?name=ops-discord&timeout=3s")
	if p.Name() != "ops-discord" || p.(*Discord).timeout != 3*time.Second {
		t.Errorf("Name() = %q, timeout %v", p.Name(), p.(*Discord).timeout)
	}
}

// A Discord URL's problems say what is wrong and never quote the token.
func TestDiscordURLProblems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"discord+https://discord.com", "the path is not a webhook's /webhooks/ID/TOKEN"},
		{"discord+https://discord.com/api/webhooks/123456789012345678", "the path is not a webhook's"},
		{"discord+https://discord.com/api/webhooks/abc/XXXXsecretXXXX", "the path is not a webhook's"},
		{"discord+https://u:p@discord.com" + discordPath, "discord URLs take no credentials"},
		{"discord+https://discord.com" + discordPath + "?token=abc", `unknown parameter "token" (supported: concurrency, name, thread_id, timeout)`},
		{"discord+https://discord.com" + discordPath + "?wait=false", `unknown parameter "wait"`},
		{"discord+https://discord.com" + discordPath + "?thread_id=general", `parameter "thread_id": want a thread's id`},
		{"discord+https://discord.com" + discordPath + "?timeout=soon", `parameter "timeout": "soon" is not a positive Go duration`},
		{"discord+https://" + discordPath, "missing host"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, problem := build(u)
		if !strings.Contains(problem, c.want) {
			t.Errorf("%s: %q, want %q", c.url, problem, c.want)
		}
		if strings.Contains(problem, "XXXXsecretXXXX") {
			t.Errorf("%s: problem quotes the token: %q", c.url, problem)
		}
		if _, err := New(c.url); err == nil || strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("New(%s) = %v: want an error without the token", c.url, err)
		}
	}
}

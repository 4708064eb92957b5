package providers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// slackPath stands for the secret part of a Slack webhook URL.
const slackPath = "/services/T0001/B0002/XXXXsecretXXXX"

func TestSlackRequest(t *testing.T) {
	t.Parallel()
	srv, seen := scriptedAPI(t, scriptedAnswer{200, "ok", map[string]string{"Content-Type": "text/html"}})
	p := newProvider(t, "slack+"+srv.URL+slackPath)
	if p.HonoursKeys() {
		t.Error("HonoursKeys() = true: Slack incoming webhooks take no idempotency key")
	}
	withBodyOnly := testMessage("k2")
	withBodyOnly.Subject = ""
	hostile := testMessage("k3")
	hostile.Subject, hostile.Body = "Alert <!channel>", "a & b <@U123> <https://evil.example|click>"
	for _, c := range []struct {
		m    *Message
		body string
	}{
		{testMessage("k1"), `{"text":"Paid\nThanks."}`},
		{withBodyOnly, `{"text":"Thanks."}`},
		{hostile, `{"text":"Alert &lt;!channel&gt;\na &amp; b &lt;@U123&gt; &lt;https://evil.example|click&gt;"}`},
	} {
		r := send(p, c.m)
		if r.Outcome != Sent || r.HTTPStatus != 200 || r.Detail != "200 OK" || r.MessageID != "" {
			t.Errorf("%s: got %s status=%d detail %q id=%q", c.m.Key, r.Outcome, r.HTTPStatus, r.Detail, r.MessageID)
		}
		reqs := seen()
		q := reqs[len(reqs)-1]
		if q.method != http.MethodPost || q.path != slackPath {
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

func TestSlackOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer    scriptedAnswer
		outcome   Outcome
		permanent bool
		after     time.Duration
		detail    string
	}{
		{scriptedAnswer{400, "invalid_payload", nil}, Refused, true, 0, "400 Bad Request: invalid_payload"},
		{scriptedAnswer{403, "invalid_token", nil}, Refused, true, 0, "403 Forbidden: invalid_token"},
		{scriptedAnswer{403, "action_prohibited", nil}, Refused, true, 0, "action_prohibited"},
		{scriptedAnswer{404, "no_service", nil}, Refused, true, 0, "404 Not Found: no_service"},
		{scriptedAnswer{404, "channel_not_found", nil}, Refused, true, 0, "channel_not_found"},
		{scriptedAnswer{410, "channel_is_archived", nil}, Refused, true, 0, "410 Gone: channel_is_archived"},
		{scriptedAnswer{429, "rate_limited", map[string]string{"Retry-After": "30"}}, Refused, false, 30 * time.Second, "429 Too Many Requests: rate_limited"},
		{scriptedAnswer{500, "rollup_error", nil}, Unknown, false, 0, "500 Internal Server Error: rollup_error"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, 0, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			r := send(newProvider(t, "slack+"+srv.URL+slackPath+"?timeout=5s"), testMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.RetryAfter != c.after || !strings.Contains(r.Detail, c.detail) || r.InvalidAddress {
				t.Errorf("got %s permanent=%v retry-after=%v invalid-address=%v detail %q", r.Outcome, r.Permanent, r.RetryAfter, r.InvalidAddress, r.Detail)
			}
			if strings.Contains(r.Detail, "<html>") {
				t.Errorf("detail quotes an HTML body: %q", r.Detail)
			}
		})
	}
}

// The path is the webhook's credential: Name never shows it.
func TestSlackName(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "slack+https://hooks.slack.com"+slackPath)
	if p.Name() != "slack://hooks.slack.com" {
		t.Errorf("Name() = %q", p.Name())
	}
	if e := p.(*Slack).httpEndpoint; e.url != "https://hooks.slack.com"+slackPath || e.timeout != defaultTimeout {
		t.Errorf("calls %q with timeout %v", e.url, e.timeout)
	}
	p = newProvider(t, "slack+https://hooks.slack.com"+slackPath+"?name=ops-channel&timeout=3s")
	if p.Name() != "ops-channel" || p.(*Slack).timeout != 3*time.Second {
		t.Errorf("Name() = %q, timeout %v", p.Name(), p.(*Slack).timeout)
	}
}

// A Slack URL's problems never quote the path. (New's own wrapper quotes
// the URL through Redact, which is url.go's business.)
func TestSlackURLProblems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"slack+https://hooks.slack.com", "missing path"},
		{"slack+https://hooks.slack.com/", "missing path"},
		{"slack+https://u:p@hooks.slack.com" + slackPath, "slack URLs take no credentials"},
		{"slack+https://hooks.slack.com" + slackPath + "?token=abc", `unknown parameter "token" (supported: concurrency, name, timeout)`},
		{"slack+https://hooks.slack.com" + slackPath + "?idempotency=honoured", `unknown parameter "idempotency"`},
		{"slack+https://hooks.slack.com" + slackPath + "?timeout=soon", `parameter "timeout": "soon" is not a positive Go duration`},
		{"slack+https://hooks.slack.com" + slackPath + "?name=", `parameter "name" is empty`},
		{"slack+https://hooks.slack.com" + slackPath + "?timeout=1s&timeout=2s", `parameter "timeout" given 2 times`},
		{"slack+https://" + slackPath, "missing host"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, problem := build(u)
		if !strings.Contains(problem, c.want) {
			t.Errorf("%s: %q, want %q", c.url, problem, c.want)
		}
		if strings.Contains(problem, "XXXXsecretXXXX") || strings.Contains(problem, "B0002") {
			t.Errorf("%s: problem quotes the path: %q", c.url, problem)
		}
	}
}

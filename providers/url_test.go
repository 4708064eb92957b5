package providers

import (
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(t.TempDir(), "out.log")
	cases := []struct {
		url     string
		name    string
		honours bool
		target  string        // the URL an HTTP provider calls
		timeout time.Duration // for HTTP providers
	}{
		{url: "log://stdout", name: "log://stdout"},
		{url: "log://stderr", name: "log://stderr"},
		{url: "log://" + logPath, name: "log://" + logPath},
		{url: "log://stdout?name=dry-run", name: "dry-run"},
		{url: "webhook+http://127.0.0.1:9/hook", name: "webhook://127.0.0.1:9/hook", target: "http://127.0.0.1:9/hook", timeout: defaultTimeout},
		{url: "webhook+https://hooks.example.com", name: "webhook://hooks.example.com", target: "https://hooks.example.com", timeout: defaultTimeout},
		{
			url:  "webhook+https://u:p@hooks.example.com/a%2Fb?idempotency=honoured&timeout=1500ms&name=hooks",
			name: "hooks", honours: true, target: "https://hooks.example.com/a%2Fb", timeout: 1500 * time.Millisecond,
		},
		{
			url:  "email-http+http://127.0.0.1:9099/v1/emails?from=relay%40example.com&token=sk_live_x&idempotency=none",
			name: "email-http://127.0.0.1:9099/v1/emails", target: "http://127.0.0.1:9099/v1/emails", timeout: defaultTimeout,
		},
		{
			url:  "email-http+https://api.resend.com/emails?from=Acme+%3Cno-reply%40acme.test%3E&idempotency=honoured",
			name: "email-http://api.resend.com/emails", honours: true, target: "https://api.resend.com/emails", timeout: defaultTimeout,
		},
	}
	for _, c := range cases {
		p, err := New(c.url)
		if err != nil {
			t.Errorf("New(%q): %v", c.url, err)
			continue
		}
		t.Cleanup(func() { p.(io.Closer).Close() })
		if p.Name() != c.name || p.HonoursKeys() != c.honours {
			t.Errorf("New(%q): Name() = %q, HonoursKeys() = %v; want %q, %v", c.url, p.Name(), p.HonoursKeys(), c.name, c.honours)
		}
		if c.target == "" {
			if _, ok := p.(*Log); !ok {
				t.Errorf("New(%q) = %T, want *Log", c.url, p)
			}
			continue
		}
		e := endpoint(p)
		if e.url != c.target || e.timeout != c.timeout || e.client.Timeout != c.timeout {
			t.Errorf("New(%q): calls %q with timeout %v/%v, want %q, %v", c.url, e.url, e.timeout, e.client.Timeout, c.target, c.timeout)
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		want string // the whole error, or a part of it when partial
	}{
		{"foo://x", `provider URL "foo://x": unknown scheme "foo" (supported: log, webhook+http, webhook+https, email-http+http, email-http+https, smtp, smtps, twilio+http, twilio+https, fcm+http, fcm+https, slack+http, slack+https, discord+http, discord+https, telegram+http, telegram+https, teams+http, teams+https, mailgun+http, mailgun+https, ses+http, ses+https, webpush+http, webpush+https, apns)`},
		{"stdout", `provider URL "stdout": missing scheme (supported: log, webhook+http, webhook+https, email-http+http, email-http+https, smtp, smtps, twilio+http, twilio+https, fcm+http, fcm+https, slack+http, slack+https, discord+http, discord+https, telegram+http, telegram+https, teams+http, teams+https, mailgun+http, mailgun+https, ses+http, ses+https, webpush+http, webpush+https, apns)`},
		{"log:stdout", `expected log://`},
		{"log://relative/file.log", `log target must be stdout, stderr or an absolute file path`},
		{"log://stdout?timeout=1s", `unknown parameter "timeout" (supported: name)`},
		{"log:///nonexistent-dir/x/y.log", `open log file`},
		{"webhook+http://h/x?timeout=fast", `parameter "timeout": "fast" is not a positive Go duration`},
		{"webhook+http://h/x?timeout=-1s", `parameter "timeout": "-1s"`},
		{"webhook+http://h/x?tokn=abc&timout=1s", `unknown parameters "timout", "tokn" (supported: allow, allow_prefix, allow_private, concurrency, idempotency, name, secret, timeout, to, token)`},
		{"webhook+http://h/x?timeout=1s&timeout=2s", `parameter "timeout" given 2 times`},
		{"webhook+http://h/x?idempotency=yes", `parameter "idempotency": "yes" is neither honoured nor none`},
		{"webhook+http://h/x?token=", `parameter "token" is empty`},
		{"webhook+http://h/x?name=", `parameter "name" is empty`},
		{"webhook+http:///x", `missing host`},
		{"webhook+http://h/x#frag", `unexpected fragment`},
		{"webhook+http://u:p@h/x?token=t", `both userinfo and parameter "token" set`},
		{"email-http+https://api.example.com/emails", `missing parameter "from"`},
		{"email-http+https://api.example.com/emails?from=nobody", `parameter "from": "nobody" is not an email address`},
		{"email-http+https://api.example.com/emails?from=a%40b.c&fromm=x", `unknown parameter "fromm" (supported: concurrency, from, idempotency, list_unsubscribe, message_stream, name, preset, timeout, token)`},
		{"webhook+http://h:port/x", `not a valid URL: invalid port ":port" after host`},
		{"webhook+http://h/x?concurrency=0", `parameter "concurrency": "0" is not a positive whole number (try 64)`},
		{"smtp://mail.example.com?from=a%40b.c&concurrency=many", `parameter "concurrency": "many" is not a positive whole number`},
	}
	for _, c := range cases {
		_, err := New(c.url)
		if err == nil {
			t.Errorf("New(%q): no error, want %q", c.url, c.want)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q):\n got %v\nwant %s", c.url, err, c.want)
		}
	}
}

// Secrets must not reach an error or a Name, however the URL is broken.
func TestNoSecretInErrorsOrNames(t *testing.T) {
	t.Parallel()
	secrets := []string{"hunter2", "s3cret", "apikey-val", "fragtail"}
	bad := []string{
		"webhook+https://admin:hunter2@h/x?token=s3cret",                    // both: an error
		"webhook+https://admin:hunter2@h/x?tokn=1",                          // a typo beside a password
		"webhook+https://h/x?token=s3cret&apikey=apikey-val",                // a secret under a wrong name
		"webhook+https://h/x?token=s3cret#fragtail",                         // an unescaped # in a token
		"webhook+https://admin:hunter2/x@h/x",                               // an unescaped / in a password
		"webhook+https://admin:hunter2#x@h/x",                               // an unescaped # in a password
		"email-http+https://u:hunter2@h/x?token=s3cret",                     // missing from, and more
		"nope://admin:hunter2@h/x?token=s3cret",                             // unknown scheme
		"webhook+https://h/x?timeout=bad&token=s3cret",                      // a bad value beside a token
		"webhook+https://admin:hunter2@h:port/x?token=s3cret",               // unparsable
		"email-http+https://h/x?from=a%40b.c&token=s3cret&Token=apikey-val", // a case slip
		"slack+https://hooks.slack.com/services/T0/B0/hunter2?tokn=1",       // a Slack webhook's path is its secret
		"discord+https://discord.com/api/webhooks/1/hunter2?tokn=1",         // so is a Discord webhook's
	}
	for _, raw := range bad {
		_, err := New(raw)
		if err == nil {
			t.Errorf("New(%q): no error", raw)
			continue
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("New(%q) error leaks %q: %v", raw, s, err)
			}
		}
	}
	good := []string{
		"webhook+https://admin:hunter2@h/x",
		"email-http+https://h/x?from=a%40b.c&token=s3cret",
	}
	for _, raw := range good {
		p := newProvider(t, raw)
		for _, s := range append(secrets, "admin", "?", "token") {
			if strings.Contains(p.Name(), s) {
				t.Errorf("New(%q).Name() = %q leaks %q", raw, p.Name(), s)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"log://stdout", "log://stdout"},
		{"webhook+https://h/x?timeout=1s&name=n", "webhook+https://h/x?timeout=1s&name=n"},
		{"webhook+https://user:pw@h:8443/x", "webhook+https://REDACTED@h:8443/x"},
		{"webhook+https://user@h/x", "webhook+https://REDACTED@h/x"},
		{"webhook+https://h/x?token=abc&timeout=1s", "webhook+https://h/x?token=REDACTED&timeout=1s"},
		{"webhook+https://h/x?tok%65n=abc", "webhook+https://h/x?tok%65n=REDACTED"},
		{"webhook+https://h/x?apikey=abc&from=a%40b", "webhook+https://h/x?apikey=REDACTED&from=a%40b"},
		{"webhook+https://h/x?flag", "webhook+https://h/x?flag"},
		{"webhook+https://h/x#frag", "webhook+https://h/x#REDACTED"},
		{"webhook+https://u:p@ss@h/x", "webhook+https://REDACTED@h/x"},
		{"webhook+https://u:p/ss@h/x", "webhook+https://REDACTED"}, // does not parse
		{"not a url at all", "not a url at all"},
		{"slack+https://hooks.slack.com/services/T0/B0/s3cret", "slack+https://hooks.slack.com/REDACTED"},
		{"discord+https://discord.com/api/webhooks/1/s3cret?thread_id=2", "discord+https://discord.com/REDACTED?thread_id=2"},
		{"teams+https://h.example/workflows/w/invoke?api-version=1&sig=s3cret", "teams+https://h.example/REDACTED?api-version=REDACTED&sig=REDACTED"},
	}
	for _, c := range cases {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzRedact checks that whatever parses as a URL, its redaction carries
// no password, no token and no other non-public parameter value.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"webhook+https://u:p@h/x?token=t", "email-http+http://h/x?from=a%40b&token=t#f",
		"log:///tmp/x", "x://a@b@c/d?token=1&token=2;token=3", "x://h/?tok%65n=v", "x://[::1]:80/?a=b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := Redact(raw)
		u, err := url.Parse(r)
		if err != nil {
			return
		}
		if _, has := u.User.Password(); has || u.User != nil && u.User.Username() != "REDACTED" {
			t.Errorf("Redact(%q) = %q keeps userinfo", raw, r)
		}
		q, _ := url.ParseQuery(u.RawQuery)
		for k, vs := range q {
			for _, v := range vs {
				if v != "" && v != "REDACTED" && !slices.Contains(publicParams, k) {
					t.Errorf("Redact(%q) = %q keeps %s=%s", raw, r, k, v)
				}
			}
		}
		if u.Fragment != "" && u.Fragment != "REDACTED" {
			t.Errorf("Redact(%q) = %q keeps the fragment", raw, r)
		}
	})
}

// A provider's window ceiling: its URL's concurrency, else its kind's
// default; the log provider is unbounded.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]int{
		"webhook+http://h/x":                                 HTTPConcurrency,
		"webhook+http://h/x?concurrency=64":                  64,
		"email-http+https://api.example.com/e?from=a%40b.c":  HTTPConcurrency,
		"smtp://mail.example.com?from=a%40b.c":               SMTPConcurrency,
		"smtp://mail.example.com?from=a%40b.c&concurrency=2": 2,
		"log://stdout": 0,
	} {
		p, err := New(url)
		if err != nil {
			t.Fatal(err)
		}
		if got := Concurrency(p); got != want {
			t.Errorf("Concurrency(%s) = %d, want %d", url, got, want)
		}
	}
}

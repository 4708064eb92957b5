package providers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptedAnswer is what a fake API answers.
type scriptedAnswer struct {
	status int
	body   string
	header map[string]string
}

// apiRequest is one request as a fake API saw it.
type apiRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

// scriptedAPI starts a server that records each request and gives a. It
// returns the server and a function that yields the requests so far.
func scriptedAPI(t *testing.T, a scriptedAnswer) (*httptest.Server, func() []apiRequest) {
	t.Helper()
	return lossyAPI(t, a, 0)
}

// lossyAPI is scriptedAPI that loses its answer to the first lose
// requests: it reads each whole and closes the connection without a word,
// as a remote that acted on a request and crashed before answering.
func lossyAPI(t *testing.T, a scriptedAnswer, lose int) (*httptest.Server, func() []apiRequest) {
	t.Helper()
	var mu sync.Mutex
	var seen []apiRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, apiRequest{r.Method, r.URL.Path, r.Header.Clone(), b})
		n := len(seen)
		mu.Unlock()
		if n <= lose {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			c.Close()
			return
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []apiRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]apiRequest(nil), seen...)
	}
}

// sameJSON reports whether got is the JSON document want, field for field.
func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("request body %q: %v", got, err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

const presetFrom = "from=Acme%20%3Cno-reply%40acme.test%3E"

func htmlMessage(key string) *Message {
	m := testMessage(key)
	m.HTML = "<p>Thanks.</p>"
	return m
}

// Each preset sends its API's exact request: path, headers, body.
func TestPresetRequests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		preset string
		path   string // appended to the server's URL
		answer scriptedAnswer
		m      *Message
		// wantPath is the path called; header the headers that must be
		// there ("" for must be absent).
		wantPath string
		header   map[string]string
		body     string
		id       string
	}{
		{
			preset: "postmark", path: "", // the host alone: the preset knows the path
			answer: scriptedAnswer{200, `{"To":"ada@example.com","SubmittedAt":"2025-01-01T00:00:00Z","MessageID":"b7bc2f4a-e38e-4336-af7d-e6c392c2f817","ErrorCode":0,"Message":"OK"}`, nil},
			m:      htmlMessage("notif-1"), wantPath: "/email",
			header: map[string]string{"X-Postmark-Server-Token": "tok", "Authorization": "", "Accept": "application/json", "Content-Type": "application/json", "Idempotency-Key": "notif-1"},
			body: `{"From":"Acme <no-reply@acme.test>","To":"ada@example.com","Subject":"Paid","TextBody":"Thanks.","HtmlBody":"<p>Thanks.</p>",
				"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}]}`,
			id: "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
		},
		{
			preset: "postmark", path: "/email",
			answer: scriptedAnswer{200, `{"MessageID":"m-2","ErrorCode":0,"Message":"OK"}`, nil},
			m:      testMessage("notif-2"), wantPath: "/email",
			header: map[string]string{"X-Postmark-Server-Token": "tok"},
			body: `{"From":"Acme <no-reply@acme.test>","To":"ada@example.com","Subject":"Paid","TextBody":"Thanks.",
				"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}]}`,
			id: "m-2",
		},
		{
			preset: "resend", path: "/",
			answer: scriptedAnswer{200, `{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}`, nil},
			m:      htmlMessage("notif-3"), wantPath: "/emails",
			header: map[string]string{"Authorization": "Bearer tok", "X-Postmark-Server-Token": "", "Accept": "application/json", "Content-Type": "application/json", "Idempotency-Key": "notif-3"},
			body: `{"from":"Acme <no-reply@acme.test>","to":["ada@example.com"],"subject":"Paid","text":"Thanks.","html":"<p>Thanks.</p>",
				"headers":{"Auto-Submitted":"auto-generated"}}`,
			id: "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794",
		},
		{
			preset: "sendgrid", path: "/v3/mail/send",
			answer: scriptedAnswer{202, "", map[string]string{"X-Message-Id": "W86EgYT6SQKk0lRflfLRsA"}},
			m:      htmlMessage("notif-4"), wantPath: "/v3/mail/send",
			header: map[string]string{"Authorization": "Bearer tok", "Accept": "application/json", "Content-Type": "application/json", "Idempotency-Key": "notif-4"},
			body: `{"personalizations":[{"to":[{"email":"ada@example.com"}]}],"from":{"email":"no-reply@acme.test","name":"Acme"},"subject":"Paid",
				"content":[{"type":"text/plain","value":"Thanks."},{"type":"text/html","value":"<p>Thanks.</p>"}],
				"headers":{"Auto-Submitted":"auto-generated"}}`,
			id: "W86EgYT6SQKk0lRflfLRsA",
		},
		{
			preset: "sendgrid", path: "",
			answer: scriptedAnswer{202, "", map[string]string{"X-Message-Id": "id-5"}},
			// HTML only: the text part is made from it.
			m: func() *Message {
				m := htmlMessage("notif-5")
				m.Address, m.Body = "Ada Lovelace <ada@example.com>", ""
				return m
			}(),
			wantPath: "/v3/mail/send",
			body: `{"personalizations":[{"to":[{"email":"ada@example.com","name":"Ada Lovelace"}]}],"from":{"email":"no-reply@acme.test","name":"Acme"},"subject":"Paid",
				"content":[{"type":"text/plain","value":"Thanks."},{"type":"text/html","value":"<p>Thanks.</p>"}],
				"headers":{"Auto-Submitted":"auto-generated"}}`,
			id: "id-5",
		},
	}
	for _, c := range cases {
		t.Run(c.preset+c.path, func(t *testing.T) {
			t.Parallel()
			srv, seen := scriptedAPI(t, c.answer)
			p := newProvider(t, "email-http+"+srv.URL+c.path+"?preset="+c.preset+"&token=tok&"+presetFrom)
			r := send(p, c.m)
			if r.Outcome != Sent || r.MessageID != c.id || r.HTTPStatus != c.answer.status {
				t.Errorf("got %s id=%q status=%d (%s), want sent id=%q", r.Outcome, r.MessageID, r.HTTPStatus, r.Detail, c.id)
			}
			reqs := seen()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests", len(reqs))
			}
			q := reqs[0]
			if q.method != http.MethodPost || q.path != c.wantPath {
				t.Errorf("called %s %s, want POST %s", q.method, q.path, c.wantPath)
			}
			for k, want := range c.header {
				if got := q.header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if !sameJSON(t, q.body, c.body) {
				t.Errorf("body\n got %s\nwant %s", q.body, c.body)
			}
		})
	}
}

// Each preset reads its API's error bodies: which refusals are permanent,
// which retryable, which mean the address is dead.
func TestPresetOutcomes(t *testing.T) {
	t.Parallel()
	const (
		perm    = "permanent"
		retry   = "retryable"
		unknown = "unknown"
	)
	cases := []struct {
		preset string
		answer scriptedAnswer
		want   string
		dead   bool          // InvalidAddress
		after  time.Duration // RetryAfter
		detail string
	}{
		{"postmark", scriptedAnswer{422, `{"ErrorCode":406,"Message":"You tried to send to recipient(s) that have been marked as inactive. Found inactive addresses: ada@example.com."}`, nil},
			perm, true, 0, "422 Unprocessable Entity: ErrorCode 406: You tried to send"},
		{"postmark", scriptedAnswer{422, `{"ErrorCode":300,"Message":"Invalid 'From' address: 'no-reply@acme.test'."}`, nil},
			perm, false, 0, "ErrorCode 300: Invalid 'From' address"},
		{"postmark", scriptedAnswer{401, `{"ErrorCode":10,"Message":"Bad or missing Server API token."}`, nil},
			perm, false, 0, "ErrorCode 10"},
		{"postmark", scriptedAnswer{429, `{"ErrorCode":429,"Message":"Rate limit exceeded."}`, map[string]string{"Retry-After": "30"}},
			retry, false, 30 * time.Second, "ErrorCode 429"},
		{"postmark", scriptedAnswer{422, `{"ErrorCode":429,"Message":"Rate limit exceeded."}`, nil},
			retry, false, 0, "ErrorCode 429"},
		{"postmark", scriptedAnswer{500, `{"ErrorCode":100,"Message":"Maintenance."}`, nil},
			retry, false, 0, "ErrorCode 100"},
		{"postmark", scriptedAnswer{500, `{"Message":"boom"}`, nil},
			unknown, false, 0, "500 Internal Server Error"},
		{"postmark", scriptedAnswer{422, `not json`, nil},
			perm, false, 0, "422 Unprocessable Entity"},

		{"resend", scriptedAnswer{422, `{"statusCode":422,"name":"validation_error","message":"Invalid ` + "`to`" + ` field."}`, nil},
			perm, false, 0, "422 Unprocessable Entity: validation_error: Invalid `to` field."},
		{"resend", scriptedAnswer{400, `{"statusCode":400,"name":"validation_error","message":"The subject field is required."}`, nil},
			perm, false, 0, "validation_error"},
		{"resend", scriptedAnswer{403, `{"statusCode":403,"name":"invalid_api_key","message":"API key is invalid"}`, nil},
			perm, false, 0, "invalid_api_key"},
		{"resend", scriptedAnswer{429, `{"statusCode":429,"name":"rate_limit_exceeded","message":"Too many requests."}`, map[string]string{"Retry-After": "1"}},
			retry, false, time.Second, "rate_limit_exceeded"},
		{"resend", scriptedAnswer{429, `{"statusCode":429,"name":"daily_quota_exceeded","message":"You have reached your daily email sending quota."}`, nil},
			retry, false, 0, "daily_quota_exceeded"},
		{"resend", scriptedAnswer{409, `{"statusCode":409,"name":"concurrent_idempotent_requests","message":"Same idempotency key used while original request is still in progress."}`, nil},
			retry, false, 0, "concurrent_idempotent_requests"},
		{"resend", scriptedAnswer{409, `{"statusCode":409,"name":"invalid_idempotent_request","message":"Same idempotency key used with a different request payload."}`, nil},
			unknown, false, 0, "invalid_idempotent_request"},
		{"resend", scriptedAnswer{500, `{"statusCode":500,"name":"application_error","message":"An unexpected error occurred."}`, nil},
			unknown, false, 0, "application_error"},

		{"sendgrid", scriptedAnswer{400, `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email","help":"http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message.personalizations.to"}]}`, nil},
			perm, true, 0, "400 Bad Request: personalizations.0.to.0.email: Does not contain a valid address."},
		{"sendgrid", scriptedAnswer{400, `{"errors":[{"message":"The subject is required.","field":"subject"},{"message":"The from email does not contain a valid address.","field":"from.email"}]}`, nil},
			perm, false, 0, "subject: The subject is required.; from.email: The from email"},
		{"sendgrid", scriptedAnswer{401, `{"errors":[{"field":null,"message":"The provided authorization grant is invalid, expired, or revoked","help":null}]}`, nil},
			perm, false, 0, "401 Unauthorized: The provided authorization grant"},
		{"sendgrid", scriptedAnswer{413, `{"errors":[{"field":null,"message":"Payload too large"}]}`, nil},
			perm, false, 0, "Payload too large"},
		{"sendgrid", scriptedAnswer{429, `{"errors":[{"field":null,"message":"too many requests"}]}`, map[string]string{"Retry-After": "2"}},
			retry, false, 2 * time.Second, "too many requests"},
		{"sendgrid", scriptedAnswer{503, ``, nil},
			retry, false, 0, "503 Service Unavailable"},
		{"sendgrid", scriptedAnswer{500, `{"errors":[{"field":null,"message":"internal error"}]}`, nil},
			unknown, false, 0, "internal error"},
	}
	for _, c := range cases {
		t.Run(c.preset+"/"+c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			p := newProvider(t, "email-http+"+srv.URL+"?preset="+c.preset+"&token=tok&"+presetFrom)
			r := send(p, testMessage("notif-1"))
			var got string
			switch {
			case r.Outcome == Unknown:
				got = unknown
			case r.Outcome == Refused && r.Permanent:
				got = perm
			case r.Outcome == Refused:
				got = retry
			default:
				got = string(r.Outcome)
			}
			if got != c.want || r.InvalidAddress != c.dead || r.RetryAfter != c.after || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("got %s invalid-address=%v retry-after=%v detail %q\nwant %s invalid-address=%v retry-after=%v detail containing %q",
					got, r.InvalidAddress, r.RetryAfter, r.Detail, c.want, c.dead, c.after, c.detail)
			}
			if r.HTTPStatus != c.answer.status || r.Response != c.answer.body {
				t.Errorf("status %d response %q: the audit trail must keep the answer", r.HTTPStatus, r.Response)
			}
		})
	}
}

func TestPresetDetailIsShort(t *testing.T) {
	t.Parallel()
	srv, _ := scriptedAPI(t, scriptedAnswer{422, `{"ErrorCode":300,"Message":"` + strings.Repeat("é", 500) + `"}`, nil})
	r := send(newProvider(t, "email-http+"+srv.URL+"?preset=postmark&token=tok&"+presetFrom), testMessage("k"))
	if len(r.Detail) > 260 || !strings.HasSuffix(r.Detail, "…") || !strings.Contains(r.Detail, "ErrorCode 300") {
		t.Errorf("detail (%d bytes) %q", len(r.Detail), r.Detail)
	}
}

// A recipient that is not one mailbox never reaches the API: a list would
// fan one notification out to several people.
func TestPresetRecipient(t *testing.T) {
	t.Parallel()
	for _, preset := range presetNames {
		srv, seen := scriptedAPI(t, scriptedAnswer{200, `{}`, nil})
		p := newProvider(t, "email-http+"+srv.URL+"?preset="+preset+"&token=tok&"+presetFrom)
		for _, addr := range []string{"ada@example.com, eve@example.com", "not an address"} {
			m := testMessage("k")
			m.Address = addr
			if r := send(p, m); r.Outcome != Refused || !r.Permanent || !r.InvalidAddress {
				t.Errorf("%s, %q: got %s permanent=%v invalid-address=%v", preset, addr, r.Outcome, r.Permanent, r.InvalidAddress)
			}
		}
		if n := len(seen()); n != 0 {
			t.Errorf("%s: the API saw %d requests", preset, n)
		}
	}
}

// Resend documents Idempotency-Key; Postmark and SendGrid do not. The
// URL's idempotency parameter stands over the preset.
func TestPresetHonoursKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		params  string
		honours bool
	}{
		{"preset=resend", true},
		{"preset=resend&idempotency=honoured", true},
		{"preset=postmark", false},
		{"preset=sendgrid", false},
		{"preset=postmark&idempotency=honoured", true},
		{"preset=sendgrid&idempotency=honoured", true},
		{"preset=sendgrid&idempotency=none", false},
		{"", false},
	} {
		p := newProvider(t, "email-http+https://api.example.com/send?token=tok&"+presetFrom+"&"+c.params)
		if p.HonoursKeys() != c.honours {
			t.Errorf("%s: HonoursKeys() = %v, want %v", c.params, p.HonoursKeys(), c.honours)
		}
	}
	// Told that the URL set idempotency (to none), the preset keeps out.
	p := &EmailHTTP{httpEndpoint: &httpEndpoint{url: "https://api.resend.com/emails", token: "tok"}}
	if problem := p.preset("resend", true); problem != "" || p.HonoursKeys() {
		t.Errorf("explicit idempotency=none with preset resend: %q, HonoursKeys() = %v", problem, p.HonoursKeys())
	}
}

func TestPresetProblems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"email-http+https://api.example.com/send?token=t&preset=mailgun&" + presetFrom,
			`parameter "preset": unknown preset "mailgun" (choices: postmark, resend, sendgrid)`},
		{"email-http+https://api.example.com/send?token=t&preset=Postmark&" + presetFrom, `unknown preset "Postmark"`},
		{"email-http+https://api.postmarkapp.com?preset=postmark&" + presetFrom,
			`preset postmark needs parameter "token" (a Postmark server token)`},
		{"email-http+https://api.resend.com?preset=resend&" + presetFrom, `preset resend needs parameter "token" (a Resend API key)`},
		{"email-http+https://apikey:s3cret@api.sendgrid.com?preset=sendgrid&" + presetFrom,
			`preset sendgrid authenticates with parameter "token" (a SendGrid API key), not with userinfo`},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want %q", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(%q) leaks the password: %v", c.url, err)
		}
	}
}

// The URL names the endpoint; a bare host means the preset's own path.
func TestPresetEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, target, name string }{
		{"email-http+https://api.postmarkapp.com?preset=postmark", "https://api.postmarkapp.com/email", "email-http://api.postmarkapp.com"},
		{"email-http+https://api.resend.com/?preset=resend", "https://api.resend.com/emails", "email-http://api.resend.com/"},
		{"email-http+https://api.sendgrid.com?preset=sendgrid", "https://api.sendgrid.com/v3/mail/send", "email-http://api.sendgrid.com"},
		{"email-http+https://api.eu.sendgrid.com/v3/mail/send?preset=sendgrid", "https://api.eu.sendgrid.com/v3/mail/send", "email-http://api.eu.sendgrid.com/v3/mail/send"},
		{"email-http+http://127.0.0.1:8025/proxy/postmark?preset=postmark", "http://127.0.0.1:8025/proxy/postmark", "email-http://127.0.0.1:8025/proxy/postmark"},
	} {
		p := newProvider(t, c.url+"&token=tok&"+presetFrom).(*EmailHTTP)
		if p.url != c.target || p.Name() != c.name {
			t.Errorf("%s: calls %q named %q, want %q named %q", c.url, p.url, p.Name(), c.target, c.name)
		}
	}
}

// message_stream puts Postmark's mail on the stream it names (bulk mail
// belongs on a broadcast stream); without it the field is left out and the
// server's default transactional stream takes it. Other presets refuse it.
func TestPostmarkMessageStream(t *testing.T) {
	t.Parallel()
	answer := scriptedAnswer{200, `{"MessageID":"m-1","ErrorCode":0,"Message":"OK"}`, nil}
	for _, c := range []struct{ query, body string }{
		{"&message_stream=broadcast", `{"From":"Acme <no-reply@acme.test>","To":"ada@example.com","Subject":"Paid","TextBody":"Thanks.",
			"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}],"MessageStream":"broadcast"}`},
		{"", `{"From":"Acme <no-reply@acme.test>","To":"ada@example.com","Subject":"Paid","TextBody":"Thanks.",
			"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}]}`},
	} {
		srv, seen := scriptedAPI(t, answer)
		p := newProvider(t, "email-http+"+srv.URL+"?preset=postmark&token=tok&"+presetFrom+c.query)
		if r := send(p, testMessage("notif-1")); r.Outcome != Sent {
			t.Fatalf("%q: %s (%s)", c.query, r.Outcome, r.Detail)
		}
		if reqs := seen(); len(reqs) != 1 || !sameJSON(t, reqs[0].body, c.body) {
			t.Errorf("%q: requests %d, body\n got %s\nwant %s", c.query, len(reqs), reqs[0].body, c.body)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"email-http+https://api.resend.com?preset=resend&token=t&message_stream=broadcast&" + presetFrom,
			`parameter "message_stream" is Postmark's (preset=postmark); this URL's preset is "resend"`},
		{"email-http+https://api.postmarkapp.com?preset=postmark&token=t&message_stream=&" + presetFrom,
			`parameter "message_stream": empty`},
	} {
		if _, err := New(c.url); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want %q", c.url, err, c.want)
		}
	}
}

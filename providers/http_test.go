package providers

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// captured is one request as a test server saw it.
type captured struct {
	header http.Header
	path   string
	query  string
	user   string
	pass   string
	basic  bool
	body   map[string]any
}

// capture starts a server that records each request and answers with
// answer; it returns the server and a function that yields the requests
// seen so far.
func capture(t *testing.T, answer string) (*httptest.Server, func() []captured) {
	t.Helper()
	var mu sync.Mutex
	var seen []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := captured{header: r.Header.Clone(), path: r.URL.Path, query: r.URL.RawQuery}
		c.user, c.pass, c.basic = r.BasicAuth()
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &c.body); err != nil {
			t.Errorf("request body %q: %v", b, err)
		}
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []captured {
		mu.Lock()
		defer mu.Unlock()
		return append([]captured(nil), seen...)
	}
}

func TestEmailHTTPRequest(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{"id":"re_123"}`)
	p := newProvider(t, "email-http+"+srv.URL+"/v1/emails?from=Acme%20%3Cno-reply%40acme.test%3E&token=sk_test")
	m := testMessage("notif-42")
	for range 2 {
		if r := send(p, m); r.Outcome != Sent || r.MessageID != "re_123" || r.HTTPStatus != 200 {
			t.Fatalf("got %s id=%q status=%d (%s)", r.Outcome, r.MessageID, r.HTTPStatus, r.Detail)
		}
	}
	reqs := seen()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	for _, c := range reqs {
		if got := c.header.Get("Idempotency-Key"); got != "notif-42" {
			t.Errorf("Idempotency-Key = %q, want the message key on every call", got)
		}
		if got := c.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
		if got := c.header.Get("Authorization"); got != "Bearer sk_test" {
			t.Errorf("Authorization = %q", got)
		}
		if c.path != "/v1/emails" || c.query != "" {
			t.Errorf("called %s?%s, want /v1/emails with the provider's parameters stripped", c.path, c.query)
		}
		want := map[string]any{
			"from": "Acme <no-reply@acme.test>", "to": []any{"ada@example.com"},
			"subject": "Paid", "text": "Thanks.", "headers": map[string]any{"Auto-Submitted": "auto-generated"},
		}
		if !reflect.DeepEqual(c.body, want) {
			t.Errorf("body = %v, want %v (no html when the message has none)", c.body, want)
		}
	}

	m.HTML = "<p>Thanks.</p>"
	send(p, m)
	if got := seen()[2].body["html"]; got != "<p>Thanks.</p>" {
		t.Errorf("html = %v", got)
	}
}

func TestEmailHTTPMessageIDKeys(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{`{"id":"x-1"}`, `{"MessageID":"x-1"}`, `{"message_id":"x-1"}`, `{"data":{},"id":"x-1"}`} {
		srv, _ := capture(t, answer)
		p := newProvider(t, "email-http+"+srv.URL+"?from=a%40b.test")
		if r := send(p, testMessage("k")); r.MessageID != "x-1" {
			t.Errorf("answer %s: MessageID = %q, want x-1", answer, r.MessageID)
		}
	}
}

func TestEmailHTTPNoAddress(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{}`)
	p := newProvider(t, "email-http+"+srv.URL+"?from=a%40b.test")
	m := testMessage("k")
	m.Address = ""
	if r := send(p, m); r.Outcome != Refused || !r.Permanent {
		t.Errorf("got %s permanent=%v, want Refused permanent", r.Outcome, r.Permanent)
	}
	if n := len(seen()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestWebhookRequest(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{"id":"wh-9","MessageID":"ignored"}`)
	p := newProvider(t, "webhook+http://relay:s3cret@"+srv.Listener.Addr().String()+"/hooks/in?idempotency=honoured")
	if !p.HonoursKeys() {
		t.Error("HonoursKeys() = false with idempotency=honoured")
	}
	m := testMessage("notif-43")
	m.Data = json.RawMessage(`{"amount":12}`)
	r := send(p, m)
	if r.Outcome != Sent || r.MessageID != "wh-9" {
		t.Fatalf("got %s id=%q (%s)", r.Outcome, r.MessageID, r.Detail)
	}
	c := seen()[0]
	if got := c.header.Get("Idempotency-Key"); got != "notif-43" {
		t.Errorf("Idempotency-Key = %q", got)
	}
	if !c.basic || c.user != "relay" || c.pass != "s3cret" {
		t.Errorf("basic auth = %v %q %q", c.basic, c.user, c.pass)
	}
	want := map[string]any{
		"key": "notif-43", "notification_id": "n_0000000000042", "tenant": "acme", "event_id": "evt-1",
		"type": "invoice.paid", "purpose": "transactional", "channel": "email",
		"recipient": map[string]any{"id": "user-7", "address": "ada@example.com"},
		"subject":   "Paid", "body": "Thanks.", "data": map[string]any{"amount": 12.0},
	}
	if !reflect.DeepEqual(c.body, want) {
		t.Errorf("body = %v\nwant   %v", c.body, want)
	}

	m.Data = nil
	send(p, m)
	if d, ok := seen()[1].body["data"]; !ok || d != nil {
		t.Errorf("data = %v (present %v), want null", d, ok)
	}
}

func TestNoIdempotencyKey(t *testing.T) {
	t.Parallel()
	srv, seen := capture(t, `{}`)
	for _, k := range httpKinds {
		p := newProvider(t, kindURL(k.scheme, k.params, srv.Listener.Addr().String(), "/", ""))
		if r := send(p, testMessage("")); r.Outcome != Refused || !r.Permanent {
			t.Errorf("%s: got %s permanent=%v, want Refused permanent", k.name, r.Outcome, r.Permanent)
		}
	}
	if n := len(seen()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

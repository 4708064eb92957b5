package providers

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// emailShapes are the request shapes of email-http: the generic one ("")
// and each preset's, with an answer each API gives to a send.
var emailShapes = []struct {
	preset string
	answer scriptedAnswer
}{
	{"", scriptedAnswer{200, `{"id":"g-1"}`, nil}},
	{"postmark", scriptedAnswer{200, `{"To":"ada@example.com","MessageID":"pm-1","ErrorCode":0,"Message":"OK"}`, nil}},
	{"resend", scriptedAnswer{200, `{"id":"re-1"}`, nil}},
	{"sendgrid", scriptedAnswer{202, "", map[string]string{"X-Message-Id": "sg-1"}}},
}

// shapeURL is the email-http URL of preset ("" for the generic shape)
// served by srv, with extra parameters.
func shapeURL(srv *httptest.Server, preset, extra string) string {
	u := "email-http+" + srv.URL + "?" + presetFrom
	if preset != "" {
		u += "&preset=" + preset + "&token=tok"
	}
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// sentMail is what one request body asks the API to send, read the way
// that API reads it.
type sentMail struct {
	headers    map[string]string
	text, html string
}

func readMail(t *testing.T, preset string, body []byte) sentMail {
	t.Helper()
	var out sentMail
	switch preset {
	case "postmark":
		var b struct {
			TextBody, HtmlBody string
			Headers            []struct{ Name, Value string }
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("postmark body %s: %v", body, err)
		}
		out.text, out.html = b.TextBody, b.HtmlBody
		if b.Headers != nil {
			out.headers = map[string]string{}
		}
		for _, h := range b.Headers {
			if _, dup := out.headers[h.Name]; dup {
				t.Errorf("postmark body repeats header %s: %s", h.Name, body)
			}
			out.headers[h.Name] = h.Value
		}
	case "sendgrid":
		var b struct {
			Headers map[string]string `json:"headers"`
			Content []struct{ Type, Value string }
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("sendgrid body %s: %v", body, err)
		}
		out.headers = b.Headers
		for i, c := range b.Content {
			switch c.Type {
			case "text/plain":
				if i != 0 {
					t.Errorf("sendgrid: text/plain must come first: %s", body)
				}
				out.text = c.Value
			case "text/html":
				out.html = c.Value
			}
		}
	default: // the generic shape and Resend's
		var b struct {
			Headers    map[string]string `json:"headers"`
			Text, HTML string
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("%q body %s: %v", preset, body, err)
		}
		out.headers, out.text, out.html = b.Headers, b.Text, b.HTML
	}
	return out
}

// Mail of an optional category carries the relay's one-click link, in
// each API's own field for headers, with List-Unsubscribe-Post when it is
// https; mail of a commercial type carries list_unsubscribe=; a required
// category's (an OTP) carries none. Every message is Auto-Submitted and
// an HTML-only one gets a text part made from its HTML.
func TestEmailHTTPUnsubscribeHeaders(t *testing.T) {
	t.Parallel()
	const html = `<p>Spring offers, <b>Ada</b>: <a href="https://shop.example.com/s">shop</a>.</p>`
	const text = "Spring offers, Ada: shop (https://shop.example.com/s)."
	auto := map[string]string{"Auto-Submitted": "auto-generated"}
	with := func(link string, post bool) map[string]string {
		h := map[string]string{"Auto-Submitted": "auto-generated", "List-Unsubscribe": link}
		if post {
			h["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
		}
		return h
	}
	rows := []struct {
		name            string
		typ, key, link  string // link: the relay's (Message.Unsubscribe)
		body, html      string
		headers         map[string]string
		text            string
		mailtoTemplated bool // sent through the provider whose list_unsubscribe is a mailto
	}{
		{name: "optional category: the relay's link", typ: "newsletter", key: "er1_n",
			link: "https://relay.example.com/u/AbC-1.dEf_2", html: html,
			headers: with("<https://relay.example.com/u/AbC-1.dEf_2>", true), text: text},
		{name: "required category (an OTP): none", typ: "otp", key: "er1_o",
			body: "Your code is 123456.", headers: auto, text: "Your code is 123456."},
		{name: "the relay's link over http: no one-click", typ: "newsletter", key: "er1_h",
			link: "http://127.0.0.1:8025/u/x.y", html: html, headers: with("<http://127.0.0.1:8025/u/x.y>", false), text: text},
		{name: "commercial type: list_unsubscribe", typ: "promo", key: "er1_p/q r",
			body: "Offers.", html: html, headers: with("<https://lists.example.com/u/er1_p%2Fq%20r?l=1>", true), text: "Offers."},
		{name: "the relay's link wins over list_unsubscribe", typ: "promo", key: "er1_w",
			link: "https://relay.example.com/u/w.w", html: html, headers: with("<https://relay.example.com/u/w.w>", true), text: text},
		{name: "commercial type, mailto: no one-click", typ: "promo", key: "er1_m", mailtoTemplated: true,
			body: "Offers.", headers: with("<mailto:unsubscribe@example.com?subject=er1_m>", false), text: "Offers."},
	}
	for _, shape := range emailShapes {
		t.Run("shape="+shape.preset, func(t *testing.T) {
			t.Parallel()
			srv, seen := scriptedAPI(t, shape.answer)
			https := newProvider(t, shapeURL(srv, shape.preset, "list_unsubscribe="+
				url.QueryEscape("https://lists.example.com/u/{key}?l=1"))).(*EmailHTTP)
			mailto := newProvider(t, shapeURL(srv, shape.preset, "list_unsubscribe="+
				url.QueryEscape("mailto:unsubscribe@example.com?subject={key}"))).(*EmailHTTP)
			https.SetCommercial([]string{"promo"})
			mailto.SetCommercial([]string{"promo"})
			for i, row := range rows {
				m := testMessage(row.key)
				m.Type, m.Purpose, m.Body, m.HTML, m.Unsubscribe = row.typ, row.typ, row.body, row.html, row.link
				p := https
				if row.mailtoTemplated {
					p = mailto
				}
				if r := send(p, m); r.Outcome != Sent {
					t.Fatalf("%s: %+v", row.name, r)
				}
				reqs := seen()
				if len(reqs) != i+1 {
					t.Fatalf("%s: the API saw %d requests, want %d", row.name, len(reqs), i+1)
				}
				got := readMail(t, shape.preset, reqs[i].body)
				if !reflect.DeepEqual(got.headers, row.headers) {
					t.Errorf("%s: headers %v, want exactly %v\nbody %s", row.name, got.headers, row.headers, reqs[i].body)
				}
				if got.text != row.text || got.html != row.html {
					t.Errorf("%s: text %q html %q, want %q %q", row.name, got.text, got.html, row.text, row.html)
				}
			}
		})
	}
}

// A retry after a lost answer sends the first attempt's body byte for
// byte under the same Idempotency-Key: a Resend-style API compares them,
// and refuses a changed body under one key.
func TestEmailHTTPRetrySendsTheSameBytes(t *testing.T) {
	t.Parallel()
	for _, shape := range emailShapes {
		t.Run("shape="+shape.preset, func(t *testing.T) {
			t.Parallel()
			srv, seen := lossyAPI(t, shape.answer, 1)
			p := newProvider(t, shapeURL(srv, shape.preset, "timeout=5s"))
			m := testMessage("er1_retry")
			m.Type, m.Body, m.HTML = "newsletter", "", `<p>Spring offers, <b>Ada</b>.</p><ul><li>Tea</li><li>Cake</li></ul>`
			m.Unsubscribe = "https://relay.example.com/u/Zm9v.YmFy"
			m.Created = time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)
			if r := send(p, m); r.Outcome != Unknown {
				t.Fatalf("first attempt: %+v, want unknown (the answer was lost)", r)
			}
			m.Attempt = 2
			if r := send(p, m); r.Outcome != Sent {
				t.Fatalf("retry: %+v, want sent", r)
			}
			reqs := seen()
			if len(reqs) != 2 {
				t.Fatalf("the API saw %d requests, want 2", len(reqs))
			}
			if !bytes.Equal(reqs[0].body, reqs[1].body) {
				t.Errorf("the retry sent another body:\n first %s\nretry  %s", reqs[0].body, reqs[1].body)
			}
			for i, q := range reqs {
				if k := q.header.Get("Idempotency-Key"); k != m.Key {
					t.Errorf("request %d: Idempotency-Key %q, want %q", i+1, k, m.Key)
				}
			}
			got := readMail(t, shape.preset, reqs[1].body)
			if got.headers["List-Unsubscribe"] != "<"+m.Unsubscribe+">" || got.text != "Spring offers, Ada.\n\n- Tea\n- Cake" {
				t.Errorf("the retried body lacks the link or the text part: %s", reqs[1].body)
			}
		})
	}
}

// SendGrid refuses an empty content value: HTML with no text in it (an
// image without alt text) goes without a text/plain part rather than not
// at all.
func TestSendGridHTMLWithoutText(t *testing.T) {
	t.Parallel()
	srv, seen := scriptedAPI(t, scriptedAnswer{202, "", nil})
	p := newProvider(t, shapeURL(srv, "sendgrid", ""))
	m := testMessage("er1_img")
	m.Body, m.HTML = "", `<img src="https://example.com/banner.png">`
	if r := send(p, m); r.Outcome != Sent {
		t.Fatalf("%+v", r)
	}
	if body := seen()[0].body; !strings.Contains(string(body), `"content":[{"type":"text/html","value":`) {
		t.Errorf("body %s: want only the text/html part", body)
	}
}

// email-http takes list_unsubscribe= as smtp does, refuses a bad one
// naming the parameter, and reports whether it has one (config refuses a
// commercial type routed through a provider without it).
func TestEmailHTTPListUnsubscribeParameter(t *testing.T) {
	t.Parallel()
	for _, preset := range append([]string{""}, presetNames...) {
		u := "email-http+https://api.example.com/send?" + presetFrom + "&token=tok"
		if preset != "" {
			u += "&preset=" + preset
		}
		with := newProvider(t, u+"&list_unsubscribe="+url.QueryEscape("https://relay.example.com/u/{key}")).(CommercialSender)
		without := newProvider(t, u).(CommercialSender)
		if !with.Unsubscribes() || without.Unsubscribes() {
			t.Errorf("%q: Unsubscribes() %v with list_unsubscribe, %v without", preset, with.Unsubscribes(), without.Unsubscribes())
		}
		_, err := New(u + "&list_unsubscribe=" + url.QueryEscape("https://relay.example.com/u/all"))
		if err == nil || !strings.Contains(err.Error(), `parameter "list_unsubscribe": "https://relay.example.com/u/all" has no {key}`) {
			t.Errorf("%q: a template without {key}: %v", preset, err)
		}
	}
}

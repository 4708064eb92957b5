package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mailgunQueued is what the messages API answers a send.
const mailgunQueued = `{"id":"<20250201100000.1.5F3C2A@mg.example.com>","message":"Queued. Thank you."}`

const mailgunSigningKey = "whkey-XXXXsecretXXXX"

func mailgunURL(base, extra string) string {
	u := "mailgun+" + base + "?domain=mg.example.com&from=Acme+%3Cno-reply%40mg.example.com%3E&token=key-XXXXsecretXXXX"
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func TestMailgunRequest(t *testing.T) {
	t.Parallel()
	srv, seen := scriptedAPI(t, scriptedAnswer{200, mailgunQueued, map[string]string{"Content-Type": "application/json"}})
	p := newProvider(t, mailgunURL(srv.URL, "tag=billing,receipts&list_unsubscribe="+url.QueryEscape("https://lists.example.com/u/{key}")))
	p.(CommercialSender).SetCommercial([]string{"promo"})
	if p.HonoursKeys() {
		t.Error("HonoursKeys() = true: Mailgun takes no idempotency key")
	}
	html := testMessage("er1_html")
	html.Body, html.HTML = "", "<p>Paid, <b>thanks</b>.</p>"
	promo := testMessage("er1_promo")
	promo.Type = "promo"
	for _, c := range []struct {
		m    *Message
		want url.Values
	}{
		{testMessage("er1_plain"), url.Values{"from": {"Acme <no-reply@mg.example.com>"}, "to": {"ada@example.com"}, "subject": {"Paid"},
			"text": {"Thanks."}, "o:tag": {"billing", "receipts"}, "h:Auto-Submitted": {"auto-generated"}, "v:edgerelay-key": {"er1_plain"}}},
		// The text part is made from the HTML when there is none.
		{html, url.Values{"from": {"Acme <no-reply@mg.example.com>"}, "to": {"ada@example.com"}, "subject": {"Paid"},
			"text": {"Paid, thanks."}, "html": {"<p>Paid, <b>thanks</b>.</p>"}, "o:tag": {"billing", "receipts"},
			"h:Auto-Submitted": {"auto-generated"}, "v:edgerelay-key": {"er1_html"}}},
		{promo, url.Values{"from": {"Acme <no-reply@mg.example.com>"}, "to": {"ada@example.com"}, "subject": {"Paid"},
			"text": {"Thanks."}, "o:tag": {"billing", "receipts"}, "h:Auto-Submitted": {"auto-generated"}, "v:edgerelay-key": {"er1_promo"},
			"h:List-Unsubscribe": {"<https://lists.example.com/u/er1_promo>"}, "h:List-Unsubscribe-Post": {"List-Unsubscribe=One-Click"}}},
	} {
		r := send(p, c.m)
		if r.Outcome != Sent || r.HTTPStatus != 200 || r.MessageID != "20250201100000.1.5F3C2A@mg.example.com" {
			t.Errorf("%s: got %s status=%d detail %q id=%q", c.m.Key, r.Outcome, r.HTTPStatus, r.Detail, r.MessageID)
		}
		reqs := seen()
		q := reqs[len(reqs)-1]
		if q.method != http.MethodPost || q.path != "/v3/mg.example.com/messages" {
			t.Errorf("called %s %s", q.method, q.path)
		}
		user, pass, ok := (&http.Request{Header: q.header}).BasicAuth()
		if !ok || user != "api" || pass != "key-XXXXsecretXXXX" {
			t.Errorf("Authorization %q: want basic api:KEY", q.header.Get("Authorization"))
		}
		if ct := q.header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
			t.Errorf("Content-Type %q", ct)
		}
		got, err := url.ParseQuery(string(q.body))
		if err != nil || got.Encode() != c.want.Encode() {
			t.Errorf("%s: form\n%v\nwant\n%v", c.m.Key, got, c.want)
		}
	}
	before := len(seen())
	list := testMessage("k_list")
	list.Address = "ada@example.com, ben@example.com"
	empty := testMessage("k_empty")
	empty.Body = ""
	for _, c := range []struct {
		m       *Message
		invalid bool
	}{{list, true}, {empty, false}} {
		if r := send(p, c.m); r.Outcome != Refused || !r.Permanent || r.InvalidAddress != c.invalid {
			t.Errorf("%s: got %s permanent=%v invalid=%v (%s)", c.m.Key, r.Outcome, r.Permanent, r.InvalidAddress, r.Detail)
		}
	}
	if n := len(seen()); n != before {
		t.Errorf("%d calls for messages that cannot be sent", n-before)
	}
}

func TestMailgunOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer    scriptedAnswer
		outcome   Outcome
		permanent bool
		invalid   bool
		detail    string
	}{
		{scriptedAnswer{400, `{"message":"'to' parameter is not a valid address. please check documentation"}`, nil}, Refused, true, true, "400 Bad Request: 'to' parameter is not a valid address"},
		{scriptedAnswer{400, `{"message":"Need at least one of 'text' or 'html' parameters specified"}`, nil}, Refused, true, false, "Need at least one"},
		{scriptedAnswer{401, "Forbidden", map[string]string{"Content-Type": "text/plain"}}, Refused, true, false, "401 Unauthorized (check the API key and the region"},
		{scriptedAnswer{402, `{"message":"Domain mg.example.com is not allowed to send: Free accounts are for test purposes only."}`, nil}, Refused, true, false, "not allowed to send"},
		{scriptedAnswer{404, `{"message":"Domain not found: mg.example.com"}`, nil}, Refused, true, false, "404 Not Found: Domain not found"},
		{scriptedAnswer{429, `{"message":"Too many requests"}`, map[string]string{"Retry-After": "12"}}, Refused, false, false, "429 Too Many Requests"},
		{scriptedAnswer{500, `{"message":"Internal Server Error"}`, nil}, Unknown, false, false, "500 Internal Server Error"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, false, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			r := send(newProvider(t, mailgunURL(srv.URL, "timeout=5s")), testMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.InvalidAddress != c.invalid || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("got %s permanent=%v invalid-address=%v detail %q", r.Outcome, r.Permanent, r.InvalidAddress, r.Detail)
			}
			if r.HTTPStatus == 429 && (r.RetryAfter != 12*time.Second || !r.Overloaded) {
				t.Errorf("429: retry-after %v, overloaded %v", r.RetryAfter, r.Overloaded)
			}
		})
	}
}

func TestMailgunURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, name, target string }{
		{mailgunURL("https://api.mailgun.net", ""), "mailgun://api.mailgun.net/mg.example.com", "https://api.mailgun.net/v3/mg.example.com/messages"},
		{mailgunURL("https://api.eu.mailgun.net", ""), "mailgun://api.eu.mailgun.net/mg.example.com", "https://api.eu.mailgun.net/v3/mg.example.com/messages"},
	} {
		p := newProvider(t, c.url).(*Mailgun)
		if p.Name() != c.name || p.url != c.target || p.token != "" || p.user != "api" {
			t.Errorf("%s: name %q, calls %q (bearer %q, user %q)", Redact(c.url), p.Name(), p.url, p.token, p.user)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"mailgun+https://api.mailgun.net?domain=mg.example.com&from=a%40b.c", `missing parameter "token"`},
		{"mailgun+https://api.mailgun.net?from=a%40b.c&token=key-XXXXsecretXXXX", `missing or bad parameter "domain"`},
		{"mailgun+https://api.mailgun.net?domain=mg..example&from=a%40b.c&token=key-XXXXsecretXXXX", `missing or bad parameter "domain"`},
		{"mailgun+https://api.mailgun.net?domain=mg.example.com&token=key-XXXXsecretXXXX", `missing parameter "from"`},
		{"mailgun+https://api.mailgun.net?domain=mg.example.com&from=nobody&token=key-XXXXsecretXXXX", `parameter "from": "nobody" is not an email address`},
		{"mailgun+https://api.us.mailgun.net?domain=mg.example.com&from=a%40b.c&token=key-XXXXsecretXXXX", `"api.us.mailgun.net" is not a Mailgun API host: api.mailgun.net (US) or api.eu.mailgun.net (EU)`},
		{"mailgun+https://api:key-XXXXsecretXXXX@api.mailgun.net?domain=mg.example.com&from=a%40b.c", `not in userinfo`},
		{"mailgun+https://api.mailgun.net/v3/mg.example.com/messages?domain=mg.example.com&from=a%40b.c&token=k", "mailgun URLs take no path"},
		{mailgunURL("https://api.mailgun.net", "tag=a,b,c,d"), `parameter "tag": Mailgun takes at most 3 tags`},
		{mailgunURL("https://api.mailgun.net", "tag=a,,b"), `parameter "tag": each tag is 1 to 128`},
		{mailgunURL("https://api.mailgun.net", "webhook_signing_key="), `parameter "webhook_signing_key" is empty`},
		{mailgunURL("https://api.mailgun.net", "region=eu"), `unknown parameter "region" (supported: concurrency, domain, from, list_unsubscribe, name, tag, timeout, token, webhook_signing_key)`},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s) = %v, want %q", Redact(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("New(%s): the error quotes a secret: %v", Redact(c.url), err)
		}
	}
}

// signedMailgunEvent is a webhook request as Mailgun signs it: HMAC-SHA256 under
// the signing key over timestamp and token, in hex.
func signedMailgunEvent(key string, signedAt time.Time, eventData string) []byte {
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	token := base64.RawURLEncoding.EncodeToString([]byte(ts + "-a-random-token-of-fifty-chars-or-so"))
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(ts + token))
	return fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":%s}`,
		ts, token, hex.EncodeToString(mac.Sum(nil)), eventData)
}

func TestMailgunReceipts(t *testing.T) {
	t.Parallel()
	p := newProvider(t, mailgunURL("https://api.mailgun.net", "webhook_signing_key="+mailgunSigningKey)).(*Mailgun)
	event := func(name, extra string) string {
		return `{"id":"ev-` + name + `","event":"` + name + `","timestamp":1738404000.5` + extra +
			`,"recipient":"ada@example.com","message":{"headers":{"message-id":"20250201100000.1.5F3C2A@mg.example.com"}},` +
			`"user-variables":{"edgerelay-key":"er1_plain"}}`
	}
	at := time.Unix(1738404000, 5e8).UTC()
	for _, c := range []struct {
		name, data string
		status     ReceiptStatus
		bounce     Bounce
		detail     string
	}{
		{"delivered", event("delivered", `,"delivery-status":{"code":250,"message":"OK"}`), ReceiptDelivered, BounceDefault, "delivered 250: OK"},
		{"opened", event("opened", ""), ReceiptDelivered, BounceDefault, "opened"},
		{"accepted", event("accepted", ""), ReceiptSent, BounceDefault, "accepted"},
		{"complained", event("complained", ""), ReceiptComplained, BounceDefault, "complained"},
		{"bounce", event("failed", `,"severity":"permanent","reason":"bounce","delivery-status":{"code":550,"message":"5.1.1 The email account that you tried to reach does not exist."}`),
			ReceiptBounced, BounceHard, "failed permanent bounce 550: 5.1.1 The email account that you tried to reach does not exist."},
		{"suppress-bounce", event("failed", `,"severity":"permanent","reason":"suppress-bounce"`), ReceiptBounced, BounceHard, "failed permanent suppress-bounce"},
		{"suppress-complaint", event("failed", `,"severity":"permanent","reason":"suppress-complaint"`), ReceiptComplained, BounceDefault, "failed permanent suppress-complaint"},
		// Not sent, but nothing says the address is dead.
		{"old", event("failed", `,"severity":"permanent","reason":"old"`), ReceiptFailed, BounceNone, "failed permanent old"},
		{"suppress-unsubscribe", event("failed", `,"severity":"permanent","reason":"suppress-unsubscribe"`), ReceiptFailed, BounceNone, "failed permanent suppress-unsubscribe"},
		// Mailgun keeps trying: progress.
		{"temporary", event("failed", `,"severity":"temporary","reason":"generic","delivery-status":{"code":452,"message":"4.2.2 Mailbox full"}`),
			ReceiptSent, BounceNone, "failed temporary generic 452: 4.2.2 Mailbox full"},
	} {
		rs, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/v1/receipts/mailgun", nil), signedMailgunEvent(mailgunSigningKey, time.Now(), c.data), "")
		if err != nil || len(rs) != 1 {
			t.Errorf("%s: %v, %d receipts", c.name, err, len(rs))
			continue
		}
		event, _, _ := strings.Cut(c.detail, " ")
		want := Receipt{ID: "ev-" + event, MessageID: "20250201100000.1.5F3C2A@mg.example.com", Key: "er1_plain",
			Status: c.status, At: at, Detail: c.detail, Bounce: c.bounce}
		if rs[0] != want {
			t.Errorf("%s: %+v\nwant %+v", c.name, rs[0], want)
		}
	}

	delivered := event("delivered", "")
	for _, c := range []struct {
		name string
		p    *Mailgun
		body []byte
	}{
		{"another key", p, signedMailgunEvent("another-key", time.Now(), delivered)},
		{"signed 13 hours ago", p, signedMailgunEvent(mailgunSigningKey, time.Now().Add(-13*time.Hour), delivered)},
		{"signed an hour ahead", p, signedMailgunEvent(mailgunSigningKey, time.Now().Add(time.Hour), delivered)},
		{"no signature", p, []byte(`{"event-data":` + delivered + `}`)},
		{"tampered timestamp", p, []byte(strings.Replace(string(signedMailgunEvent(mailgunSigningKey, time.Now(), delivered)), `"timestamp":"1`, `"timestamp":"2`, 1))},
		{"no signing key configured", newProvider(t, mailgunURL("https://api.mailgun.net", "")).(*Mailgun), signedMailgunEvent(mailgunSigningKey, time.Now(), delivered)},
	} {
		if _, err := c.p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), c.body, ""); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
	// A subaccount's event: signed with the subaccount's key, and with
	// the primary account's (the one configured) as parent-signature.
	now := time.Now()
	sub := string(signedMailgunEvent("subaccount-key", now, delivered))
	var w struct {
		Signature map[string]string `json:"signature"`
	}
	if err := json.Unmarshal(signedMailgunEvent(mailgunSigningKey, now, delivered), &w); err != nil {
		t.Fatal(err)
	}
	withParent := strings.Replace(sub, `"signature":{`, `"signature":{"parent-signature":"`+w.Signature["signature"]+`",`, 1)
	if _, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), []byte(withParent), ""); err != nil {
		t.Errorf("a subaccount's event with the primary's parent-signature: %v", err)
	}
	if _, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), []byte(strings.Replace(withParent, `"parent-signature":"`, `"parent-signature":"0`, 1)), ""); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a wrong parent-signature: %v, want ErrBadSignature", err)
	}
	// Signed an 8-hour retry later: still taken.
	if _, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), signedMailgunEvent(mailgunSigningKey, time.Now().Add(-8*time.Hour), delivered), ""); err != nil {
		t.Errorf("an event signed 8 hours ago: %v", err)
	}
	if _, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), signedMailgunEvent(mailgunSigningKey, time.Now(), `{"id":"x","event":"delivered"}`), ""); err == nil || errors.Is(err, ErrBadSignature) {
		t.Errorf("an event naming no message: %v, want an invalid receipt", err)
	}
}

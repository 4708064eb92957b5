package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// linksReply is the body of POST /v1/recipients/{id}/links.
type linksReply struct {
	Preferences struct {
		URL     string    `json:"url"`
		Expires time.Time `json:"expires_at"`
	} `json:"preferences"`
	Unsubscribe []struct {
		Category string `json:"category"`
		Channel  string `json:"channel"`
		URL      string `json:"url"`
	} `json:"unsubscribe"`
}

func links(t *testing.T, b *bundle, recipient string) linksReply {
	t.Helper()
	rep := b.do(t, "POST", "/v1/recipients/"+recipient+"/links", `{"channels":["email"]}`)
	if rep.status != http.StatusOK {
		t.Fatalf("links: %s", rep)
	}
	l := decode[linksReply](t, rep)
	if len(l.Unsubscribe) != 1 || l.Unsubscribe[0].Category != "marketing" || !strings.HasPrefix(l.Unsubscribe[0].URL, "/u/") {
		t.Fatalf("links %+v: want one unsubscribe link, for marketing (security is required)", l)
	}
	return l
}

// postForm sends a urlencoded body (do sends JSON).
func postForm(t *testing.T, b *bundle, path string, v url.Values, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", b.srv.URL+path, strings.NewReader(v.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return doReq(t, b, req)
}

func doReq(t *testing.T, b *bundle, req *http.Request) reply {
	t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: buf.Bytes()}
}

func marketing(t *testing.T, b *bundle, recipient string) relay.CategoryPreference {
	t.Helper()
	p := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/"+recipient+"/preferences", ""))
	for _, c := range p.Categories {
		if c.Name == "marketing" {
			return c
		}
	}
	t.Fatalf("no marketing in %+v", p)
	return relay.CategoryPreference{}
}

var oneClick = url.Values{"List-Unsubscribe": {"One-Click"}}

// RFC 8058: a GET of the link shows a confirmation page and unsubscribes
// nobody; a POST without List-Unsubscribe=One-Click does nothing; the
// one-click POST turns marketing off on email for that recipient, and a
// repeat changes nothing (idempotent); the next newsletter is skipped.
func TestOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	u := links(t, b, "ada").Unsubscribe[0].URL

	for range 3 { // link scanners prefetch, more than once
		rep := b.do(t, "GET", u, "")
		if rep.status != http.StatusOK || !strings.Contains(string(rep.body), `<input type="hidden" name="List-Unsubscribe" value="One-Click">`) ||
			!strings.Contains(string(rep.body), "<strong>marketing</strong>") {
			t.Fatalf("GET %s: %s", u, rep)
		}
	}
	if m := marketing(t, b, "ada"); !m.Enabled || len(m.Channels) != 0 {
		t.Fatalf("a GET unsubscribed: %+v", m)
	}
	if rep := postForm(t, b, u, url.Values{"x": {"y"}}); rep.status != http.StatusBadRequest {
		t.Fatalf("POST without List-Unsubscribe=One-Click: %s", rep)
	}
	if m := marketing(t, b, "ada"); len(m.Channels) != 0 {
		t.Fatalf("a POST without One-Click unsubscribed: %+v", m)
	}

	if rep := postForm(t, b, u, oneClick); rep.status != http.StatusOK || !strings.Contains(string(rep.body), "Unsubscribed") {
		t.Fatalf("one-click POST: %s", rep)
	}
	m := marketing(t, b, "ada")
	if len(m.Channels) != 1 || m.Channels[0].Channel != "email" || m.Channels[0].Enabled || m.Channels[0].SetBy != model.SetByUnsubscribe || !m.Enabled {
		t.Fatalf("after the one-click: %+v, want marketing off on email only, by unsubscribe", m)
	}
	first := m.Channels[0].SetAt
	// A multipart body is one-click too (RFC 8058 allows it), and a repeat.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("List-Unsubscribe", "One-Click")
	mw.Close()
	req, _ := http.NewRequest("POST", b.srv.URL+u, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if rep := doReq(t, b, req); rep.status != http.StatusOK {
		t.Fatalf("multipart one-click: %s", rep)
	}
	if m := marketing(t, b, "ada"); len(m.Channels) != 1 || !m.Channels[0].SetAt.Equal(first) {
		t.Fatalf("a repeat changed the switch: %+v, want it set at %s still", m, first)
	}
	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada", "bob")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	if d := strings.Join(s.delivered(), " "); strings.Contains(d, "newsletter→ada") || !strings.Contains(d, "otp→ada") || !strings.Contains(d, "newsletter→bob") {
		t.Fatalf("delivered %q", d)
	}
}

// payloadOf decodes a link token's payload; relink makes a token of
// another payload with the same mac (what a forger can do).
func fields(t *testing.T, tok string) (byte, []string, string) {
	t.Helper()
	p, mac, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		t.Fatal(err)
	}
	var fs []string
	rest := raw[1:]
	for len(rest) > 0 {
		n, k := binary.Uvarint(rest)
		fs, rest = append(fs, string(rest[k:k+int(n)])), rest[k+int(n):]
	}
	return raw[0], fs, mac
}

func relink(kind byte, fs []string, mac string) string {
	b := []byte{kind}
	for _, f := range fs {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return base64.RawURLEncoding.EncodeToString(b) + "." + mac
}

// A forged or widened unsubscribe token is a 403 and changes nothing:
// another recipient, another category, every channel, another tenant, a
// changed mac, a page token, a required category.
func TestForgedUnsubscribeIs403(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	l := links(t, b, "ada")
	tok := strings.TrimPrefix(l.Unsubscribe[0].URL, "/u/")
	kind, fs, mac := fields(t, tok)
	if len(fs) != 4 || fs[1] != "ada" || fs[2] != "marketing" || fs[3] != "email" {
		t.Fatalf("token fields %q", fs)
	}
	with := func(i int, v string) []string { c := append([]string(nil), fs...); c[i] = v; return c }
	links(t, b, "bob") // bob exists too; his own key is the tenant's
	security, err := b.r.UnsubscribeToken(t.Context(), relay.UnsubscribeLink{Tenant: "default", Recipient: "ada", Category: "security", Channel: "email"})
	if err != nil {
		t.Fatal(err)
	}
	badMac := []byte(mac)
	badMac[3] ^= 1
	pageTok := strings.TrimPrefix(l.Preferences.URL, "/p/")
	for name, forged := range map[string]string{
		"another recipient": relink(kind, with(1, "bob"), mac),
		"another category":  relink(kind, with(2, "security"), mac),
		"every channel":     relink(kind, with(3, ""), mac),
		"another channel":   relink(kind, with(3, "sms"), mac),
		"another tenant":    relink(kind, with(0, "globex"), mac),
		"a changed mac":     relink(kind, fs, string(badMac)),
		"no mac":            strings.Split(tok, ".")[0],
		"a page token":      pageTok,
		"a required one":    security,
		"garbage":           "not-a-token",
	} {
		rep := postForm(t, b, "/u/"+forged, oneClick)
		if rep.status != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", name, rep)
		}
		if rep := b.do(t, "GET", "/u/"+forged, ""); rep.status != http.StatusForbidden {
			t.Errorf("GET of %s: %d, want 403", name, rep.status)
		}
	}
	for _, r := range []string{"ada", "bob"} {
		if m := marketing(t, b, r); len(m.Channels) != 0 || !m.Enabled {
			t.Fatalf("a forged token changed %s's marketing: %+v", r, m)
		}
	}
}

var formToken = regexp.MustCompile(`name="form" value="([^"]+)"`)

// The preferences page: the recipient opens their signed preferences link,
// unticks marketing and saves (a real form POST, as a browser sends it);
// the next marketing email is skipped while the OTP goes out. A POST
// without the page's form token, or from another site, is refused; the
// link expires.
func TestPreferencesPageOptOut(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	s := newSink(t, clk.Now)
	o := prefOptions(s.prov)
	o.Now = clk.Now
	b := setup(t, options{Relay: o})
	l := links(t, b, "ada")
	pg := l.Preferences.URL
	if !l.Preferences.Expires.Equal(clk.Now().Add(7 * 24 * time.Hour)) {
		t.Fatalf("page link expires %s", l.Preferences.Expires)
	}
	rep := b.do(t, "GET", pg, "")
	html := string(rep.body)
	if rep.status != http.StatusOK || !strings.Contains(html, `name="on" value="marketing" checked`) || !strings.Contains(html, `value="security" checked disabled`) {
		t.Fatalf("page: %s", rep)
	}
	m := formToken.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no form token on the page:\n%s", html)
	}
	// The form as the browser sends it with marketing unticked (an
	// unticked checkbox sends nothing; disabled ones neither).
	save := url.Values{"form": {m[1]}, "quiet_from": {""}, "quiet_to": {""}, "timezone": {"Europe/Berlin"}}
	if rep := postForm(t, b, pg, url.Values{"timezone": {"Europe/Berlin"}}); rep.status != http.StatusForbidden {
		t.Fatalf("POST without the form token: %s", rep)
	}
	if rep := postForm(t, b, pg, save, "Sec-Fetch-Site", "cross-site"); rep.status != http.StatusForbidden {
		t.Fatalf("POST from another site: %s", rep)
	}
	if c := marketing(t, b, "ada"); !c.Enabled {
		t.Fatalf("a refused POST changed marketing: %+v", c)
	}
	rep = postForm(t, b, pg, save, "Sec-Fetch-Site", "same-origin", "Origin", b.srv.URL)
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), "Saved.") || strings.Contains(string(rep.body), `value="marketing" checked`) {
		t.Fatalf("save: %s", rep)
	}
	if c := marketing(t, b, "ada"); c.Enabled || c.SetBy != model.SetByPage {
		t.Fatalf("after the page's save: %+v, want marketing off, set by page", c)
	}
	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	if d := s.delivered(); len(d) != 1 || d[0] != "otp→ada" {
		t.Fatalf("delivered %v, want only the OTP", d)
	}
	clk.set(l.Preferences.Expires)
	if rep := b.do(t, "GET", pg, ""); rep.status != http.StatusForbidden || !strings.Contains(string(rep.body), "expired") {
		t.Fatalf("an expired link: %s", rep)
	}
}

// capture is a provider that keeps the messages the relay built.
type capture struct {
	mu   sync.Mutex
	msgs []providers.Message
}

func (c *capture) Name() string      { return "capture" }
func (c *capture) HonoursKeys() bool { return true }
func (c *capture) Send(_ context.Context, m *providers.Message) providers.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, *m)
	return providers.Result{Outcome: providers.Sent}
}

// A message of an optional category carries the relay's one-click link
// (the smtp provider makes it List-Unsubscribe), under the public URL; a
// required category's carries none. The link, POSTed, unsubscribes.
func TestMessagesCarryTheirUnsubscribeLink(t *testing.T) {
	t.Parallel()
	p := &capture{}
	o := prefOptions(p)
	o.PublicURL = "https://relay.example.com/"
	b := setup(t, options{Relay: o})
	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	p.mu.Lock()
	msgs := append([]providers.Message(nil), p.msgs...)
	p.mu.Unlock()
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	var link string
	for _, m := range msgs {
		switch m.Type {
		case "otp":
			if m.Unsubscribe != "" {
				t.Errorf("the OTP (required) carries an unsubscribe link %q", m.Unsubscribe)
			}
		case "newsletter":
			link = m.Unsubscribe
		}
	}
	path, ok := strings.CutPrefix(link, "https://relay.example.com/u/")
	if !ok {
		t.Fatalf("newsletter's link %q", link)
	}
	if rep := postForm(t, b, "/u/"+path, oneClick); rep.status != http.StatusOK {
		t.Fatalf("one-click of the message's link: %s", rep)
	}
	if m := marketing(t, b, "ada"); len(m.Channels) != 1 || m.Channels[0].Channel != "email" || m.Channels[0].Enabled {
		t.Fatalf("after the message's link: %+v", m)
	}
}

// The recipients' pages are never framed nor cached, and a POST a browser
// says is from another site changes nothing; a same-origin POST and a
// one-click POST without Origin or Sec-Fetch-Site (a mail provider's
// server sends neither) still act.
func TestRecipientPagesHeadersAndCrossSite(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	l := links(t, b, "ada")
	u, pg := l.Unsubscribe[0].URL, l.Preferences.URL
	var html string
	for _, p := range []string{u, pg} {
		rep := b.do(t, "GET", p, "")
		h := rep.header
		if rep.status != http.StatusOK || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET %s: %s, headers %v", p, rep, h)
		}
		html = string(rep.body)
	}
	m := formToken.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no form token on the page:\n%s", html)
	}
	save := url.Values{"form": {m[1]}, "timezone": {"Europe/Berlin"}}
	for _, hdr := range [][]string{
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "https://evil.example", "Sec-Fetch-Site", "same-origin"},
	} {
		if rep := postForm(t, b, u, oneClick, hdr...); rep.status != http.StatusForbidden || !strings.Contains(string(rep.body), "Cross-site") ||
			rep.header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("one-click POST with %v: %s", hdr, rep)
		}
		if rep := postForm(t, b, pg, save, hdr...); rep.status != http.StatusForbidden {
			t.Fatalf("preferences POST with %v: %s", hdr, rep)
		}
	}
	if c := marketing(t, b, "ada"); !c.Enabled || len(c.Channels) != 0 {
		t.Fatalf("a refused POST changed marketing: %+v", c)
	}
	rep := postForm(t, b, pg, save, "Origin", b.srv.URL, "Sec-Fetch-Site", "same-origin")
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), "Saved.") || rep.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("same-origin save: %s", rep)
	}
	if c := marketing(t, b, "ada"); c.Enabled || c.SetBy != model.SetByPage {
		t.Fatalf("after the same-origin save: %+v", c)
	}
	// A browser's form POST from a no-referrer page says Origin: null.
	if rep := postForm(t, b, pg, save, "Origin", "null", "Sec-Fetch-Site", "same-origin"); rep.status != http.StatusOK {
		t.Fatalf("save with Origin null: %s", rep)
	}
	if rep := postForm(t, b, u, oneClick); rep.status != http.StatusOK || !strings.Contains(string(rep.body), "Unsubscribed") {
		t.Fatalf("header-less one-click POST: %s", rep)
	}
	if c := marketing(t, b, "ada"); len(c.Channels) != 1 || c.Channels[0].Enabled || c.Channels[0].SetBy != model.SetByUnsubscribe {
		t.Fatalf("after the one-click: %+v", c)
	}
}

// POST /v1/recipients/{id}/links needs no body: none at all, or {}, is
// every default (a week, email), the same links as naming them.
func TestLinksWithoutABody(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	for _, body := range []string{"", "{}"} {
		rep := b.do(t, "POST", "/v1/recipients/ada/links", body)
		if rep.status != http.StatusOK {
			t.Fatalf("links with the body %q: %s", body, rep)
		}
		l := decode[linksReply](t, rep)
		if len(l.Unsubscribe) != 1 || l.Unsubscribe[0].Channel != "email" || !strings.HasPrefix(l.Unsubscribe[0].URL, "/u/") ||
			time.Until(l.Preferences.Expires) < 6*24*time.Hour {
			t.Fatalf("links with the body %q: %+v, want one email unsubscribe link and a preferences link for a week", body, l)
		}
	}
	if rep := b.do(t, "POST", "/v1/recipients/ada/links", `{"ttl": 5}`); rep.status != http.StatusBadRequest {
		t.Fatalf("a body of the wrong shape: %s, want 400", rep)
	}
}

package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// A tracked link over HTTP, end to end: a stored template's track helper
// puts a /c/ link in the email the Postmark stand-in receives; a GET of it
// redirects (302, no Referer) to the link and counts the click, which the
// notification then lists; a forged token is the 403 page and redirects
// nowhere. Every answer is held to the OpenAPI document.
func TestTrackedLinkOverHTTP(t *testing.T) {
	t.Parallel()
	pm, p := newPostmarkAPI(t)
	o := prefOptions(p)
	o.PublicURL = "https://relay.example.com/"
	b := setup(t, options{Relay: o})
	if rep := b.do(t, "PUT", "/v1/templates/invoice/email/en", partsBody(t, map[string]string{
		"subject": "Invoice", "text": `Pay at {{track "https://pay.example/inv/42?x=1&y=2"}}`})); rep.status != http.StatusCreated {
		t.Fatalf("put template: %s", rep)
	}
	acc := accepted(t, b.do(t, "POST", "/v1/events",
		`{"id":"inv-42","type":"invoice","channels":["email"],"recipients":[{"id":"ada","email":"ada@example.com"}]}`))
	runIdle(t, b.r)
	sent := pm.sent()
	if len(sent) != 1 {
		t.Fatalf("the stand-in saw %d sends, want 1", len(sent))
	}
	m := regexp.MustCompile(`https://relay\.example\.com(/c/[A-Za-z0-9_.-]+)`).FindStringSubmatch(sent[0].TextBody)
	if m == nil || strings.Contains(sent[0].TextBody, "pay.example") {
		t.Fatalf("the email says %q; want the link tracked", sent[0].TextBody)
	}
	noFollow := *b.client
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := noFollow.Get(b.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for range 3 {
		resp := get(m[1])
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://pay.example/inv/42?x=1&y=2" ||
			resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Fatalf("GET the tracked link: %d, Location %q, Referrer-Policy %q; want 302 to the invoice, no referrer",
				resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Referrer-Policy"))
		}
	}
	// A character of the mac changed (not the last: its low bits are padding).
	i := len(m[1]) - 5
	forged := m[1][:i] + map[bool]string{true: "A", false: "B"}[m[1][i] != 'A'] + m[1][i+1:]
	if resp := get(forged); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
		t.Fatalf("GET a forged link: %d, Location %q; want 403 and no redirect", resp.StatusCode, resp.Header.Get("Location"))
	}
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+acc.Notifications[0].ID, ""))
	if len(n.Clicks) != 1 || n.Clicks[0].URL != "https://pay.example/inv/42?x=1&y=2" || n.Clicks[0].Count != 3 {
		t.Fatalf("the notification's clicks = %+v; want the link, clicked 3 times", n.Clicks)
	}
}

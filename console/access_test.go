package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// A browser without JavaScript: a cookie jar, no redirects followed
// unless asked.
type client struct {
	t    *testing.T
	c    *http.Client
	base string
	hdr  []string // headers sent with every request (name, value, …)
}

func newClient(t *testing.T, f *fixture) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: f.srv.URL, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	header = append(append([]string{}, c.hdr...), header...)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", page)
	}
	return m[1]
}

// signIn posts the login form with token (tenant in open mode) and returns
// the overview's HTML.
func (c *client) signIn(field, value string) (*http.Response, string) {
	c.t.Helper()
	_, page := c.do("GET", "/console/login", nil)
	return c.do("POST", "/console/login", url.Values{"csrf": {csrf(c.t, page)}, field: {value}, "next": {"/console/"}})
}

// Every answer carries the security headers; a session comes only from a
// known token, as an HttpOnly, SameSite=Strict cookie; every POST needs
// the session's CSRF token and the console's own origin; a revoked token
// or a forged cookie ends the session at once; and every read works
// without JavaScript.
func TestConsoleAccess(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	c := newClient(t, f)

	resp, _ := c.do("GET", "/console/notifications?recipient=ada", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login?next=") {
		t.Fatalf("signed out: %d to %q, want 303 to the login", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/console/login", "/console/static/console.css", "/console/nothing"} {
		resp, _ := c.do("GET", path, nil)
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("%s: headers %v", path, h)
		}
	}
	// The login form's own CSRF token is required, and a token must be known.
	if resp, _ := c.do("POST", "/console/login", url.Values{"token": {f.acmeToken}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login without its form token: %d, want 403", resp.StatusCode)
	}
	if resp, page := c.signIn("token", "ert_nope"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "not known") {
		t.Fatalf("unknown token: %d", resp.StatusCode)
	}
	resp, _ = c.signIn("token", f.acmeToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "edgerelay_console" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/console" ||
		strings.Contains(session.Value, f.acmeToken) {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/console, without the token", session)
	}

	// Reads without JavaScript: the search and the notification are in the HTML.
	_, page := c.do("GET", "/console/notifications?recipient=ada", nil)
	if !strings.Contains(page, "ada@example.com") || !strings.Contains(page, fmt.Sprintf(`/console/notifications/%s"`, f.adaID)) {
		t.Fatalf("search without JavaScript:\n%s", page)
	}
	// The search lists newest first: dan's event came after ada's.
	_, page = c.do("GET", "/console/notifications?from=2000-01-01", nil)
	ai, di := strings.Index(page, "/console/notifications/"+f.adaID+`"`), strings.Index(page, "/console/notifications/"+f.danID+`"`)
	if ai < 0 || di < 0 || di > ai {
		t.Fatalf("search from 2000-01-01: ada's row at %d, dan's at %d; want both, dan's (the newer) first", ai, di)
	}
	_, page = c.do("GET", "/console/notifications?recipient=ada", nil)
	// Pages spell ids as the API does: a row id, from one sequence for
	// every tenant, would let a tenant count the others' traffic.
	if strings.Contains(page, fmt.Sprintf(`/console/notifications/%d"`, f.ada)) || strings.Contains(page, fmt.Sprintf(">#%d<", f.ada)) {
		t.Fatalf("the search shows ada's row id %d:\n%s", f.ada, page)
	}
	_, page = c.do("GET", fmt.Sprintf("/console/notifications/%s", f.adaID), nil)
	if !strings.Contains(page, "sent once: the provider honours keys") || strings.Count(page, `class="outcome unknown"`) != 2 {
		t.Fatalf("ada's page without JavaScript:\n%s", page)
	}

	// POSTs: no CSRF token, a wrong one, another origin: refused, nothing retried.
	_, page = c.do("GET", fmt.Sprintf("/console/retry?id=%s", f.danID), nil)
	tok := csrf(t, page)
	// The confirmation says what a retry does: it never lifts a suppression
	// (RetryAs refuses one, naming the entry).
	if !strings.Contains(page, "never lifts a suppression") || strings.Contains(page, "lifted)") {
		t.Fatalf("the retry page promises what a retry does not do:\n%s", page)
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{"id": {f.danID}}, nil},
		{"a wrong token", url.Values{"id": {f.danID}, "csrf": {tok + "x"}}, nil},
		{"another origin", url.Values{"id": {f.danID}, "csrf": {tok}}, []string{"Origin", "https://evil.example"}},
	} {
		if resp, _ := c.do("POST", "/console/retry", tc.form, tc.header...); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("retry with %s: %d, want 403", tc.name, resp.StatusCode)
		}
	}
	if n, _ := f.r.Store().Notification(t.Context(), "", f.dan, ""); n.Status != model.StatusDead || len(n.Audit) != 0 {
		t.Fatalf("after refused POSTs dan is %s with audit %v; want dead, untouched", n.Status, n.Audit)
	}
	resp, page = c.do("POST", "/console/retry", url.Values{"id": {f.danID}, "csrf": {tok}}, "Origin", f.srv.URL)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Retried 1 notification") {
		t.Fatalf("retry: %d\n%s", resp.StatusCode, page)
	}
	n, _ := f.r.Store().Notification(t.Context(), "", f.dan, "")
	if len(n.Audit) != 1 || n.Audit[0].Actor != "console, token 1 (support) of tenant acme" || n.Audit[0].Detail != "was dead" {
		t.Fatalf("dan's audit after the retry: %+v", n.Audit)
	}

	// A forged cookie is no session.
	forged := newClient(t, f)
	u, _ := url.Parse(f.srv.URL)
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "edgerelay_console", Value: session.Value[:len(session.Value)-2] + "xx", Path: "/console"}})
	if resp, _ := forged.do("GET", "/console/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a forged cookie: %d, want 303 to the login", resp.StatusCode)
	}
	// Revoking the token ends its sessions at once.
	toks, err := f.r.Store().Tokens(t.Context())
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens %v, %v", toks, err)
	}
	if err := f.r.Store().DeleteToken(t.Context(), toks[0].ID); err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.do("GET", "/console/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after revoking the token: %d, want 303 to the login", resp.StatusCode)
	}
	if resp, _ := c.do("POST", "/console/retry", url.Values{"id": {f.danID}, "csrf": {tok}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a POST after revoking: %d, want 403", resp.StatusCode)
	}
}

// Open on loopback (no tokens), the console asks for a tenant instead of a
// token and shows that tenant only; once a token is created the open
// session ends, as the API closes.
func TestConsoleOpenMode(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	c := newClient(t, f)
	_, page := c.do("GET", "/console/login", nil)
	if !strings.Contains(page, `name="tenant"`) || strings.Contains(page, `name="token"`) {
		t.Fatalf("open login page:\n%s", page)
	}
	if resp, _ := c.signIn("tenant", "bad tenant!"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a malformed tenant: %d, want 400", resp.StatusCode)
	}
	if resp, _ := c.signIn("tenant", "beta"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("open sign-in: %d", resp.StatusCode)
	}
	if resp, _ := c.do("GET", fmt.Sprintf("/console/notifications/%s", f.adaID), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("open as beta, acme's ada: %d, want 404", resp.StatusCode)
	}
	if resp, page := c.do("GET", fmt.Sprintf("/console/notifications/%s", f.eveID), nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "eve@example.com") {
		t.Fatalf("open as beta, beta's eve: %d", resp.StatusCode)
	}
	if _, _, err := f.r.CreateToken(t.Context(), "acme", "first"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := c.do("GET", "/console/", nil)
		if resp.StatusCode == http.StatusSeeOther {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a token exists, the open session still answers %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, page := c.do("GET", "/console/login", nil); !strings.Contains(page, `name="token"`) {
		t.Fatal("after a token was created, the login still offers open mode")
	}
}

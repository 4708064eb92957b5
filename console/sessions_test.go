package console_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/console"
	"github.com/edgerelay/edgerelay/internal/pgtest"
)

// clock is a settable clock for sessions and the login throttle.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// sessionOf is the session cookie a login answered with.
func sessionOf(t *testing.T, resp *http.Response, name string) *http.Cookie {
	t.Helper()
	for _, ck := range resp.Cookies() {
		if ck.Name == name && ck.MaxAge >= 0 {
			return ck
		}
	}
	t.Fatalf("no %s cookie in %d answer: %v", name, resp.StatusCode, resp.Header.Values("Set-Cookie"))
	return nil
}

// withCookie is a client of base holding only ck, as a copy of a
// browser's cookie would be used elsewhere.
func withCookie(t *testing.T, base string, ck *http.Cookie) *client {
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(base)
	jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/console"}})
	return &client{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// signedIn reports whether c's cookie opens the overview (else it is sent
// to the login).
func (c *client) signedIn() bool {
	c.t.Helper()
	resp, _ := c.do("GET", "/console/", nil)
	switch resp.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusSeeOther:
		return false
	}
	c.t.Fatalf("overview: %d", resp.StatusCode)
	return false
}

// Logging out ends the session itself, not only the browser's cookie: a
// copy of the cookie taken before opens nothing after, neither a page nor
// a POST.
func TestLogoutEndsSession(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	c := newClient(t, f)
	resp, _ := c.signIn("token", f.acmeToken)
	copied := withCookie(t, f.srv.URL, sessionOf(t, resp, "edgerelay_console"))
	_, page := copied.do("GET", "/console/retry?id="+f.danID, nil)
	tok := csrf(t, page)

	_, page = c.do("GET", "/console/", nil)
	if resp, _ := c.do("POST", "/console/logout", url.Values{"csrf": {csrf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if c.signedIn() {
		t.Fatal("the browser that logged out is still signed in")
	}
	if copied.signedIn() {
		t.Fatal("after logout, a copy of the old cookie still opens the console")
	}
	if resp, _ := copied.do("POST", "/console/retry", url.Values{"id": {f.danID}, "csrf": {tok}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a POST with the old cookie after logout: %d, want 403", resp.StatusCode)
	}
}

// A session lasts SessionTTL from the login, by the console's clock.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	clk := newClock()
	f := setupWith(t, false, console.Options{Now: clk.Now, SessionTTL: time.Hour})
	c := newClient(t, f)
	c.signIn("token", f.acmeToken)
	clk.add(time.Hour - time.Second)
	if !c.signedIn() {
		t.Fatal("signed out before the session's hour")
	}
	clk.add(time.Second)
	if c.signedIn() {
		t.Fatal("signed in at the end of the session's hour")
	}
}

// Two nodes over one database share their sessions: a login on one works
// on the other, a logout on either ends it on both, and a token revoked
// through either ends its sessions on both.
func TestSessionsTravelBetweenNodes(t *testing.T) {
	t.Parallel()
	travel(t, setup(t, false))
}

// The same on PostgreSQL, as a cluster runs.
func TestSessionsTravelBetweenNodesPostgres(t *testing.T) {
	t.Parallel()
	travel(t, setupAt(t, pgtest.Start(t), false, console.Options{}))
}

func travel(t *testing.T, f *fixture) {
	node2 := f.node(t, console.Options{})

	c1 := newClient(t, f)
	resp, _ := c1.signIn("token", f.acmeToken)
	c2 := withCookie(t, node2.URL, sessionOf(t, resp, "edgerelay_console"))
	if !c2.signedIn() {
		t.Fatal("a login on node 1 does not open node 2")
	}
	_, page := c2.do("GET", "/console/", nil)
	if resp, _ := c2.do("POST", "/console/logout", url.Values{"csrf": {csrf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout on node 2: %d", resp.StatusCode)
	}
	if c1.signedIn() {
		t.Fatal("a logout on node 2 left the session open on node 1")
	}

	// A token revoked (through node 1's relay) ends its sessions on node 2.
	resp, _ = c1.signIn("token", f.acmeToken)
	c2 = withCookie(t, node2.URL, sessionOf(t, resp, "edgerelay_console"))
	if !c2.signedIn() || !c1.signedIn() {
		t.Fatal("the second login does not open both nodes")
	}
	toks, err := f.r.Store().Tokens(t.Context())
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens %v, %v", toks, err)
	}
	if err := f.r.Store().DeleteToken(t.Context(), toks[0].ID); err != nil {
		t.Fatal(err)
	}
	if c2.signedIn() || c1.signedIn() {
		t.Fatal("a revoked token's session still opens a node")
	}
}

// rawClient sends requests with the cookies it was given by hand: the
// cookie jar would not send a Secure cookie over the test's plain HTTP,
// which a proxy terminating TLS does.
type rawClient struct {
	t       *testing.T
	base    string
	cookies map[string]string
}

func (c *rawClient) do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	c.t.Helper()
	h := []string{}
	var parts []string
	for n, v := range c.cookies {
		parts = append(parts, n+"="+v)
	}
	if len(parts) > 0 {
		h = append(h, "Cookie", strings.Join(parts, "; "))
	}
	cl := &client{t: c.t, base: c.base, c: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	resp, body := cl.do(method, path, form, append(h, header...)...)
	for _, ck := range resp.Cookies() {
		if ck.MaxAge < 0 {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck.Value
		}
	}
	return resp, body
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// Behind a trusted proxy that says the browser came over HTTPS, the
// cookies are Secure and named __Host- (so Path=/), and a session works
// over it; the same header from an address that is not a trusted proxy
// changes nothing.
func TestTrustedProxyHTTPS(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f := setupWith(t, false, console.Options{TrustedProxies: loopback})
	https := []string{"X-Forwarded-Proto", "https", "X-Forwarded-For", "198.51.100.4"}
	c := &rawClient{t: t, base: f.srv.URL, cookies: map[string]string{}}

	resp, page := c.do("GET", "/console/login", nil, https...)
	if ck := cookieNamed(resp, "__Host-edgerelay_console_login"); ck == nil || !ck.Secure || ck.Path != "/" || !ck.HttpOnly {
		t.Fatalf("the login form's cookie over HTTPS: %v", resp.Header.Values("Set-Cookie"))
	}
	resp, _ = c.do("POST", "/console/login", url.Values{"csrf": {csrf(t, page)}, "token": {f.acmeToken}, "next": {"/console/"}}, https...)
	ck := cookieNamed(resp, "__Host-edgerelay_console")
	if resp.StatusCode != http.StatusSeeOther || ck == nil || !ck.Secure || ck.Path != "/" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login over HTTPS: %d, cookies %v", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	if resp, _ := c.do("GET", "/console/", nil, https...); resp.StatusCode != http.StatusOK {
		t.Fatalf("the overview over HTTPS with the __Host- cookie: %d", resp.StatusCode)
	}
	// Over plain HTTP the __Host- cookie is not the session (a browser
	// would not send it anyway).
	if resp, _ := c.do("GET", "/console/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the overview over plain HTTP with the __Host- cookie: %d, want 303 to the login", resp.StatusCode)
	}

	// From an address that is not a trusted proxy, the header is the
	// client's word and is ignored.
	g := setupWith(t, false, console.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	d := &rawClient{t: t, base: g.srv.URL, cookies: map[string]string{}}
	resp, page = d.do("GET", "/console/login", nil, https...)
	if ck := cookieNamed(resp, "edgerelay_console_login"); ck == nil || ck.Secure || ck.Path != "/console" {
		t.Fatalf("the login form's cookie, X-Forwarded-Proto from an untrusted address: %v", resp.Header.Values("Set-Cookie"))
	}
	resp, _ = d.do("POST", "/console/login", url.Values{"csrf": {csrf(t, page)}, "token": {g.acmeToken}}, https...)
	if ck := cookieNamed(resp, "edgerelay_console"); ck == nil || ck.Secure || ck.Path != "/console" || cookieNamed(resp, "__Host-edgerelay_console") != nil {
		t.Fatalf("the session cookie, X-Forwarded-Proto from an untrusted address: %v", resp.Header.Values("Set-Cookie"))
	}
}

// Failed logins are throttled per client address: past LoginFailures the
// address is answered 429 with Retry-After, even with a good token, while
// another address still signs in; one more try comes back every
// LoginRefill. Behind a trusted proxy the address is X-Forwarded-For's.
func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	clk := newClock()
	f := setupWith(t, false, console.Options{Now: clk.Now, LoginFailures: 3, LoginRefill: time.Minute,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	from := func(addr string) *client {
		c := newClient(t, f)
		c.hdr = []string{"X-Forwarded-For", addr}
		return c
	}
	guesser, other := from("203.0.113.7"), from("203.0.113.8")
	for i := range 3 {
		if resp, _ := guesser.signIn("token", "ert_guess"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	resp, page := guesser.signIn("token", "ert_guess")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" || !strings.Contains(page, "Too many failed sign-ins") {
		t.Fatalf("the 4th failed login: %d, Retry-After %q, want 429 and 60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := guesser.signIn("token", f.acmeToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a good token from the throttled address: %d, want 429", resp.StatusCode)
	}
	if resp, _ := other.signIn("token", f.acmeToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("another address's login: %d, want 303", resp.StatusCode)
	}
	clk.add(30 * time.Second)
	if resp, _ := guesser.signIn("token", "ert_guess"); resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("half a refill later: %d, Retry-After %q, want 30", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clk.add(30 * time.Second)
	if resp, _ := guesser.signIn("token", f.acmeToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a good token a refill later: %d, want 303", resp.StatusCode)
	}
	// The good login gave its try back: one more guess, then 429 again.
	if resp, _ := guesser.signIn("token", "ert_guess"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a guess after the good login: %d, want 401", resp.StatusCode)
	}
	if resp, _ := guesser.signIn("token", "ert_guess"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the next guess: %d, want 429", resp.StatusCode)
	}
}

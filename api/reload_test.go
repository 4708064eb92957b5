package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// SetTokenHashes replaces the config's tokens: a dropped token is refused
// on the next request, a new one accepted, and a request in flight is not
// affected (each request looks the table up once).
func TestSetTokenHashes(t *testing.T) {
	t.Parallel()
	const old, nu = "tok_old_0123456789", "tok_new_0123456789"
	b := setup(t, options{Tokens: map[string]string{sha256hex(old): "acme"}})
	get := func(tok string) int {
		return b.do(t, "GET", "/v1/notifications", "", "Authorization", "Bearer "+tok).status
	}
	if got := get(old); got != http.StatusOK {
		t.Fatalf("old token before: %d", got)
	}
	b.api.SetTokenHashes(map[string]string{sha256hex(nu): "acme"})
	if got := get(old); got != http.StatusUnauthorized {
		t.Errorf("dropped token: %d, want 401", got)
	}
	if got := get(nu); got != http.StatusOK {
		t.Errorf("new token: %d, want 200", got)
	}
}

// Tokens arriving by reload close an open API, as a stored token does; an
// empty set of tokens never reopens it.
func TestSetTokenHashesClosesAnOpenAPI(t *testing.T) {
	t.Parallel()
	const tok = "tok_reload_0123456789"
	b := setup(t, options{})
	if got := b.do(t, "GET", "/v1/notifications", "").status; got != http.StatusOK {
		t.Fatalf("open API: %d", got)
	}
	b.api.SetTokenHashes(map[string]string{sha256hex(tok): "acme"})
	if got := b.do(t, "GET", "/v1/notifications", "").status; got != http.StatusUnauthorized {
		t.Errorf("after tokens arrived, no token: %d, want 401", got)
	}
	if got := b.do(t, "GET", "/v1/notifications", "", "Authorization", "Bearer "+tok).status; got != http.StatusOK {
		t.Errorf("the new token: %d", got)
	}
	b.api.SetTokenHashes(nil)
	if got := b.do(t, "GET", "/v1/notifications", "").status; got != http.StatusUnauthorized {
		t.Errorf("tokens removed again, no token: %d, want 401 (removing tokens must not reopen the API)", got)
	}
}

// Routes lists exactly what the mux serves: each pattern, with its
// wildcards filled in, reaches a handler of its own (not the 404/405
// fallback), and /metrics is listed when metrics are on.
func TestRoutesAreServed(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Metrics: true})
	routes := b.api.Routes()
	if len(routes) < 10 {
		t.Fatalf("only %d routes: %v", len(routes), routes)
	}
	seen := map[string]bool{}
	wild := regexp.MustCompile(`\{[^}]+\}`)
	for _, pat := range routes {
		if seen[pat] {
			t.Errorf("%s listed twice", pat)
		}
		seen[pat] = true
		method, path, ok := strings.Cut(pat, " ")
		if !ok {
			t.Errorf("pattern %q has no method", pat)
			continue
		}
		var hdr []string
		if strings.HasSuffix(path, "/stream") {
			hdr = []string{"Last-Event-ID", "not a seq"} // answered at once (400), not streamed
		}
		rep := b.do(t, method, wild.ReplaceAllString(path, "1"), "", hdr...)
		if rep.status == http.StatusNotFound && strings.Contains(string(rep.body), "no route for") ||
			rep.status == http.StatusMethodNotAllowed {
			t.Errorf("%s: the fallback answered %s", pat, rep)
		}
	}
	for _, want := range []string{"POST /v1/events", "GET /metrics", "GET /healthz"} {
		if !seen[want] {
			t.Errorf("Routes lacks %s", want)
		}
	}
}

package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
)

// The suppression list is the tenant's own: acme sees and lifts its entry
// for an address, never beta's entry for the same address; lifting takes
// the session's CSRF token, as every POST.
func TestConsoleSuppressions(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	ctx := t.Context()
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := f.r.Suppress(ctx, []model.Suppression{{Tenant: tenant, Channel: "email", Address: "gone@example.com",
			Reason: model.ReasonHardBounce, Source: model.SourceAPI, Detail: "550 5.1.1 " + tenant}}); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, f)
	if resp, _ := c.signIn("token", f.acmeToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, page := c.do("GET", "/console/suppressions", nil)
	if !strings.Contains(page, "gone@example.com") || !strings.Contains(page, "550 5.1.1 acme") || strings.Contains(page, "550 5.1.1 beta") {
		t.Fatalf("acme's suppression list:\n%s", page)
	}
	q := url.Values{"channel": {"email"}, "address": {"gone@example.com"}}
	_, page = c.do("GET", "/console/suppressions/lift?"+q.Encode(), nil)
	tok := csrf(t, page)
	if resp, _ := c.do("POST", "/console/suppressions/lift", q); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("lift without the CSRF token: %d, want 403", resp.StatusCode)
	}
	form := url.Values{"channel": {"email"}, "address": {"gone@example.com"}, "csrf": {tok}}
	if resp, page := c.do("POST", "/console/suppressions/lift", form, "Origin", f.srv.URL); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Lifted") {
		t.Fatalf("lift: %d\n%s", resp.StatusCode, page)
	}
	left := map[string]int{}
	for _, tenant := range []string{"acme", "beta"} {
		es, err := f.r.Suppressions(ctx, model.SuppressionFilter{Tenant: tenant, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		left[tenant] = len(es)
	}
	if left["acme"] != 0 || left["beta"] != 1 {
		t.Fatalf("entries left after acme lifted its own: %v, want acme 0, beta 1", left)
	}
	if resp, _ := c.do("POST", "/console/suppressions/lift", form, "Origin", f.srv.URL); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("lifting it again: %d, want 404", resp.StatusCode)
	}
}

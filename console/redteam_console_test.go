package console_test

import (
	"net/http"
	"testing"
)

// Red-team findings in the console: each test showed a hole, failed
// until it was fixed, and keeps it fixed.

// An audience name no audience can have, in the console's URL, is a page
// that does not exist (404), as an unknown one is; not a 500 "Something
// went wrong" with an ERROR in the log. Seen: /console/audiences/-1,
// /console/audiences/%00 and a 3,000-byte name answer 500 (console/pages.go
// audience: relay.Audience's *relay.InvalidEventError from checkAudience
// goes to c.internal; only model.ErrNotFound is a 404).
func TestRedteamConsoleAudienceBadNameIsNotFound(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	c := newClient(t, f)
	c.signIn("token", f.acmeToken)
	if resp, _ := c.do("GET", "/console/audiences/nosuch", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("control: an unknown audience answers %d, want 404", resp.StatusCode)
	}
	for _, name := range []string{"-1", "%00", "EVE@EXAMPLE.COM"} {
		if resp, page := c.do("GET", "/console/audiences/"+name, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("/console/audiences/%s: %d, want 404 (page %.200s)", name, resp.StatusCode, page)
		}
	}
}

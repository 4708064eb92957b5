package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/relay"
)

// The notification page shows control characters in message text as
// visible escapes: raw, they hide in the page or reorder how it reads.
func TestNotificationPageShowsControls(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	res, err := f.r.Accept(t.Context(), relay.Event{ID: "evt_ctl", Type: "payment.succeeded", Tenant: "acme", Channels: []string{"email"},
		Recipients: []relay.Recipient{{ID: "zoe", Email: "zoe@example.com"}},
		Subject:    "hi \x1b]0;pwned\x07 there", Body: "line\n\u202eevil"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := f.r.IDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f)
	if resp, _ := c.signIn("tenant", "acme"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("open sign-in: %d", resp.StatusCode)
	}
	resp, page := c.do("GET", "/console/notifications/"+ids.Notification(res.Notifications[0].ID), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d\n%s", resp.StatusCode, page)
	}
	if strings.ContainsAny(page, "\x1b\x07\u202e") {
		t.Errorf("page carries raw control characters")
	}
	for _, want := range []string{`hi \x1b]0;pwned\x07 there`, "line\n\\u202eevil"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// The workflow runs page shows the tenant's runs, each step with its
// outcome and why, linked to the notification a step wrote; another
// tenant's runs are not there; a state that is none is refused.
func TestConsoleWorkflowRuns(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	ctx := t.Context()
	for _, tenant := range []string{"acme", "beta"} {
		if _, _, err := f.r.PutWorkflow(ctx, tenant, "comment.created", []byte(`{"steps": [
			{"id": "inbox", "channels": ["in_app"]}, {"id": "email", "channels": ["email"], "if": "!steps.inbox.read"}]}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.r.Accept(ctx, relay.Event{ID: "c-" + tenant, Type: "comment.created", Tenant: tenant, Subject: "New comment", Body: "Ann replied",
			Recipients: []relay.Recipient{{ID: "zoe-" + tenant, Email: "zoe-" + tenant + "@example.com"}}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		runs, err := f.r.Runs(ctx, model.RunFilter{Tenant: "acme", State: model.RunDone})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("acme's run was not done within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := newClient(t, f)
	c.signIn("token", f.acmeToken)
	resp, page := c.do("GET", "/console/workflows?state=done", nil)
	if resp.StatusCode != 200 || !strings.Contains(page, "recipient zoe-acme") || strings.Contains(page, "zoe-beta") ||
		!strings.Contains(page, "posted to zoe-acme&#39;s in-app feed") || !strings.Contains(page, "unread") ||
		!strings.Contains(page, "/console/notifications/n_") || !strings.Contains(page, `id="run_`) {
		t.Fatalf("acme's runs: %d\n%s", resp.StatusCode, page)
	}
	if resp, _ := c.do("GET", "/console/workflows?state=paused", nil); resp.StatusCode != 400 {
		t.Fatalf("a state that is none: %d, want 400", resp.StatusCode)
	}
}

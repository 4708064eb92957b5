package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// edgerelay workflow runs shows each run with its steps and why; workflow
// cancel stops the runs of a cancel key; a bad state is a usage error.
func TestWorkflowCLI(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	ctx := context.Background()
	r, err := relaytest.Open(ctx, db, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.PutWorkflow(ctx, "default", "invoice.due", []byte(`{"cancel_key": "'invoice-' + data.invoice",
		"steps": [{"id": "inbox", "channels": ["in_app"]}, {"id": "wait", "delay": {"for": "72h"}}, {"id": "remind", "channels": ["email"], "if": "!steps.inbox.read"}]}`)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"42", "43"} {
		if _, err := r.Accept(ctx, relay.Event{ID: "due-" + id, Type: "invoice.due", Body: "Unpaid", Data: []byte(`{"invoice": "` + id + `"}`),
			Recipients: []relay.Recipient{{ID: "ada", Email: "ada@example.com"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A workflow whose step writes an email at once: show follows the
	// notification to its run, and show run_… prints a run.
	if _, _, err := r.PutWorkflow(ctx, "default", "ping", []byte(`{"steps": [{"id": "mail", "channels": ["email"]}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(ctx, relay.Event{ID: "ping-1", Type: "ping", Body: "Ping", Recipients: []relay.Recipient{{ID: "ada", Email: "ada@example.com"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.StepWorkflows(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := r.IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pings, err := r.Runs(ctx, model.RunFilter{Tenant: "default", EventID: "ping-1"})
	if err != nil || len(pings) != 1 || len(pings[0].Steps) != 1 || pings[0].Steps[0].Notification == 0 {
		t.Fatalf("the ping's run = %+v, %v", pings, err)
	}
	pingNote, pingRun := x.Notification(pings[0].Steps[0].Notification), x.Run(pings[0].ID)
	r.Close()
	if out := runCLI(t, "", "show", "--db", db, pingNote); out.code != 0 || !strings.Contains(out.stdout, "Written by a workflow step of this run:") ||
		!strings.Contains(out.stdout, "event ping-1, recipient ada: workflow ping v1, done") {
		t.Fatalf("show of the step's notification: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := runCLI(t, "", "show", "--db", db, pingRun); out.code != 0 || !strings.Contains(out.stdout, "0 mail") || !strings.Contains(out.stdout, "written for email") {
		t.Fatalf("show %s: exit %d\n%s%s", pingRun, out.code, out.stdout, out.stderr)
	}
	if out := runCLI(t, "", "show", "--db", db, "run_nope"); out.code != 2 {
		t.Fatalf("show run_nope: exit %d\n%s", out.code, out.stderr)
	}
	// dispatch --until-idle says the runs wait for their delay.
	if out := runCLI(t, "", "dispatch", "--db", db, "--until-idle", "--route", "*=log://stdout"); !strings.Contains(out.stderr, "2 workflow runs wait for a later step") {
		t.Fatalf("dispatch --until-idle: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out := runCLI(t, "", "workflow", "runs", "--db", db, "--state", "waiting")
	if out.code != 0 || strings.Count(out.stdout, "workflow invoice.due v1, waiting") != 2 ||
		!strings.Contains(out.stdout, "posted to ada's in-app feed") || !strings.Contains(out.stdout, "waiting 72h0m0s, until") {
		t.Fatalf("workflow runs: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := runCLI(t, "", "workflow", "cancel", "--db", db, "invoice-42"); out.code != 0 || out.stdout != "1 runs cancelled\n" {
		t.Fatalf("workflow cancel: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = runCLI(t, "", "workflow", "runs", "--db", db, "--state", "cancelled")
	if !strings.Contains(out.stdout, "event due-42") || strings.Contains(out.stdout, "due-43") ||
		!strings.Contains(out.stdout, `cancelled by edgerelay workflow cancel: cancel key "invoice-42"`) {
		t.Fatalf("cancelled runs:\n%s%s", out.stdout, out.stderr)
	}
	if out := runCLI(t, "", "workflow", "runs", "--db", db, "--state", "paused"); out.code != 2 || !strings.Contains(out.stderr, `"paused": one of waiting, done, cancelled`) {
		t.Fatalf("a bad state: exit %d\n%s", out.code, out.stderr)
	}
}

// A throttle step from the config file, through the commands: batch send
// accepts three nudges for ada, dispatch decides their runs (two pass and
// are emailed, the third ends throttled), and workflow runs says so.
func TestWorkflowThrottleCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, cfg, events := filepath.Join(dir, "relay.db"), filepath.Join(dir, "edgerelay.yaml"), filepath.Join(dir, "nudges.jsonl")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(cfg, `routes: {email: log://stdout}
workflows:
  - type: nudge
    steps:
      - id: daily
        throttle: {max: 2, per: 24h}
      - id: email
        channels: [email]
`)
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf(`{"id": "nudge-%d", "type": "nudge", "recipients": [{"id": "ada", "email": "ada@example.com"}], "subject": "Nudge", "body": "Nudge %d"}`, i, i))
	}
	write(events, strings.Join(lines, "\n")+"\n")
	if out := runCLI(t, "", "batch", "send", "--db", db, "--config", cfg, events); out.code != 0 {
		t.Fatalf("batch send: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out := runCLI(t, "", "dispatch", "--db", db, "--config", cfg, "--until-idle")
	if out.code != 0 || !strings.Contains(out.stderr, "2 attempts; sent 2, failed 0") {
		t.Fatalf("dispatch: exit %d, want 2 emails to ada\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = runCLI(t, "", "workflow", "runs", "--db", db, "--state", "done")
	if out.code != 0 || strings.Count(out.stdout, "passed: ada's runs of nudge passed this step") != 2 ||
		!strings.Contains(out.stdout, "event nudge-2, recipient ada: workflow nudge v1, done: ended at step 0 (daily): throttled") ||
		!strings.Contains(out.stdout, "throttled: ada's runs of nudge passed this step 2 times in the last 24h0m0s (max 2): the run ends here") {
		t.Fatalf("workflow runs: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
}

package relay

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// A category throttle with its excess digested, as workflow steps: at
// most two comments an hour reach u1 by email at once; the rest go on
// throttled into an hourly batch, which becomes one digest email. Another
// recipient counts on their own, a slot stops counting when its hour is
// over, and a throttle whose excess ends the run ends it, saying so.
func TestWorkflowThrottleStep(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		for name, parts := range map[string]map[string]string{
			"comment.created": {"subject": "comment {{.data.text}}", "text": "{{.data.text}}"},
			"comment.digest":  {"subject": "{{.batch.count}} more comments", "text": "{{range .batch.items}}{{.data.text}};{{end}}"},
			"nudge":           {"subject": "nudge {{.data.text}}", "text": "{{.data.text}}"},
		} {
			key, err := TemplateKey("acme", name, "email", "en")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := r.PutTemplate(ctx, key, parts); err != nil {
				t.Fatal(err)
			}
		}
		putWorkflow(t, r, "acme", "comment.created", `{"steps": [
		{"id": "limit", "throttle": {"max": 2, "per": "1h", "excess": "continue"}},
		{"id": "now", "channels": ["email"], "if": "!steps.limit.throttled"},
		{"id": "gather", "batch": {"window": "1h"}, "if": "steps.limit.throttled"},
		{"id": "digest", "channels": ["email"], "template": "comment.digest", "if": "steps.limit.throttled"}]}`)
		putWorkflow(t, r, "acme", "nudge", `{"steps": [
		{"id": "daily", "throttle": {"max": 1, "per": "24h"}},
		{"id": "email", "channels": ["email"]}]}`)
		u1, u2 := Recipient{ID: "u1", Email: "u1@example.com"}, Recipient{ID: "u2", Email: "u2@example.com"}
		post := func(id, typ, text string, rc Recipient) {
			t.Helper()
			accept(t, r, Event{ID: id, Type: typ, Tenant: "acme", Data: []byte(`{"text":"` + text + `"}`), Recipients: []Recipient{rc}})
			stepAll(t, r)
			clk.advance(time.Minute)
		}
		for i, text := range []string{"a", "b", "c", "d", "e"} {
			post("c"+string(rune('1'+i)), "comment.created", text, u1)
		}
		post("x1", "comment.created", "x", u2)
		post("n1", "nudge", "n1", u1)
		post("n2", "nudge", "n2", u1)
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		subjects := func() map[string]int {
			got := map[string]int{}
			for _, d := range sim.srv.Deliveries() {
				got[d.To+" "+d.Subject+" "+d.Text]++
			}
			return got
		}
		want := map[string]int{"u1@example.com comment a a": 1, "u1@example.com comment b b": 1,
			"u2@example.com comment x x": 1, "u1@example.com nudge n1 n1": 1}
		if got := subjects(); !maps.Equal(got, want) {
			t.Fatalf("before the hour is over: emails %v; want %v", got, want)
		}
		// The batch of the excess closes an hour after c3 reached it; c1's
		// and c2's slots stop counting an hour after they were taken.
		clk.advance(time.Hour)
		stepAll(t, r)
		post("c6", "comment.created", "f", u1)
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		want["u1@example.com 3 more comments c;d;e;"] = 1
		want["u1@example.com comment f f"] = 1
		if got := subjects(); !maps.Equal(got, want) {
			t.Fatalf("after the hour: emails %v; want %v", got, want)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		if v := runs["c2/u1"]; v.State != model.RunDone || v.Steps[0].Outcome != model.StepPassed ||
			!strings.Contains(v.Steps[0].Reason, "passed: u1's runs of comment.created passed this step 2 times in the last 1h0m0s (max 2)") ||
			v.Steps[1].Outcome != model.StepSent || v.Steps[2].Outcome != model.StepSkipped {
			t.Errorf("c2's run = %+v; want it passed, emailed, not batched", v)
		}
		if v := runs["c3/u1"]; v.Steps[0].Outcome != model.StepThrottled || v.Steps[1].Outcome != model.StepSkipped ||
			!strings.Contains(v.Steps[0].Reason, "throttled: u1's runs of comment.created passed this step 2 times in the last 1h0m0s (max 2): the run goes on, throttled") ||
			!strings.Contains(v.Steps[1].Reason, "limit: throttled") {
			t.Errorf("c3's run = %+v; want it throttled, then not emailed, saying why", v)
		}
		if v := runs["c6/u1"]; v.Steps[0].Outcome != model.StepPassed || !strings.Contains(v.Steps[0].Reason, "passed this step 1 times") {
			t.Errorf("c6's run = %+v; want it passed: the earlier slots are over an hour old", v)
		}
		if v := runs["n2/u1"]; v.State != model.RunDone || len(v.Steps) != 1 || v.Steps[0].Outcome != model.StepThrottled ||
			!strings.Contains(v.Steps[0].Reason, "the run ends here") || !strings.Contains(v.Reason, "ended at step 0 (daily): throttled") {
			t.Errorf("n2's run = %+v; want it ended at the throttle", v)
		}
	})
}

package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// A digest as a workflow: comments for one recipient within ten minutes
// become one email, rendered with the batch (.batch.count, .batch.items);
// another recipient's comment is a batch of its own. The runs that joined
// end carried, saying by whom; a batch with a max closes when it fills,
// and the next comment opens the next batch.
func TestWorkflowBatchesADigest(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		for _, typ := range []string{"comment.created", "like.created"} {
			key, err := TemplateKey("acme", typ, "email", "en")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": "{{.batch.count}} new",
				"text": "{{range .batch.items}}{{.data.text}};{{end}}"}); err != nil {
				t.Fatal(err)
			}
		}
		putWorkflow(t, r, "acme", "comment.created", `{"steps": [
		{"id": "digest", "batch": {"window": "10m"}},
		{"id": "email", "channels": ["email"]}]}`)
		putWorkflow(t, r, "acme", "like.created", `{"steps": [
		{"id": "digest", "batch": {"window": "1h", "max": 2}},
		{"id": "email", "channels": ["email"]}]}`)
		u1, u2 := Recipient{ID: "u1", Email: "u1@example.com"}, Recipient{ID: "u2", Email: "u2@example.com"}
		post := func(id, typ, text string, rc Recipient) {
			t.Helper()
			accept(t, r, Event{ID: id, Type: typ, Tenant: "acme", Data: []byte(`{"text":"` + text + `"}`), Recipients: []Recipient{rc}})
			stepAll(t, r)
		}
		post("c1", "comment.created", "a", u1)
		clk.advance(time.Minute)
		post("c2", "comment.created", "b", u1)
		post("c3", "comment.created", "x", u2)
		clk.advance(time.Minute)
		post("c4", "comment.created", "c", u1)
		post("l1", "like.created", "L1", u1)
		post("l2", "like.created", "L2", u1) // fills the batch: it closes now
		post("l3", "like.created", "L3", u1) // the next batch
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := sim.srv.Deliveries(); len(got) != 1 || got[0].Subject != "2 new" || got[0].Text != "L1;L2;" {
			t.Fatalf("before the window ends: %+v; want only the filled batch of likes", got)
		}
		clk.advance(10 * time.Minute)
		stepAll(t, r)
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range sim.srv.Deliveries() {
			got[d.To+" "+d.Subject] += d.Text
		}
		want := map[string]string{"u1@example.com 3 new": "a;b;c;", "u2@example.com 1 new": "x;", "u1@example.com 2 new": "L1;L2;"}
		if len(got) != len(want) {
			t.Fatalf("emails %v; want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("emails %v; want %v", got, want)
			}
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		lead := runs["c1/u1"]
		if lead.State != model.RunDone || len(lead.Steps) != 3 || lead.Steps[0].Outcome != model.StepBatched ||
			!strings.Contains(lead.Steps[1].Reason, "closed the batch it opened; it carries 3 events") {
			t.Fatalf("c1's run = %+v; want it to open and close the batch, then email", lead)
		}
		leader := fmt.Sprintf("run %d", lead.ID)
		if x := r.ids.Load(); x != nil {
			leader = x.Run(lead.ID)
		}
		for _, id := range []string{"c2/u1", "c4/u1"} {
			v := runs[id]
			if v.State != model.RunDone || !strings.Contains(v.Reason, "carried on by the batch "+leader+" leads") {
				t.Errorf("%s's run = %s (%s); want done, carried by %s", id, v.State, v.Reason, leader)
			}
		}
		if v := runs["l3/u1"]; v.State != model.RunWaiting || len(v.Steps) != 1 || !strings.Contains(v.Steps[0].Reason, "opened a batch") {
			t.Errorf("l3's run = %+v; want it leading a batch of its own", v)
		}
		want1 := StepKey("acme", "c1", "comment.created", "u1", "email", 1, "email")
		found := false
		for _, k := range sim.requestKeys() {
			found = found || k == want1
		}
		if !found {
			t.Errorf("Idempotency-Keys %v; want the digest's under the leader's step key %s", sim.requestKeys(), want1)
		}
	})
}

// A digest at 08:00 where each recipient is: a batch step with a schedule
// closes at its next 08:00 in the recipient's time zone (the one the event
// gives, else UTC), so u1 in Berlin gets the day's comments an hour
// before u2, and the next comment opens the next day's batch.
func TestWorkflowBatchOnASchedule(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		clk.set(time.Date(2026, 3, 2, 5, 30, 0, 0, time.UTC)) // 06:30 in Berlin
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		key, err := TemplateKey("acme", "comment.created", "email", "en")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": "{{.batch.count}} new",
			"text": "{{range .batch.items}}{{.data.text}};{{end}}"}); err != nil {
			t.Fatal(err)
		}
		putWorkflow(t, r, "acme", "comment.created", `{"steps": [
		{"id": "daily", "batch": {"schedule": "0 8 * * *"}},
		{"id": "email", "channels": ["email"]}]}`)
		u1 := Recipient{ID: "u1", Email: "u1@example.com", Timezone: "Europe/Berlin"}
		u2 := Recipient{ID: "u2", Email: "u2@example.com"}
		for i, text := range []string{"a", "b"} {
			accept(t, r, Event{ID: fmt.Sprintf("c%d", i), Type: "comment.created", Tenant: "acme", Data: []byte(`{"text":"` + text + `"}`),
				Recipients: []Recipient{u1, u2}})
			stepAll(t, r)
			clk.advance(time.Minute)
		}
		deliveries := func(at time.Time) map[string]string {
			t.Helper()
			clk.set(at)
			stepAll(t, r)
			if _, err := r.RunUntilIdle(ctx, 0); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, d := range sim.srv.Deliveries() {
				got[d.To] += d.Subject + " " + d.Text + " | "
			}
			return got
		}
		if got := deliveries(time.Date(2026, 3, 2, 6, 59, 59, 0, time.UTC)); len(got) != 0 {
			t.Fatalf("before 08:00 in Berlin: %v; want nothing", got)
		}
		if got := deliveries(time.Date(2026, 3, 2, 7, 0, 1, 0, time.UTC)); len(got) != 1 || got["u1@example.com"] != "2 new a;b; | " {
			t.Fatalf("after 08:00 in Berlin: %v; want u1's digest of both", got)
		}
		accept(t, r, Event{ID: "c9", Type: "comment.created", Tenant: "acme", Data: []byte(`{"text":"c"}`), Recipients: []Recipient{u1}})
		stepAll(t, r)
		if got := deliveries(time.Date(2026, 3, 2, 8, 0, 1, 0, time.UTC)); len(got) != 2 || got["u2@example.com"] != "2 new a;b; | " || got["u1@example.com"] != "2 new a;b; | " {
			t.Fatalf("after 08:00 UTC: %v; want u2's digest too, and u1's next not yet", got)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		if v := runs["c9/u1"]; v.State != model.RunWaiting || !strings.Contains(v.Steps[0].Reason, `(the next 2026-03-03 08:00 CET of "0 8 * * *" in Europe/Berlin)`) {
			t.Fatalf("c9's run = %+v; want it leading tomorrow's batch, saying when", v)
		}
		if got := deliveries(time.Date(2026, 3, 3, 7, 0, 1, 0, time.UTC)); got["u1@example.com"] != "2 new a;b; | 1 new c; | " {
			t.Fatalf("the next day: %v; want u1's second digest", got)
		}
	})
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store/open"
	"github.com/edgerelay/edgerelay/workflow"
)

// Workflow runs under SIGKILLs: dispatch processes (each runs the stepper
// beside the dispatcher) are killed at random points, and at the "step"
// crash point, inside the transaction that writes a step's decision, while
// runs go through an in-app post, a delay, an email, and a chat message
// whose condition waits for the email's outcome. In the end every run has
// decided each step exactly once: one item per recipient, each email and
// each chat message delivered once under its own key, no step skipped, none twice.
// Beside them, forty events for each of five recipients go through a batch
// step (a digest email): however the kills cut the windows, each event is in
// exactly one digest delivered, and each digest is delivered once. The same
// holds for four events for each of thirty recipients through a batch that
// closes on a schedule (every minute): a dispatch is killed as the first of
// those digests goes out. And ten
// nudges for each of four recipients go through a throttle step of three a
// day: exactly three of each recipient's runs pass and are emailed, once
// each; the other seven end throttled.
//
// On PostgreSQL two dispatch processes run at once on the database, and
// the kills take one of them at a time: any node decides the next step.
func TestWorkflowSIGKILLAcrossSteps(t *testing.T) {
	longtest.Require(t)
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		workflowSIGKILLDrill(t, filepath.Join(t.TempDir(), "relay.db"), 1)
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		workflowSIGKILLDrill(t, pgtest.Start(t), 2)
	})
}

// workflowSIGKILLDrill is the drill on the store at db, with nodes
// dispatch processes at a time.
func workflowSIGKILLDrill(t *testing.T, db string, nodes int) {
	bin := binary(t)
	dir := t.TempDir()
	server := sim.New(sim.Options{HonourKeys: true, Script: &sim.Script{Rules: []sim.Rule{
		{To: "*", Action: sim.ActionSlow, Delay: 10 * time.Millisecond},
	}}})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	const n = 150
	ctx := context.Background()
	def := workflow.Definition{Type: "order.shipped", Steps: []workflow.Step{
		{ID: "inbox", Channels: []string{relay.InAppChannel}},
		{ID: "wait", Delay: &workflow.Delay{For: workflow.Duration(300 * time.Millisecond)}},
		{ID: "email", Channels: []string{"email"}},
		{ID: "chat", Channels: []string{"chat"}, If: "steps.email.sent"},
	}}
	logp, err := providers.New("log://" + filepath.Join(dir, "accept.log"))
	if err != nil {
		t.Fatal(err)
	}
	digest := workflow.Definition{Type: windowed.typ, Steps: []workflow.Step{
		{ID: "digest", Batch: &workflow.Batch{Window: workflow.Duration(300 * time.Millisecond)}},
		{ID: "email", Channels: []string{"email"}},
	}}
	daily := workflow.Definition{Type: scheduled.typ, Steps: []workflow.Step{
		{ID: "daily", Batch: &workflow.Batch{Schedule: "* * * * *"}},
		{ID: "email", Channels: []string{"email"}},
	}}
	nudge := workflow.Definition{Type: "nudge", Steps: []workflow.Step{
		{ID: "daily", Throttle: &workflow.Throttle{Max: nudgeMax, Per: workflow.Duration(24 * time.Hour)}},
		{ID: "email", Channels: []string{"email"}},
	}}
	r, err := relaytest.Open(ctx, db, relay.Options{Workflows: []relay.FileWorkflow{{Tenant: "default", Definition: def}, {Tenant: "default", Definition: digest},
		{Tenant: "default", Definition: daily}, {Tenant: "default", Definition: nudge}},
		Routes: relay.Routes{"*": {logp}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := relay.Event{ID: "ord-1", Type: "order.shipped", Subject: "Shipped", Body: "Your order is on its way"}
	for i := range n {
		ev.Recipients = append(ev.Recipients, relay.Recipient{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i),
			Addresses: map[string]string{"chat": fmt.Sprintf("u%d@chat.example", i)}})
	}
	if acc, err := r.Accept(ctx, ev); err != nil || acc.Count != n {
		t.Fatalf("accept: %+v, %v", acc, err)
	}
	acceptDigests(t, r, windowed)
	acceptDigests(t, r, scheduled)
	var nudges []relay.Event
	for i := range nudgeEvents {
		for j := range nudgeRecipients {
			nudges = append(nudges, relay.Event{ID: fmt.Sprintf("nudge-%02d-t%d", i, j), Type: "nudge", Subject: "nudge", Body: "nudge",
				Recipients: []relay.Recipient{{ID: fmt.Sprintf("t%d", j), Email: fmt.Sprintf("t%d@example.com", j)}}})
		}
	}
	if _, errs := r.AcceptAll(ctx, nudges, 0); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	r.Close()

	base := "email-http+" + hs.URL + "/v1/emails?from=relay@example.com&idempotency=honoured&timeout=2s"
	args := []string{"dispatch", "--db", db, "--route", "email=" + base, "--route", "chat=" + base + "&name=chat",
		"--lease", "1s", "--workers", "8", "--log-level", "warn"}
	// The other nodes, on PostgreSQL: each runs until the drill ends.
	for range nodes - 1 {
		other := exec.Command(bin, args...)
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	}
	run := func(env string, until func() bool, within time.Duration) {
		cmd := exec.Command(bin, args...)
		if env != "" {
			cmd.Env = append(cmd.Environ(), env)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if env == "" {
			deadline := time.Now().Add(within) // on PostgreSQL the other node may have left it little to do
			for !until() && time.Now().Before(deadline) {
				time.Sleep(2 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			t.Logf("a dispatch killed at %d provider calls", server.Requests())
		}
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("dispatch (%s) was not killed (%v); stderr:\n%s", env, err, stderr.String())
		}
		if env != "" && !strings.Contains(stderr.String(), "crash point step:") {
			t.Fatalf("dispatch (%s) died elsewhere:\n%s", env, stderr.String())
		}
	}
	if nodes > 1 {
		// The crash points need steps left to reach: the other node may
		// have decided them all. A random kill instead, twice.
		for range 2 {
			target := server.Requests() + 5 + rand.IntN(20)
			run("", func() bool { return server.Requests() >= target }, 10*time.Second)
		}
	}
	// Killed inside the deciding transaction: at the 40th step decided
	// (the in-app posts and the delays' starts), then at the 25th of the
	// next process (emails and chat messages mixed in). With another node
	// deciding too, these may never be reached: on PostgreSQL the kills
	// are at random points only (above).
	if nodes == 1 {
		run("EDGERELAY_CRASH_AT=step:40", nil, 0)
		run("EDGERELAY_CRASH_AT=step:25", nil, 0)
	}
	for range 4 {
		target := server.Requests() + 10 + rand.IntN(60)
		run("", func() bool { return server.Requests() >= target }, 10*time.Second)
	}
	// Killed as the scheduled digests go out: at the next minute, or the
	// one after if a batch opened after the minute turned.
	run("", func() bool { return subjects(server.Deliveries())[scheduled.subject] > 0 }, 125*time.Second)
	t.Logf("killed with %d of %d scheduled digests delivered", subjects(server.Deliveries())[scheduled.subject], scheduled.recipients)
	// The final run waits for a scheduled batch that opened after the kill.
	final := exec.Command(bin, append(args, "--until-idle", "--max-wait", "70s")...)
	if out, err := final.CombinedOutput(); err != nil {
		t.Fatalf("final dispatch: %v\n%s", err, out)
	}

	st, err := open.Store(ctx, db, open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs, err := st.Runs(ctx, model.RunFilter{Tenant: "default", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if want := n + windowed.runs() + scheduled.runs() + nudgeEvents*nudgeRecipients; len(runs) != want {
		t.Fatalf("%d runs, want %d", len(runs), want)
	}
	passed := map[string]int{}
	want := []string{model.StepSent, model.StepDelayed, model.StepSent, model.StepSent}
	for _, run := range runs {
		if run.Type == digest.Type || run.Type == daily.Type {
			if run.State != model.RunDone {
				t.Errorf("digest run of %s for %s: %s (%s), want done", run.EventID, run.Recipient, run.State, run.Reason)
			}
			continue
		}
		steps, err := st.RunSteps(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if run.Type == nudge.Type {
			switch {
			case run.State != model.RunDone || len(steps) == 0:
				t.Errorf("nudge run of %s for %s: %s with %d steps, want done", run.EventID, run.Recipient, run.State, len(steps))
			case steps[0].Outcome == model.StepPassed && len(steps) == 2 && steps[1].Outcome == model.StepSent:
				passed[run.Recipient]++
			case steps[0].Outcome != model.StepThrottled || len(steps) != 1:
				t.Errorf("nudge run of %s for %s: steps %+v, want passed and sent, or throttled alone", run.EventID, run.Recipient, steps)
			}
			continue
		}
		var got []string
		for _, s := range steps {
			got = append(got, s.Outcome)
		}
		if run.State != model.RunDone || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run of %s: %s with steps %v (%+v), want done with %v", run.Recipient, run.State, got, steps, want)
		}
		if items, _, err := st.FeedPage(ctx, "default", run.Recipient, 0, 10); err != nil || len(items) != 1 {
			t.Errorf("%s's feed: %d items, %v; want 1", run.Recipient, len(items), err)
		}
	}
	perKey := map[string]int{}
	for _, d := range server.Deliveries() {
		perKey[d.Key]++
	}
	lost, doubled := 0, 0
	for i := range n {
		for _, ch := range []string{"email", "chat"} {
			k := relay.StepKey("default", "ord-1", "order.shipped", fmt.Sprintf("u%d", i), ch, 1, ch)
			switch perKey[k] {
			case 0:
				lost++
			case 1:
			default:
				doubled++
			}
		}
	}
	digests := checkDigests(t, server.Deliveries(), perKey, windowed) + checkDigests(t, server.Deliveries(), perKey, scheduled)
	nudged := map[string]int{}
	for _, d := range server.Deliveries() {
		if d.Subject == "nudge" {
			nudged[d.To]++
			if perKey[d.Key] != 1 {
				t.Errorf("nudge %s delivered %d times", d.Key, perKey[d.Key])
			}
		}
	}
	for j := range nudgeRecipients {
		if rc := fmt.Sprintf("t%d", j); passed[rc] != nudgeMax || nudged[rc+"@example.com"] != nudgeMax {
			t.Errorf("%s: %d nudge runs passed the throttle, %d nudges delivered; want %d and %d", rc, passed[rc], nudged[rc+"@example.com"], nudgeMax, nudgeMax)
		}
	}
	status, err := st.Status(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs, %d deliveries (%d digests, %d of them scheduled), statuses %v: %d lost, %d doubled", len(runs), len(server.Deliveries()), digests,
		subjects(server.Deliveries())[scheduled.subject], status.Counts, lost, doubled)
	if sent := 2*n + digests + nudgeMax*nudgeRecipients; lost != 0 || doubled != 0 || status.Counts[model.StatusSent] != int64(sent) {
		t.Fatalf("%d lost, %d delivered twice, statuses %v; want 0, 0 and %d sent", lost, doubled, status.Counts, sent)
	}
}

// The drill's throttled nudges: nudgeEvents for each of nudgeRecipients
// recipients (t0, t1, …), of which nudgeMax a day pass.
const nudgeEvents, nudgeRecipients, nudgeMax = 10, 4, 3

// digestSet is the drill's events through one batch step: events events
// (numbered) for each of recipients recipients (PREFIX0, PREFIX1, …), each
// event to one recipient, gathered in digests whose subject is subject.
type digestSet struct {
	typ, subject, prefix string
	events, recipients   int
}

var (
	windowed  = digestSet{typ: "comment.digest", subject: "digest", prefix: "d", events: 40, recipients: 5}
	scheduled = digestSet{typ: "comment.daily", subject: "daily", prefix: "e", events: 4, recipients: 30}
)

func (d digestSet) runs() int { return d.events * d.recipients }

// id is the event of number i for recipient j.
func (d digestSet) id(i, j int) string { return fmt.Sprintf("%s-%02d-%s%d", d.typ, i, d.prefix, j) }

// acceptDigests stores d's digest template and accepts its events.
func acceptDigests(t *testing.T, r *relay.Relay, d digestSet) {
	t.Helper()
	ctx := context.Background()
	key, err := relay.TemplateKey("default", d.typ, "email", "en")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": d.subject, "text": "{{range .batch.items}}{{.id}} {{end}}"}); err != nil {
		t.Fatal(err)
	}
	var evs []relay.Event
	for i := range d.events {
		for j := range d.recipients {
			evs = append(evs, relay.Event{ID: d.id(i, j), Type: d.typ,
				Recipients: []relay.Recipient{{ID: fmt.Sprintf("%s%d", d.prefix, j), Email: fmt.Sprintf("%s%d@example.com", d.prefix, j)}}})
		}
	}
	_, errs := r.AcceptAll(ctx, evs, 0)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("accept %s: %v", evs[i].ID, err)
		}
	}
}

// checkDigests fails unless each of d's events is in exactly one digest
// delivered to its recipient, and no digest was delivered twice; it
// returns how many digests there were.
func checkDigests(t *testing.T, ds []sim.Delivery, perKey map[string]int, d digestSet) int {
	t.Helper()
	carried := map[string]int{}
	digests := 0
	for _, del := range ds {
		if del.Subject != d.subject {
			continue
		}
		if perKey[del.Key] != 1 {
			t.Errorf("%s %s delivered %d times", d.subject, del.Key, perKey[del.Key])
		}
		digests++
		for _, id := range strings.Fields(del.Text) {
			carried[del.To+" "+id]++
		}
	}
	for i := range d.events {
		for j := range d.recipients {
			k := fmt.Sprintf("%s%d@example.com %s", d.prefix, j, d.id(i, j))
			if carried[k] != 1 {
				t.Errorf("%s: in %d %s digests, want 1", k, carried[k], d.subject)
			}
		}
	}
	if len(carried) != d.runs() {
		t.Errorf("%d events carried in %s digests, want %d", len(carried), d.subject, d.runs())
	}
	return digests
}

// subjects counts deliveries by subject.
func subjects(ds []sim.Delivery) map[string]int {
	n := map[string]int{}
	for _, d := range ds {
		n[d.Subject]++
	}
	return n
}

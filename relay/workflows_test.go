package relay

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
	"github.com/edgerelay/edgerelay/workflow"
)

func putWorkflow(t *testing.T, r *Relay, tenant, typ, def string) model.StoredWorkflow {
	t.Helper()
	w, _, err := r.PutWorkflow(context.Background(), tenant, typ, []byte(def))
	if err != nil {
		t.Fatalf("put workflow %s: %v", typ, err)
	}
	return w
}

func stepAll(t *testing.T, r *Relay) int {
	t.Helper()
	n, err := r.StepWorkflows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func runsByRecipient(t *testing.T, r *Relay, f model.RunFilter) map[string]RunView {
	t.Helper()
	runs, err := r.Runs(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]RunView{}
	for _, v := range runs {
		out[v.EventID+"/"+v.Recipient] = v
	}
	return out
}

// The workflow the issue opens with: in-app first, then email if the item
// is still unread 30 minutes later. One recipient reads it, the other does
// not: one email, to the second, with a key of its own; each run says what
// was decided at each step and why.
func TestWorkflowEmailsOnlyIfUnread(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "comment.created", `{"steps": [
		{"id": "inbox", "channels": ["in_app"]},
		{"id": "wait", "delay": {"for": "30m"}},
		{"id": "email", "channels": ["email"], "if": "!steps.inbox.read"}]}`)
		ev := Event{ID: "c-1", Type: "comment.created", Tenant: "acme", Subject: "New comment", Body: "Ann replied",
			Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}, {ID: "u2", Email: "u2@example.com"}}}
		res := accept(t, r, ev)
		if res.Count != 2 || len(res.Notifications) != 0 {
			t.Fatalf("accept = %+v; want 2 runs and no notification yet", res)
		}
		if again := accept(t, r, ev); !again.Duplicate {
			t.Fatalf("the event again = %+v; want a duplicate", again)
		}
		if n := stepAll(t, r); n != 4 {
			t.Fatalf("decided %d steps at once, want 4 (the in-app item and the delay, each of 2 runs)", n)
		}
		items, _, err := r.store.FeedPage(ctx, "acme", "u1", 0, 10)
		if err != nil || len(items) != 1 {
			t.Fatalf("u1's feed = %+v, %v; want the item", items, err)
		}
		if err := r.MarkItem(ctx, "acme", "u1", model.MarkRead, items[0].Seq); err != nil {
			t.Fatal(err)
		}
		clk.advance(29 * time.Minute)
		if n := stepAll(t, r); n != 0 {
			t.Fatalf("%d steps decided before the delay ended", n)
		}
		clk.advance(time.Minute)
		if n := stepAll(t, r); n != 2 {
			t.Fatalf("decided %d steps when the delay ended, want 2", n)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		u1, u2 := runs["c-1/u1"], runs["c-1/u2"]
		for _, v := range []RunView{u1, u2} {
			if v.State != model.RunDone || len(v.Steps) != 3 || v.Version != 1 || v.Reason != "its 3 steps are decided" {
				t.Fatalf("run %+v; want done after 3 steps of version 1", v)
			}
		}
		if s := u1.Steps[2]; s.Outcome != model.StepSkipped || !strings.Contains(s.Reason, "read") || s.Notification != 0 {
			t.Errorf("u1's email step = %+v; want skipped, saying the item was read", s)
		}
		if s := u2.Steps[2]; s.Outcome != model.StepSent || s.Notification == 0 || !strings.Contains(s.Reason, "unread") {
			t.Errorf("u2's email step = %+v; want sent, saying the item was unread", s)
		}
		if s := u1.Steps[1]; s.Outcome != model.StepDelayed || !strings.Contains(s.Reason, "30m") {
			t.Errorf("the delay step = %+v", s)
		}
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := sim.srv.Counts(); got["u2@example.com"] != 1 || got["u1@example.com"] != 0 {
			t.Fatalf("emails = %v; want one, to u2", got)
		}
		want := StepKey("acme", "c-1", "comment.created", "u2", "email", 1, "email")
		if keys := sim.requestKeys(); len(keys) != 1 || keys[0] != want {
			t.Fatalf("Idempotency-Keys = %v; want [%s]", keys, want)
		}
	})
}

// A run's cancel key comes from the workflow; a later event naming it in
// "cancels" stops the run in its own accept, and nothing more is sent.
// The API's cancel does the same.
func TestWorkflowCancelledByALaterEvent(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "invoice.due", `{"cancel_key": "'invoice-' + data.invoice", "steps": [
		{"id": "wait", "delay": {"for": "72h"}},
		{"id": "remind", "channels": ["email"]}]}`)
		for _, id := range []string{"42", "43"} {
			accept(t, r, Event{ID: "due-" + id, Type: "invoice.due", Tenant: "acme", Subject: "Unpaid", Body: "Invoice " + id,
				Data: []byte(`{"invoice": "` + id + `"}`), Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}}})
		}
		stepAll(t, r)
		accept(t, r, Event{ID: "paid-42", Type: "invoice.paid", Tenant: "acme", Cancels: "invoice-42",
			Feeds: []string{"@u1"}, Body: "Thanks"})
		if n, err := r.CancelRuns(ctx, "acme", "invoice-43", "the API"); err != nil || n != 1 {
			t.Fatalf("cancel invoice-43 = %d, %v", n, err)
		}
		clk.advance(73 * time.Hour)
		if n := stepAll(t, r); n != 0 {
			t.Fatalf("%d steps of cancelled runs decided", n)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme", State: model.RunCancelled})
		if v := runs["due-42/u1"]; !strings.Contains(v.Reason, `cancelled by event "paid-42"`) || len(v.Steps) != 1 {
			t.Errorf("run of due-42 = %+v; want cancelled by paid-42 after its delay began", v)
		}
		if v := runs["due-43/u1"]; !strings.Contains(v.Reason, "cancelled by the API") {
			t.Errorf("run of due-43 = %+v", v)
		}
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := sim.srv.Counts(); len(got) != 0 {
			t.Fatalf("sent %v after the runs were cancelled", got)
		}
		if _, err := r.Runs(ctx, model.RunFilter{Tenant: "acme", State: "paused"}); err == nil {
			t.Error("a list by an unknown state was not refused")
		}
	})
}

// A step whose condition reads an earlier notification's outcome waits
// until that notification is final: "SMS if the email failed" sends the
// SMS only once the email is refused, and not for the one that was sent.
func TestWorkflowWaitsForAnOutcome(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}, "sms": {sim.provider(t, "honoured", "&name=sms-sim")}}, Now: clk.now})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "otp", `{"steps": [
		{"id": "email", "channels": ["email"]},
		{"id": "sms", "channels": ["sms"], "if": "steps.email.failed"}]}`)
		accept(t, r, Event{ID: "otp-1", Type: "otp", Tenant: "acme", Body: "123456",
			Recipients: []Recipient{{ID: "u1", Email: "u1@example.com", Phone: "+15550001"}}})
		if n := stepAll(t, r); n != 1 {
			t.Fatalf("decided %d steps, want the email alone (the sms waits for its outcome)", n)
		}
		clk.advance(2 * time.Second)
		if n := stepAll(t, r); n != 0 {
			t.Fatalf("decided %d steps while the email is pending", n)
		}
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// The sms step is due again a second after it last waited: the
		// dispatcher's own stepper may decide it inside RunUntilIdle on a
		// loaded box, else this does. Either way it is decided once, below.
		clk.advance(2 * time.Second)
		stepAll(t, r)
		v := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})["otp-1/u1"]
		if v.State != model.RunDone || len(v.Steps) != 2 || v.Steps[1].Outcome != model.StepSkipped || !strings.Contains(v.Steps[1].Reason, "email: sent") {
			t.Fatalf("run = %+v; want the sms skipped because the email was sent", v)
		}
	})
}

// What cannot run is refused when saved, with the step and field named,
// and nothing is stored.
func TestWorkflowRefusedAtSave(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{Routes: Routes{"email": {setupSim(t, true).provider(t, "honoured")}}})
	ctx := context.Background()
	for def, want := range map[string]string{
		`{"steps": [{"id": "a", "channels": ["sms"]}]}`:                                                              `steps[0] (a).channels[0]: "sms" is not a channel of this relay`,
		`{"steps": [{"id": "a", "channels": ["email"], "if": "steps.b.read"}, {"id": "b", "channels": ["in_app"]}]}`: "steps[0] (a).if: steps.b is this step or a later one",
		`{"steps": [{"id": "a", "delay": {"for": "800h"}}, {"id": "b", "channels": ["email"]}]}`:                     "steps: the delays and batch windows add up to 800h0m0s, over the 720h0m0s a run may wait",
		`{"steps": [{"id": "a", "channels": ["email"]}], "colour": "red"}`:                                           "body:",
		`{"steps": [{"id": "a", "delay": {"for": "soon"}}, {"id": "b", "channels": ["email"]}]}`:                     `steps[0].delay.for: not a duration such as 30s, 15m or 72h: "soon"`,
		`{"type": "other", "steps": [{"id": "a", "channels": ["email"]}]}`:                                           `type: "other", but it is saved for "t"`,
	} {
		_, _, err := r.PutWorkflow(ctx, "acme", "t", []byte(def))
		var we *WorkflowError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), want) {
			t.Errorf("put %s = %v; want a WorkflowError naming %q", def, err, want)
		}
	}
	if vs, err := r.Store().WorkflowVersions(ctx, "acme", "t"); err != nil || len(vs) != 0 {
		t.Fatalf("versions after refused puts = %v, %v; want none", vs, err)
	}
	// A field of the event's data named clicked is not the step state.
	if _, _, err := r.PutWorkflow(ctx, "acme", "t", []byte(`{"steps": [{"id": "a", "channels": ["email"], "if": "data.clicked == true"}]}`)); err != nil {
		t.Fatalf("a condition on data.clicked: %v", err)
	}
}

// A workflow of the config file is stored as a version at the first accept
// (again only when it changed), runs as a stored one does, and cannot be
// changed over the API.
func TestWorkflowFromTheConfigFile(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		def := workflow.Definition{Type: "welcome", Steps: []workflow.Step{{ID: "inbox", Channels: []string{InAppChannel}}, {ID: "email", Channels: []string{"email"}}}}
		opts := Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Workflows: []FileWorkflow{{Tenant: "acme", Definition: def}}}
		r := setupRelayAt(t, db, opts)
		ctx := context.Background()
		res := accept(t, r, Event{ID: "w-1", Type: "welcome", Tenant: "acme", Body: "Hello", Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}}})
		if res.Count != 1 || len(res.Notifications) != 0 {
			t.Fatalf("accept = %+v; want one run", res)
		}
		if _, _, err := r.PutWorkflow(ctx, "acme", "welcome", []byte(`{"steps": [{"id": "a", "channels": ["email"]}]}`)); !errors.Is(err, ErrWorkflowDefinedByFile) {
			t.Fatalf("put over the file's = %v; want ErrWorkflowDefinedByFile", err)
		}
		if _, err := r.RetireWorkflow(ctx, "acme", "welcome"); !errors.Is(err, ErrWorkflowDefinedByFile) {
			t.Fatalf("retire the file's = %v; want ErrWorkflowDefinedByFile", err)
		}
		// Another process with the same file stores no second version; one
		// with a changed file stores the next.
		again := setupRelayAt(t, db, opts)
		accept(t, again, Event{ID: "w-2", Type: "welcome", Tenant: "acme", Body: "Hello", Recipients: []Recipient{{ID: "u2", Email: "u2@example.com"}}})
		def.Steps = def.Steps[1:]
		changed := setupRelayAt(t, db, Options{Routes: opts.Routes, Workflows: []FileWorkflow{{Tenant: "acme", Definition: def}}})
		accept(t, changed, Event{ID: "w-3", Type: "welcome", Tenant: "acme", Body: "Hello", Recipients: []Recipient{{ID: "u3", Email: "u3@example.com"}}})
		vs, err := r.Store().WorkflowVersions(ctx, "acme", "welcome")
		if err != nil || len(vs) != 2 {
			t.Fatalf("versions = %+v, %v; want 2", vs, err)
		}
		stepAll(t, r)
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		if runs["w-1/u1"].Version != 1 || len(runs["w-1/u1"].Steps) != 2 || runs["w-3/u3"].Version != 2 || len(runs["w-3/u3"].Steps) != 1 {
			t.Fatalf("runs = %+v; want w-1 on version 1 (two steps), w-3 on version 2 (one)", runs)
		}
	})
}

// An event posted to the tenant's feed at accept and to each recipient's
// own by an in-app step is one unread item for each of them, not two; a
// read of it in either feed reads it.
func TestWorkflowInAppItemCountedOnce(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {setupSim(t, true).provider(t, "honoured")}}})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "news", `{"steps": [{"id": "inbox", "channels": ["in_app"]}, {"id": "email", "channels": ["email"], "if": "!steps.inbox.read"}]}`)
		accept(t, r, Event{ID: "n-1", Type: "news", Tenant: "acme", Body: "Hello", Feeds: []string{"*"},
			Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}, {ID: "u2", Email: "u2@example.com"}}})
		// The first step only: the email's condition reads the item after.
		due, err := r.store.DueRuns(ctx, r.now(), 10)
		if err != nil || len(due) != 2 {
			t.Fatalf("due = %d, %v", len(due), err)
		}
		stepAll(t, r)
		for _, u := range []string{"u1", "u2"} {
			if n, err := r.UnreadCount(ctx, "acme", u); err != nil || n != 1 {
				t.Errorf("%s's unread count = %d, %v; want 1 (the event once)", u, n, err)
			}
		}
	})
}

// A delay until the recipient's quiet hours allow waits, for a recipient
// in their quiet hours, until they end in the recipient's time zone, and
// not at all for one outside any.
func TestWorkflowWaitsOutQuietHours(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		vienna, err := time.LoadLocation("Europe/Vienna")
		if err != nil {
			t.Skip(err)
		}
		clk := &clock{}
		clk.advance(time.Until(time.Date(2026, 12, 7, 23, 0, 0, 0, vienna)))
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {setupSim(t, true).provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		if _, err := r.PutPreferences(ctx, "acme", "night", PreferencesInput{TimeZone: "Europe/Vienna",
			QuietHours: []QuietPreference{{Window: "21:00-08:00"}}}, model.SetByAPI); err != nil {
			t.Fatal(err)
		}
		putWorkflow(t, r, "acme", "digest", `{"steps": [{"id": "inbox", "channels": ["in_app"]},
		{"id": "window", "delay": {"window": "allowed"}}, {"id": "email", "channels": ["email"]}]}`)
		accept(t, r, Event{ID: "d-1", Type: "digest", Tenant: "acme", Body: "Your day",
			Recipients: []Recipient{{ID: "night", Email: "night@example.com"}, {ID: "day", Email: "day@example.com"}}})
		stepAll(t, r)
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		night, day := runs["d-1/night"], runs["d-1/day"]
		wantDue := time.Date(2026, 12, 8, 8, 0, 0, 0, vienna)
		if night.State != model.RunWaiting || night.Step != 2 || !night.DueAt.Equal(wantDue) ||
			!strings.Contains(night.Steps[1].Reason, "quiet hours 21:00-08:00 in Europe/Vienna") {
			t.Fatalf("night's run = %+v; want the email due at %s, after its quiet hours", night, wantDue)
		}
		if day.State != model.RunDone || day.Steps[1].Reason != "not waiting: the recipient has no quiet hours" {
			t.Fatalf("day's run = %+v; want done without waiting", day)
		}
	})
}

// A channel step's channels are a fallback chain: the first that may reach
// the recipient is taken, and the step says why the ones before it were
// passed over; a step none of whose channels may is skipped, saying why.
func TestWorkflowFallsBackPastASuppressedAddress(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}, "chat": {sim.provider(t, "honoured", "&name=chat-sim")}}})
		ctx := context.Background()
		if _, err := r.Suppress(ctx, []model.Suppression{{Tenant: "acme", Channel: "email", Address: "Gone@Example.com",
			Reason: model.ReasonHardBounce, Source: model.SourceImport}}); err != nil {
			t.Fatal(err)
		}
		putWorkflow(t, r, "acme", "alert", `{"steps": [{"id": "notify", "channels": ["email", "chat"]}]}`)
		accept(t, r, Event{ID: "a-1", Type: "alert", Tenant: "acme", Body: "Disk full", Recipients: []Recipient{
			{ID: "gone", Email: "gone@example.com", Addresses: map[string]string{"chat": "gone@chat.example"}},
			{ID: "ok", Email: "ok@example.com", Addresses: map[string]string{"chat": "ok@chat.example"}},
			{ID: "nowhere", Email: "gone@EXAMPLE.com"}}})
		stepAll(t, r)
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		if s := runs["a-1/gone"].Steps[0]; s.Outcome != model.StepSent || !strings.Contains(s.Reason, "written for chat") ||
			!strings.Contains(s.Reason, "passed over: email: gone@example.com is suppressed (hard_bounce)") {
			t.Errorf("gone's step = %+v; want chat, past the suppressed email", s)
		}
		if s := runs["a-1/ok"].Steps[0]; !strings.Contains(s.Reason, "written for email") || strings.Contains(s.Reason, "passed over") {
			t.Errorf("ok's step = %+v; want email", s)
		}
		if s := runs["a-1/nowhere"].Steps[0]; s.Outcome != model.StepSkipped || !strings.Contains(s.Reason, "chat: no address") {
			t.Errorf("nowhere's step = %+v; want skipped, naming both channels", s)
		}
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := sim.srv.Counts(); got["gone@chat.example"] != 1 || got["ok@example.com"] != 1 || len(got) != 2 {
			t.Fatalf("sent %v; want gone's chat and ok's email", got)
		}
	})
}

// An event with more recipients than one chunk writes the rest of its runs
// after the accept, as a fan-out does; each recipient gets one run.
func TestWorkflowRunsOfALargeEvent(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		r := setupRelayAt(t, db, Options{Chunk: 2, Routes: Routes{"email": {setupSim(t, true).provider(t, "honoured")}}})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "notice", `{"steps": [{"id": "inbox", "channels": ["in_app"]}]}`)
		ev := Event{ID: "big", Type: "notice", Tenant: "acme", Body: "Hello"}
		for i := range 7 {
			ev.Recipients = append(ev.Recipients, Recipient{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"})
		}
		if res := accept(t, r, ev); res.Count != 7 {
			t.Fatalf("accept = %+v; want 7 runs", res)
		}
		if again := accept(t, r, ev); !again.Duplicate || again.Count != 7 {
			t.Fatalf("again = %+v", again)
		}
		stepAll(t, r)
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		if len(runs) != 7 {
			t.Fatalf("%d runs, want 7", len(runs))
		}
		for i := range 7 {
			if v := runs["big/u"+strconv.Itoa(i)]; v.State != model.RunDone || len(v.Steps) != 1 {
				t.Errorf("u%d's run = %+v", i, v)
			}
			if n, err := r.UnreadCount(ctx, "acme", "u"+strconv.Itoa(i)); err != nil || n != 1 {
				t.Errorf("u%d unread = %d, %v", i, n, err)
			}
		}
	})
}

// onBothStores runs test on a fresh SQLite file and on a fresh PostgreSQL
// database (internal/pgtest), in parallel.
func onBothStores(t *testing.T, test func(t *testing.T, db string)) {
	for name, db := range map[string]func(t *testing.T) string{
		"SQLite":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "relay.db") },
		"PostgreSQL": func(t *testing.T) string { return pgtest.Start(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, db(t))
		})
	}
}

// The undelivered fallback: the OTP goes by SMS; without a delivery
// receipt within 20 s, by email; a delivered SMS sends no email, and its
// record says so. Each channel's notification is recorded at the step.
func TestWorkflowFallsBackWhenNotDelivered(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		sms := sim.provider(t, "honoured", "&name=sms-sim")
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}, "chat": {sms}}, Now: clk.now})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "otp", `{"steps": [{"id": "code", "channels": ["chat", "email"], "fallback": "undelivered", "within": "20s"},
			{"id": "after", "channels": ["in_app"]}]}`)
		accept(t, r, Event{ID: "otp-1", Type: "otp", Tenant: "acme", Body: "Your code is 123456", Recipients: []Recipient{
			{ID: "fast", Email: "fast@example.com", Addresses: map[string]string{"chat": "fast@chat.example"}},
			{ID: "slow", Email: "slow@example.com", Addresses: map[string]string{"chat": "slow@chat.example"}}}})
		if n := stepAll(t, r); n != 2 {
			t.Fatalf("decided %d steps, want the two chat messages", n)
		}
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		key := StepKey("acme", "otp-1", "otp", "fast", "chat", 1, "code")
		n, err := r.store.Notification(ctx, "", 0, key)
		if err != nil || n.Status != model.StatusSent {
			t.Fatalf("fast's chat message = %+v, %v", n, err)
		}
		if _, err := r.AddReceipts(ctx, "sms-sim", []providers.Receipt{{Key: key, MessageID: n.ProviderMessageID, Status: providers.ReceiptDelivered}}); err != nil {
			t.Fatal(err)
		}
		// The clock is the wall clock moved on by advance: half the 20 s
		// leaves a loaded box ten real seconds between the step and this.
		clk.advance(10 * time.Second)
		if n := stepAll(t, r); n != 0 {
			t.Fatalf("decided %d steps before the 20 s were up", n)
		}
		clk.advance(11 * time.Second)
		stepAll(t, r)
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := sim.srv.Counts(); got["fast@chat.example"] != 1 || got["slow@chat.example"] != 1 || got["slow@example.com"] != 1 || got["fast@example.com"] != 0 {
			t.Fatalf("sent %v; want both chat messages and slow's email alone", got)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		fast, slow := runs["otp-1/fast"], runs["otp-1/slow"]
		if fast.State != model.RunDone || len(fast.Steps) != 2 || !strings.Contains(fast.Steps[0].Reason, "delivered within 20s: no fallback") {
			t.Errorf("fast's run = %+v; want the chat message, delivered, then the in-app step", fast)
		}
		if slow.State != model.RunDone || len(slow.Steps) != 3 || slow.Steps[1].Attempt != 1 ||
			!strings.Contains(slow.Steps[1].Reason, "written for email") || !strings.Contains(slow.Steps[1].Reason, "chat was not delivered within 20s (sent)") {
			t.Errorf("slow's run = %+v; want chat, then email at attempt 1, then the in-app step", slow)
		}
	})
}

// Prune keeps a waiting run's earlier notifications, whatever their age:
// a step due after the retention (a delay until a time in the data) still
// reads what became of them.
func TestWorkflowPruneKeepsWhatALaterStepReads(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now})
		ctx := context.Background()
		putWorkflow(t, r, "acme", "renewal", `{"steps": [{"id": "email", "channels": ["email"]},
			{"id": "wait", "delay": {"until": "data.renews_at"}}, {"id": "inbox", "channels": ["in_app"], "if": "steps.email.sent"}]}`)
		renews := clk.now().Add(40 * 24 * time.Hour).UTC().Format(time.RFC3339)
		accept(t, r, Event{ID: "r-1", Type: "renewal", Tenant: "acme", Body: "Your plan renews soon", Data: []byte(`{"renews_at": "` + renews + `"}`),
			Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}}})
		stepAll(t, r)
		if _, err := r.RunUntilIdle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		stepAll(t, r)
		clk.advance(35 * 24 * time.Hour)
		if _, err := r.Prune(ctx, 30*24*time.Hour); err != nil {
			t.Fatal(err)
		}
		key := StepKey("acme", "r-1", "renewal", "u1", "email", 1, "email")
		if n, err := r.store.Notification(ctx, "", 0, key); err != nil || n.Status != model.StatusSent {
			t.Fatalf("the email after prune = %+v, %v; want it kept, sent", n, err)
		}
		clk.advance(6 * 24 * time.Hour)
		stepAll(t, r)
		v := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})["r-1/u1"]
		if v.State != model.RunDone || len(v.Steps) != 3 || v.Steps[2].Outcome != model.StepSent || !strings.Contains(v.Steps[2].Reason, "email: sent") {
			t.Fatalf("run = %+v; want the in-app step sent, the email read as sent", v)
		}
	})
}

// workflowReads is a store that counts its reads of workflow versions.
type workflowReads struct {
	store.Store
	n atomic.Int32
}

func (w *workflowReads) WorkflowVersion(ctx context.Context, tenant, typ string, version int) (model.StoredWorkflow, error) {
	w.n.Add(1)
	return w.Store.WorkflowVersion(ctx, tenant, typ, version)
}

// One accept of many events reads each tenant and type's workflow once,
// not once per event.
func TestWorkflowReadOncePerAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := open.Store(ctx, filepath.Join(t.TempDir(), "relay.db"), open.Options{})
	if err != nil {
		t.Fatal(err)
	}
	counted := &workflowReads{Store: st}
	r, err := New(ctx, counted, Options{Routes: Routes{"email": {setupSim(t, true).provider(t, "honoured")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	putWorkflow(t, r, "acme", "notice", `{"steps": [{"id": "inbox", "channels": ["in_app"]}]}`)
	var evs []Event
	for i := range 10 {
		for _, typ := range []string{"notice", "plain"} {
			evs = append(evs, Event{ID: typ + strconv.Itoa(i), Type: typ, Tenant: "acme", Body: "Hi",
				Recipients: []Recipient{{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"}}})
		}
	}
	counted.n.Store(0)
	_, errs := r.AcceptAll(ctx, evs, 0)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := counted.n.Load(); n != 2 {
		t.Fatalf("%d reads of a workflow for 20 events of 2 types, want 2", n)
	}
}

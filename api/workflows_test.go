package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// workflowBundle is an API with acme's and bravo's tokens over a relay
// that routes email only (a "*" route would take any channel).
func workflowBundle(t *testing.T, o options) *bundle {
	o.Tokens = map[string]string{sha256hex(acmeTok): "acme", sha256hex(bravoTok): "bravo"}
	o.Relay.Routes = relay.Routes{"email": {providers.NewLog(io.Discard, "log://discard")}}
	return setup(t, o)
}

// invoiceWorkflow reminds about an unpaid invoice after 72 hours, unless
// a later event cancels "invoice-ID".
const invoiceWorkflow = `{"cancel_key": "'invoice-' + data.invoice", "steps": [
	{"id": "wait", "delay": {"for": "72h"}},
	{"id": "remind", "channels": ["email"]}]}`

type workflowBody struct {
	model.StoredWorkflow
	Definition json.RawMessage `json:"definition"`
	Retired    bool            `json:"retired"`
}

type workflowVersionsBody struct {
	Versions []workflowBody `json:"versions"`
}

type runStepBody struct {
	model.RunStep
	Notification string `json:"notification"`
}

type runBody struct {
	ID string `json:"id"`
	model.Run
	Steps []runStepBody `json:"steps"`
}

type runListBody struct {
	Tenant string    `json:"tenant"`
	Runs   []runBody `json:"runs"`
	Next   string    `json:"next"`
}

// workflowProblemBody is the 422 workflow-invalid problem.
type workflowProblemBody struct {
	api.Problem
	Problems []struct {
		Step    *int   `json:"step"`
		ID      string `json:"id"`
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"problems"`
}

func wantWorkflowInvalid(t *testing.T, rep reply) workflowProblemBody {
	t.Helper()
	if rep.status != http.StatusUnprocessableEntity || rep.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %s (%s), want a 422 problem", rep, rep.header.Get("Content-Type"))
	}
	p := decode[workflowProblemBody](t, rep)
	if p.Type != "https://edgerelay.dev/problems/workflow-invalid" || p.Status != 422 || p.Title == "" || len(p.Problems) == 0 {
		t.Fatalf("problem %s, want workflow-invalid with its problems", rep)
	}
	return p
}

func invoiceEvent(t *testing.T, id, invoice string, recipients ...string) string {
	var rs []relay.Recipient
	for _, r := range recipients {
		rs = append(rs, relay.Recipient{ID: r, Email: r + "@example.com"})
	}
	return jsonOf(t, relay.Event{ID: id, Type: "invoice.due", Subject: "Unpaid", Body: "Invoice " + invoice,
		Recipients: rs, Data: json.RawMessage(`{"invoice": "` + invoice + `"}`)})
}

func listRuns(t *testing.T, b *bundle, query string, hdr ...string) runListBody {
	t.Helper()
	rep := b.do(t, "GET", "/v1/workflow-runs"+query, "", hdr...)
	if rep.status != http.StatusOK {
		t.Fatalf("GET /v1/workflow-runs%s: %s", query, rep)
	}
	return decode[runListBody](t, rep)
}

// A PUT stores version 1 (201) with its definition; the same PUT again is
// 200 and no new version; a changed one is version 2. Each version stays
// readable; a DELETE retires the latest, which GET then shows retired.
func TestWorkflowVersionsOverHTTP(t *testing.T) {
	t.Parallel()
	b := workflowBundle(t, options{})
	path := "/v1/workflows/invoice.due"
	rep := b.do(t, "PUT", path, invoiceWorkflow, tplAcme()...)
	if rep.status != http.StatusCreated {
		t.Fatalf("first PUT: %s, want 201", rep)
	}
	v1 := decode[workflowBody](t, rep)
	if v1.Version != 1 || v1.Tenant != "acme" || v1.Type != "invoice.due" || v1.Retired || v1.RetiredAt != nil {
		t.Fatalf("first PUT = %+v, want acme's version 1", v1)
	}
	var def struct {
		Type      string `json:"type"`
		CancelKey string `json:"cancel_key"`
		Steps     []struct {
			ID    string `json:"id"`
			Delay *struct {
				For string `json:"for"`
			} `json:"delay"`
			Channels []string `json:"channels"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(v1.Definition, &def); err != nil {
		t.Fatalf("definition %s: %v", v1.Definition, err)
	}
	if def.Type != "invoice.due" || def.CancelKey != "'invoice-' + data.invoice" || len(def.Steps) != 2 ||
		def.Steps[0].Delay == nil || def.Steps[0].Delay.For != "72h0m0s" || !slices.Equal(def.Steps[1].Channels, []string{"email"}) {
		t.Fatalf("definition %s, want the one put (type filled in)", v1.Definition)
	}

	again := b.do(t, "PUT", path, invoiceWorkflow, tplAcme()...)
	if again.status != http.StatusOK || decode[workflowBody](t, again).Version != 1 {
		t.Fatalf("the same PUT again: %s, want 200 and version 1", again)
	}
	changed := strings.Replace(invoiceWorkflow, "72h", "48h", 1)
	if rep := b.do(t, "PUT", path, `{"type": "invoice.due", `+changed[1:], tplAcme()...); rep.status != http.StatusCreated || decode[workflowBody](t, rep).Version != 2 {
		t.Fatalf("a changed PUT (naming its type): %s, want 201 version 2", rep)
	}

	if got := decode[workflowBody](t, b.do(t, "GET", path, "", tplAcme()...)); got.Version != 2 || !strings.Contains(string(got.Definition), `"48h0m0s"`) {
		t.Errorf("GET latest = %d %s, want version 2", got.Version, got.Definition)
	}
	if got := decode[workflowBody](t, b.do(t, "GET", path+"?version=1", "", tplAcme()...)); got.Version != 1 || !strings.Contains(string(got.Definition), `"72h0m0s"`) {
		t.Errorf("GET version 1 = %d %s", got.Version, got.Definition)
	}
	vs := decode[workflowVersionsBody](t, b.do(t, "GET", path+"/versions", "", tplAcme()...))
	if len(vs.Versions) != 2 || vs.Versions[0].Version != 1 || vs.Versions[1].Version != 2 {
		t.Errorf("versions = %+v, want 1 and 2", vs.Versions)
	}
	wantProblem(t, b.do(t, "GET", path+"?version=9", "", tplAcme()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", path+"?version=x", "", tplAcme()...), http.StatusBadRequest, "invalid-query")
	wantProblem(t, b.do(t, "GET", "/v1/workflows/other", "", tplAcme()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", "/v1/workflows/other/versions", "", tplAcme()...), http.StatusNotFound, "not-found")

	del := b.do(t, "DELETE", path, "", tplAcme()...)
	if got := decode[workflowBody](t, del); del.status != http.StatusOK || got.Version != 2 || !got.Retired || got.RetiredAt == nil {
		t.Fatalf("DELETE: %s, want version 2 retired", del)
	}
	if got := decode[workflowBody](t, b.do(t, "GET", path, "", tplAcme()...)); got.Version != 2 || got.RetiredAt == nil || !got.Retired {
		t.Errorf("GET after DELETE = %+v, want version 2 with retired_at", got)
	}
	if got := decode[workflowBody](t, b.do(t, "GET", path+"?version=1", "", tplAcme()...)); got.Version != 1 {
		t.Errorf("version 1 after DELETE = %+v, want it readable", got)
	}
	p := wantProblem(t, b.do(t, "DELETE", path, "", tplAcme()...), http.StatusNotFound, "not-found")
	if !strings.Contains(p.Detail, "retired already") {
		t.Errorf("second DELETE: %q", p.Detail)
	}
	// An event of the type now goes out as without a workflow: no run.
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-1", "1", "u1"), tplAcme()...))
	if runs := listRuns(t, b, "", tplAcme()...); len(runs.Runs) != 0 {
		t.Errorf("runs after the workflow was retired: %+v", runs.Runs)
	}
	if rep := b.do(t, "PUT", path, invoiceWorkflow, tplAcme()...); rep.status != http.StatusCreated || decode[workflowBody](t, rep).Version != 3 {
		t.Errorf("PUT after DELETE: %s, want 201 version 3", rep)
	}
}

// A definition that does not check is 422 workflow-invalid naming each
// problem's step and field, and one that does not decode is 400
// invalid-json naming the path; either way nothing is stored.
func TestWorkflowPutRefusesABadDefinition(t *testing.T) {
	t.Parallel()
	b := workflowBundle(t, options{})
	path := "/v1/workflows/invoice.due"
	if rep := b.do(t, "PUT", path, invoiceWorkflow, tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	step := func(n int) *int { return &n }
	type want struct {
		step         *int
		id, field    string
		message      string
		detailSubstr string
	}
	for _, tc := range []struct {
		def  string
		want []want
	}{
		{`{"steps": [{"id": "a", "channels": ["sms"]}]}`,
			[]want{{step(0), "a", "channels[0]", `"sms" is not a channel of this relay`, `steps[0] (a).channels[0]`}}},
		{`{"steps": [{"id": "a", "channels": ["email"], "if": "steps.b.read"}, {"id": "b", "channels": ["in_app"]}]}`,
			[]want{{step(0), "a", "if", "steps.b is this step or a later one", "steps[0] (a).if"}}},
		{`{"type": "invoice.paid", "steps": [{"id": "a", "channels": ["email"]}]}`,
			[]want{{nil, "", "type", `"invoice.paid", but it is saved for "invoice.due"`, "type:"}}},
		{`{"steps": [{"id": "b", "batch": {"window": "1h", "schedule": "0 8 * * *"}}, {"id": "a", "channels": ["email"]}]}`,
			[]want{{step(0), "b", "batch.window", "after a window or on a schedule, not both", "steps[0] (b).batch.window"}}},
		// Every problem at once, each at its step.
		{`{"steps": [{"id": "a", "channels": ["sms"]}, {"id": "b", "channels": ["email"], "if": "steps.c.sent"}, {"id": "c", "channels": ["in_app"]}]}`,
			[]want{{step(0), "a", "channels[0]", `"sms"`, "steps[0] (a).channels[0]"}, {step(1), "b", "if", "steps.c", "steps[1] (b).if"}}},
	} {
		p := wantWorkflowInvalid(t, b.do(t, "PUT", path, tc.def, tplAcme()...))
		if len(p.Problems) != len(tc.want) {
			t.Errorf("%s: problems %+v, want %d", tc.def, p.Problems, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			got := p.Problems[i]
			if (got.Step == nil) != (w.step == nil) || got.Step != nil && *got.Step != *w.step || got.ID != w.id || got.Field != w.field || !strings.Contains(got.Message, w.message) {
				t.Errorf("%s: problem %d = %+v, want %+v", tc.def, i, got, w)
			}
			if !strings.Contains(p.Detail, w.detailSubstr) {
				t.Errorf("%s: detail %q does not name %q", tc.def, p.Detail, w.detailSubstr)
			}
		}
		first := tc.want[0].field
		if s := tc.want[0].step; s != nil {
			first = fmt.Sprintf("steps[%d].%s", *s, first)
		}
		if p.Field != first {
			t.Errorf("%s: field %q, want the first problem's path", tc.def, p.Field)
		}
	}
	// An unknown field, at a step: the API's strict JSON answer, with the path.
	pe := wantProblem(t, b.do(t, "PUT", path, `{"steps": [{"id": "a", "channels": ["email"]}, {"id": "b", "colour": "red"}]}`, tplAcme()...),
		http.StatusBadRequest, "invalid-json")
	if pe.Field != "steps[1].colour" || !strings.Contains(pe.Detail, "steps[1].colour: unknown field") {
		t.Errorf("unknown field: field %q detail %q", pe.Field, pe.Detail)
	}
	wantProblem(t, b.do(t, "PUT", path, `{"steps": [`, tplAcme()...), http.StatusBadRequest, "invalid-json")

	vs := decode[workflowVersionsBody](t, b.do(t, "GET", path+"/versions", "", tplAcme()...))
	if len(vs.Versions) != 1 || vs.Versions[0].Version != 1 {
		t.Errorf("versions after refused PUTs = %+v, want only version 1", vs.Versions)
	}
	wantWorkflowInvalid(t, b.do(t, "PUT", "/v1/workflows/fresh", `{"steps": [{"id": "a", "channels": ["sms"]}]}`, tplAcme()...))
	wantProblem(t, b.do(t, "GET", "/v1/workflows/fresh/versions", "", tplAcme()...), http.StatusNotFound, "not-found")
}

// One tenant's token neither reads nor changes another's workflows and
// runs: naming the other tenant is 403, the same path in its own tenant
// finds nothing.
func TestWorkflowsAreTenantScoped(t *testing.T) {
	t.Parallel()
	b := workflowBundle(t, options{})
	path := "/v1/workflows/invoice.due"
	if rep := b.do(t, "PUT", path, invoiceWorkflow, tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-42", "42", "u1"), tplAcme()...))

	wantProblem(t, b.do(t, "GET", path, "", tplBravo()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", path+"/versions", "", tplBravo()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "DELETE", path, "", tplBravo()...), http.StatusNotFound, "not-found")
	for _, req := range [][2]string{{"GET", path}, {"GET", path + "/versions"}, {"PUT", path}, {"DELETE", path},
		{"GET", "/v1/workflow-runs"}, {"POST", "/v1/workflow-runs/invoice-42/cancel"}} {
		body := ""
		if req[0] == "PUT" {
			body = invoiceWorkflow
		}
		wantProblem(t, b.do(t, req[0], req[1]+"?tenant=acme", body, tplBravo()...), http.StatusForbidden, "tenant-mismatch")
	}
	if runs := listRuns(t, b, "", tplBravo()...); runs.Tenant != "bravo" || len(runs.Runs) != 0 {
		t.Errorf("bravo's runs = %+v, want none", runs)
	}
	if rep := b.do(t, "POST", "/v1/workflow-runs/invoice-42/cancel", "", tplBravo()...); rep.status != http.StatusOK || !strings.Contains(rep.String(), `"cancelled":0`) {
		t.Errorf("bravo cancelling acme's key: %s, want 0 cancelled", rep)
	}
	// bravo's own workflow of the same type is its own version 1.
	if rep := b.do(t, "PUT", path, `{"steps": [{"id": "inbox", "channels": ["in_app"]}]}`, tplBravo()...); rep.status != http.StatusCreated || decode[workflowBody](t, rep).Version != 1 {
		t.Errorf("bravo's PUT: %s, want 201 version 1", rep)
	}
	got := decode[workflowBody](t, b.do(t, "GET", path, "", tplAcme()...))
	if got.Version != 1 || got.Retired || !strings.Contains(string(got.Definition), "remind") {
		t.Errorf("acme's workflow after bravo's requests = %+v %s", got, got.Definition)
	}
	runs := listRuns(t, b, "", tplAcme()...)
	if len(runs.Runs) != 1 || runs.Runs[0].State != model.RunWaiting {
		t.Errorf("acme's runs after bravo's cancel = %+v, want one waiting", runs.Runs)
	}
}

// An event of a type with a workflow becomes a run per recipient, which
// GET /v1/workflow-runs lists waiting, by pages; the stepper's decisions
// show in its steps, with the notification a channel step wrote. An event
// with "cancels" and POST …/cancel cancel the runs of their key, each run
// saying by what.
func TestWorkflowRunsOverHTTP(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	b := workflowBundle(t, options{Relay: relay.Options{Now: clk.Now}})
	if rep := b.do(t, "PUT", "/v1/workflows/invoice.due", invoiceWorkflow, tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-42", "42", "u1", "u2"), tplAcme()...))
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-43", "43", "u1"), tplAcme()...))

	// The api server runs no stepper: every run is at its first step.
	all := listRuns(t, b, "", tplAcme()...)
	if all.Tenant != "acme" || len(all.Runs) != 3 || all.Next != "" {
		t.Fatalf("runs = %+v, want 3 on one page", all)
	}
	seen := map[string]bool{}
	for _, run := range all.Runs {
		if run.State != model.RunWaiting || run.Step != 0 || len(run.Steps) != 0 || run.Version != 1 || run.Type != "invoice.due" ||
			run.CancelKey != "invoice-"+strings.TrimPrefix(run.EventID, "due-") || !strings.HasPrefix(run.ID, "run_") || len(run.ID) != len("run_")+13 {
			t.Errorf("run %+v, want waiting at step 0 with its cancel key and a run_ id", run)
		}
		seen[run.ID] = true
	}
	if len(seen) != 3 {
		t.Errorf("run ids %v, want 3 distinct", seen)
	}
	// Pages of one: each next continues after the last, none repeated.
	var paged []string
	for next := "/v1/workflow-runs?limit=1"; next != ""; {
		page := decode[runListBody](t, b.do(t, "GET", next, "", tplAcme()...))
		for _, run := range page.Runs {
			paged = append(paged, run.ID)
		}
		next = page.Next
		if len(paged) > 4 {
			t.Fatalf("paging does not end: %v", paged)
		}
	}
	if want := []string{all.Runs[0].ID, all.Runs[1].ID, all.Runs[2].ID}; !slices.Equal(paged, want) {
		t.Errorf("paged %v, want %v", paged, want)
	}
	if got := listRuns(t, b, "?event_id=due-42", tplAcme()...); len(got.Runs) != 2 || got.Runs[0].EventID != "due-42" || got.Runs[1].EventID != "due-42" {
		t.Errorf("event_id=due-42: %+v", got.Runs)
	}
	wantProblem(t, b.do(t, "GET", "/v1/workflow-runs?state=paused", "", tplAcme()...), http.StatusBadRequest, "invalid-query")
	wantProblem(t, b.do(t, "GET", "/v1/workflow-runs?after=12", "", tplAcme()...), http.StatusBadRequest, "invalid-query")
	p := wantProblem(t, b.do(t, "GET", "/v1/workflow-runs?after=n_0000000000000", "", tplAcme()...), http.StatusBadRequest, "invalid-query")
	if !strings.Contains(p.Detail, "a notification's id") {
		t.Errorf("a notification id as the cursor: %q", p.Detail)
	}

	// The stepper decides each run's delay: step 1 is due in 72 hours.
	if _, err := b.r.StepWorkflows(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, run := range listRuns(t, b, "?state=waiting", tplAcme()...).Runs {
		if run.Step != 1 || len(run.Steps) != 1 || run.Steps[0].StepID != "wait" || run.Steps[0].Outcome != model.StepDelayed ||
			!run.DueAt.Equal(clk.Now().Add(72*time.Hour)) || !strings.Contains(run.Steps[0].Reason, "waiting 72h") {
			t.Errorf("run after its delay began: %+v", run)
		}
	}

	// due-42's runs are cancelled by an event, due-43's over the API.
	paid := `{"id": "paid-42", "type": "invoice.paid", "cancels": "invoice-42", "feeds": ["@u1"], "body": "Thanks"}`
	accepted(t, b.do(t, "POST", "/v1/events", paid, tplAcme()...))
	if rep := b.do(t, "POST", "/v1/workflow-runs/invoice-43/cancel", "", tplAcme()...); rep.status != http.StatusOK || strings.TrimSpace(string(rep.body)) != `{"cancelled":1}` {
		t.Fatalf("cancel invoice-43: %s, want 1 cancelled", rep)
	}
	if rep := b.do(t, "POST", "/v1/workflow-runs/invoice-43/cancel", "", tplAcme()...); strings.TrimSpace(string(rep.body)) != `{"cancelled":0}` {
		t.Errorf("cancel invoice-43 again: %s, want 0", rep)
	}
	wantProblem(t, b.do(t, "POST", "/v1/workflow-runs/%20x/cancel", "", tplAcme()...), http.StatusBadRequest, "invalid-request")
	if got := listRuns(t, b, "?state=waiting", tplAcme()...); len(got.Runs) != 0 {
		t.Errorf("waiting runs after the cancels: %+v", got.Runs)
	}
	cancelled := listRuns(t, b, "?state=cancelled", tplAcme()...)
	if len(cancelled.Runs) != 3 {
		t.Fatalf("cancelled runs = %+v, want 3", cancelled.Runs)
	}
	for _, run := range cancelled.Runs {
		want := `cancelled by event "paid-42"`
		if run.EventID == "due-43" {
			want = `cancelled by the API: cancel key "invoice-43"`
		}
		if run.State != model.RunCancelled || !strings.Contains(run.Reason, want) || len(run.Steps) != 1 {
			t.Errorf("run of %s = %+v, want cancelled with %q after its delay began", run.EventID, run, want)
		}
	}
	clk.set(clk.Now().Add(73 * time.Hour))
	if n, err := b.r.StepWorkflows(context.Background()); err != nil || n != 0 {
		t.Errorf("steps of cancelled runs decided: %d, %v", n, err)
	}

	// A run that is not cancelled reaches its channel step: the step names
	// the notification it wrote, which the API reads.
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-44", "44", "u3"), tplAcme()...))
	for range 2 {
		if _, err := b.r.StepWorkflows(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.set(clk.Now().Add(73 * time.Hour))
	}
	done := listRuns(t, b, "?state=done&event_id=due-44", tplAcme()...)
	if len(done.Runs) != 1 || len(done.Runs[0].Steps) != 2 {
		t.Fatalf("due-44's run = %+v, want done after two steps", done.Runs)
	}
	remind := done.Runs[0].Steps[1]
	if remind.StepID != "remind" || remind.Outcome != model.StepSent || !strings.HasPrefix(remind.Notification, "n_") {
		t.Fatalf("remind step = %+v, want sent with its notification", remind)
	}
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+remind.Notification, "", tplAcme()...))
	if n.Recipient != "u3" || n.Channel != "email" || n.EventID != "due-44" {
		t.Errorf("the remind step's notification = %+v", n)
	}
}

// A throttle step over HTTP: at most two of u1's nudges a day pass it; the
// third's run ends there, saying so, and another recipient counts on their
// own. A throttle that lets nothing through, or has no window, is refused
// with its step and field named.
func TestWorkflowThrottleOverHTTP(t *testing.T) {
	t.Parallel()
	const metricsTok = "tok-metrics-0123456789"
	clk := &clock{now: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	b := workflowBundle(t, options{Relay: relay.Options{Now: clk.Now}, Metrics: true, API: api.Options{MetricsToken: metricsTok}})
	path := "/v1/workflows/invoice.due"
	p := wantWorkflowInvalid(t, b.do(t, "PUT", path, `{"steps": [{"id": "daily", "throttle": {"max": 0, "per": "0s", "excess": "later"}}, {"id": "email", "channels": ["email"]}]}`, tplAcme()...))
	if len(p.Problems) != 3 || p.Field != "steps[0].throttle.max" || p.Problems[1].Field != "throttle.per" || p.Problems[2].Field != "throttle.excess" {
		t.Fatalf("a bad throttle: %+v, want max, per and excess named", p)
	}
	if rep := b.do(t, "PUT", path, `{"steps": [{"id": "daily", "throttle": {"max": 2, "per": "24h"}}, {"id": "email", "channels": ["email"]}]}`, tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	for i := range 3 {
		accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, fmt.Sprintf("due-%d", i), fmt.Sprint(i), "u1"), tplAcme()...))
		clk.set(clk.Now().Add(time.Minute))
	}
	accepted(t, b.do(t, "POST", "/v1/events", invoiceEvent(t, "due-9", "9", "u2"), tplAcme()...))
	for range 3 {
		if _, err := b.r.StepWorkflows(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	runs := listRuns(t, b, "?state=done", tplAcme()...).Runs
	if len(runs) != 4 {
		t.Fatalf("done runs = %+v, want 4", runs)
	}
	for _, run := range runs {
		first := run.Steps[0]
		switch {
		case run.EventID == "due-2":
			if len(run.Steps) != 1 || first.Outcome != model.StepThrottled || !strings.Contains(first.Reason, "passed this step 2 times in the last 24h0m0s (max 2): the run ends here") ||
				!strings.Contains(run.Reason, "throttled") {
				t.Errorf("the third nudge's run = %+v, want it ended throttled", run)
			}
		default:
			if len(run.Steps) != 2 || first.Outcome != model.StepPassed || run.Steps[1].Outcome != model.StepSent {
				t.Errorf("run of %s = %+v, want passed, then sent", run.EventID, run)
			}
		}
	}
	// /metrics counts the steps by outcome.
	text := string(b.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+metricsTok).body)
	for _, want := range []string{`edgerelay_workflow_steps_total{outcome="passed"} 3`, `edgerelay_workflow_steps_total{outcome="throttled"} 1`,
		`edgerelay_workflow_steps_total{outcome="sent"} 3`} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, text)
		}
	}
}

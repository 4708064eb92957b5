package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/internal/addrkey"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/templates"
	"github.com/edgerelay/edgerelay/workflow"
)

// Workflows: an event whose type has a workflow becomes one run
// per recipient instead of its notifications (written by the accept, in
// its transaction); the stepper then decides each run's steps in order,
// each decision in one store transaction that also reads the facts the
// step's condition needs (an earlier step's notification status, its
// in-app item's read state) and writes what it decided: the step's
// notification, which the dispatcher delivers as any other, or its in-app
// item, or a skip and its reason, and the run's next step and due time.
// A delay is that due time, so a restart or a SIGKILL loses no step and
// repeats none: a step is decided exactly when the run's row moves past it.

// InAppChannel is the channel of a workflow step that posts to the
// recipient's own in-app feed (@RECIPIENT).
const InAppChannel = "in_app"

// MaxWorkflowDelay bounds a workflow's fixed delays and windows added up:
// the default retention (prune's 30d). A run's earlier notifications are
// kept while it waits, but its in-app items are pruned by age like any
// other, and a condition read after that would not see their marks.
const MaxWorkflowDelay = 30 * 24 * time.Hour

// stepRetry is how soon a step whose condition reads a notification that is
// not final yet (pending, sending) is looked at again, at the earliest.
const stepRetry = time.Second

// The store numbers a step's notification in its event by the step's
// position and channel (model.StepSeq), within the bounds the workflow
// package checks: these fail to compile if the two disagree.
const (
	_ = uint(model.MaxStepChannels-workflow.MaxChannels) + uint(workflow.MaxChannels-model.MaxStepChannels)
	_ = uint(model.MaxRunSteps-workflow.MaxSteps) + uint(workflow.MaxSteps-model.MaxRunSteps)
)

// stepBatch is how many due runs one stepper transaction decides.
const stepBatch = 64

// WorkflowError is a workflow that cannot be saved: every problem, each at
// its step and field. Nothing of it is stored.
type WorkflowError struct{ Problems workflow.Error }

func (e *WorkflowError) Error() string { return e.Problems.Error() }

// FileWorkflow is a workflow a config file defines for a tenant.
type FileWorkflow struct {
	Tenant     string
	Definition workflow.Definition
}

// ErrWorkflowDefinedByFile: the API cannot change a workflow the config
// file defines (the file would put it back at the next start).
var ErrWorkflowDefinedByFile = errors.New("the workflow is defined by the config file")

// fileWorkflow reports whether the config file defines tenant's workflow
// for typ.
func (r *Relay) fileWorkflow(tenant, typ string) bool {
	return slices.ContainsFunc(r.opts.Workflows, func(f FileWorkflow) bool {
		return f.Tenant == tenant && f.Definition.Type == typ
	})
}

// syncFileWorkflows stores each workflow of the config file as the next
// version of its type when it differs from the latest (the same one again
// stores nothing), once per process: before the first accept or step
// reads a workflow.
func (r *Relay) syncFileWorkflows(ctx context.Context) error {
	if len(r.opts.Workflows) == 0 || r.wf.synced.Load() {
		return nil
	}
	r.wf.syncMu.Lock()
	defer r.wf.syncMu.Unlock()
	if r.wf.synced.Load() {
		return nil
	}
	for _, f := range r.opts.Workflows {
		w, err := CheckWorkflowDefinition(f.Definition, r.workflowOptions(f.Tenant))
		if err != nil {
			return fmt.Errorf("the config file's workflow for %s (tenant %s): %w", f.Definition.Type, f.Tenant, err)
		}
		def, err := json.Marshal(w.Definition)
		if err != nil {
			return err
		}
		if _, _, err := r.store.PutWorkflow(ctx, f.Tenant, f.Definition.Type, def, r.now()); err != nil {
			return err
		}
	}
	r.wf.synced.Store(true)
	return nil
}

// workflowOptions are what a workflow of tenant is checked against: the
// channels it has routes for, and in-app.
func (r *Relay) workflowOptions(tenant string) workflow.Options {
	chans := append([]string{InAppChannel}, r.router.published().channels(tenant)...)
	return workflow.Options{Channels: chans, AnyChannel: slices.Contains(chans, "*"), MaxDelay: MaxWorkflowDelay}
}

// CheckWorkflow reads a workflow definition (JSON, unknown fields refused)
// for tenant and checks it; typ, when set, is the event type it is saved
// for, and a definition naming another is refused.
func (r *Relay) CheckWorkflow(tenant, typ string, body []byte) (*workflow.Workflow, error) {
	var def workflow.Definition
	if err := DecodeJSON(body, &def); err != nil {
		return nil, &WorkflowError{workflow.Error{{Step: -1, Field: "body", Msg: err.Error()}}}
	}
	if def.Type == "" {
		def.Type = typ
	}
	if typ != "" && def.Type != typ {
		return nil, &WorkflowError{workflow.Error{{Step: -1, Field: "type", Msg: fmt.Sprintf("%q, but it is saved for %q", def.Type, typ)}}}
	}
	return CheckWorkflowDefinition(def, r.workflowOptions(tenant))
}

// CheckWorkflowDefinition checks def against opts and against what this
// relay runs (package workflow's Check, channel names, the step kinds not
// run yet): a *WorkflowError names every problem.
func CheckWorkflowDefinition(def workflow.Definition, opts workflow.Options) (*workflow.Workflow, error) {
	w, err := workflow.Check(def, opts)
	var probs workflow.Error
	if errors.As(err, &probs) {
		return nil, &WorkflowError{probs}
	}
	if err != nil {
		return nil, err
	}
	for i, st := range def.Steps {
		for j, c := range st.Channels {
			if err := CheckChannel(c); err != nil {
				probs = append(probs, workflow.Problem{Step: i, ID: st.ID, Field: fmt.Sprintf("channels[%d]", j), Msg: err.Error()})
			}
		}
	}
	if len(probs) > 0 {
		return nil, &WorkflowError{probs}
	}
	return w, nil
}

// PutWorkflow checks the definition and stores it as the next version of
// tenant's workflow for typ (created false: it equals the latest version,
// which is returned). Runs already started keep their version.
func (r *Relay) PutWorkflow(ctx context.Context, tenant, typ string, body []byte) (model.StoredWorkflow, bool, error) {
	if r.fileWorkflow(tenant, typ) {
		return model.StoredWorkflow{}, false, fmt.Errorf("%w: %s (tenant %s): change it there", ErrWorkflowDefinedByFile, typ, tenant)
	}
	w, err := r.CheckWorkflow(tenant, typ, body)
	if err != nil {
		return model.StoredWorkflow{}, false, err
	}
	def, err := json.Marshal(w.Definition)
	if err != nil {
		return model.StoredWorkflow{}, false, err
	}
	return r.store.PutWorkflow(ctx, tenant, typ, def, r.now())
}

// RetireWorkflow retires tenant's workflow for typ: new events of the type
// are delivered as without one; runs already started go on.
func (r *Relay) RetireWorkflow(ctx context.Context, tenant, typ string) (model.StoredWorkflow, error) {
	if r.fileWorkflow(tenant, typ) {
		return model.StoredWorkflow{}, fmt.Errorf("%w: %s (tenant %s): remove it there", ErrWorkflowDefinedByFile, typ, tenant)
	}
	return r.store.RetireWorkflow(ctx, tenant, typ, r.now())
}

// workflows caches checked workflow versions, which never change once
// stored.
type workflows struct {
	mu   sync.Mutex
	byID map[string]*workflow.Workflow
	// synced: the config file's workflows are stored (syncFileWorkflows).
	synced atomic.Bool
	syncMu sync.Mutex
}

// version returns tenant's workflow for typ at version (0: the latest that
// is not retired; nil, with no error, when there is none).
func (r *Relay) workflowVersion(ctx context.Context, tenant, typ string, version int) (*workflow.Workflow, int, error) {
	if err := r.syncFileWorkflows(ctx); err != nil {
		return nil, 0, err
	}
	if version > 0 {
		k := fmt.Sprintf("%s\x00%s\x00%d", tenant, typ, version)
		r.wf.mu.Lock()
		w := r.wf.byID[k]
		r.wf.mu.Unlock()
		if w != nil {
			return w, version, nil
		}
	}
	st, err := r.store.WorkflowVersion(ctx, tenant, typ, version)
	switch {
	case errors.Is(err, model.ErrNotFound) && version == 0:
		return nil, 0, nil
	case err != nil:
		return nil, 0, err
	case version == 0 && st.RetiredAt != nil:
		return nil, 0, nil
	}
	k := fmt.Sprintf("%s\x00%s\x00%d", tenant, typ, st.Version)
	r.wf.mu.Lock()
	w := r.wf.byID[k]
	r.wf.mu.Unlock()
	if w != nil {
		return w, st.Version, nil // the latest, read; compiled once
	}
	var def workflow.Definition
	if err := json.Unmarshal(st.Definition, &def); err != nil {
		return nil, 0, fmt.Errorf("workflow %s version %d of tenant %s no longer decodes: %w", typ, st.Version, tenant, err)
	}
	// Checked again for what it reads and computes; its channels were
	// checked when it was saved (a route removed since fails the step's
	// notification, visibly, rather than the run).
	opts := r.workflowOptions(tenant)
	for _, s := range def.Steps {
		opts.Channels = append(opts.Channels, s.Channels...)
	}
	if w, err = workflow.Check(def, opts); err != nil {
		return nil, 0, fmt.Errorf("workflow %s version %d of tenant %s no longer checks: %w", typ, st.Version, tenant, err)
	}
	r.wf.mu.Lock()
	if r.wf.byID == nil {
		r.wf.byID = map[string]*workflow.Workflow{}
	}
	r.wf.byID[k] = w
	r.wf.mu.Unlock()
	return w, st.Version, nil
}

// payloadWithWorkflow is the stored payload of an event that started
// workflow runs: the event, and the version and cancel key its runs got,
// so the rest of a large fan-out, finished after a crash, writes the same
// runs. The fingerprint stays that of the event as submitted: a resend
// after the workflow changed is still a duplicate.
type payloadWithWorkflow struct {
	Event
	WorkflowVersion int    `json:"workflow_version"`
	CancelKey       string `json:"workflow_cancel_key,omitempty"`
}

// runTargets are an event's runs, one per recipient in order.
func runTargets(ev *Event, version int, cancelKey string) []model.Target {
	ts := make([]model.Target, len(ev.Recipients))
	for i, rc := range ev.Recipients {
		ts[i] = model.Target{Recipient: rc.ID, Run: &model.RunSpec{Version: version, CancelKey: cancelKey}}
	}
	return ts
}

// latestWorkflows remembers, for one AcceptAll, the latest workflow of
// each tenant and type its events have (nil for none): a batch of one
// type reads it once.
type latestWorkflows map[[2]string]latestWorkflow

type latestWorkflow struct {
	w       *workflow.Workflow
	version int
}

// latestWorkflow is tenant's workflow for typ that new events start, nil
// when there is none, read through seen (which may be nil).
func (r *Relay) latestWorkflow(ctx context.Context, tenant, typ string, seen latestWorkflows) (*workflow.Workflow, int, error) {
	k := [2]string{tenant, typ}
	if l, ok := seen[k]; ok {
		return l.w, l.version, nil
	}
	w, version, err := r.workflowVersion(ctx, tenant, typ, 0)
	if err == nil && seen != nil {
		seen[k] = latestWorkflow{w, version}
	}
	return w, version, err
}

// prepareRuns makes rec and its targets those of the runs of workflow w
// (at version) for the event's recipients.
func prepareRuns(ev *Event, rec *model.NewEvent, w *workflow.Workflow, version int) ([]model.Target, error) {
	key, err := w.CancelKeyOf(eventFacts(ev, nil))
	if err != nil {
		return nil, invalid("data", "the workflow of type %q (version %d): %v", ev.Type, version, err)
	}
	if rec.Payload, err = json.Marshal(payloadWithWorkflow{Event: *ev, WorkflowVersion: version, CancelKey: key}); err != nil {
		return nil, err
	}
	ts := runTargets(ev, version, key)
	rec.Targets = len(ts)
	return ts, nil
}

// storedRuns rebuilds the runs of an event from its stored payload (ok
// false for an event without a workflow).
func storedRuns(payload []byte) ([]model.Target, bool, error) {
	var p payloadWithWorkflow
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, false, err
	}
	if p.WorkflowVersion == 0 {
		return nil, false, nil
	}
	return runTargets(&p.Event, p.WorkflowVersion, p.CancelKey), true, nil
}

// eventFacts is what a condition reads of an event and, when rc is set, of
// the recipient.
func eventFacts(ev *Event, rc *Recipient) workflow.Facts {
	f := workflow.Facts{EventID: ev.ID, Type: ev.Type, Data: map[string]any{}}
	if len(ev.Data) > 0 {
		_ = json.Unmarshal(ev.Data, &f.Data) // checked at accept: an object
	}
	if rc != nil {
		f.Recipient = map[string]any{"id": rc.ID, "locale": rc.Locale, "timezone": rc.Timezone}
		for _, c := range []string{"email", "sms", "push", "webhook"} {
			if a := rc.Address(c); a != "" {
				f.Recipient[c] = a
			}
		}
	}
	return f
}

// stepPrep is what the stepper works out for a due run before the deciding
// transaction: nothing in it depends on what that transaction reads.
type stepPrep struct {
	w     *workflow.Workflow
	ev    *Event
	rc    *Recipient
	needs []workflow.Ref
	facts workflow.Facts // the event's and the recipient's, for the step's condition
	// channel is the channel a channel step sends on, its position in the
	// step's list, and the target (its message rendered); skip, when set,
	// is why it cannot send (no address on any of its channels, a
	// template that does not render).
	channel string
	chIdx   int
	passed  []string // why each channel before it was passed over
	target  model.Target
	skip    string
	// windowEnd is when a delay until quiet hours allow ends, and why.
	windowEnd time.Time
	windowWhy string
	// closes is when a batch a scheduled batch step opens now closes,
	// and which of the schedule's times that is.
	closes    time.Time
	closesWhy string
	// broken, when set, is why the run cannot go on (its workflow version
	// or payload no longer reads): it ends with that reason.
	broken string
	// runID shows a run's id as the API does.
	runID func(int64) string
}

// StepWorkflows decides the steps of the workflow runs that are due, in
// batches, until none is (a step due at once after the one decided, such
// as a delay's start after an in-app post, is decided in the next batch);
// it returns how many steps it decided.
func (r *Relay) StepWorkflows(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		now := r.now()
		runs, err := r.store.DueRuns(ctx, now, stepBatch)
		if err != nil || len(runs) == 0 {
			return total, err
		}
		plans := make([]model.StepPlan, 0, len(runs))
		preps := make(map[int64]*stepPrep, len(runs))
		events := map[int64]*payloadWithWorkflow{} // decoded once per event, not once per run
		for _, run := range runs {
			p, err := r.prepareStep(ctx, run, events)
			if err != nil {
				return total, err // the store or the templates cannot be read: the next turn tries again
			}
			preps[run.ID] = p
			plan := model.StepPlan{Run: run}
			if p.broken == "" {
				plan.Batched = p.w.Steps[run.Step].Batch != nil
				if th := p.w.Steps[run.Step].Throttle; th != nil {
					plan.Throttle = &model.StepThrottle{Window: run.Type + "/" + p.w.Steps[run.Step].ID, Per: time.Duration(th.Per)}
				}
				if s := p.w.Steps[run.Step]; s.Fallback == workflow.FallbackUndelivered && run.Attempt > 0 {
					plan.Needs = append(plan.Needs, run.Step) // what became of the channel tried last
				}
				for _, ref := range p.needs {
					j := slices.IndexFunc(p.w.Steps, func(s workflow.Step) bool { return s.ID == ref.Step })
					if !slices.Contains(plan.Needs, j) {
						plan.Needs = append(plan.Needs, j)
					}
				}
			}
			plans = append(plans, plan)
		}
		// Of this transaction's decisions, by run, reported once it commits
		// (a batch step found taken by another node is decided again).
		outcomes := map[int64]string{}
		n, err := r.store.DecideSteps(ctx, plans, func(p model.StepPlan, facts []model.StepFact) model.StepDecision {
			d := decideStep(preps[p.Run.ID], p, facts, now)
			if d.Wait.IsZero() {
				outcomes[p.Run.ID] = d.Outcome
				r.hooks.at(PhaseStep)
			}
			return d
		}, now)
		total += n
		if err != nil {
			return total, err
		}
		if r.opts.Observer != nil {
			for _, o := range outcomes {
				if o != "" { // "": a fallback's channel delivered, the run goes on; no step of its own
					r.opts.Observer.Stepped(o)
				}
			}
		}
		r.notify() // the dispatcher: new notifications
		if n == 0 {
			return total, nil // what is due waits (or another node took it)
		}
	}
	return total, ctx.Err()
}

// prepareStep reads a due run's workflow and event and, for a channel
// step, chooses its channel and renders its message.
//
// An error is a store or templates that cannot be read now; a run that
// can never go on (its workflow version or payload no longer reads) is
// not an error but p.broken, which ends it with that reason.
func (r *Relay) prepareStep(ctx context.Context, run model.Run, events map[int64]*payloadWithWorkflow) (*stepPrep, error) {
	p := &stepPrep{runID: func(id int64) string { return fmt.Sprintf("run %d", id) }}
	if x := r.ids.Load(); x != nil {
		p.runID = x.Run
	}
	w, _, err := r.workflowVersion(ctx, run.Tenant, run.Type, run.Version)
	switch {
	case model.IsUnavailable(err) || errors.Is(err, model.ErrClosed) || ctx.Err() != nil:
		return nil, err
	case err != nil:
		p.broken = err.Error()
		return p, nil
	}
	p.w = w
	stored := events[run.EventRow]
	if stored == nil {
		stored = new(payloadWithWorkflow)
		if err := json.Unmarshal(run.Payload, stored); err != nil {
			p.broken = "its event's stored payload no longer decodes: " + err.Error()
			return p, nil
		}
		events[run.EventRow] = stored
	}
	p.ev = &stored.Event
	if run.Seq < len(p.ev.Recipients) && p.ev.Recipients[run.Seq].ID == run.Recipient {
		p.rc = &p.ev.Recipients[run.Seq] // the run's position in the fan-out is the recipient's
	} else {
		p.broken = fmt.Sprintf("recipient %q is not in its event's stored payload", run.Recipient)
		return p, nil
	}
	if run.Step >= len(w.Steps) {
		p.broken = fmt.Sprintf("it is at step %d of a workflow of %d steps", run.Step, len(w.Steps))
		return p, nil
	}
	p.needs = w.Needs(run.Step)
	s := w.Steps[run.Step]
	if s.If != "" {
		p.facts = eventFacts(p.ev, p.rc) // decoded here, not in the deciding transaction
	}
	if s.Delay != nil && s.Delay.Window != "" {
		return p, r.quietWindow(ctx, run, p)
	}
	if s.Batch != nil && s.Batch.Schedule != "" && run.Attempt == 0 {
		return p, r.batchCloses(ctx, run, p)
	}
	if len(s.Channels) == 0 {
		return p, nil
	}
	from := 0
	if s.Fallback == workflow.FallbackUndelivered {
		from = run.Attempt // the channels after the one tried last
	}
	passed, err := r.chooseChannel(ctx, run, p, s.Channels, from)
	if err != nil {
		return nil, err
	}
	if p.chIdx < 0 {
		p.skip = fmt.Sprintf("skipped, not sent: none of its channels may reach recipient %s (%s)", run.Recipient, strings.Join(passed, "; "))
		return p, nil
	}
	p.channel = s.Channels[p.chIdx]
	p.passed = passed
	addr := p.rc.Address(p.channel)
	p.target = model.Target{
		Key:       StepKey(run.Tenant, run.EventID, run.Purpose, run.Recipient, p.channel, run.Version, s.ID),
		Recipient: run.Recipient, Channel: p.channel, Address: addr,
	}
	if p.channel != InAppChannel {
		p.target.AddressKey = addrkey.Stored(p.channel, addr)
	}
	set, err := r.Templates(ctx)
	if err != nil {
		return nil, err
	}
	name := s.Template
	if name == "" {
		name = templateName(set, p.ev)
	}
	if name == "" || set == nil {
		return p, nil // the event's own wording
	}
	if _, ok := set.Lookup(run.Tenant, name, p.channel, p.rc.Locale); !ok && p.channel == InAppChannel {
		return p, nil // an in-app item without a template of its own shows the event's wording
	}
	batch, err := r.batchOf(ctx, run, p)
	if err != nil {
		return nil, err
	}
	one := []model.Target{p.target}
	if _, err := renderTargets(ctx, r, set, name, p.ev, one, batch...); err != nil {
		p.skip = fmt.Sprintf("skipped, not sent: its template %q did not render for %s: %v", name, p.channel, err)
		return p, nil
	}
	p.target.Message = one[0].Message
	return p, nil
}

// chooseChannel sets p.chIdx to the first of channels, from position from
// on, that may reach the
// run's recipient (-1 for none): in-app always; any other when the
// recipient has an address for it, the address is not on the tenant's
// suppression list, and the recipient has not turned the event's category
// off on it. It returns why each channel before it was passed over. (The
// dispatcher checks suppression and preferences again at the claim: an
// entry made after this choice ends the notification suppressed, which a
// later step's condition sees as failed.)
func (r *Relay) chooseChannel(ctx context.Context, run model.Run, p *stepPrep, channels []string, from int) ([]string, error) {
	var passed []string
	var prefs *prefInputs
	for i, c := range channels {
		if i < from {
			continue
		}
		if c == InAppChannel {
			p.chIdx = i
			return passed, nil
		}
		addr := p.rc.Address(c)
		if addr == "" {
			passed = append(passed, c+": no address")
			continue
		}
		sup, err := r.store.Suppressions(ctx, model.SuppressionFilter{Tenant: run.Tenant, Channel: c, Address: SuppressionKey(c, addr), Limit: 1}, r.now())
		if err != nil {
			return nil, err
		}
		if len(sup) > 0 {
			passed = append(passed, fmt.Sprintf("%s: %s is suppressed (%s)", c, addr, sup[0].Reason))
			continue
		}
		if prefs == nil {
			name, cat, ok := r.categoryOf(run.Tenant, run.Type, run.Purpose)
			prefs = &prefInputs{}
			if ok && !cat.Required {
				stored, err := r.store.RecipientPreferences(ctx, run.Tenant, []string{run.Recipient})
				if err != nil {
					return nil, err
				}
				prefs = &prefInputs{category: name, cat: cat, stored: stored[run.Recipient]}
			}
		}
		if prefs.category != "" {
			if on, why := switchFor(*prefs, model.Claimed{Recipient: run.Recipient, Channel: c}); !on {
				passed = append(passed, c+": "+why)
				continue
			}
		}
		p.chIdx = i
		return passed, nil
	}
	p.chIdx = -1
	return passed, nil
}

// quietWindow works out when a delay until the recipient's quiet hours
// allow ends: the end of the quiet hours the recipient is in now (their
// own for the event's category, else theirs for every category, else the
// category's default; read in their time zone: the one they set, else the
// event's for them, else UTC), or now when they are in none.
func (r *Relay) quietWindow(ctx context.Context, run model.Run, p *stepPrep) error {
	now := r.now()
	p.windowEnd, p.windowWhy = now, "not waiting: outside quiet hours"
	name, cat, _ := r.categoryOf(run.Tenant, run.Type, run.Purpose)
	if cat.Required {
		p.windowWhy = fmt.Sprintf("not waiting: category %q is required, and ignores quiet hours", name)
		return nil
	}
	stored, loc, err := r.recipientZone(ctx, run, p)
	if err != nil {
		return err
	}
	in := prefInputs{category: name, cat: cat, stored: stored, loc: loc}
	w, why, ok := quietFor(in)
	if !ok {
		p.windowWhy = "not waiting: the recipient has no quiet hours"
		return nil
	}
	if end, quiet := quietEnd(now, in.loc, w); quiet {
		p.windowEnd = end
		p.windowWhy = fmt.Sprintf("waiting for the end of quiet hours %s in %s (%s), until %s",
			w, in.loc, why, end.In(in.loc).Format("2006-01-02 15:04 MST"))
	}
	return nil
}

// recipientZone reads the run's recipient's stored preferences and the
// time zone their times are read in: the one they set, else the event's
// for them, else UTC.
func (r *Relay) recipientZone(ctx context.Context, run model.Run, p *stepPrep) (model.RecipientPreferences, *time.Location, error) {
	stored, err := r.store.RecipientPreferences(ctx, run.Tenant, []string{run.Recipient})
	if err != nil {
		return model.RecipientPreferences{}, nil, err
	}
	zone := stored[run.Recipient].TimeZone
	if zone == "" {
		zone = p.rc.Timezone
	}
	if loc, err := time.LoadLocation(zone); zone != "" && err == nil {
		return stored[run.Recipient], loc, nil
	}
	return stored[run.Recipient], time.UTC, nil
}

// batchCloses sets when a batch that the run's scheduled batch step opens
// (or takes over) now closes: the schedule's next time in the recipient's
// zone. (A window's batch closes the window after the decision.)
func (r *Relay) batchCloses(ctx context.Context, run model.Run, p *stepPrep) error {
	now := r.now()
	b := p.w.Steps[run.Step].Batch
	_, loc, err := r.recipientZone(ctx, run, p)
	if err != nil {
		return err
	}
	p.closes = p.w.BatchCloses(run.Step, now, loc)
	p.closesWhy = fmt.Sprintf(" (the next %s of %q in %s)", p.closes.In(loc).Format("2006-01-02 15:04 MST"), b.Schedule, loc)
	return nil
}

// decideStep decides one run's step from the facts the deciding
// transaction read. It is policy only: no I/O.
func decideStep(p *stepPrep, plan model.StepPlan, facts []model.StepFact, now time.Time) model.StepDecision {
	run := plan.Run
	if p.broken != "" {
		id := fmt.Sprintf("step-%d", run.Step)
		if p.w != nil && run.Step < len(p.w.Steps) {
			id = p.w.Steps[run.Step].ID
		}
		return model.StepDecision{StepID: id, Outcome: model.StepSkipped, Reason: "skipped, and the run ended: " + p.broken, Next: run.Step, Done: true,
			RunReason: fmt.Sprintf("ended at step %d (%s), which could not be decided: %s", run.Step, id, p.broken)}
	}
	s := p.w.Steps[run.Step]
	dec := model.StepDecision{StepID: s.ID, Next: run.Step + 1, NextDue: now, Done: run.Step+1 == len(p.w.Steps),
		RunReason: fmt.Sprintf("its %d steps are decided", len(p.w.Steps))}
	if s.Fallback == workflow.FallbackUndelivered && run.Attempt > 0 {
		return nextFallback(p, plan, facts, dec, now)
	}
	if s.If != "" {
		f := p.facts
		f.Steps = map[string]workflow.StepState{}
		var wait time.Time
		for k, j := range plan.Needs {
			st, live, next := stepState(facts[k])
			if live {
				wait = later(wait, later(now.Add(stepRetry), next))
			}
			f.Steps[p.w.Steps[j].ID] = st
		}
		if !wait.IsZero() {
			return model.StepDecision{Wait: wait}
		}
		ok, err := p.w.Allows(run.Step, f)
		switch {
		case err != nil:
			dec.Outcome, dec.Reason = model.StepSkipped, "skipped: its condition could not be evaluated: "+err.Error()
			return dec
		case !ok:
			dec.Outcome, dec.Reason = model.StepSkipped, fmt.Sprintf("skipped: if %q did not hold (%s)", s.If, describeFacts(p, plan, facts))
			return dec
		}
	}
	switch {
	case s.Batch != nil:
		return decideBatch(p, plan, s, dec, now)
	case s.Throttle != nil:
		decideThrottle(plan, s, &dec)
	case s.Delay != nil && s.Delay.Window != "":
		dec.Outcome, dec.Reason, dec.NextDue = model.StepDelayed, p.windowWhy, later(p.windowEnd, now)
	case s.Delay != nil:
		until, why := delayEnd(s.Delay, run.DueAt, p.ev)
		dec.Outcome, dec.Reason, dec.NextDue = model.StepDelayed, why, later(until, now)
	case p.skip != "":
		dec.Outcome, dec.Reason = model.StepSkipped, p.skip
	case p.channel == InAppChannel:
		dec.Outcome = model.StepSent
		dec.Feed, dec.FeedMessage = model.PersonalFeed(run.Recipient), p.target.Message
		for _, f := range p.ev.Feeds {
			if !strings.HasPrefix(f, "@") {
				dec.FeedShared++
			}
		}
		dec.Reason = fmt.Sprintf("posted to %s's in-app feed", run.Recipient)
	default:
		tg := p.target
		dec.Outcome, dec.Notification = model.StepSent, &tg
		dec.Seq = model.StepSeq(run.Targets, run.Seq, run.Step, p.chIdx)
		dec.Reason = fmt.Sprintf("written for %s (%s): the dispatcher delivers it", p.channel, tg.Key)
		if s.Fallback == workflow.FallbackUndelivered {
			awaitDelivery(&dec, s, run, p.chIdx, now)
		}
	}
	if len(p.passed) > 0 && dec.Outcome == model.StepSent {
		dec.Reason += " (passed over: " + strings.Join(p.passed, "; ") + ")"
	}
	if s.If != "" && dec.Outcome != model.StepSkipped {
		dec.Reason += fmt.Sprintf("; if %q held (%s)", s.If, describeFacts(p, plan, facts))
	}
	return dec
}

// decideThrottle decides a throttle step from its window's slots as the
// deciding transaction counted them, holding the window's lock: a run
// passes, taking a slot, while fewer than Max are taken in the last Per;
// else it is throttled, and ends there unless the step's excess is
// "continue".
func decideThrottle(plan model.StepPlan, s workflow.Step, dec *model.StepDecision) {
	th, run := s.Throttle, plan.Run
	per := time.Duration(th.Per)
	if plan.Slots < th.Max {
		dec.Outcome, dec.TakeSlot = model.StepPassed, true
		dec.Reason = fmt.Sprintf("passed: %s's runs of %s passed this step %d times in the last %v (max %d)", run.Recipient, run.Type, plan.Slots+1, per, th.Max)
		return
	}
	dec.Outcome = model.StepThrottled
	dec.Reason = fmt.Sprintf("throttled: %s's runs of %s passed this step %d times in the last %v (max %d)", run.Recipient, run.Type, plan.Slots, per, th.Max)
	if th.Excess != workflow.ExcessContinue {
		dec.Reason += ": the run ends here"
		dec.Done, dec.RunReason = true, fmt.Sprintf("ended at step %d (%s): throttled", run.Step, s.ID)
		return
	}
	dec.Reason += ": the run goes on, throttled"
}

// decideBatch decides a batch step from the batch the deciding
// transaction read (plan.Batch). Reaching the step, a run opens a batch
// for its recipient or joins the open one; the batch's leader waits for
// the window to end (or the batch to fill) and closes it, then goes on
// with every event still waiting in it; the runs that joined end, carried
// on by the leader. A batch whose leader was cancelled is closed and led
// on by the first of its runs to come due.
func decideBatch(p *stepPrep, plan model.StepPlan, s workflow.Step, dec model.StepDecision, now time.Time) model.StepDecision {
	run, b := plan.Run, plan.Batch
	window := time.Duration(s.Batch.Window)
	if s.Batch.Schedule != "" {
		window = max(p.closes.Sub(now), time.Millisecond) // closes is after the time it was read at, itself after now
	}
	stay := func(attempt int, due time.Time) {
		dec.Next, dec.NextAttempt, dec.NextDue, dec.Done = run.Step, attempt, later(due, now), false
	}
	dec.Outcome = model.StepBatched
	switch {
	case run.Attempt == 0 && b == nil:
		dec.Batch, dec.Window = model.BatchOpen, window
		dec.Reason = fmt.Sprintf("opened a batch: %s's runs of %s reaching this step until %s%s join it",
			run.Recipient, run.Type, now.Add(window).Format(time.RFC3339), p.closesWhy)
		if s.Batch.Max > 0 {
			dec.Reason += fmt.Sprintf(" (or until it holds %d)", s.Batch.Max)
		}
		stay(model.BatchLeading, now.Add(window))
	case run.Attempt == 0:
		dec.Batch, dec.Fill = model.BatchJoin, s.Batch.Max > 0 && b.Size+1 >= s.Batch.Max
		closes := b.ClosesAt
		if !b.LeaderWaiting && !now.Before(closes) {
			// Its leader was cancelled and its window is over: this run
			// takes it over when a window from now ends.
			dec.Window, closes = window, now.Add(window)
		}
		if dec.Fill {
			closes = now
		}
		dec.Reason = fmt.Sprintf("joined the batch %s leads (%d runs in it), which closes at %s", p.runID(b.Leader), b.Size+1, closes.Format(time.RFC3339))
		if dec.Fill {
			dec.Reason = fmt.Sprintf("joined the batch %s leads and filled it (%d runs): it closes now", p.runID(b.Leader), b.Size+1)
		}
		stay(model.BatchJoined, closes)
	case b == nil && run.Attempt == model.BatchLeading:
		dec.Reason = "its batch is gone (pruned): it goes on alone"
		dec.Attempt = run.Attempt
	case b == nil:
		return model.StepDecision{StepID: s.ID, Next: run.Step, Done: true, RunReason: "carried on by its batch, which is gone since (pruned)"}
	case !b.Open && b.Leader != run.ID:
		return model.StepDecision{StepID: s.ID, Next: run.Step, Done: true,
			RunReason: fmt.Sprintf("carried on by the batch %s leads: its event goes on in that run's next steps", p.runID(b.Leader))}
	case !b.Open:
		dec.Reason, dec.Attempt = "its batch was closed", run.Attempt
	case b.Leader != run.ID && b.LeaderWaiting:
		return model.StepDecision{Wait: later(b.ClosesAt, now.Add(stepRetry))} // its leader closes it
	case now.Before(b.ClosesAt):
		return model.StepDecision{Wait: b.ClosesAt}
	case b.Leader == run.ID:
		dec.Batch, dec.Attempt = model.BatchClose, run.Attempt
		dec.Reason = "closed the batch it opened"
	default:
		dec.Batch, dec.Attempt = model.BatchClose, run.Attempt
		dec.Reason = fmt.Sprintf("closed the batch, and leads it on: its leader %s was cancelled", p.runID(b.Leader))
	}
	return dec
}

// batchOf is the batch a run's channel step renders with: the events the
// batch the run leads on carried, when an earlier step is a batch step;
// nil otherwise (the template's .batch is then the event alone).
func (r *Relay) batchOf(ctx context.Context, run model.Run, p *stepPrep) ([]templates.BatchEvent, error) {
	if !slices.ContainsFunc(p.w.Steps[:run.Step], func(s workflow.Step) bool { return s.Batch != nil }) {
		return nil, nil
	}
	items, err := r.store.BatchItems(ctx, run.ID)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	out := make([]templates.BatchEvent, len(items))
	for i, it := range items {
		var stored payloadWithWorkflow
		if err := json.Unmarshal(it.Payload, &stored); err != nil {
			return nil, fmt.Errorf("the stored payload of batched event %s: %w", it.EventID, err)
		}
		out[i] = templates.BatchEvent{ID: it.EventID, Type: it.Type, Data: stored.Event.Data}
	}
	return out, nil
}

// awaitDelivery makes dec, which wrote the notification of an undelivered
// fallback's channel at position ch, keep the run at its step until the
// channel's time is up, unless ch is the chain's last.
func awaitDelivery(dec *model.StepDecision, s workflow.Step, run model.Run, ch int, now time.Time) {
	dec.Attempt = ch
	if ch == len(s.Channels)-1 {
		return
	}
	within := time.Duration(s.Within)
	dec.Next, dec.NextAttempt, dec.NextDue, dec.Done = run.Step, ch+1, now.Add(within), false
	dec.Reason += fmt.Sprintf("; the next channel if it is not delivered within %v", within)
}

// nextFallback decides an undelivered fallback's step when its last
// channel's time is up: delivered, the run goes on (the channel's record
// says so); not delivered (no receipt, or it failed), the next channel
// that may reach the recipient gets the notification, and none left ends
// the step where it is.
func nextFallback(p *stepPrep, plan model.StepPlan, facts []model.StepFact, dec model.StepDecision, now time.Time) model.StepDecision {
	run, s := plan.Run, p.w.Steps[plan.Run.Step]
	last := s.Channels[run.Attempt-1]
	k := slices.Index(plan.Needs, run.Step)
	if k < 0 {
		dec.Outcome, dec.Reason = model.StepSkipped, "skipped: the fallback's last channel could not be read"
		return dec
	}
	st, _, _ := stepState(facts[k])
	within := time.Duration(s.Within)
	switch {
	case st.Delivered:
		dec.Amend = fmt.Sprintf("; delivered within %v: no fallback", within)
		return dec
	case p.chIdx < 0 || p.skip != "":
		dec.Amend = fmt.Sprintf("; not delivered within %v (%s), and no channel after it may reach %s (%s)",
			within, describeStatus(facts[k]), run.Recipient, strings.Join(p.passed, "; "))
		return dec
	}
	tg := p.target
	dec.Outcome, dec.Notification = model.StepSent, &tg
	dec.Seq = model.StepSeq(run.Targets, run.Seq, run.Step, p.chIdx)
	dec.Reason = fmt.Sprintf("written for %s (%s): %s was not delivered within %v (%s)", p.channel, tg.Key, last, within, describeStatus(facts[k]))
	if len(p.passed) > 0 {
		dec.Reason += " (passed over: " + strings.Join(p.passed, "; ") + ")"
	}
	awaitDelivery(&dec, s, run, p.chIdx, now)
	return dec
}

// describeStatus says what became of a step's notification.
func describeStatus(f model.StepFact) string {
	if f.Status == "" {
		return "no notification"
	}
	return f.Status
}

// stepState is how a condition sees an earlier step, and whether its
// notification is still live (so the condition waits, until next at the
// earliest).
func stepState(f model.StepFact) (st workflow.StepState, live bool, next time.Time) {
	st.Skipped, st.Clicked, st.Throttled = f.Outcome == model.StepSkipped, f.Clicked, f.Outcome == model.StepThrottled
	switch f.Status {
	case model.StatusPending, model.StatusSending:
		return st, true, f.NextAttemptAt
	case model.StatusSent:
		st.Sent = true
	case model.StatusDelivered:
		st.Sent, st.Delivered = true, true
	case model.StatusBounced:
		st.Sent, st.Bounced = true, true
	case model.StatusFailed, model.StatusDead, model.StatusSuppressed, model.StatusSkipped:
		st.Failed = true
	}
	// unknown (maybe sent) is neither sent nor failed.
	if f.FeedSeq > 0 {
		st.Sent, st.Read, st.Seen = true, f.Read, f.Read || f.Dismissed
	}
	return st, false, time.Time{}
}

// describeFacts says what a condition read, for the step's reason.
func describeFacts(p *stepPrep, plan model.StepPlan, facts []model.StepFact) string {
	if len(plan.Needs) == 0 {
		return "on the event's data"
	}
	var parts []string
	for k, j := range plan.Needs {
		f := facts[k]
		id := p.w.Steps[j].ID
		switch {
		case f.Outcome == "":
			parts = append(parts, id+": not decided")
		case f.FeedSeq > 0:
			state := "unread"
			if f.Read {
				state = "read"
			} else if f.Dismissed {
				state = "dismissed, unread"
			}
			parts = append(parts, fmt.Sprintf("%s: in-app item %d %s", id, f.FeedSeq, state))
		case f.Status != "" && f.Clicked:
			parts = append(parts, fmt.Sprintf("%s: %s, a tracked link clicked", id, f.Status))
		case f.Status != "":
			parts = append(parts, fmt.Sprintf("%s: %s", id, f.Status))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s", id, f.Outcome))
		}
	}
	return strings.Join(parts, "; ") + ", read when the step was decided"
}

// delayEnd is when a delay step reached at due ends, and the reason
// recorded for it.
func delayEnd(d *workflow.Delay, due time.Time, ev *Event) (time.Time, string) {
	if d.For > 0 || d.Until == "" {
		end := due.Add(time.Duration(d.For))
		return end, fmt.Sprintf("waiting %v, until %s", time.Duration(d.For), end.Format(time.RFC3339))
	}
	var data map[string]any
	_ = json.Unmarshal(ev.Data, &data)
	t, ok, err := workflow.UntilOf(d.Until, data)
	switch {
	case err != nil:
		return due, fmt.Sprintf("not waiting: %v", err)
	case !ok:
		return due, fmt.Sprintf("not waiting: the event has no %s", d.Until)
	}
	return t, fmt.Sprintf("waiting until %s (%s)", t.Format(time.RFC3339), d.Until)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// CancelRuns cancels tenant's waiting runs whose cancel key is key, as an
// event with "cancels" does; it returns how many it cancelled.
func (r *Relay) CancelRuns(ctx context.Context, tenant, key, who string) (int64, error) {
	if err := checkID("cancel_key", key); err != nil {
		return 0, err
	}
	return r.store.CancelRuns(ctx, tenant, key, fmt.Sprintf("cancelled by %s: cancel key %q", who, key), r.now())
}

// RunView is a run with what was decided at each of its steps.
type RunView struct {
	model.Run
	Steps []model.RunStep `json:"steps"`
}

// Runs lists a tenant's workflow runs, each with its steps.
func (r *Relay) Runs(ctx context.Context, f model.RunFilter) ([]RunView, error) {
	if f.State != "" && !slices.Contains(model.RunStates, f.State) {
		return nil, invalid("state", "%q: one of %s", f.State, strings.Join(model.RunStates, ", "))
	}
	runs, err := r.store.Runs(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]RunView, len(runs))
	for i, run := range runs {
		out[i].Run = run
		if out[i].Steps, err = r.store.RunSteps(ctx, run.ID); err != nil {
			return nil, err
		}
		if out[i].Steps == nil {
			out[i].Steps = []model.RunStep{}
		}
	}
	return out, nil
}

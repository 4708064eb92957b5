package store

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Templates are message templates managed over the API, kept
// as numbered versions: a change is a new version and every earlier one
// stays readable. Version numbers come from the primary key (tenant, name,
// channel, locale, version): of two writers racing for one number, one
// inserts it and the other takes the next; none is found free by a lookup
// first. Every change also moves one generation number, which every
// process reads cheaply to learn that its in-memory templates are stale.
type Templates interface {
	// PutTemplate stores parts as key's next version, unless they equal
	// its latest version and that one is not retired: then it returns
	// that version and created false (a PUT repeated after a lost answer
	// makes no second version).
	PutTemplate(ctx context.Context, key model.TemplateKey, parts map[string]string, now time.Time) (t model.StoredTemplate, created bool, err error)
	// TemplateVersion returns one version of key, the latest for version
	// 0; ErrNotFound if there is none.
	TemplateVersion(ctx context.Context, key model.TemplateKey, version int) (model.StoredTemplate, error)
	// TemplateVersions lists key's versions, oldest first; none is an
	// empty list.
	TemplateVersions(ctx context.Context, key model.TemplateKey) ([]model.StoredTemplate, error)
	// RetireTemplate marks key's latest version retired at now (new
	// accepts stop using it; every version stays readable) and returns it;
	// ErrNotFound if key has no version or its latest is retired already.
	RetireTemplate(ctx context.Context, key model.TemplateKey, now time.Time) (model.StoredTemplate, error)
	// LatestTemplates lists the latest version of every key of tenant (""
	// for every tenant), retired ones included, by tenant, name, channel
	// and locale (bytewise), with the generation it was read at.
	LatestTemplates(ctx context.Context, tenant string) ([]model.StoredTemplate, int64, error)
	// TemplateChanges is LatestTemplates("") narrowed to the keys changed
	// (a version made, or the latest retired) after generation since: what
	// a reader that loaded at since has not seen, retired ones included,
	// with the generation it was read at. Every change up to that
	// generation is in the list or was read at since.
	TemplateChanges(ctx context.Context, since int64) ([]model.StoredTemplate, int64, error)
	// TemplateGeneration is a number that every PutTemplate creating a
	// version and every RetireTemplate raises, in the same transaction.
	TemplateGeneration(ctx context.Context) (int64, error)
}

// Workflows are tenants' workflows per event type, kept as
// templates are: numbered versions from the primary key (tenant, type,
// version), every one readable, a change a new version; a run keeps the
// version it started with.
type Workflows interface {
	// PutWorkflow stores def (a checked workflow, as JSON) as the next
	// version of tenant's workflow for typ, unless it equals the latest
	// version and that one is not retired: then it returns that version
	// and created false. Of writers racing for one number, one takes it
	// and the other the next.
	PutWorkflow(ctx context.Context, tenant, typ string, def []byte, now time.Time) (w model.StoredWorkflow, created bool, err error)
	// WorkflowVersion returns one version, the latest (retired or not)
	// for version 0; ErrNotFound if there is none.
	WorkflowVersion(ctx context.Context, tenant, typ string, version int) (model.StoredWorkflow, error)
	// WorkflowVersions lists the versions, oldest first; none is an empty
	// list.
	WorkflowVersions(ctx context.Context, tenant, typ string) ([]model.StoredWorkflow, error)
	// RetireWorkflow marks the latest version retired at now and returns
	// it; ErrNotFound if there is none or it is retired already.
	RetireWorkflow(ctx context.Context, tenant, typ string, now time.Time) (model.StoredWorkflow, error)
}

// Runs are workflow runs: written by the accept of an event
// whose type has a workflow (a Target with Run set), one per recipient,
// and moved step by step by the relay's stepper.
type Runs interface {
	// DueRuns reads up to limit waiting runs due by now, soonest first,
	// each with its event's payload; it locks nothing.
	DueRuns(ctx context.Context, now time.Time, limit int) ([]model.Run, error)
	// WaitingRuns counts the waiting runs and says when the soonest is
	// due (the zero time when none waits).
	WaitingRuns(ctx context.Context) (n int64, next time.Time, err error)
	// DecideSteps decides each plan's step in one write transaction: a
	// run no longer waiting at that step and due is left alone (another
	// node decided it, or it was cancelled); for the others, the facts of
	// the earlier steps the plan needs are read in the transaction, decide
	// is called with them, and its decision (the step's notification or
	// in-app item, its record, the run's next step) is written. It returns
	// how many steps were decided.
	DecideSteps(ctx context.Context, plans []model.StepPlan, decide model.StepDecider, now time.Time) (int, error)
	// CancelRuns cancels tenant's waiting runs whose cancel key is key,
	// recording why; it returns how many.
	CancelRuns(ctx context.Context, tenant, key, why string, now time.Time) (int64, error)
	// Runs lists a tenant's runs by the filter, in id order.
	Runs(ctx context.Context, f model.RunFilter) ([]model.Run, error)
	// BatchItems lists the events of the batch run last closed and leads
	// on, in the order their runs were written; none when it leads none.
	BatchItems(ctx context.Context, run int64) ([]model.BatchItem, error)
	// RunSteps lists what was decided at each step of a run.
	RunSteps(ctx context.Context, run int64) ([]model.RunStep, error)
}

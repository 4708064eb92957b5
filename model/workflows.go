package model

import (
	"fmt"
	"time"
)

// Workflow runs: an event whose type has a workflow becomes one
// run per recipient instead of its notifications, and a stepper decides
// each run's steps in order, one transaction per decision.

// RunSpec marks a Target as a workflow run rather than a notification:
// the accept writes a run for the target's recipient, which starts at its
// first step.
type RunSpec struct {
	Version int // the workflow's version, kept by the run to its end
	// CancelKey is the workflow's cancel_key for the event ("" for none).
	CancelKey string
}

// The states of a run.
const (
	RunWaiting   = "waiting"   // its next step is due at DueAt
	RunDone      = "done"      // every step is decided
	RunCancelled = "cancelled" // stopped by an event's "cancels" or the API: nothing more is sent
)

// RunStates lists every state of a run.
var RunStates = []string{RunWaiting, RunDone, RunCancelled}

// The outcomes of a step.
const (
	StepSent    = "sent"    // its notification or in-app item was written
	StepSkipped = "skipped" // its condition did not hold, or nothing could be sent
	StepDelayed = "delayed" // a delay: the next step is due later
	StepBatched = "batched" // a batch step: the run opened, joined or closed a batch
	// A throttle step: the run took one of the limit's slots and went on
	// (passed), or found none free (throttled).
	StepPassed    = "passed"
	StepThrottled = "throttled"
)

// Run is one recipient's run of a workflow.
type Run struct {
	ID        int64  `json:"-"`
	Tenant    string `json:"tenant"`
	EventRow  int64  `json:"-"`
	EventID   string `json:"event_id"`
	Purpose   string `json:"purpose"`
	Seq       int    `json:"-"` // the recipient's position in the event's fan-out
	Recipient string `json:"recipient"`
	Type      string `json:"type"`
	Version   int    `json:"version"`
	Step      int    `json:"step"` // the next step to decide
	// Attempt, in a step with the undelivered fallback, is the position
	// after the channel tried last (0: none tried yet).
	Attempt   int       `json:"attempt,omitempty"`
	State     string    `json:"state"`
	DueAt     time.Time `json:"due_at"`
	CancelKey string    `json:"cancel_key,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Targets is the event's fan-out size: a step's notification is
	// numbered after it in the event (see StepSeq).
	Targets int `json:"-"`
	// Payload is the event as stored (DueRuns fills it in).
	Payload []byte `json:"-"`
}

// RunStep is what was decided at one step of a run.
type RunStep struct {
	Step int `json:"step"`
	// Attempt is the channel's position in the step for the undelivered
	// fallback, which records each channel it tries (0 otherwise).
	Attempt   int       `json:"attempt,omitempty"`
	StepID    string    `json:"id"`
	Outcome   string    `json:"outcome"`
	Reason    string    `json:"reason"`
	DueAt     time.Time `json:"due_at"`
	DecidedAt time.Time `json:"decided_at"`
	// Notification is the notification the step wrote (0: none).
	Notification int64 `json:"-"`
	// FeedSeq is the in-app item the step posted (0: none).
	FeedSeq int64 `json:"feed_seq,omitempty"`
}

// MaxStepChannels bounds a step's channels; with the step's position it
// numbers the step's notification in its event (StepSeq).
const MaxStepChannels = 8

// MaxRunSteps bounds a workflow's steps, as package workflow does.
const MaxRunSteps = 32

// StepSeq is the position in its event of the notification a run's step
// writes on the step's channel number ch: after the event's own fan-out,
// so the event's (event, seq) uniqueness also makes a step's notification
// once.
func StepSeq(targets, runSeq, step, ch int) int {
	return targets + (runSeq*MaxRunSteps+step)*MaxStepChannels + ch
}

// StepFact is what an earlier step of a run left, read in the transaction
// that decides a later one.
type StepFact struct {
	Step    int
	Outcome string // "" when the step has not been decided
	// Status is the status of the step's notification ("" for none);
	// NextAttemptAt when it is still pending.
	Status        string
	NextAttemptAt time.Time
	// FeedSeq is the step's in-app item (0 for none); Read and Dismissed
	// its marks for the recipient: the item's own or a watermark past it.
	FeedSeq         int64
	Read, Dismissed bool
	// Clicked says a tracked link of the step's notification was clicked.
	Clicked bool
}

// StepPlan is one due run for DecideSteps: the run as DueRuns read it and
// which earlier steps' facts its step's decision needs.
type StepPlan struct {
	Run   Run
	Needs []int // earlier steps, by position
	// Batched marks a batch step: DecideSteps reads its batch (Batch) in
	// the deciding transaction.
	Batched bool
	// Batch is the batch a batch step's run may join (at attempt 0: the
	// open one of its recipient, nil for none) or the one it is in (after),
	// as the deciding transaction read and locked it.
	Batch *BatchFact
	// Throttle marks a throttle step: DecideSteps counts its window's
	// slots (Slots) in the deciding transaction, holding the window's lock
	// until it commits.
	Throttle *StepThrottle
	Slots    int
}

// StepThrottle is the window a throttle step counts in: the slots taken
// within the last Per by the recipient's runs at the step (Window names
// the workflow's type and the step's id, so a new version counts on). A
// slot counts for Per after it is taken.
type StepThrottle struct {
	Window string
	Per    time.Duration
}

// The attempts of a run at a batch step: the batch's leader waits for it
// to close at BatchLeading, a run that joined it at BatchJoined.
const (
	BatchLeading = 1
	BatchJoined  = 2
)

// BatchFact is a batch as a deciding transaction read it.
type BatchFact struct {
	ID            int64
	Leader        int64
	LeaderWaiting bool // the leader is still waiting (not cancelled)
	Open          bool
	Size          int // runs that joined, the leader's included
	ClosesAt      time.Time
}

// The batch operations a step decision writes (StepDecision.Batch).
const (
	BatchOpen  = "open"  // the run opens a batch and leads it
	BatchJoin  = "join"  // the run joins Plan.Batch
	BatchClose = "close" // the run closes its batch and leads it on (its leader, or a run taking over from a cancelled one)
)

// BatchItem is one event a closed batch carries.
type BatchItem struct {
	EventID, Type string
	Payload       []byte // the event as stored
}

// StepDecision is what the relay decided for a run's step.
type StepDecision struct {
	// Wait, when set, decides nothing: the step is due again then (an
	// earlier step's notification is not final yet).
	Wait time.Time
	// Outcome and Reason are recorded for the step, at Attempt (""
	// Outcome records nothing: an undelivered fallback whose channel was
	// delivered goes on to the next step without another row).
	Outcome, Reason, StepID string
	Attempt                 int
	// Amend, with no Outcome, is added to the reason of the step's last
	// record (the fallback's channel that was delivered, or the last).
	Amend string
	// Notification, if set, is written: the step's message to the
	// recipient on one channel, with its Seq (StepSeq).
	Notification *Target
	Seq          int
	// Feed, if set, is the feed the step posts the event's item to, with
	// FeedMessage as its message (nil: the event's).
	Feed        string
	FeedMessage []byte
	// FeedShared is how many shared feeds (not a user's own) the event's
	// accept posted it to: the unread count looks for a second copy of
	// the event only then.
	FeedShared int
	// Batch, when set, is a batch operation (BatchOpen, BatchJoin,
	// BatchClose): Window is the window of a batch opened (or, on a join,
	// of a batch whose window ended with its leader cancelled: it starts
	// anew), and Fill, on a join, closes the batch at once (it is full).
	Batch  string
	Window time.Duration
	Fill   bool
	// TakeSlot takes a slot of Plan.Throttle's window for the run.
	TakeSlot bool
	// Next is the step the run goes on with (at NextAttempt) and NextDue
	// when it is due; Done ends the run, with RunReason.
	Next        int
	NextAttempt int
	NextDue     time.Time
	Done        bool
	RunReason   string
}

// StepDecider decides a run's step from the facts read in the deciding
// transaction. It must not block: it runs inside the transaction.
type StepDecider func(p StepPlan, facts []StepFact) StepDecision

// RunFilter selects runs to list.
type RunFilter struct {
	Tenant string // "" for any (the operator's commands)
	ID     int64  // 0 for any
	// Notification, when set, selects the run one of whose steps wrote
	// that notification.
	Notification int64
	State        string // "" for any
	EventID      string // "" for any
	AfterID      int64
	Limit        int
}

// CancelledBy is the reason recorded on the runs an event cancels.
func CancelledBy(ev NewEvent) string {
	return fmt.Sprintf("cancelled by event %q (%s): cancels %q", ev.EventID, ev.Type, ev.Cancels)
}

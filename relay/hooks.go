package relay

import "time"

// The messages of the log records the dispatcher writes for each
// notification it settles, for tools that follow its log (batch send's
// progress): one per provider call, and one per claim ended without a call
// (a wait at a gate, a give-up). Each carries "notification", "status" and
// "applied".
const (
	LogAttempt = "attempt"
	LogDecided = "decided without a call"
)

// Phase names a point in the life of a notification where a test (or a
// drill) may want to act: kill the process, pause, count.
type Phase string

// The phases, in the order a notification passes them.
const (
	// PhaseAccept: an accept is about to be written (nothing committed yet).
	PhaseAccept Phase = "accept"
	// PhaseAccepted: an accept is committed, the caller not yet answered.
	PhaseAccepted Phase = "accepted"
	// PhaseClaimed: a notification is claimed, its provider not yet called.
	PhaseClaimed Phase = "claimed"
	// PhaseCalled: the provider answered, the attempt not yet recorded.
	PhaseCalled Phase = "called"
	// PhaseSettle: a tailed outbox's batch, accepted, is about to be
	// settled: its position and rejected rows written (one transaction).
	PhaseSettle Phase = "settle"
	// PhaseStep: a workflow step is decided, inside the transaction that
	// writes the decision (nothing of it committed yet).
	PhaseStep Phase = "step"
)

// Phases lists every phase, in order.
var Phases = []Phase{PhaseAccept, PhaseAccepted, PhaseClaimed, PhaseCalled, PhaseSettle, PhaseStep}

// Hooks are test signals injected through Options (River's testsignal
// pattern): the library never reads them from the environment. The crash
// drills set At to kill the process at a chosen phase.
type Hooks struct {
	// At, if set, is called each time the relay reaches a phase, on the
	// goroutine doing the work; it must be safe for concurrent use.
	At func(Phase)
	// Lag, if set, hears the lag each claim of the dispatcher sets (on
	// its goroutine), before any of the claim's calls starts.
	Lag func(time.Duration)
}

func (h Hooks) at(p Phase) {
	if h.At != nil {
		h.At(p)
	}
}

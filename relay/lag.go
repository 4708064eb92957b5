package relay

import (
	"time"

	"edgerelay/model"
)

// The dispatcher's lag is how long the notifications it claims had been
// due when it claimed them: near zero while it keeps up, growing while
// more comes due than it can take. serve sheds new events on it
// (api.Options.ShedBehind), which is why it must not grow for reasons
// that are not the relay's own: a notification that waited while its
// provider held calls back (a pause it asked for, a rate limit, a window
// full of calls) is the provider's pace, not the box falling behind, and
// is not counted. What is counted is a notification that could have
// been claimed sooner: workers busy, the writer or the CPU behind.

// hold records that the gate held calls back at now: it had no room, or
// a claim took all the room it had.
func (g *gate) hold(now time.Time) {
	g.pace.mu.Lock()
	if now.After(g.pace.held) {
		g.pace.held = now
	}
	g.pace.mu.Unlock()
}

// heldSince reports whether the gate held calls back at or after t.
func (g *gate) heldSince(t time.Time) bool {
	g.pace.mu.Lock()
	defer g.pace.mu.Unlock()
	return !g.pace.held.Before(t)
}

// observeLag sets the lag from one turn's claims, taken at now: the
// longest any of them had been due, leaving out those whose provider held
// calls back since they came due. A turn that claimed nothing counts as
// no lag: nothing due was left waiting for the dispatcher.
func (r *Relay) observeLag(now time.Time, cs []model.Claimed) {
	var lag time.Duration
	for _, c := range cs {
		waited := now.Sub(c.DueAt)
		if waited <= lag {
			continue
		}
		if g := r.router.gateNamed(c.Provider); g != nil && g.heldSince(c.DueAt) {
			continue
		}
		lag = waited
	}
	r.lag.Store(int64(lag))
	if r.hooks.Lag != nil {
		r.hooks.Lag(lag)
	}
}

// Lag is how long the notifications the dispatcher last claimed had been
// due (see observeLag); zero while it keeps up, or when this process does
// not dispatch.
func (r *Relay) Lag() time.Duration { return time.Duration(r.lag.Load()) }

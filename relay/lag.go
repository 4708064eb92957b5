package relay

import (
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// The dispatcher's lag is how long the notifications it claims had been
// due when it claimed them: near zero while it keeps up, growing while
// more comes due than it delivers. It is kept per provider, since serve
// sheds on it (api.Options.ShedBehind) and a provider that falls behind
// (a slow SMTP relay with its few connections) must not make the events
// of the others refused: an event is refused when a provider its channels
// go to is behind. A notification that waited while its provider paused
// (the Retry-After it asked for) or while its rate limit held calls back
// is not counted: that wait is the pace the operator or the provider set,
// not delivery falling behind. Workers all busy, a window full of calls,
// the writer or the CPU behind: those are counted.

// hold records that a pause or the rate held the gate's calls back at now.
func (g *gate) hold(now time.Time) {
	g.pace.mu.Lock()
	if now.After(g.pace.held) {
		g.pace.held = now
	}
	g.pace.mu.Unlock()
}

// heldSince reports whether a pause or the rate held calls back at or
// after t.
func (g *gate) heldSince(t time.Time) bool {
	g.pace.mu.Lock()
	defer g.pace.mu.Unlock()
	return !g.pace.held.Before(t)
}

func (g *gate) setLag(d time.Duration) {
	g.pace.mu.Lock()
	g.pace.lag = d
	g.pace.mu.Unlock()
}

func (g *gate) lag() time.Duration {
	g.pace.mu.Lock()
	defer g.pace.mu.Unlock()
	return g.pace.lag
}

// observeLag sets the lag of each provider from one turn's claims, taken
// at now: the longest any of its claimed notifications had been due,
// leaving out those a pause or the rate held back since they came due. A
// provider with room that got nothing in the turn has none due: its lag
// is zero. One with no room keeps its lag until a claim hands it more.
// Notifications claimed for no provider (no route) count as the relay's
// own lag, which every event shares.
func (r *Relay) observeLag(now time.Time, cs []model.Claimed) {
	t := r.router.cur
	lags := make(map[*gate]time.Duration, len(t.gates))
	var own time.Duration
	for _, c := range cs {
		waited := max(now.Sub(c.DueAt), 0)
		p, ok := t.named[c.Provider]
		if !ok {
			own = max(own, waited)
			continue
		}
		g := t.gates[p]
		if g.heldSince(c.DueAt) {
			waited = 0
		}
		lags[g] = max(lags[g], waited)
	}
	worst := own
	for _, g := range t.gates {
		if d, ok := lags[g]; ok {
			g.setLag(d)
		} else if g.capacity(now) > 0 {
			g.setLag(0)
		}
		worst = max(worst, g.lag())
	}
	r.lag.Store(int64(own))
	if r.hooks.Lag != nil {
		r.hooks.Lag(worst)
	}
}

// Lag is how far behind delivery is: the longest lag of any provider, or
// of the notifications with none (see observeLag); zero while the
// dispatcher keeps up, or when this process does not dispatch.
func (r *Relay) Lag() time.Duration {
	lag, _ := r.Behind("", nil)
	return lag
}

// Behind is how far behind delivery is for an event of tenant on channels
// (every routed provider when channels is empty: an event without channels
// may reach any, and so may a workflow's steps), and the provider that far
// behind ("" when it is the notifications with no route).
func (r *Relay) Behind(tenant string, channels []string) (time.Duration, string) {
	t := r.router.published()
	lag, who := time.Duration(r.lag.Load()), ""
	consider := func(p providers.Provider) {
		if g, ok := t.gates[p]; ok {
			if d := g.lag(); d > lag {
				lag, who = d, p.Name()
			}
		}
	}
	if len(channels) == 0 || tenant == "" {
		for p := range t.gates {
			consider(p)
		}
		return lag, who
	}
	for _, ch := range channels {
		for _, p := range t.route(tenant, ch) {
			consider(p)
		}
	}
	return lag, who
}

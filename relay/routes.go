package relay

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// Route is the providers that serve a channel, in failover order. A
// refusal (the provider definitely did not send) moves the notification to
// the next one; an unknown outcome pins it to the provider that gave it,
// since a second provider could deliver a second copy.
type Route []providers.Provider

// Routes maps a channel to its route; the key "*" serves every channel
// without a route of its own.
type Routes map[string]Route

// Limit bounds the calls to one provider, so that one slow or throttling
// provider does not take every worker.
type Limit struct {
	// Concurrency is the most calls in flight at once: the ceiling of the
	// provider's window (window.go). 0 is the default of the provider's
	// kind (providers.Concurrency: hundreds for an HTTP API, a few
	// connections for an SMTP relay).
	Concurrency int
	// Rate is the most calls per second, with bursts of Burst; 0 is
	// unbounded.
	Rate  float64
	Burst int
}

// ceiling is the most calls l lets p have in flight; 0 is unbounded.
func (l Limit) ceiling(p providers.Provider) int {
	if l.Concurrency > 0 {
		return l.Concurrency
	}
	return providers.Concurrency(p)
}

// gate enforces one provider's Limit, its window, and its pauses: after a 429 or 503
// with Retry-After, no notification for it is called until then. A call
// enters the gate only if it can start now (tryEnter): a notification
// that cannot goes back to the queue until the time the gate names, which
// is not an attempt (the policy says so).
//
// A gate belongs to one provider value. When SetRoutes replaces a provider
// by one of the same name, the new gate shares the old one's pace (pauses
// and call times) and, if the ceiling is the same, its window and, if the
// rate is, its rate tokens: the calls still running on the old provider
// count against the new one's bound.
type gate struct {
	limit Limit
	win   *window
	rl    *rate.Limiter // nil: no rate bound
	pace  *pace
	// calls counts the calls in flight through this gate, so that a
	// provider SetRoutes dropped is closed only after its last call.
	calls sync.WaitGroup
}

// pace is what a provider's gates share across reloads.
type pace struct {
	mu    sync.Mutex
	until time.Time     // paused until
	held  time.Time     // when a pause or the rate last held calls back (lag.go)
	lag   time.Duration // how long its last claimed notifications had been due (lag.go)
	took  time.Duration // a moving average of call durations, for the wait when every slot is taken
}

func newGate(p providers.Provider, l Limit) *gate {
	g := &gate{limit: l, win: newWindow(l.ceiling(p)), pace: &pace{took: 100 * time.Millisecond}}
	if l.Rate > 0 {
		g.rl = rate.NewLimiter(rate.Limit(l.Rate), max(l.Burst, 1))
	}
	return g
}

// successor is the gate for p, which replaces prev's provider (same name):
// prev's pace; prev's window while the ceiling is unchanged, and its rate
// tokens while the rate is.
func (prev *gate) successor(p providers.Provider, l Limit) *gate {
	g := newGate(p, l)
	g.pace = prev.pace
	if g.win.ceiling == prev.win.ceiling {
		g.win = prev.win
	}
	if l.Rate == prev.limit.Rate && l.Burst == prev.limit.Burst {
		g.rl = prev.rl
	}
	return g
}

func (g *gate) paused(now time.Time) bool {
	g.pace.mu.Lock()
	defer g.pace.mu.Unlock()
	return now.Before(g.pace.until)
}

// capacity is how many calls could start now without waiting.
func (g *gate) capacity(now time.Time) int {
	if g.paused(now) {
		g.hold(now)
		return 0
	}
	n := g.win.free()
	if g.rl != nil {
		if tokens := int(g.rl.TokensAt(now)); tokens <= n {
			g.hold(now) // the rate, not the window, bounds the calls
			n = tokens
		}
	}
	return max(n, 0)
}

// tryEnterAt is when a call could enter, without taking anything; true if
// now.
func (g *gate) tryEnterAt(now time.Time) (time.Time, bool) {
	g.pace.mu.Lock()
	until := g.pace.until
	g.pace.mu.Unlock()
	if now.Before(until) {
		return until, false
	}
	if g.rl != nil && g.rl.TokensAt(now) < 1 {
		r := g.rl.ReserveN(now, 1)
		next := now.Add(r.DelayFrom(now))
		r.CancelAt(now)
		return next, false
	}
	return now, true
}

// tryEnter takes a call slot and a rate token if both are free now. If not,
// it returns the earliest time worth trying again: the end of a pause, the
// next rate token, or, when every slot is taken, about when a call ends.
func (g *gate) tryEnter(now time.Time) (time.Time, bool) {
	g.pace.mu.Lock()
	until, took := g.pace.until, g.pace.took
	g.pace.mu.Unlock()
	if now.Before(until) {
		return until, false
	}
	if !g.win.enter() {
		return now.Add(took), false
	}
	if g.rl != nil && !g.rl.AllowN(now, 1) {
		g.win.cancel()
		r := g.rl.ReserveN(now, 1)
		next := now.Add(r.DelayFrom(now))
		r.CancelAt(now) // only asking when: the token stays for whoever comes then
		return next, false
	}
	g.calls.Add(1)
	return now, true
}

// leave gives the call's place back after a call that took this long;
// overloaded says the provider asked to be called less (its window
// shrinks).
func (g *gate) leave(took time.Duration, overloaded bool) {
	g.pace.mu.Lock()
	g.pace.took = (7*g.pace.took + took) / 8
	g.pace.mu.Unlock()
	g.win.leave(took, overloaded, time.Now())
	g.calls.Done()
}

// pause holds calls for this provider until t.
func (g *gate) pause(t time.Time) {
	g.pace.mu.Lock()
	if t.After(g.pace.until) {
		g.pace.until = t
	}
	g.pace.mu.Unlock()
}

// router resolves a notification's route and holds each provider's gate.
//
// routes, tenant and gates are the dispatcher's own: only the goroutine of
// the running dispatcher reads them (dispatch.go reads them directly, and
// through route, plan and nextOpen), so they take no lock. SetRoutes does
// not touch them: it publishes a new table in next, and plan, which opens
// every claim, adopts it on the dispatcher's goroutine. A claim therefore
// sees one table from its plan to its last call's start, and a call in
// flight keeps the provider and gate it started with. Any other goroutine
// reads the published table (published).
type router struct {
	routes Routes
	tenant map[string]Routes
	gates  map[providers.Provider]*gate
	cur    *table // the table the fields above hold

	next atomic.Pointer[table] // the latest table published

	mu       sync.Mutex     // serialises publishing and adopting
	retiring sync.WaitGroup // closers of dropped providers, waiting for their calls
	log      *slog.Logger
}

// table is one generation of routes, with a gate per provider.
type table struct {
	routes Routes
	tenant map[string]Routes
	gates  map[providers.Provider]*gate
	named  map[string]providers.Provider
	// names are the routes by provider name, for the claim to record
	// where each call goes (model.ClaimRequest.Routes).
	names *model.ClaimRoutes
}

// newRouter refuses two different providers with one name: receipts, limits
// and status counts find a provider by its name.
func newRouter(routes Routes, tenant map[string]Routes, limits map[string]Limit) (*router, error) {
	t, err := newTable(routes, tenant, limits, nil)
	if err != nil {
		return nil, err
	}
	rt := &router{routes: t.routes, tenant: t.tenant, gates: t.gates, cur: t, log: slog.New(slog.DiscardHandler)}
	rt.next.Store(t)
	return rt, nil
}

// newTable checks routes and makes their gates; a provider also in prev
// keeps its gate, and one that replaces a provider of prev of the same
// name gets its successor.
func newTable(routes Routes, tenant map[string]Routes, limits map[string]Limit, prev *table) (*table, error) {
	t := &table{routes: routes, tenant: tenant, gates: map[providers.Provider]*gate{}, named: map[string]providers.Provider{},
		names: &model.ClaimRoutes{Default: routeNames(routes), Tenant: map[string]map[string][]string{}}}
	for tn, rs := range tenant {
		t.names.Tenant[tn] = routeNames(rs)
	}
	add := func(rs Routes) error {
		for _, route := range rs {
			for _, p := range route {
				if q, ok := t.named[p.Name()]; ok && q != p {
					return fmt.Errorf("relay: two providers are named %q; give each its own name (name= in its URL, or its config name)", p.Name())
				}
				t.named[p.Name()] = p
				if _, ok := t.gates[p]; ok {
					continue
				}
				switch {
				case prev == nil:
					t.gates[p] = newGate(p, limits[p.Name()])
				case prev.gates[p] != nil:
					t.gates[p] = prev.gates[p]
				case prev.named[p.Name()] != nil:
					t.gates[p] = prev.gates[prev.named[p.Name()]].successor(p, limits[p.Name()])
				default:
					t.gates[p] = newGate(p, limits[p.Name()])
				}
			}
		}
		return nil
	}
	if err := add(routes); err != nil {
		return nil, err
	}
	for _, rs := range tenant {
		if err := add(rs); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// routeNames is rs by provider name.
func routeNames(rs Routes) map[string][]string {
	out := make(map[string][]string, len(rs))
	for ch, route := range rs {
		names := make([]string, len(route))
		for i, p := range route {
			names[i] = p.Name()
		}
		out[ch] = names
	}
	return out
}

// publish makes t the table the dispatcher adopts at its next claim. A
// table published before and never adopted is dropped at once (no call
// ever went through it).
func (rt *router) publish(routes Routes, tenant map[string]Routes, limits map[string]Limit) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	prev := rt.next.Load()
	t, err := newTable(routes, tenant, limits, prev)
	if err != nil {
		return err
	}
	rt.next.Store(t)
	if prev != rt.cur {
		rt.retire(prev, t, rt.cur)
	}
	return nil
}

// adopt switches the dispatcher to the latest published table. It runs on
// the dispatcher's goroutine (from plan), before any claim that uses the
// table: the calls that entered the old gates all started before it.
func (rt *router) adopt() {
	if rt.next.Load() == rt.cur {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	old, t := rt.cur, rt.next.Load()
	rt.routes, rt.tenant, rt.gates, rt.cur = t.routes, t.tenant, t.gates, t
	rt.retire(old, t)
}

// retire closes the providers of old that none of keep routes, each once
// its calls in flight have ended (a closed HTTP provider drops its idle
// connections; a log provider closes its file). Called with mu held.
func (rt *router) retire(old *table, keep ...*table) {
	type dropped struct {
		p providers.Provider
		g *gate
	}
	var gone []dropped
outer:
	for p, g := range old.gates {
		for _, k := range keep {
			if _, ok := k.gates[p]; ok {
				continue outer
			}
		}
		gone = append(gone, dropped{p, g})
	}
	if len(gone) == 0 {
		return
	}
	log := rt.log
	rt.retiring.Go(func() {
		for _, d := range gone {
			d.g.calls.Wait()
			if c, ok := d.p.(io.Closer); ok {
				if err := c.Close(); err != nil {
					log.Warn("closing a provider the new routes dropped", "provider", d.p.Name(), "err", err)
				}
			}
		}
	})
}

// published is the latest table, for goroutines other than the
// dispatcher's.
func (rt *router) published() *table { return rt.next.Load() }

// route returns the route of a tenant's channel in the dispatcher's table.
// Only the dispatcher's goroutine may call it; others use published().route.
func (rt *router) route(tenant, channel string) Route { return rt.cur.route(tenant, channel) }

// names is the dispatcher's table by provider name, for a claim.
func (rt *router) names() *model.ClaimRoutes { return rt.cur.names }

// channels lists the channels of the dispatcher's table (see table.channels).
func (rt *router) channels(tenant string) []string { return rt.cur.channels(tenant) }

// route returns the route of a tenant's channel: the tenant's own, else the
// default, else the "*" routes in the same order.
func (rt *table) route(tenant, channel string) Route {
	if rs, ok := rt.tenant[tenant]; ok {
		if r, ok := rs[channel]; ok {
			return r
		}
	}
	if r, ok := rt.routes[channel]; ok {
		return r
	}
	if rs, ok := rt.tenant[tenant]; ok {
		if r, ok := rs["*"]; ok {
			return r
		}
	}
	return rt.routes["*"]
}

// channels lists the channels a tenant's notifications have a route for
// (its own routes and the defaults), sorted, "*" last: for errors.
func (rt *table) channels(tenant string) []string {
	seen := map[string]bool{}
	var out []string
	star := false
	for _, rs := range []Routes{rt.tenant[tenant], rt.routes} {
		for ch, route := range rs {
			switch {
			case len(route) == 0 || seen[ch]:
			case ch == "*":
				star = true
			default:
				out = append(out, ch)
			}
			seen[ch] = true
		}
	}
	sort.Strings(out)
	if star {
		out = append(out, "*")
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// claimPlan is one claim the dispatcher makes: which channels, how many.
type claimPlan struct {
	filter model.ClaimFilter
	limit  int
}

// plan splits free workers among claims so that no provider is handed
// more notifications than it can take now (its window, its rate tokens,
// none while paused), and the claims together never take more than free:
// a bounded provider's notifications wait in the queue instead of holding
// workers that other channels need.
//
// A channel whose provider can take all of free is not held to a claim of
// its own: such channels share one claim, which takes the due
// notifications of them all in their order, so that none waits behind
// another's backlog. Only a channel whose provider has less room than free
// gets its own claim, of that room (none while it has none); the dispatcher
// gives what one claim leaves to the next (dispatch.go).
//
// It looks at the first provider of each default route; a notification
// routed elsewhere (a tenant's route, a failover position) whose provider
// cannot take it now is sent back by the policy, without an attempt, until
// the gate's time.
func (rt *router) plan(now time.Time, free int) []claimPlan {
	rt.adopt() // a claim starts on the latest routes
	var plans []claimPlan
	// Several channels may share one provider: its room is handed out
	// once.
	left := map[*gate]int{}
	room := func(g *gate) int {
		n, ok := left[g]
		if !ok {
			n = g.capacity(now)
		}
		return n
	}
	// limit gives a channel (or the channels f names) a claim of its own
	// when its provider has less room than free; it reports false when the
	// provider can take all of free.
	limit := func(g *gate, f model.ClaimFilter) bool {
		n := room(g)
		if n >= free {
			return false
		}
		if n > 0 {
			plans = append(plans, claimPlan{f, n})
		}
		left[g] = 0
		return true
	}
	var limited, roomy []string
	for _, ch := range rt.explicit() {
		if limit(rt.gates[rt.routes[ch][0]], model.ClaimFilter{Only: []string{ch}}) {
			limited = append(limited, ch)
		} else {
			roomy = append(roomy, ch)
		}
	}
	star, ok := rt.routes["*"]
	if ok && len(star) > 0 && limit(rt.gates[star[0]], model.ClaimFilter{Exclude: rt.explicit()}) {
		// The channels routed by "*" have their claim; the roomy explicit
		// channels share what is left.
		if len(roomy) > 0 {
			plans = append(plans, claimPlan{model.ClaimFilter{Only: roomy}, free})
		}
		return plans
	}
	return append(plans, claimPlan{model.ClaimFilter{Exclude: limited}, free})
}

// nextOpen is the earliest time a closed gate of a default route opens
// (the end of a pause, the next rate token); false when none is closed
// that way (a gate closed by concurrency opens when a call ends, which
// wakes the dispatcher by itself).
func (rt *router) nextOpen(now time.Time) (time.Time, bool) {
	var first time.Time
	for _, route := range rt.routes {
		if len(route) == 0 {
			continue
		}
		g := rt.gates[route[0]]
		if g.capacity(now) > 0 {
			continue
		}
		if until, ok := g.tryEnterAt(now); !ok && until.After(now) && (first.IsZero() || until.Before(first)) {
			first = until
		}
	}
	return first, !first.IsZero()
}

// explicit lists the channels with a default route of their own.
func (rt *router) explicit() []string {
	var out []string
	for ch := range rt.routes {
		if ch != "*" {
			out = append(out, ch)
		}
	}
	sort.Strings(out)
	return out
}

package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// The dispatch cycle of one notification, and where each step lives:
//
//	accepted  Accept → model.AcceptEvent/ExpandEvent: row committed, status pending
//	claimed   dispatcher.claim → model.Claim: pending → sending, with a lease
//	          and the name of the provider the call goes to
//	sent      dispatcher.call → Provider.Send, outside the writer, on a worker
//	recorded  dispatcher.call → decide → model.Record: the attempt row and the new status
//
// A process that dies between claim and record leaves the row in sending;
// when its lease has expired, recoverLeases records that attempt as unknown,
// at the provider the claim named (whatever the routes are by then), and
// decide applies the usual rule to it.

var errNotStarted = errors.New("relay: dispatcher not started")

// leaseMargin is kept free at the end of each lease to record the outcome:
// a call is cancelled this long before its lease ends.
func leaseMargin(lease time.Duration) time.Duration { return min(5*time.Second, lease/4) }

// recoveryGrace is how long past its end a lease must be before lease
// recovery settles it as a crash: a record that the owning process is still
// writing (a commit slowed by load or by another process holding the file)
// lands first, instead of the claim being settled as unknown under it, and
// perhaps resent. A crash's notifications wait this much longer; nothing
// else can claim them meanwhile, since they are still in sending.
func recoveryGrace(lease time.Duration) time.Duration { return leaseMargin(lease) }

// recordGuard is the end of the lease margin that retries of a failed
// record leave alone: the last retry starts at least this long before the
// lease ends, so that it lands before another dispatcher may settle the
// claim as unknown.
func recordGuard(lease time.Duration) time.Duration { return leaseMargin(lease) / 5 }

// Retries of a failed record (or give-up) write: a short backoff, since the
// lease bounds them.
const (
	recordRetryMin = 20 * time.Millisecond
	recordRetryMax = 500 * time.Millisecond
)

// maxLoopBackoff caps the pause of a started dispatcher after a failed store
// write; the pause starts at the poll interval and doubles.
const maxLoopBackoff = 30 * time.Second

// Summary is what a dispatch run did: the final state of each notification
// it attempted, and what was left waiting.
type Summary struct {
	Attempts int `json:"attempts"` // provider calls made (and crashed calls recovered)
	Sent     int `json:"sent"`
	Failed   int `json:"failed"`
	Dead     int `json:"dead"`
	Unknown  int `json:"unknown"`
	// Suppressed counts notifications not sent because their address is
	// on their tenant's suppression list: not a failure of the run.
	Suppressed int `json:"suppressed"`
	Skipped    int `json:"skipped"` // a preference or a throttle forbade it
	// Waiting counts notifications still pending at the end: their next
	// attempt is further off than the run was willing to wait.
	Waiting int64 `json:"waiting"`
	// Quarantined counts events whose fan-out is quarantined at the end:
	// their missing notifications wait for an operator.
	Quarantined int `json:"quarantined_events"`
	// RunsWaiting counts workflow runs whose next step is due later (a
	// delay): the next run of the dispatcher takes them on.
	RunsWaiting int64 `json:"workflow_runs_waiting"`
}

// OK reports whether everything the run attempted was sent and nothing is
// left waiting.
func (s Summary) OK() bool {
	return s.Failed == 0 && s.Dead == 0 && s.Unknown == 0 && s.Waiting == 0
}

type dispatcher struct {
	r       *Relay
	slots   chan struct{} // one token per worker
	done    chan struct{} // a call finished
	calls   sync.WaitGroup
	callCtx context.Context // cancelled when a stop runs out of time
	cancel  context.CancelFunc
	stopped chan struct{} // the loop returned
	jitter  jitter        // the backoff's randomness
	// nextStep is when the loop next asks the store for due workflow runs:
	// the soonest run's due time, or a poll interval on (another process
	// may have written runs); an accept of runs here moves it to now.
	nextStep time.Time
	// records takes finished calls to the recorder, which writes them in
	// batches; a worker is free again as soon as its call has ended.
	records   chan pending
	recorders sync.WaitGroup
	recorded  chan struct{} // every recorder returned
	// active counts calls begun and not yet recorded.
	active atomic.Int64
	// stopLoop cancels the loop's context: no more claims.
	stopLoop context.CancelFunc
	// pausesRead is when the loop last read the shared pauses (pauses.go).
	pausesRead time.Time

	mu    sync.Mutex
	final map[int64]string // notification → its last decided status in this run
	tries int
	err   error // why the loop stopped, if not asked to (RunUntilIdle)
	// The current failure episode of a started dispatcher: the last store
	// error of the loop, when and after how many tries it began. failing is
	// nil while the loop's writes work.
	failing      error
	failingSince time.Time
	failures     int
	// unrecorded counts settlements that could not be written at all: their
	// claims are left to lease recovery.
	unrecorded int
}

func (r *Relay) newDispatcher() *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{
		r: r, slots: make(chan struct{}, r.opts.Workers), done: make(chan struct{}, 1),
		callCtx: ctx, cancel: cancel, stopped: make(chan struct{}), final: map[int64]string{}, jitter: r.opts.Jitter,
		records: make(chan pending, r.opts.Workers), recorded: make(chan struct{}),
	}
	for range r.opts.Workers {
		d.slots <- struct{}{}
	}
	d.recorders.Add(recorders)
	for range recorders {
		go d.recordLoop()
	}
	go func() { d.recorders.Wait(); close(d.recorded) }()
	return d
}

// Start runs the dispatcher in the background until ctx is cancelled or
// Stop is called: it finishes interrupted fan-outs, settles calls a crash
// left unrecorded, and delivers whatever is due.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.d != nil {
		return errors.New("relay: dispatcher already started")
	}
	d := r.newDispatcher()
	r.d = d
	loopCtx, stop := context.WithCancel(ctx)
	d.stopLoop = stop
	go func() {
		defer close(d.stopped)
		d.loop(loopCtx, false, 0)
	}()
	return nil
}

// Stop stops claiming new work, waits for calls in flight until ctx ends,
// then cancels them (their outcome is recorded as unknown if the request
// had gone out), and returns once every call is recorded. It returns
// ctx.Err() if calls had to be cancelled.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	d := r.d
	r.d = nil
	r.mu.Unlock()
	if d == nil {
		return errNotStarted
	}
	d.stopLoop()
	<-d.stopped
	return d.drain(ctx)
}

// DispatchErr returns the error that keeps the dispatcher from working right
// now (a store write that fails, a full disk): nil while it works, or when
// no dispatcher runs. A started dispatcher retries with backoff; this is the
// latest error of the current episode, for a readiness check.
func (r *Relay) DispatchErr() error {
	r.mu.Lock()
	d := r.d
	r.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failing != nil {
		return d.failing
	}
	return d.err
}

// RunUntilIdle delivers until every notification is final or its next
// attempt is more than maxWait away, then returns what it did. This is the
// cron mode. It returns an error only when it could not work (database).
func (r *Relay) RunUntilIdle(ctx context.Context, maxWait time.Duration) (Summary, error) {
	r.mu.Lock()
	if r.d != nil {
		r.mu.Unlock()
		return Summary{}, errors.New("relay: dispatcher already started")
	}
	d := r.newDispatcher()
	loopCtx, stop := context.WithCancel(ctx)
	d.stopLoop = stop
	r.d = d
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.d = nil
		r.mu.Unlock()
	}()
	d.loop(loopCtx, true, maxWait)
	stop()
	close(d.stopped)
	// Interrupted (ctx): give calls in flight a bounded time to finish.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	derr := d.drain(dctx)
	sum := d.summary()
	_, later, _, err := r.store.Live(context.Background(), r.now().Add(maxWait))
	sum.Waiting = later
	if runs, _, rerr := r.store.WaitingRuns(context.Background()); rerr == nil {
		sum.RunsWaiting = runs
	} else if err == nil {
		err = rerr
	}
	if qs, qerr := r.store.QuarantinedEvents(context.Background(), "", 0, 10000); qerr == nil {
		sum.Quarantined = len(qs)
	} else if err == nil {
		err = qerr
	}
	if d.err != nil {
		return sum, d.err
	}
	if err != nil {
		return sum, err
	}
	if ctx.Err() != nil {
		return sum, ctx.Err()
	}
	return sum, derr
}

func (d *dispatcher) summary() Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Summary{Attempts: d.tries}
	for _, st := range d.final {
		switch st {
		case model.StatusSent:
			s.Sent++
		case model.StatusFailed:
			s.Failed++
		case model.StatusDead:
			s.Dead++
		case model.StatusUnknown:
			s.Unknown++
		case model.StatusSuppressed:
			s.Suppressed++
		case model.StatusSkipped:
			s.Skipped++
		}
	}
	return s
}

// loop claims and hands out work until ctx ends, or, with idleExit (cron
// mode), until nothing is due within maxWait and no call is in flight.
//
// A store error (a full disk, an I/O error) ends the cron mode's loop: the
// run reports it and exits non-zero, and the next run starts over. A
// started dispatcher (serve, dispatch) must outlive it instead: it logs the
// error once, pauses (the poll interval, doubling up to 30s; an accept in
// this process, which shows that writes work again, cuts the pause short)
// and tries again, until the writes work.
func (d *dispatcher) loop(ctx context.Context, idleExit bool, maxWait time.Duration) {
	var lastSweep time.Time
	var pause time.Duration
	for ctx.Err() == nil {
		n, idle, err := d.turn(ctx, &lastSweep, idleExit, maxWait)
		if err != nil {
			if ctx.Err() != nil {
				return // shutting down: the error is the shutdown's
			}
			if idleExit {
				d.fail(err)
				return
			}
			pause = d.failed(err, pause)
			d.backOff(ctx, pause)
			continue
		}
		if pause > 0 {
			d.recovered()
			pause = 0
		}
		if n > 0 {
			continue
		}
		if idle {
			return
		}
		d.sleep(ctx)
	}
}

// turn is one round of the loop: the crash-recovery sweep when it is due,
// one claim, and with idleExit whether the run is done. A sweep that fails
// is logged and made again at the next sweep; it never holds up the claim
// (a store that cannot be written fails the claim too, and the loop backs
// off on that).
func (d *dispatcher) turn(ctx context.Context, lastSweep *time.Time, idleExit bool, maxWait time.Duration) (claimed int, idle bool, err error) {
	r := d.r
	// Crash recovery, at start and then every few seconds: finish fan-outs
	// and settle calls whose process died.
	if now := r.now(); now.Sub(*lastSweep) >= min(r.opts.Lease/2, 5*time.Second) {
		*lastSweep = now
		if err := errors.Join(r.finishFanOut(ctx), d.recoverLeases(ctx)); err != nil && ctx.Err() == nil {
			r.log.Warn("dispatcher: the recovery sweep failed; it runs again in a few seconds", "err", err)
		}
	}
	steps, err := d.step(ctx)
	if err != nil {
		return 0, false, err
	}
	n, err := d.claim(ctx)
	if err != nil || n > 0 || steps > 0 || !idleExit {
		return n + steps, false, err
	}
	idle, err = d.idle(ctx, maxWait)
	return 0, idle, err
}

// step decides the workflow steps that are due, when any may be, and
// works out when to look next.
func (d *dispatcher) step(ctx context.Context) (int, error) {
	r := d.r
	now := r.now()
	if !r.runsWritten.Swap(false) && now.Before(d.nextStep) {
		return 0, nil
	}
	n, err := r.StepWorkflows(ctx)
	if err != nil {
		return n, err
	}
	d.nextStep = now.Add(r.opts.Poll)
	if waiting, next, err := r.store.WaitingRuns(ctx); err != nil {
		return n, err
	} else if waiting > 0 && next.Before(d.nextStep) {
		d.nextStep = next
	}
	return n, nil
}

// fail ends the cron mode's run on err.
func (d *dispatcher) fail(err error) {
	d.r.log.Error("dispatcher stopped", "err", err)
	d.mu.Lock()
	d.err = err
	d.mu.Unlock()
}

// failed notes a failed turn of a started dispatcher and returns how long
// to pause after the previous pause: the first error of an episode is
// logged, the ones after it are not (they are the same trouble, retried).
func (d *dispatcher) failed(err error, prev time.Duration) time.Duration {
	r := d.r
	pause := r.opts.Poll
	if prev > 0 {
		pause = min(2*prev, max(maxLoopBackoff, r.opts.Poll))
	}
	d.mu.Lock()
	first := d.failing == nil
	if first {
		d.failingSince = time.Now()
		d.failures = 0
	}
	d.failing = err
	d.failures++
	d.mu.Unlock()
	if first {
		r.log.Error("dispatcher: a store write failed; retrying with backoff until it works (nothing is claimed meanwhile)",
			"err", err, "retry_in", pause)
	} else {
		r.log.Debug("dispatcher: store write still failing", "err", err, "retry_in", pause)
	}
	return pause
}

// recovered ends a failure episode: the store's writes work again.
func (d *dispatcher) recovered() {
	d.mu.Lock()
	err, since, n := d.failing, d.failingSince, d.failures
	d.failing = nil
	d.mu.Unlock()
	if err != nil {
		d.r.log.Warn("dispatcher: store writes work again; delivering", "failed_for", time.Since(since).Round(time.Millisecond),
			"failed_turns", n, "last_err", err)
	}
}

// backOff pauses the loop for wait after a failed turn. ctx (Stop) ends the
// pause; so does, after at most the poll interval, an accept in this
// process: its commit shows that writes may work again.
func (d *dispatcher) backOff(ctx context.Context, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	wake := d.r.wake
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-wake:
			if wait > d.r.opts.Poll {
				t.Reset(d.r.opts.Poll)
			}
			wake = nil // one shortening is enough
		}
	}
}

// idle reports whether nothing is in flight and nothing is due within wait.
func (d *dispatcher) idle(ctx context.Context, wait time.Duration) (bool, error) {
	if len(d.slots) != cap(d.slots) || d.active.Load() > 0 {
		return false, nil // calls in flight, or being recorded
	}
	due, _, sending, err := d.r.store.Live(ctx, d.r.now().Add(wait))
	if err != nil {
		return false, err
	}
	if waiting, next, err := d.r.store.WaitingRuns(ctx); err != nil {
		return false, err
	} else if waiting > 0 && !next.After(d.r.now().Add(wait)) {
		return false, nil // a workflow step is due within wait
	}
	// Rows in sending here belong to another process (or a dead one, whose
	// lease recoverLeases will settle): wait for them too.
	return due == 0 && sending == 0, nil
}

// sleep waits for a reason to look for work again: a call finishing, an
// accept in this process, the next due time, or the poll interval (another
// process may have written work).
func (d *dispatcher) sleep(ctx context.Context) {
	r := d.r
	wait := r.opts.Poll
	if next, ok, err := r.store.NextDue(ctx); err == nil && ok {
		now := r.now()
		if next.After(now) {
			wait = min(wait, max(next.Sub(now), time.Millisecond))
		} else if open, ok := r.router.nextOpen(now); ok {
			// Work is due but the last claim took none of it: its providers'
			// gates are closed. Look again when one opens (or a call ends,
			// below), not in a busy loop.
			wait = min(wait, max(open.Sub(now), time.Millisecond))
		}
	}
	if until := d.nextStep.Sub(r.now()); until < wait {
		wait = max(until, time.Millisecond)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-d.done:
	case <-t.C:
	}
}

// claim takes as many due notifications as there are free workers (and,
// per the router's plan, as their providers can take now), asks the policy
// about each, starts a call for those it clears and settles the others at
// once. It returns how many it claimed, and the error of a claim that
// failed (what the claims before it took is still handled).
//
// A worker slot is taken before its notification is claimed, so no claim
// ever waits for a worker while its lease runs.
func (d *dispatcher) claim(ctx context.Context) (int, error) {
	free := d.takeSlots()
	if free == 0 {
		// Every worker busy: wait for one.
		select {
		case <-d.done:
		case <-ctx.Done():
		}
		return 0, nil
	}
	r := d.r
	now := r.now()
	var cs []model.Claimed
	var claimErr error
	r.router.adopt()       // the gates of the latest routes take the shared pauses
	d.readPauses(ctx, now) // pauses other processes heard close these gates too
	for _, p := range r.router.plan(now, free) {
		limit := min(p.limit, free-len(cs))
		if limit <= 0 {
			break
		}
		// The claim records where each call goes (Routes), before any call.
		got, err := r.store.Claim(ctx, model.ClaimRequest{Limit: limit, Now: now, Lease: r.opts.Lease, Filter: p.filter, Routes: r.router.names()})
		if err != nil {
			if ctx.Err() == nil {
				claimErr = err
			}
			break
		}
		cs = append(cs, got...)
	}
	r.observeLag(now, cs)
	d.giveSlots(free - len(cs))
	prefs, prefErrs := d.gatherPreferences(ctx, cs)
	var settle []pending
	for _, c := range cs {
		call, s := d.prepare(ctx, c, r.prefsFor(c, prefs, prefErrs))
		if call == nil {
			d.giveSlots(1)
			settle = append(settle, s)
			continue
		}
		d.calls.Add(1)
		d.active.Add(1)
		go d.call(call)
	}
	if len(settle) > 0 {
		d.settle("settle a claim without a call", settle)
	}
	return len(cs), claimErr
}

// takeSlots takes every free worker slot without waiting.
func (d *dispatcher) takeSlots() int {
	n := 0
	for {
		select {
		case <-d.slots:
			n++
		default:
			return n
		}
	}
}

func (d *dispatcher) giveSlots(n int) {
	for range n {
		d.slots <- struct{}{}
	}
}

// callPlan is a claimed notification cleared for its call.
type callPlan struct {
	c        model.Claimed
	p        providers.Provider
	gate     *gate
	msg      *providers.Message
	routeLen int
	// deadline, on the real clock, is when the call must have ended: its
	// lease's end less the margin kept for recording the outcome.
	deadline time.Time
}

// pending is a settlement waiting to be written, with what the run counts
// of it.
type pending struct {
	c         model.Claimed
	s         model.Settlement
	provider  string
	res       *providers.Result // the call's outcome, nil when none was made
	took      time.Duration
	recovered bool
}

// prepare gathers what the policy needs to know about a claimed
// notification before its call and asks it: either a call to make now
// (with the provider's gate entered), or the settlement that ends the claim
// without one.
func (d *dispatcher) prepare(ctx context.Context, c model.Claimed, pref prefInputs) (*callPlan, pending) {
	r := d.r
	now := r.now()
	route := r.router.route(c.Tenant, c.Channel)
	p, pos := route.providerFor(c)
	if pos >= 0 {
		c.RoutePos = pos
	}
	s := d.situation(c, route, p, now)
	var msg message
	if err := json.Unmarshal(c.Message, &msg); err != nil {
		s.unreadable = err.Error()
	}
	// The call must end before the lease does (less the margin kept for
	// recording), or another process could claim the notification while
	// this call is still live. The lease is on the relay's clock; the
	// deadline is on the real one.
	s.leaseLeft = c.LeaseUntil.Sub(now) - leaseMargin(r.opts.Lease)
	s.pref = pref
	v := decide(s, d.jitter)
	if v.call && needsSlot(s) {
		// The throttle's slot once everything else cleared the call: a
		// notification the policy stops otherwise takes none.
		d.takeSlot(ctx, &s)
		v = decide(s, d.jitter)
	}
	var g *gate
	if v.call {
		// The gate last, so that a notification the policy stops spends no
		// rate token.
		g = r.router.gates[p]
		if until, ok := g.tryEnter(now); !ok {
			s.gateUntil = until
			v = decide(s, d.jitter)
		}
	}
	if !v.call {
		return nil, pending{c: c, provider: s.provider, s: model.Settlement{ID: c.ID, Token: c.Token, At: now, Decision: v.Decision}}
	}
	// The provider sees the id the API shows (a webhook may be the
	// tenant's own server): a row id would count every tenant's traffic.
	var nid string
	if x := r.ids.Load(); x != nil {
		nid = x.Notification(c.ID)
	}
	return &callPlan{c: c, p: p, gate: g, routeLen: len(route), deadline: time.Now().Add(s.leaseLeft),
		msg: &providers.Message{
			Key: c.Key, NotificationID: nid, Tenant: c.Tenant, EventID: c.EventID, Type: c.Type,
			Purpose: c.Purpose, Channel: c.Channel, RecipientID: c.Recipient, Address: c.Address,
			Subject: msg.Subject, Body: msg.Body, HTML: msg.HTML, Data: msg.Data, Attempt: c.Attempt, Created: c.CreatedAt,
			Unsubscribe: r.unsubscribeURL(ctx, c),
		}}, pending{}
}

// situation is the policy's view of a claimed notification on its route.
func (d *dispatcher) situation(c model.Claimed, route Route, p providers.Provider, now time.Time) situation {
	r := d.r
	s := situation{c: c, mode: r.mode(c), pol: r.policy(c), routeLen: len(route), provider: "none",
		now: now, hardBounceTTL: r.opts.HardBounceTTL}
	switch {
	case p != nil:
		s.provider, s.honours = p.Name(), p.HonoursKeys()
	case callee(c) != "" && len(route) > 0:
		// Its claim or its pin names a provider the route no longer lists.
		s.provider, s.pinnedGone = callee(c), true
	}
	return s
}

// call makes one provider call and records it. It runs on a worker,
// outside the writer: the writer never waits on the network.
func (d *dispatcher) call(cp *callPlan) {
	defer func() {
		d.slots <- struct{}{}
		select {
		case d.done <- struct{}{}:
		default:
		}
	}()
	r := d.r
	ctx, cancel := context.WithDeadline(d.callCtx, cp.deadline)
	start := r.now()
	r.hooks.at(PhaseClaimed)
	res := cp.p.Send(ctx, cp.msg)
	cancel()
	took := r.now().Sub(start)
	cp.gate.leave(took, res.Overloaded || res.RetryAfter > 0)
	if res.Outcome == providers.Refused && res.RetryAfter > 0 {
		// The provider asked for a pause: claim nothing for it until then,
		// here and in every process on the store.
		until := r.now().Add(res.RetryAfter)
		cp.gate.pause(until)
		d.sharePause(d.callCtx, cp.p.Name(), until)
	}
	r.hooks.at(PhaseCalled)
	d.records <- d.decided(cp.c, cp.p, cp.routeLen, start, res, false)
}

// maxRecordBatch bounds the calls one write records; recorders is how
// many such writes may wait for the store at once (the writer commits them
// together), so that one slow commit does not hold every later record
// behind it while leases run.
const (
	maxRecordBatch = 256
	recorders      = 4
)

// recordLoop writes finished calls as they come, each time all that are
// waiting (up to maxRecordBatch) in one store write: under load many
// results share a commit and a few statements, and a worker never waits
// for the disk. It returns when records is closed (after the last call).
func (d *dispatcher) recordLoop() {
	defer d.recorders.Done()
	batch := make([]pending, 0, maxRecordBatch)
	for p := range d.records {
		batch = append(batch[:0], p)
	fill:
		for len(batch) < maxRecordBatch {
			select {
			case q, ok := <-d.records:
				if !ok {
					break fill
				}
				batch = append(batch, q)
			default:
				break fill
			}
		}
		d.settle("record attempt", batch)
		for range batch {
			d.active.Add(-1)
			d.calls.Done()
		}
	}
}

// providerFor returns the provider a claimed notification's attempt goes
// to, and its position in the route: the one its claim recorded before the
// call (see callee), found by name wherever the route lists it now (lease
// recovery may run after a reload or a restart reordered the route, or
// gave its old position to another provider); nil and -1 if the route no
// longer lists it: no other provider may be given the call in its place.
// A claim that named none (made without routes, or by an older binary)
// goes by its route position.
func (rt Route) providerFor(c model.Claimed) (providers.Provider, int) {
	name := callee(c)
	if name == "" {
		return rt.at(c.RoutePos), c.RoutePos
	}
	if p := rt.at(c.RoutePos); p != nil && p.Name() == name {
		return p, c.RoutePos
	}
	for i, p := range rt {
		if p.Name() == name {
			return p, i
		}
	}
	return nil, -1
}

// callee is the provider a claimed notification's call goes to, by name:
// the one its claim recorded (model.Claimed.Provider: the provider it is
// pinned to, or the one at its route position when it was claimed), else
// the one it is pinned to; "" if neither names one.
func callee(c model.Claimed) string {
	if c.Provider != "" {
		return c.Provider
	}
	if c.Pinned {
		return c.LastProvider
	}
	return ""
}

// at returns the provider at a route position; a position past the end
// (the route was shortened since) starts the route over.
func (rt Route) at(pos int) providers.Provider {
	if len(rt) == 0 {
		return nil
	}
	if pos < 0 || pos >= len(rt) {
		pos = 0
	}
	return rt[pos]
}

// decided asks the policy what a call's outcome means and makes the
// settlement that records the attempt and the decision together.
func (d *dispatcher) decided(c model.Claimed, p providers.Provider, routeLen int, start time.Time, res providers.Result, recovered bool) pending {
	r := d.r
	now := r.now()
	s := d.situation(c, Route{p}, p, now)
	s.routeLen, s.result = routeLen, &res
	v := decide(s, d.jitter)
	a := &model.Attempt{
		N: c.Attempt, Provider: s.provider, StartedAt: start, EndedAt: now, Outcome: string(res.Outcome),
		Permanent: res.Permanent, HTTPStatus: res.HTTPStatus, MessageID: res.MessageID,
		Response: res.Response, Detail: res.Detail,
	}
	return pending{c: c, provider: s.provider, res: &res, took: now.Sub(start), recovered: recovered,
		s: model.Settlement{ID: c.ID, Token: c.Token, At: now, Attempt: a, Recovered: recovered, Decision: v.Decision}}
}

// settle writes settlements in one store write, retried while the first
// lease allows (see persist), then logs and counts them. A write that fails
// for good leaves the claims in sending: when their leases expire, a
// dispatcher settles them as unknown.
func (d *dispatcher) settle(what string, ps []pending) {
	r := d.r
	ss := make([]model.Settlement, len(ps))
	lease := ps[0].c.LeaseUntil
	for i, p := range ps {
		ss[i] = p.s
		if p.c.LeaseUntil.Before(lease) {
			lease = p.c.LeaseUntil
		}
	}
	var applied []bool
	err := d.persist(lease, ps[0].c, what, func() error {
		var err error
		applied, err = r.store.Settle(context.Background(), ss)
		return err
	})
	if err != nil && len(ps) > 1 && !model.IsUnavailable(err) && !errors.Is(err, model.ErrClosed) && d.callCtx.Err() == nil {
		// A write that fails for a reason of its own (one settlement the
		// store refuses) must not take the others with it: one at a time.
		r.log.Warn(what+": a batch failed; writing its settlements one by one", "settlements", len(ps), "err", err)
		for _, p := range ps {
			d.settle(what, []pending{p})
		}
		return
	}
	if err != nil {
		d.mu.Lock()
		d.unrecorded += len(ps)
		d.mu.Unlock()
		for _, p := range ps {
			r.log.Error(what, "notification", p.c.ID, "key", p.c.Key, "status", p.s.Decision.Status, "err", err)
		}
		return
	}
	for i, p := range ps {
		dec := p.s.Decision
		if p.res == nil {
			r.log.Info(LogDecided, "notification", p.c.ID, "key", p.c.Key, "channel", p.c.Channel,
				"provider", p.provider, "status", dec.Status, "why", dec.Reason, "applied", applied[i])
		} else {
			r.log.Info(LogAttempt, "notification", p.c.ID, "key", p.c.Key, "channel", p.c.Channel, "provider", p.provider,
				"attempt", p.c.Attempt, "outcome", p.res.Outcome, "http_status", p.res.HTTPStatus, "detail", p.res.Detail,
				"status", dec.Status, "applied", applied[i])
			if r.opts.Observer != nil && (applied[i] || !p.recovered) {
				r.opts.Observer.Attempted(p.c.Channel, p.provider, p.res.Outcome, dec.Status, p.took)
			}
		}
		d.mu.Lock()
		if p.res != nil && (applied[i] || !p.recovered) {
			d.tries++
		}
		if applied[i] {
			d.final[p.c.ID] = dec.Status
		}
		d.mu.Unlock()
	}
}

// persist runs write, the store write that settles claims (c is the first,
// for the logs), and retries it with a short backoff while the lease
// (ending at lease) leaves time: this process knows the outcome, and a claim
// left in sending would be settled as unknown when its lease expires (and
// may be resent). The last try starts recordGuard before the lease ends;
// past that, lease recovery is the fallback. Retrying stops at once when
// the store is closed, and when a stop ran out of time (callCtx): shutdown
// is not held up by a failing disk beyond its drain timeout.
func (d *dispatcher) persist(lease time.Time, c model.Claimed, what string, write func() error) error {
	r := d.r
	// The relay's clock may be a test's: the retries are timed on the real one.
	deadline := time.Now().Add(lease.Sub(r.now()) - recordGuard(r.opts.Lease))
	wait := recordRetryMin
	var first error
	for tries := 1; ; tries++ {
		err := write()
		if err == nil {
			if first != nil {
				r.log.Warn(what+": written after retries", "notification", c.ID, "key", c.Key, "tries", tries)
			}
			return nil
		}
		if errors.Is(err, model.ErrClosed) || d.callCtx.Err() != nil || time.Until(deadline) < wait {
			return err
		}
		if first == nil {
			first = err
			r.log.Warn(what+": write failed; retrying while the lease lasts", "notification", c.ID, "key", c.Key,
				"lease_until", lease, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.callCtx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, recordRetryMax)
	}
}

// recoverLeases settles notifications whose claim outlived its process:
// each is an attempt with an unknown outcome (the call may have reached the
// provider before the crash), decided like any other unknown. Settling is
// fenced by the claim's token, so of two dispatchers that find the same
// expired lease, one settles it and the other changes nothing.
func (d *dispatcher) recoverLeases(ctx context.Context) error {
	r := d.r
	for {
		cs, err := r.store.ExpiredLeases(ctx, r.now().Add(-recoveryGrace(r.opts.Lease)), 256)
		if err != nil || len(cs) == 0 {
			return err
		}
		ps := make([]pending, len(cs))
		for i, c := range cs {
			route := r.router.route(c.Tenant, c.Channel)
			// The provider the claim recorded, wherever the current route
			// has it: the one the call may have reached.
			r.log.Warn("recovering an attempt interrupted by a crash", "notification", c.ID, "key", c.Key, "attempt", c.Attempt,
				"provider", callee(c))
			p, pos := route.providerFor(c)
			if pos >= 0 {
				c.RoutePos = pos
			}
			ps[i] = d.decided(c, p, len(route), c.ClaimedAt, providers.Result{
				Outcome: providers.Unknown,
				Detail:  fmt.Sprintf("lease expired at %s: the process stopped during this attempt (crash or kill); the call may have reached the provider", c.LeaseUntil.Format(time.RFC3339)),
			}, true)
		}
		// The lease has expired: no retry of the write here. An error ends
		// the sweep (the same rows would be listed again); the next sweep
		// tries again.
		ss := make([]model.Settlement, len(ps))
		for i := range ps {
			ss[i] = ps[i].s
		}
		applied, err := r.store.Settle(ctx, ss)
		if err != nil {
			return err
		}
		for i, p := range ps {
			if applied[i] && r.opts.Observer != nil {
				r.opts.Observer.Attempted(p.c.Channel, p.provider, p.res.Outcome, p.s.Decision.Status, p.took)
			}
			d.mu.Lock()
			if applied[i] {
				d.tries++
				d.final[p.c.ID] = p.s.Decision.Status
			}
			d.mu.Unlock()
		}
	}
}

// drain waits for calls in flight; past ctx it cancels them and waits for
// their (unknown) outcomes to be recorded. It logs what it waited for and
// how that ended, so a stop explains itself.
func (d *dispatcher) drain(ctx context.Context) error {
	log := d.r.log
	inFlight := int(d.active.Load())
	d.mu.Lock()
	unrecorded := d.unrecorded
	d.mu.Unlock()
	if inFlight > 0 {
		deadline, ok := ctx.Deadline()
		wait := "until they end"
		if ok {
			wait = "up to " + time.Until(deadline).Round(time.Millisecond).String()
		}
		log.Info("dispatcher stopping: no more claims; waiting for the calls in flight", "calls", inFlight, "wait", wait)
	}
	idle := make(chan struct{})
	go func() { d.calls.Wait(); close(idle) }()
	var err error
	cancelled := 0
	select {
	case <-idle:
	case <-ctx.Done():
		cancelled = int(d.active.Load())
		d.cancel()
		<-idle
		err = ctx.Err()
	}
	d.cancel()
	close(d.records) // every call is recorded: the recorder may end
	<-d.recorded
	d.mu.Lock()
	unrecorded = d.unrecorded - unrecorded
	d.mu.Unlock()
	if inFlight > 0 || cancelled > 0 {
		log.Info("dispatcher stopped", "calls_waited_for", inFlight, "finished_and_recorded", inFlight-cancelled-unrecorded,
			"cut_off_at_the_drain_timeout_and_recorded_unknown", cancelled, "not_recorded_left_to_lease_recovery", unrecorded)
	}
	return err
}

// realJitter draws backoff jitter from math/rand.
func realJitter(n time.Duration) time.Duration { return rand.N(n + 1) }

// stdout writes to the current os.Stdout (looked up on each write, so a
// program that redirects os.Stdout redirects the default log provider).
type stdout struct{}

func (stdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }

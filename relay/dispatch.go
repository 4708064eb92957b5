package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"edgerelay/providers"
	"edgerelay/store"
)

// The dispatch cycle of one notification, and where each step lives:
//
//	accepted  Accept → store.AcceptEvent/ExpandEvent: row committed, status pending
//	claimed   dispatcher.claim → store.Claim: pending → sending, with a lease
//	sent      dispatcher.call → Provider.Send, outside the writer, on a worker
//	recorded  dispatcher.call → decide → store.Record: the attempt row and the new status
//
// A process that dies between claim and record leaves the row in sending;
// when its lease has expired, recoverLeases records that attempt as unknown
// and decide applies the usual rule to it.

var errNotStarted = errors.New("relay: dispatcher not started")

// leaseMargin is kept free at the end of each lease to record the outcome:
// a call is cancelled this long before its lease ends.
func leaseMargin(lease time.Duration) time.Duration { return min(5*time.Second, lease/4) }

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
	// Waiting counts notifications still pending at the end: their next
	// attempt is further off than the run was willing to wait.
	Waiting int64 `json:"waiting"`
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
	// stopLoop cancels the loop's context: no more claims.
	stopLoop context.CancelFunc

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
}

func (r *Relay) newDispatcher() *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{
		r: r, slots: make(chan struct{}, r.opts.Workers), done: make(chan struct{}, 1),
		callCtx: ctx, cancel: cancel, stopped: make(chan struct{}), final: map[int64]string{},
	}
	for range r.opts.Workers {
		d.slots <- struct{}{}
	}
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
		case store.StatusSent:
			s.Sent++
		case store.StatusFailed:
			s.Failed++
		case store.StatusDead:
			s.Dead++
		case store.StatusUnknown:
			s.Unknown++
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
// is made again on the next turn.
func (d *dispatcher) turn(ctx context.Context, lastSweep *time.Time, idleExit bool, maxWait time.Duration) (claimed int, idle bool, err error) {
	r := d.r
	// Crash recovery, at start and then every few seconds: finish fan-outs
	// and settle calls whose process died.
	if now := r.now(); now.Sub(*lastSweep) >= min(r.opts.Lease/2, 5*time.Second) {
		if err := r.finishFanOut(ctx); err != nil {
			return 0, false, err
		}
		if err := d.recoverLeases(ctx); err != nil {
			return 0, false, err
		}
		*lastSweep = now
	}
	n, err := d.claim(ctx)
	if err != nil || n > 0 || !idleExit {
		return n, false, err
	}
	idle, err = d.idle(ctx, maxWait)
	return 0, idle, err
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
	if len(d.slots) != cap(d.slots) {
		return false, nil // calls in flight
	}
	due, _, sending, err := d.r.store.Live(ctx, d.r.now().Add(wait))
	if err != nil {
		return false, err
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
		wait = min(wait, max(next.Sub(r.now()), time.Millisecond))
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

// claim takes as many due notifications as there are free workers and
// starts a call for each. It returns how many it started, and the error of
// a claim that failed (what the claims before it took is still called).
func (d *dispatcher) claim(ctx context.Context) (int, error) {
	free := len(d.slots)
	if free == 0 {
		// Every worker busy: wait for one.
		select {
		case <-d.done:
		case <-ctx.Done():
		}
		return 0, nil
	}
	now := d.r.now()
	var cs []store.Claimed
	var claimErr error
	for _, p := range d.r.router.plan(now, min(free, 256)) {
		got, err := d.r.store.ClaimWhere(ctx, p.limit, now, d.r.opts.Lease, p.filter)
		if err != nil {
			if ctx.Err() == nil {
				claimErr = err
			}
			break
		}
		cs = append(cs, got...)
	}
	for _, c := range cs {
		<-d.slots
		d.calls.Add(1)
		// Take the provider's slot here, not in the worker, so the next
		// plan sees it taken; a call that finds it taken waits in call.
		var entered bool
		if p := d.r.router.route(c.Tenant, c.Channel).at(c.RoutePos); p != nil {
			entered = d.r.router.gates[p].tryEnter(now)
		}
		go d.call(c, entered)
	}
	return len(cs), claimErr
}

// call makes one provider call and records it. It runs on a worker,
// outside the writer: the writer never waits on the network.
func (d *dispatcher) call(c store.Claimed, entered bool) {
	defer func() {
		d.slots <- struct{}{}
		d.calls.Done()
		select {
		case d.done <- struct{}{}:
		default:
		}
	}()
	r := d.r
	route := r.router.route(c.Tenant, c.Channel)
	p := route.at(c.RoutePos)
	if entered {
		defer r.router.gates[p].leave()
	}
	// A retry that became due while no dispatcher ran may be past its max
	// age: the provider may have forgotten the key, so sending now could
	// deliver a second copy. Give up without calling.
	if pol := r.policy(c); c.ClaimedAt.Sub(c.CycleStartedAt) > pol.MaxAge {
		reason := fmt.Sprintf("gave up before attempt %d: %s after the first, past the max age of %s (the provider may have forgotten the key)",
			c.Attempt, c.ClaimedAt.Sub(c.CycleStartedAt).Round(time.Second), pol.MaxAge)
		d.giveUp(c, store.StatusDead, reason)
		return
	}
	// An address a provider declared dead is not tried again.
	if c.Invalid != "" {
		d.giveUp(c, store.StatusFailed, "not sent: the address is invalid: "+c.Invalid)
		return
	}
	var res providers.Result
	name := "none"
	start := r.now()
	if p == nil {
		res = providers.Result{Outcome: providers.Refused, Detail: fmt.Sprintf("no route for channel %q (configure one with --route %s=URL)", c.Channel, c.Channel)}
	} else {
		name = p.Name()
		var msg message
		if err := json.Unmarshal(c.Message, &msg); err != nil {
			res = providers.Result{Outcome: providers.Refused, Permanent: true, Detail: "stored message unreadable: " + err.Error()}
		} else {
			// The call must end before the lease does, or another process
			// could claim the notification while this call is still live.
			ctx, cancel := context.WithTimeout(d.callCtx, c.LeaseUntil.Sub(c.ClaimedAt)-leaseMargin(r.opts.Lease))
			g := r.router.gates[p]
			var err error
			if !entered {
				if err = g.enter(ctx); err == nil {
					defer g.leave()
				}
			}
			if err != nil {
				res = providers.Result{Outcome: providers.Refused, Detail: "not sent: waited for the provider's limit until the lease ran short"}
			} else {
				start = r.now()
				r.hooks.at(PhaseClaimed)
				res = p.Send(ctx, &providers.Message{
					Key: c.Key, NotificationID: c.ID, Tenant: c.Tenant, EventID: c.EventID, Type: c.Type,
					Purpose: c.Purpose, Channel: c.Channel, RecipientID: c.Recipient, Address: c.Address,
					Subject: msg.Subject, Body: msg.Body, HTML: msg.HTML, Data: msg.Data, Attempt: c.Attempt,
				})
				if res.Outcome == providers.Refused && res.RetryAfter > 0 {
					g.pause(r.now().Add(res.RetryAfter)) // the provider asked for a pause: claim nothing for it until then
				}
			}
			cancel()
		}
	}
	r.hooks.at(PhaseCalled)
	d.record(c, name, p, len(route), start, res)
}

// giveUp ends a claimed notification without a call.
func (d *dispatcher) giveUp(c store.Claimed, status, reason string) {
	err := d.persist(c, "give up", func() error {
		_, err := d.r.store.GiveUp(context.Background(), c.ID, c.Attempt, status, reason, d.r.now())
		return err
	})
	if err != nil {
		d.r.log.Error("give up", "notification", c.ID, "err", err)
		return
	}
	d.mu.Lock()
	d.final[c.ID] = status
	d.mu.Unlock()
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

// record decides what the outcome means for the notification and writes
// the attempt and the decision in one transaction. A write that fails is
// retried while the claim's lease lasts (see persist); the error is
// returned when it could not be written at all.
func (d *dispatcher) record(c store.Claimed, provider string, p providers.Provider, routeLen int, start time.Time, res providers.Result) error {
	r := d.r
	now := r.now()
	honours := p != nil && p.HonoursKeys()
	dec := decide(c, res, honours, r.mode(c), r.policy(c), routeLen, now)
	a := store.Attempt{
		N: c.Attempt, Provider: provider, StartedAt: start, EndedAt: now, Outcome: string(res.Outcome),
		Permanent: res.Permanent, HTTPStatus: res.HTTPStatus, MessageID: res.MessageID,
		Response: res.Response, Detail: res.Detail,
	}
	// Recording must not be cut short by shutdown: the provider has acted.
	var applied bool
	err := d.persist(c, "record attempt", func() error {
		var err error
		applied, err = r.store.Record(context.Background(), c.ID, a, dec)
		return err
	})
	if err != nil {
		// The writer is gone (closing) or the disk kept failing until the
		// lease ran short: when the lease has expired, a dispatcher settles
		// this attempt as unknown.
		r.log.Error("record attempt", "notification", c.ID, "key", c.Key, "outcome", res.Outcome, "err", err)
		return err
	}
	r.log.Info("attempt", "notification", c.ID, "key", c.Key, "channel", c.Channel, "provider", provider,
		"attempt", c.Attempt, "outcome", res.Outcome, "http_status", res.HTTPStatus, "detail", res.Detail,
		"status", dec.Status, "applied", applied)
	if r.opts.Observer != nil {
		r.opts.Observer.Attempted(c.Channel, provider, res.Outcome, dec.Status, now.Sub(start))
	}
	d.mu.Lock()
	d.tries++
	if applied {
		d.final[c.ID] = dec.Status
	}
	d.mu.Unlock()
	return nil
}

// persist runs write, the store write that settles the claim c (its
// attempt, or giving it up), and retries it with a short backoff while the
// lease leaves time: this process knows the outcome, and a claim left in
// sending would be settled as unknown when its lease expires (and may be
// resent). The last try starts recordGuard before the lease ends; past
// that, lease recovery is the fallback. Retrying stops at once when the
// store is closed, and when a stop ran out of time (callCtx): shutdown is
// not held up by a failing disk beyond its drain timeout.
func (d *dispatcher) persist(c store.Claimed, what string, write func() error) error {
	r := d.r
	// The relay's clock may be a test's: the retries are timed on the real one.
	deadline := time.Now().Add(c.LeaseUntil.Sub(r.now()) - recordGuard(r.opts.Lease))
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
		if errors.Is(err, store.ErrClosed) || d.callCtx.Err() != nil || time.Until(deadline) < wait {
			return err
		}
		if first == nil {
			first = err
			r.log.Warn(what+": write failed; retrying while the lease lasts", "notification", c.ID, "key", c.Key,
				"lease_until", c.LeaseUntil, "err", err)
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
// provider before the crash), decided like any other unknown.
func (d *dispatcher) recoverLeases(ctx context.Context) error {
	r := d.r
	for {
		cs, err := r.store.ExpiredLeases(ctx, r.now(), 256)
		if err != nil || len(cs) == 0 {
			return err
		}
		for _, c := range cs {
			name := "none"
			route := r.router.route(c.Tenant, c.Channel)
			p := route.at(c.RoutePos)
			if p != nil {
				name = p.Name()
			}
			r.log.Warn("recovering an attempt interrupted by a crash", "notification", c.ID, "key", c.Key, "attempt", c.Attempt)
			// The lease has expired: no retry here. An error ends the sweep
			// (the same rows would be listed again); the loop retries it.
			if err := d.record(c, name, p, len(route), c.ClaimedAt, providers.Result{
				Outcome: providers.Unknown,
				Detail:  fmt.Sprintf("lease expired at %s: the process stopped during this attempt (crash or kill); the call may have reached the provider", c.LeaseUntil.Format(time.RFC3339)),
			}); err != nil {
				return err
			}
		}
	}
}

// drain waits for calls in flight; past ctx it cancels them and waits for
// their (unknown) outcomes to be recorded.
func (d *dispatcher) drain(ctx context.Context) error {
	idle := make(chan struct{})
	go func() { d.calls.Wait(); close(idle) }()
	select {
	case <-idle:
		d.cancel()
		return nil
	case <-ctx.Done():
		d.cancel()
		<-idle
		return ctx.Err()
	}
}

// decide is the whole delivery policy: what an attempt's outcome means for
// the notification. It is a pure function of its inputs. routeLen is how
// many providers the notification's route lists (for failover).
func decide(c store.Claimed, res providers.Result, honoursKeys bool, mode Mode, pol Policy, routeLen int, now time.Time) store.Decision {
	keep := store.Decision{RoutePos: c.RoutePos, Pinned: c.Pinned, NextAttemptAt: now}
	switch res.Outcome {
	case providers.Sent:
		keep.Status = store.StatusSent
		return keep
	case providers.Refused:
		if res.Permanent && res.InvalidAddress {
			// The address is dead, whichever provider is asked.
			keep.Status, keep.Reason, keep.InvalidAddress = store.StatusFailed, "refused for good, address invalid: "+res.Detail, res.Detail
			return keep
		}
		// A refusal means this provider did not send: the next provider of
		// the route may, straight away (never after an unknown: pinned).
		if !c.Pinned && c.RoutePos+1 < routeLen {
			if c.CycleAttempts >= pol.MaxAttempts {
				keep.Status, keep.Reason = store.StatusDead, fmt.Sprintf("gave up after %d attempts; last: refused: %s", c.CycleAttempts, res.Detail)
				return keep
			}
			keep.Status, keep.RoutePos = store.StatusPending, c.RoutePos+1
			keep.Reason = fmt.Sprintf("refused (%s); failing over to provider %d of %d", res.Detail, c.RoutePos+2, routeLen)
			return keep
		}
		if res.Permanent {
			keep.Status, keep.Reason = store.StatusFailed, "refused for good: "+res.Detail
			return keep
		}
		if !c.Pinned {
			keep.RoutePos = 0 // every provider refused this round: start the route over after the backoff
		}
		return retry(c, res, pol, now, "refused: "+res.Detail, keep)
	default: // Unknown, or a provider that returned nothing usable
		// From now on only this provider may be tried: another could
		// deliver a second copy.
		keep.Pinned = true
		if res.Permanent {
			keep.Status, keep.Reason = store.StatusUnknown, "outcome unknown and retrying cannot settle it ("+res.Detail+"): it may or may not have arrived"
			return keep
		}
		if honoursKeys {
			return retry(c, res, pol, now, "outcome unknown ("+res.Detail+"); retrying with the same key, which the provider honours", keep)
		}
		if mode == AtMostOnce {
			keep.Status, keep.Reason = store.StatusUnknown, fmt.Sprintf(
				"outcome unknown (%s); type %q is at-most-once and the provider does not honour idempotency keys, so it is not resent: it may or may not have arrived",
				res.Detail, c.Type)
			return keep
		}
		return retry(c, res, pol, now, "outcome unknown ("+res.Detail+"); at-least-once: retrying, a duplicate is possible because the provider does not honour idempotency keys", keep)
	}
}

// retry schedules the next attempt with exponential backoff and jitter,
// honouring Retry-After, or gives up when the budget is spent.
func retry(c store.Claimed, res providers.Result, pol Policy, now time.Time, why string, d store.Decision) store.Decision {
	if c.CycleAttempts >= pol.MaxAttempts {
		d.Status, d.Reason = store.StatusDead, fmt.Sprintf("gave up after %d attempts; last: %s", c.CycleAttempts, why)
		return d
	}
	delay := backoff(pol, c.CycleAttempts)
	if res.RetryAfter > delay {
		delay = res.RetryAfter
	}
	next := now.Add(delay)
	if next.Sub(c.CycleStartedAt) > pol.MaxAge {
		d.Status, d.Reason = store.StatusDead, fmt.Sprintf("gave up: the next attempt (in %s) would be past the max age of %s; last: %s", delay.Round(time.Millisecond), pol.MaxAge, why)
		return d
	}
	d.Status, d.NextAttemptAt = store.StatusPending, next
	d.Reason = fmt.Sprintf("%s; next attempt in %s", why, delay.Round(time.Millisecond))
	return d
}

// backoff is BaseDelay·2^(n-1), capped at MaxDelay, with "equal jitter":
// between half and all of it, so retries of many notifications after one
// outage spread out instead of arriving together.
func backoff(pol Policy, n int) time.Duration {
	d := pol.BaseDelay
	for i := 1; i < n && d < pol.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, pol.MaxDelay)
	half := d / 2
	return half + rand.N(half+1)
}

// stdout writes to the current os.Stdout (looked up on each write, so a
// program that redirects os.Stdout redirects the default log provider).
type stdout struct{}

func (stdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }

package relay

import (
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// The delivery policy: every decision about a claimed notification's next
// state is made here, by decide, a function of its inputs (the clock and the
// jitter come in with them). The dispatcher gathers the inputs and applies
// the verdict; it decides nothing on the side.
//
//	before the call  its address on its tenant's suppression list:
//	                 suppressed, not called (the entry says why)
//	                 too old for the key to be remembered: dead, not called
//	                 its stored message unreadable: failed, not called
//	                 its category optional and turned off for this recipient
//	                 and channel (or off by default): skipped, not called
//	                 in the recipient's quiet hours, never called yet: waits
//	                 until they end, its retry budget counted from then
//	                 over its category's throttle: skipped (throttled),
//	                 and folded into the throttle's digest if it has one
//	                 and that digest would carry it
//	                 no route serves its channel: waits (not an attempt)
//	                 pinned to a provider no longer routed: at-most-once
//	                 ends unknown; at-least-once goes back to the route's
//	                 first provider (not an attempt; a duplicate is possible)
//	                 its provider's gate is closed (rate, concurrency, a
//	                 Retry-After pause): waits until it opens (not an attempt)
//	                 too little of its lease left to call: back to the queue
//	after the answer sent: sent
//	                 refused for good, address dead: failed, the address
//	                 put on its tenant's suppression list (a hard bounce)
//	                 refused, another provider on the route: fail over now
//	                 refused for good: failed
//	                 refused: retried with backoff (Retry-After honoured)
//	                 unknown: pinned to this provider; retried with the same
//	                 key if it honours keys or the type is at-least-once,
//	                 else ends unknown
//	                 budget spent (attempts, age): dead
//
// Only a provider's answer is an attempt: waiting at our own gate never
// spends the retry budget and never ends a notification.

// situation is everything the policy looks at for one claimed notification.
type situation struct {
	c    model.Claimed // its attempt counts, cycle start, route position, pin, suppression entry
	mode Mode
	pol  Policy
	// routeLen is how many providers its route lists (0: no route serves
	// its channel); provider is the one its claim recorded (the one at its
	// route position, or the one it is pinned to), honours whether that one
	// honours idempotency keys. pinnedGone says that provider is one its
	// route no longer lists.
	routeLen   int
	provider   string
	honours    bool
	pinnedGone bool
	// unreadable, if set, is why its stored message cannot be read.
	unreadable string
	// gateUntil, if after now, is the earliest time its provider's gate
	// can take the call (a rate or concurrency limit, a pause).
	gateUntil time.Time
	// leaseLeft is how long the call may take before the lease (less its
	// margin for recording) runs out.
	leaseLeft time.Duration
	// result is the provider's answer; nil before the call.
	result *providers.Result
	now    time.Time
	// hardBounceTTL is how long a hard bounce keeps the address on the
	// suppression list (0: until removed).
	hardBounceTTL time.Duration
	// pref is its category and its recipient's preferences.
	pref prefInputs
}

// verdict is what the policy says: make the call now, or the
// notification's next state (Decision).
type verdict struct {
	call bool
	model.Decision
}

// jitter returns a duration in [0, n]; decide draws backoff jitter from it.
type jitter func(n time.Duration) time.Duration

// noRouteWait is how long a notification whose channel no route serves
// waits before it is looked at again (a config change may add the route):
// longer than dispatch --until-idle's default --max-wait, so a cron run
// reports it waiting and exits instead of waiting for it.
const noRouteWait = 5 * time.Minute

// minGateWait keeps a notification sent back to wait at a gate out of the
// very next claim.
const minGateWait = 10 * time.Millisecond

// decide is the whole delivery policy.
func decide(s situation, j jitter) verdict {
	c := s.c
	keep := model.Decision{RoutePos: c.RoutePos, Pinned: c.Pinned, NextAttemptAt: s.now}
	if s.result == nil {
		return beforeCall(s, keep)
	}
	res := *s.result
	switch res.Outcome {
	case providers.Sent:
		keep.Status = model.StatusSent
		return verdict{Decision: keep}
	case providers.Refused:
		if res.Permanent && res.InvalidAddress {
			// The address is dead, whichever provider is asked: it goes on
			// this tenant's suppression list.
			keep.Status, keep.Reason = model.StatusFailed, "refused for good, address invalid: "+res.Detail+" (address suppressed: hard_bounce)"
			keep.Suppress = &model.Suppress{Reason: model.ReasonHardBounce, Detail: res.Detail, ExpiresAt: after(s.now, s.hardBounceTTL)}
			return verdict{Decision: keep}
		}
		// A refusal means this provider did not send: the next provider of
		// the route may, straight away (never after an unknown: pinned).
		if !c.Pinned && c.RoutePos+1 < s.routeLen {
			if c.CycleAttempts >= s.pol.MaxAttempts {
				keep.Status, keep.Reason = model.StatusDead, fmt.Sprintf("gave up after %d attempts; last: refused: %s", c.CycleAttempts, res.Detail)
				return verdict{Decision: keep}
			}
			keep.Status, keep.RoutePos = model.StatusPending, c.RoutePos+1
			keep.Reason = fmt.Sprintf("refused (%s); failing over to provider %d of %d", res.Detail, c.RoutePos+2, s.routeLen)
			return verdict{Decision: keep}
		}
		if res.Permanent {
			keep.Status, keep.Reason = model.StatusFailed, "refused for good: "+res.Detail
			return verdict{Decision: keep}
		}
		if !c.Pinned {
			keep.RoutePos = 0 // every provider refused this round: start the route over after the backoff
		}
		return retry(s, j, "refused: "+res.Detail, keep)
	default: // Unknown, or a provider that returned nothing usable
		// From now on only this provider may be tried: another could
		// deliver a second copy.
		keep.Pinned = true
		if res.Permanent {
			keep.Status, keep.Reason = model.StatusUnknown, "outcome unknown and retrying cannot settle it ("+res.Detail+"): it may or may not have arrived"
			return verdict{Decision: keep}
		}
		if s.honours {
			return retry(s, j, "outcome unknown ("+res.Detail+"); retrying with the same key, which the provider honours", keep)
		}
		if s.mode == AtMostOnce {
			keep.Status, keep.Reason = model.StatusUnknown, fmt.Sprintf(
				"outcome unknown (%s); type %q is at-most-once and the provider does not honour idempotency keys, so it is not resent: it may or may not have arrived",
				res.Detail, c.Type)
			return verdict{Decision: keep}
		}
		return retry(s, j, "outcome unknown ("+res.Detail+"); at-least-once: retrying, a duplicate is possible because the provider does not honour idempotency keys", keep)
	}
}

// beforeCall decides whether a claimed notification is called now.
func beforeCall(s situation, keep model.Decision) verdict {
	c := s.c
	// The recipient's side refused the address (or an operator did): no
	// call, whatever else holds.
	if c.Suppression != nil {
		keep.Status, keep.Reason = model.StatusSuppressed, "not sent: the address is on the tenant's suppression list: "+c.Suppression.Describe()
		return verdict{Decision: keep}
	}
	// A retry that became due while no dispatcher ran may be past its max
	// age: the provider may have forgotten the key, so sending now could
	// deliver a second copy.
	if age := s.now.Sub(c.CycleStartedAt); age > s.pol.MaxAge {
		keep.Status, keep.Reason = model.StatusDead, fmt.Sprintf(
			"gave up before attempt %d: %s after the first, past the max age of %s (the provider may have forgotten the key)",
			c.Attempt, age.Round(time.Second), s.pol.MaxAge)
		return verdict{Decision: keep}
	}
	if s.unreadable != "" {
		keep.Status, keep.Reason = model.StatusFailed, "not sent: its stored message cannot be read: "+s.unreadable
		return verdict{Decision: keep}
	}
	if v, ok := preference(s, keep); ok {
		return v
	}
	// Waiting is not an attempt: the notification goes back to the queue
	// with its budget untouched, no later than its max age allows.
	wait := func(until time.Time, why string) verdict {
		keep.Status, keep.Reason = model.StatusPending, "waiting, not an attempt: "+why
		keep.NextAttemptAt = maxTime(until, s.now.Add(minGateWait))
		if end := c.CycleStartedAt.Add(s.pol.MaxAge + time.Millisecond); keep.NextAttemptAt.After(end) {
			keep.NextAttemptAt = maxTime(end, s.now.Add(minGateWait))
		}
		return verdict{Decision: keep}
	}
	if s.routeLen == 0 {
		return wait(s.now.Add(noRouteWait), fmt.Sprintf("no route serves channel %q (configure one with --route %s=URL)", c.Channel, c.Channel))
	}
	if s.pinnedGone {
		// Only the provider that may have sent it could tell a retry from
		// a second copy, and it is no longer routed.
		if s.mode == AtMostOnce {
			keep.Status, keep.Reason = model.StatusUnknown, fmt.Sprintf(
				"not resent: its last outcome at provider %s was unknown, the route of channel %q no longer lists %s, and type %q is at-most-once: another provider could deliver a second copy; it may or may not have arrived",
				s.provider, c.Channel, s.provider, c.Type)
			return verdict{Decision: keep}
		}
		keep.Status, keep.Pinned, keep.RoutePos = model.StatusPending, false, 0
		keep.Reason = fmt.Sprintf(
			"waiting, not an attempt: its last outcome at provider %s was unknown and the route of channel %q no longer lists %s; type %q is at-least-once, so it goes to the route's first provider (a duplicate is possible)",
			s.provider, c.Channel, s.provider, c.Type)
		return verdict{Decision: keep}
	}
	if s.gateUntil.After(s.now) {
		return wait(s.gateUntil, fmt.Sprintf("provider %s cannot take a call before %s (its limit or a pause it asked for)",
			s.provider, s.gateUntil.UTC().Format("15:04:05.000")))
	}
	if s.leaseLeft <= 0 {
		return wait(s.now, "its lease ran short before the call could start")
	}
	return verdict{call: true}
}

// retry schedules the next attempt with exponential backoff and jitter,
// honouring Retry-After, or gives up when the budget is spent.
func retry(s situation, j jitter, why string, d model.Decision) verdict {
	c, pol, res := s.c, s.pol, s.result
	if c.CycleAttempts >= pol.MaxAttempts {
		d.Status, d.Reason = model.StatusDead, fmt.Sprintf("gave up after %d attempts; last: %s", c.CycleAttempts, why)
		return verdict{Decision: d}
	}
	delay := backoff(pol, c.CycleAttempts, j)
	if res.RetryAfter > delay {
		delay = res.RetryAfter
	}
	next := s.now.Add(delay)
	if next.Sub(c.CycleStartedAt) > pol.MaxAge {
		d.Status, d.Reason = model.StatusDead, fmt.Sprintf("gave up: the next attempt (in %s) would be past the max age of %s; last: %s", delay.Round(time.Millisecond), pol.MaxAge, why)
		return verdict{Decision: d}
	}
	d.Status, d.NextAttemptAt = model.StatusPending, next
	d.Reason = fmt.Sprintf("%s; next attempt in %s", why, delay.Round(time.Millisecond))
	return verdict{Decision: d}
}

// backoff is BaseDelay·2^(n-1), capped at MaxDelay, with "equal jitter":
// between half and all of it, so retries of many notifications after one
// outage spread out instead of arriving together.
func backoff(pol Policy, n int, j jitter) time.Duration {
	d := pol.BaseDelay
	for i := 1; i < n && d < pol.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, pol.MaxDelay)
	half := d / 2
	return half + j(d-half)
}

// after is now+ttl, or nil (never) for a ttl of 0.
func after(now time.Time, ttl time.Duration) *time.Time {
	if ttl <= 0 {
		return nil
	}
	t := now.Add(ttl)
	return &t
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ---- Preferences, quiet hours and throttles ----

// preference applies the recipient's preferences, if the notification's
// category is optional: ok says it decided. It runs at every claim, so a
// change the recipient made at any time before the claim applies (an
// opt-out stops a retry too); one made while a call is in flight cannot
// reach that call.
func preference(s situation, keep model.Decision) (verdict, bool) {
	c, p := s.c, s.pref
	if p.category == "" || p.cat.Required {
		return verdict{}, false
	}
	if p.err != "" {
		// Sending could reach someone who opted out: wait instead.
		keep.Status, keep.Reason = model.StatusPending, "waiting, not an attempt: the recipient's preferences cannot be applied: "+p.err
		keep.NextAttemptAt = s.now.Add(time.Second)
		return verdict{Decision: keep}, true
	}
	if on, why := switchFor(p, c); !on {
		keep.Status, keep.Reason = model.StatusSkipped, "skipped, not sent: "+why
		if c.Attempt > 1 {
			keep.Reason += fmt.Sprintf(" (after %d earlier attempts", c.Attempt-1)
			if c.Pinned {
				keep.Reason += "; the last one's outcome was unknown: it may have arrived"
			}
			keep.Reason += ")"
		}
		return verdict{Decision: keep}, true
	}
	// Quiet hours hold only a notification never called: a retry is
	// already under way and its provider may hold the key only so long.
	if w, why, ok := quietFor(p); ok && c.Attempt == 1 {
		if end, in := quietEnd(s.now, p.loc, w); in {
			keep.Status, keep.NextAttemptAt, keep.CycleStartsAt = model.StatusPending, end, end
			keep.Reason = fmt.Sprintf("waiting, not an attempt: quiet hours %s in %s (%s) until %s; the retry budget counts from then",
				w, p.loc, why, end.In(p.loc).Format("2006-01-02 15:04 MST"))
			return verdict{Decision: keep}, true
		}
	}
	if p.throttled {
		over := fmt.Sprintf("recipient %s already got %d of category %q in the last %s",
			c.Recipient, p.cat.Throttle.Max, p.category, p.cat.Throttle.Per)
		keep.Status, keep.Reason = model.StatusSkipped, "skipped (throttled), not sent: "+over
		if dg := p.cat.Throttle.Digest; dg != nil {
			if p.unfoldable != "" {
				keep.Reason = fmt.Sprintf("skipped (throttled), not sent and not folded into digest %s (%s): %s", dg.Job, p.unfoldable, over)
				return verdict{Decision: keep}, true
			}
			// The item is written with this decision, in one transaction:
			// never one without the other.
			keep.Reason = fmt.Sprintf("skipped (throttled), folded into digest %s: its next run carries it; %s", dg.Job, over)
			keep.Fold = &model.Fold{Feed: model.PersonalFeed(c.Recipient)}
		}
		return verdict{Decision: keep}, true
	}
	return verdict{}, false
}

// switchFor is whether the category reaches the recipient on c's channel,
// and which switch says so: the channel's own, else the category's on
// every channel, else the default.
func switchFor(p prefInputs, c model.Claimed) (bool, string) {
	var all, one *model.Switch
	for i, sw := range p.stored.Switches {
		if sw.Category != p.category {
			continue
		}
		switch sw.Channel {
		case "":
			all = &p.stored.Switches[i]
		case c.Channel:
			one = &p.stored.Switches[i]
		}
	}
	set := func(sw *model.Switch, where string) (bool, string) {
		return sw.Enabled, fmt.Sprintf("recipient %s turned category %q off %s (set %s by %s)",
			c.Recipient, p.category, where, sw.SetAt.UTC().Format(time.RFC3339), sw.SetBy)
	}
	switch {
	case one != nil:
		return set(one, "on channel "+c.Channel)
	case all != nil:
		return set(all, "on every channel")
	case p.cat.Off:
		return false, fmt.Sprintf("category %q is off unless the recipient turns it on, and recipient %s has not", p.category, c.Recipient)
	}
	return true, ""
}

// quietFor is the recipient's quiet hours for the category: their own for
// it, else their own for every category, else the category's default.
func quietFor(p prefInputs) (QuietWindow, string, bool) {
	var all *model.QuietHours
	for i, q := range p.stored.Quiet {
		switch q.Category {
		case p.category:
			return QuietWindow{q.Start, q.End}, fmt.Sprintf("set %s by %s", q.SetAt.UTC().Format(time.RFC3339), q.SetBy), true
		case "":
			all = &p.stored.Quiet[i]
		}
	}
	if all != nil {
		return QuietWindow{all.Start, all.End}, fmt.Sprintf("set for every category %s by %s", all.SetAt.UTC().Format(time.RFC3339), all.SetBy), true
	}
	if p.cat.Quiet != nil {
		return *p.cat.Quiet, fmt.Sprintf("category %q's default", p.category), true
	}
	return QuietWindow{}, "", false
}

// quietEnd says whether now falls in the window, read on the wall clock of
// loc, and when it ends: the next local time End after now (time.Date
// normalises a time a DST change skips).
func quietEnd(now time.Time, loc *time.Location, w QuietWindow) (time.Time, bool) {
	l := now.In(loc)
	m := l.Hour()*60 + l.Minute()
	in := m >= w.Start && m < w.End
	if w.End < w.Start { // across midnight
		in = m >= w.Start || m < w.End
	}
	if !in {
		return time.Time{}, false
	}
	end := time.Date(l.Year(), l.Month(), l.Day(), w.End/60, w.End%60, 0, 0, loc)
	if !end.After(now) {
		end = time.Date(l.Year(), l.Month(), l.Day()+1, w.End/60, w.End%60, 0, 0, loc)
	}
	return end, true
}

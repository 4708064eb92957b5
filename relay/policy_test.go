package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// The delivery policy as a table: each row is a sentence of the README's
// guarantees, the situation it speaks of, and what must follow.
func TestPolicy(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pol := Policy{MaxAttempts: 3, MaxAge: time.Hour, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	fresh := model.Claimed{ID: 1, Type: "payment.succeeded", Attempt: 1, CycleAttempts: 1, CycleStartedAt: now, Channel: "email"}
	base := situation{c: fresh, mode: AtLeastOnce, pol: pol, routeLen: 1, provider: "p", leaseLeft: time.Minute, now: now}
	result := func(o providers.Outcome, permanent bool) *providers.Result {
		return &providers.Result{Outcome: o, Permanent: permanent, Detail: "the detail"}
	}
	with := func(f func(*situation)) situation { s := base; f(&s); return s }

	type want struct {
		call   bool
		status string
		in     time.Duration // next attempt in (when pending); -1: any time within the backoff
		reason string        // a part of the reason
		pinned bool
		pos    int
		// suppress is the reason of the suppression entry the decision
		// makes ("": none); its expiry is the situation's hardBounceTTL.
		suppress string
	}
	backoff := time.Duration(-1)
	rows := []struct {
		guarantee string
		s         situation
		want      want
	}{
		// Before the call.
		{"a due notification with a free provider is called", base, want{call: true}},
		{"a retry past its max age is not called: the provider may have forgotten the key",
			with(func(s *situation) { s.c.CycleStartedAt = now.Add(-pol.MaxAge - time.Second) }),
			want{status: model.StatusDead, reason: "past the max age"}},
		{"an address on its tenant's suppression list ends suppressed, not called, and the reason says why",
			with(func(s *situation) {
				s.c.Suppression = &model.Suppression{Tenant: "acme", Channel: "push", Address: "tok", Reason: model.ReasonHardBounce,
					Source: model.SourceProvider, Provider: "fcm", Notification: 7, Detail: "UNREGISTERED", CreatedAt: now.Add(-time.Hour)}
			}),
			want{status: model.StatusSuppressed, reason: "suppression list: hard_bounce (from fcm's answer, 2026-03-01T11:00:00Z, never expires): UNREGISTERED"}},
		{"a suppressed address is not called even on a notification's last allowed attempt or past its max age",
			with(func(s *situation) {
				s.c.CycleStartedAt = now.Add(-pol.MaxAge - time.Second)
				until := now.Add(time.Hour)
				s.c.Suppression = &model.Suppression{Reason: model.ReasonSoftBounce, Source: model.SourceDSN, CreatedAt: now, ExpiresAt: &until}
			}),
			want{status: model.StatusSuppressed, reason: "soft_bounce (from a delivery status notification"}},
		{"a stored message that cannot be read fails without a call",
			with(func(s *situation) { s.unreadable = "unexpected end of JSON input" }),
			want{status: model.StatusFailed, reason: "cannot be read"}},
		{"a channel no route serves waits, and that is not an attempt",
			with(func(s *situation) { s.routeLen = 0 }),
			want{status: model.StatusPending, in: noRouteWait, reason: "not an attempt: no route serves channel \"email\""}},
		{"waiting at our own gate is never an attempt: it waits until the gate opens",
			with(func(s *situation) { s.gateUntil = now.Add(700 * time.Millisecond) }),
			want{status: model.StatusPending, in: 700 * time.Millisecond, reason: "not an attempt: provider p cannot take a call"}},
		{"waiting at the gate keeps the budget, even the last attempt's",
			with(func(s *situation) { s.gateUntil = now.Add(time.Second); s.c.CycleAttempts = pol.MaxAttempts }),
			want{status: model.StatusPending, in: time.Second, reason: "not an attempt"}},
		{"waiting keeps the route position and the pin",
			with(func(s *situation) {
				s.gateUntil = now.Add(time.Second)
				s.c.RoutePos, s.c.Pinned = 1, true
				s.routeLen = 2
			}),
			want{status: model.StatusPending, in: time.Second, pinned: true, pos: 1}},
		{"a wait never outlives the max age: the notification is looked at again when it ends",
			with(func(s *situation) {
				s.c.CycleStartedAt = now.Add(-pol.MaxAge + time.Second)
				s.gateUntil = now.Add(time.Hour)
			}),
			want{status: model.StatusPending, in: time.Second + time.Millisecond, reason: "not an attempt"}},
		{"pinned to a provider no longer routed, an at-most-once type is not resent elsewhere: it ends unknown",
			with(func(s *situation) {
				s.c.Pinned, s.pinnedGone, s.provider, s.mode = true, true, "gone", AtMostOnce
			}),
			want{status: model.StatusUnknown, pinned: true, reason: "no longer lists gone"}},
		{"pinned to a provider no longer routed, an at-least-once type starts the route over, unpinned, without an attempt",
			with(func(s *situation) {
				s.c.Pinned, s.c.RoutePos, s.pinnedGone, s.provider, s.routeLen = true, 1, true, "gone", 2
				s.c.CycleAttempts = pol.MaxAttempts
			}),
			want{status: model.StatusPending, in: 0, reason: "not an attempt: its last outcome at provider gone was unknown"}},
		{"a claim whose lease ran short goes back to the queue uncalled",
			with(func(s *situation) { s.leaseLeft = 0 }),
			want{status: model.StatusPending, in: minGateWait, reason: "lease ran short"}},

		// After the answer.
		{"sent (2xx) is done", with(func(s *situation) { s.result = result(providers.Sent, false) }),
			want{status: model.StatusSent}},
		{"refused is retried with backoff", with(func(s *situation) { s.result = result(providers.Refused, false) }),
			want{status: model.StatusPending, in: backoff, reason: "refused: the detail"}},
		{"refused for good fails", with(func(s *situation) { s.result = result(providers.Refused, true) }),
			want{status: model.StatusFailed, reason: "refused for good: the detail"}},
		{"refused for good with a dead address fails and puts it on the tenant's list, a hard bounce, for good by default",
			with(func(s *situation) {
				s.result = result(providers.Refused, true)
				s.result.InvalidAddress = true
			}),
			want{status: model.StatusFailed, reason: "address invalid", suppress: model.ReasonHardBounce}},
		{"a hard bounce lasts the configured TTL when there is one",
			with(func(s *situation) {
				s.result = result(providers.Refused, true)
				s.result.InvalidAddress = true
				s.hardBounceTTL = 24 * time.Hour
			}),
			want{status: model.StatusFailed, reason: "address invalid", suppress: model.ReasonHardBounce}},
		{"refused with another provider on the route fails over at once",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.routeLen = 2 }),
			want{status: model.StatusPending, in: 0, pos: 1, reason: "failing over to provider 2 of 2"}},
		{"refused for good with another provider on the route fails over too",
			with(func(s *situation) { s.result = result(providers.Refused, true); s.routeLen = 2 }),
			want{status: model.StatusPending, in: 0, pos: 1, reason: "failing over"}},
		{"refused by every provider starts the route over after the backoff",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.routeLen = 2; s.c.RoutePos = 1 }),
			want{status: model.StatusPending, in: backoff, pos: 0}},
		{"after an unknown, a refusal never fails over: another provider could send a second copy",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.routeLen = 2; s.c.Pinned = true }),
			want{status: model.StatusPending, in: backoff, pinned: true, pos: 0}},
		{"unknown from a provider that honours keys is retried with the same key",
			with(func(s *situation) { s.result = result(providers.Unknown, false); s.honours = true; s.mode = AtMostOnce }),
			want{status: model.StatusPending, in: backoff, pinned: true, reason: "which the provider honours"}},
		{"unknown without keys, at-least-once: retried, a duplicate is possible",
			with(func(s *situation) { s.result = result(providers.Unknown, false) }),
			want{status: model.StatusPending, in: backoff, pinned: true, reason: "a duplicate is possible"}},
		{"unknown without keys, at-most-once: not resent, it ends unknown",
			with(func(s *situation) { s.result = result(providers.Unknown, false); s.mode = AtMostOnce }),
			want{status: model.StatusUnknown, pinned: true, reason: "is at-most-once"}},
		{"no usable outcome counts as unknown",
			with(func(s *situation) { s.result = result("", false); s.mode = AtMostOnce }),
			want{status: model.StatusUnknown, pinned: true}},
		{"an unknown that retrying cannot settle ends unknown without spending the budget",
			with(func(s *situation) { s.result = result(providers.Unknown, true); s.honours = true }),
			want{status: model.StatusUnknown, pinned: true, reason: "retrying cannot settle it"}},
		{"the last attempt's refusal ends dead",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.c.CycleAttempts = pol.MaxAttempts }),
			want{status: model.StatusDead, reason: "gave up after 3 attempts"}},
		{"the budget counts this cycle only (a manual retry starts a new one)",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.c.CycleAttempts, s.c.Attempt = 2, 9 }),
			want{status: model.StatusPending, in: backoff}},
		{"a failover on the last attempt ends dead",
			with(func(s *situation) {
				s.result = result(providers.Refused, false)
				s.routeLen = 2
				s.c.CycleAttempts = pol.MaxAttempts
			}),
			want{status: model.StatusDead, reason: "gave up after 3 attempts"}},
		{"Retry-After longer than the backoff wins, even past MaxDelay",
			with(func(s *situation) {
				s.result = result(providers.Refused, false)
				s.result.RetryAfter = 10 * time.Second
			}),
			want{status: model.StatusPending, in: 10 * time.Second}},
		{"Retry-After shorter than the backoff does not shorten it",
			with(func(s *situation) {
				s.result = result(providers.Refused, false)
				s.result.RetryAfter = time.Millisecond
			}),
			want{status: model.StatusPending, in: backoff}},
		{"a next attempt past the max age ends dead now",
			with(func(s *situation) { s.result = result(providers.Refused, false); s.result.RetryAfter = 2 * time.Hour }),
			want{status: model.StatusDead, reason: "max age"}},
		{"a backoff that crosses the max age ends dead",
			with(func(s *situation) {
				s.result = result(providers.Refused, false)
				s.c.CycleStartedAt = now.Add(-pol.MaxAge + 10*time.Millisecond)
			}),
			want{status: model.StatusDead, reason: "max age"}},
	}
	for _, row := range rows {
		// The jitter source is injected: the lowest and the highest draw
		// bound the backoff.
		for _, j := range []jitter{func(time.Duration) time.Duration { return 0 }, func(n time.Duration) time.Duration { return n }} {
			v := decide(row.s, j)
			w := row.want
			if v.call != w.call {
				t.Errorf("%s: call %v (%s: %s), want %v", row.guarantee, v.call, v.Status, v.Reason, w.call)
				continue
			}
			if w.call {
				continue
			}
			if v.Status != w.status || !strings.Contains(v.Reason, w.reason) || v.Pinned != w.pinned || v.RoutePos != w.pos {
				t.Errorf("%s: %s (%q) pinned=%v pos=%d, want %s (reason with %q) pinned=%v pos=%d",
					row.guarantee, v.Status, v.Reason, v.Pinned, v.RoutePos, w.status, w.reason, w.pinned, w.pos)
			}
			switch e := v.Suppress; {
			case (e != nil) != (w.suppress != ""):
				t.Errorf("%s: suppression entry %+v, want one: %v", row.guarantee, e, w.suppress != "")
			case e != nil && (e.Reason != w.suppress || e.Detail != "the detail"):
				t.Errorf("%s: suppression entry %+v, want %s with the provider's detail", row.guarantee, e, w.suppress)
			case e != nil && row.s.hardBounceTTL == 0 && e.ExpiresAt != nil:
				t.Errorf("%s: entry expires at %s, want never (no TTL)", row.guarantee, e.ExpiresAt)
			case e != nil && row.s.hardBounceTTL > 0 && (e.ExpiresAt == nil || !e.ExpiresAt.Equal(now.Add(row.s.hardBounceTTL))):
				t.Errorf("%s: entry expires at %v, want now+%s", row.guarantee, e.ExpiresAt, row.s.hardBounceTTL)
			}
			in := v.NextAttemptAt.Sub(now)
			switch {
			case w.status != model.StatusPending:
				if in != 0 {
					t.Errorf("%s: final, yet next attempt in %s", row.guarantee, in)
				}
			case w.in == backoff:
				full := min(pol.BaseDelay<<max(row.s.c.CycleAttempts-1, 0), pol.MaxDelay)
				if in < full/2 || in > full {
					t.Errorf("%s: next attempt in %s, want the backoff, within [%s, %s]", row.guarantee, in, full/2, full)
				}
			case in != w.in:
				t.Errorf("%s: next attempt in %s, want %s", row.guarantee, in, w.in)
			}
			if w.status != model.StatusSent && w.status != "" && row.s.result != nil && !strings.Contains(v.Reason, "the detail") {
				t.Errorf("%s: reason %q does not carry the provider's detail", row.guarantee, v.Reason)
			}
			if w.status == model.StatusSent && v.Reason != "" {
				t.Errorf("%s: sent with reason %q", row.guarantee, v.Reason)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	pol := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}
	for n := 1; n <= 70; n++ {
		full := min(pol.BaseDelay<<min(n-1, 20), pol.MaxDelay)
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 200 {
			b := backoff(pol, n, realJitter)
			lo, hi = min(lo, b), max(hi, b)
		}
		if lo < full/2 || hi > full {
			t.Errorf("attempt %d: backoff in [%s, %s], want within [%s, %s]", n, lo, hi, full/2, full)
		}
		if lo == hi {
			t.Errorf("attempt %d: 200 backoffs all %s: no jitter", n, lo)
		}
	}
	// Defaults fill in what a policy leaves out, and a BaseDelay above the
	// default MaxDelay raises the cap instead of inverting it.
	if p := (Policy{}).withDefaults(); p != DefaultPolicy {
		t.Errorf("zero policy with defaults: %+v, want %+v", p, DefaultPolicy)
	}
	p := Policy{BaseDelay: time.Hour}.withDefaults()
	if b := backoff(p, 1, realJitter); b < 30*time.Minute || b > time.Hour {
		t.Errorf("BaseDelay 1h: first backoff %s, want within [30m, 1h]", b)
	}
}

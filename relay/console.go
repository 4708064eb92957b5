package relay

import (
	"context"
	"fmt"

	"github.com/edgerelay/edgerelay/model"
)

// What the console asks of the relay beyond the API's reads: a retry that
// records who asked (and wakes the dispatcher), and the guarantee that
// applies to one notification. Its overview, sessions and feed memberships
// it reads from the store itself.

// RetryAs is RetryLifting without lift that records who asked (actor) with the
// notification, in the same write.
func (r *Relay) RetryAs(ctx context.Context, tenant string, id int64, actor string) error {
	if err := r.store.RetryAs(ctx, tenant, id, r.now(), actor); err != nil {
		return err
	}
	r.notify()
	return nil
}

// Guarantee is the promise that holds for n, in one sentence, from what
// the relay knows now: whether each provider that answered honours
// idempotency keys (as configured now), the delivery mode of n's type, and
// the outcomes of its attempts.
func (r *Relay) Guarantee(n model.Notification) string {
	g := guaranteeInput{status: n.Status, mode: AtLeastOnce}
	for _, k := range []string{n.Type, n.Purpose} {
		if m, ok := r.opts.Delivery[k]; ok {
			g.mode = m
			break
		}
	}
	for _, a := range n.AttemptLog {
		ga := guaranteeAttempt{provider: a.Provider, outcome: a.Outcome}
		if p := r.Provider(a.Provider); p != nil {
			ga.known, ga.honours = true, p.HonoursKeys()
		}
		g.attempts = append(g.attempts, ga)
	}
	return guarantee(g)
}

type guaranteeInput struct {
	status   string
	mode     Mode
	attempts []guaranteeAttempt
}

type guaranteeAttempt struct {
	provider, outcome string
	known, honours    bool // the provider is configured now; it honours keys
}

// guarantee is the sentence for a notification's situation. A copy may
// have reached the recipient for every attempt that was sent or whose
// outcome is unknown; such attempts count once only when they all went to
// one provider that honours keys (it dedupes on the key, within its key
// lifetime). A refusal is a definite no and counts for nothing.
func guarantee(g guaranteeInput) string {
	var maybe []guaranteeAttempt
	sent, unknown := 0, 0
	for _, a := range g.attempts {
		switch a.outcome {
		case "sent":
			sent++
			maybe = append(maybe, a)
		case "unknown":
			unknown++
			maybe = append(maybe, a)
		}
	}
	oneKeyed := len(maybe) > 0
	for _, a := range maybe {
		if !a.known || !a.honours || a.provider != maybe[0].provider {
			oneKeyed = false
		}
	}
	final := g.status == model.StatusSent || g.status == model.StatusDelivered || g.status == model.StatusBounced
	after := ""
	switch g.status {
	case model.StatusDelivered:
		after = "; the provider reports it delivered"
	case model.StatusBounced:
		after = "; the provider reports it bounced"
	}
	notConfigured := ""
	for _, a := range maybe {
		if !a.known {
			notConfigured = fmt.Sprintf(" (provider %s is not configured now, so whether it honours keys is not known)", a.provider)
			break
		}
	}
	switch {
	case len(maybe) == 0:
		switch g.status {
		case model.StatusPending, model.StatusSending:
			if len(g.attempts) > 0 {
				return "not sent yet: every call so far was refused (a definite no), so it cannot have arrived; it will be tried again"
			}
			return "not sent yet: no provider has been called"
		case model.StatusFailed, model.StatusDead:
			return "not sent: every call was refused (a definite no), so it cannot have arrived"
		}
		return "not sent: no provider accepted it"
	case len(maybe) == 1 && final:
		return "sent once: the provider accepted it and no earlier call can have delivered it" + after
	case len(maybe) == 1:
		switch g.status {
		case model.StatusUnknown:
			return "at most once: the answer to its one call that may have sent it was lost and it was not resent (" +
				string(g.mode) + ", no keys); it may not have arrived"
		case model.StatusFailed, model.StatusDead:
			return "at most once: one call's answer was lost (it may have arrived), then it was given up"
		}
		if maybe[0].known && maybe[0].honours {
			return "at most once so far: one answer was lost; the next call uses the same key, which " + maybe[0].provider + " honours"
		}
		if g.mode == AtMostOnce {
			return "at most once so far: one answer was lost" + notConfigured
		}
		return "at most once so far: one answer was lost; the next call may deliver a second copy (at-least-once, no keys)" + notConfigured
	case oneKeyed && final:
		return fmt.Sprintf("sent once: the provider honours keys, so the %d calls that may have sent it (%d with a lost answer) count once%s",
			len(maybe), unknown, after)
	case oneKeyed:
		return fmt.Sprintf("at most once: the provider honours keys, so the %d calls whose answers were lost count once; it may not have arrived", len(maybe))
	}
	times := map[int]string{2: "twice", 3: "three times"}[len(maybe)]
	if times == "" {
		times = fmt.Sprintf("%d times", len(maybe))
	}
	why := "no keys"
	if !allSame(maybe) {
		why = "through more than one provider"
	}
	if final {
		return fmt.Sprintf("maybe sent %s: retried after %s, %s%s%s", times, plural(unknown, "an unknown", "unknowns"), why, notConfigured, after)
	}
	return fmt.Sprintf("maybe sent up to %s: %s, %s%s; none confirmed", times, plural(unknown, "one answer lost", "answers lost"), why, notConfigured)
}

func allSame(as []guaranteeAttempt) bool {
	for _, a := range as {
		if a.provider != as[0].provider {
			return false
		}
	}
	return true
}

// plural is one for n == 1, else "N many".
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf("%d %s", n, many)
}

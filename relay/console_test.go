package relay

import (
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
)

// The sentence the console shows for each situation: one row per way a
// notification can stand, in the README's words.
func TestGuarantee(t *testing.T) {
	t.Parallel()
	keyed := func(outcomes ...string) []guaranteeAttempt { return attemptsBy("resend", true, true, outcomes...) }
	nokeys := func(outcomes ...string) []guaranteeAttempt { return attemptsBy("smtp", true, false, outcomes...) }
	cases := []struct {
		name string
		in   guaranteeInput
		want string
	}{
		{"new", guaranteeInput{status: model.StatusPending}, "not sent yet: no provider has been called"},
		{"refused so far", guaranteeInput{status: model.StatusPending, attempts: nokeys("refused", "refused")},
			"not sent yet: every call so far was refused (a definite no), so it cannot have arrived; it will be tried again"},
		{"refused for good", guaranteeInput{status: model.StatusFailed, attempts: nokeys("refused")},
			"not sent: every call was refused (a definite no), so it cannot have arrived"},
		{"dead after refusals", guaranteeInput{status: model.StatusDead, attempts: keyed("refused", "refused", "refused")},
			"not sent: every call was refused (a definite no), so it cannot have arrived"},
		{"sent at once", guaranteeInput{status: model.StatusSent, attempts: nokeys("sent")},
			"sent once: the provider accepted it and no earlier call can have delivered it"},
		{"sent after a 503", guaranteeInput{status: model.StatusSent, attempts: nokeys("refused", "sent")},
			"sent once: the provider accepted it and no earlier call can have delivered it"},
		{"delivered", guaranteeInput{status: model.StatusDelivered, attempts: nokeys("sent")},
			"sent once: the provider accepted it and no earlier call can have delivered it; the provider reports it delivered"},
		{"ada with keys: two lost answers, then sent", guaranteeInput{status: model.StatusSent, attempts: keyed("unknown", "unknown", "sent")},
			"sent once: the provider honours keys, so the 3 calls that may have sent it (2 with a lost answer) count once"},
		{"ada without keys, at-least-once", guaranteeInput{status: model.StatusSent, attempts: nokeys("unknown", "unknown", "sent")},
			"maybe sent three times: retried after 2 unknowns, no keys"},
		{"one lost answer without keys, then sent", guaranteeInput{status: model.StatusSent, attempts: nokeys("unknown", "sent")},
			"maybe sent twice: retried after an unknown, no keys"},
		{"ada without keys, at-most-once", guaranteeInput{status: model.StatusUnknown, mode: AtMostOnce, attempts: nokeys("unknown")},
			"at most once: the answer to its one call that may have sent it was lost and it was not resent (at-most-once, no keys); it may not have arrived"},
		{"lost answer, retry with the key next", guaranteeInput{status: model.StatusPending, attempts: keyed("unknown")},
			"at most once so far: one answer was lost; the next call uses the same key, which resend honours"},
		{"lost answer, retry without keys next", guaranteeInput{status: model.StatusPending, mode: AtLeastOnce, attempts: nokeys("unknown")},
			"at most once so far: one answer was lost; the next call may deliver a second copy (at-least-once, no keys)"},
		{"dead after lost answers with keys", guaranteeInput{status: model.StatusDead, attempts: keyed("unknown", "unknown")},
			"at most once: the provider honours keys, so the 2 calls whose answers were lost count once; it may not have arrived"},
		{"dead after lost answers without keys", guaranteeInput{status: model.StatusDead, attempts: nokeys("unknown", "unknown")},
			"maybe sent up to twice: 2 answers lost, no keys; none confirmed"},
		{"keys, but two providers (a manual retry after failover)", guaranteeInput{status: model.StatusSent,
			attempts: append(keyed("unknown"), attemptsBy("postmark", true, true, "sent")...)},
			"maybe sent twice: retried after an unknown, through more than one provider"},
		{"the provider is no longer configured", guaranteeInput{status: model.StatusSent, attempts: attemptsBy("old", false, false, "unknown", "sent")},
			"maybe sent twice: retried after an unknown, no keys (provider old is not configured now, so whether it honours keys is not known)"},
	}
	for _, c := range cases {
		if got := guarantee(c.in); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
		if strings.Contains(c.want, "\n") {
			t.Errorf("%s: not one sentence", c.name)
		}
	}
}

func attemptsBy(provider string, known, honours bool, outcomes ...string) []guaranteeAttempt {
	out := make([]guaranteeAttempt, len(outcomes))
	for i, o := range outcomes {
		out[i] = guaranteeAttempt{provider: provider, outcome: o, known: known, honours: honours}
	}
	return out
}

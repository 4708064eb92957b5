package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// opener opens a new, empty store for t.
type opener = func(t *testing.T) store.Store

// Run runs the conformance suite against the stores open makes. Every
// subtest gets its own store from open, runs in parallel with the others,
// and closes the store when it ends: open must return a new, empty store
// each time (a new file, schema or database) and leave closing to the
// suite. Subtests are grouped by the parts of model.Store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	// Dispatch and Quarantine open their stores themselves: closing makes
	// each of those close when its test ends, as runAll does for the rest.
	closing := func(t *testing.T) store.Store {
		s := open(t)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	}
	groups := []struct {
		name string
		run  func(*testing.T, opener)
	}{
		{"Events", events},
		{"Quarantine", Quarantine},
		{"Dispatch", Dispatch},
		{"Reads", reads},
		{"Receipts", receipts},
		{"Suppressions", suppressions},
		{"Audiences", audiences},
		{"Feeds", feeds},
		{"Jobs", jobs},
		{"Sources", sources},
		{"Requests", requests},
		{"Claims", claims},
		{"Leases", leases},
		{"Pauses", pauses},
		{"Tokens", tokens},
		{"UserTokens", userTokens},
		{"Secrets", secrets},
		{"Maintenance", maintenance},
		{"Preferences", preferences},
		{"Console", console},
		{"Sessions", sessions},
		{"Templates", templatesSuite},
		{"Workflows", workflowsSuite},
		{"Runs", runsSuite},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			if g.name == "Quarantine" || g.name == "Dispatch" {
				g.run(t, closing)
				return
			}
			g.run(t, open)
		})
	}
}

// Feeds: members, fan-out on read, marks, pages, unread counts (feeds.go).
func feeds(t *testing.T, open opener) {
	feedViews(t, open)
	feedReadback(t, open)
}

// Jobs: begin, finish, last run (jobs.go).
func jobs(t *testing.T, open opener) {
	jobRuns(t, open)
}

// test is one behaviour, run on a fresh store.
type test struct {
	name string
	run  func(t *testing.T, s store.Store)
	// closes: the test closes the store itself (the suite does not).
	closes bool
}

func runAll(t *testing.T, open opener, tests []test) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if !tc.closes {
				t.Cleanup(func() {
					if err := s.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				})
			}
			tc.run(t, s)
		})
	}
}

// newEvent is event id of tenant for purpose "receipt" with n targets
// r0…r(n-1) on email, every target in its first chunk. Keys are unique per
// identity and recipient, as the relay's are.
func newEvent(tenant, id string, n int) model.AcceptInput {
	return model.AcceptInput{
		Event: model.NewEvent{Tenant: tenant, EventID: id, Purpose: "receipt", Type: "payment",
			Payload: fmt.Appendf(nil, `{"id":%q,"tenant":%q}`, id, tenant), Message: []byte(`{"subject":"hi"}`),
			Fingerprint: "fp:" + tenant + "/" + id, Targets: n},
		First: targets(tenant, id, "receipt", 0, n),
	}
}

// targets are positions from to to-1 of an event's fan-out.
func targets(tenant, id, purpose string, from, to int) []model.Target {
	ts := make([]model.Target, 0, to-from)
	for i := from; i < to; i++ {
		ts = append(ts, model.Target{Key: fmt.Sprintf("%s/%s/%s/r%d/email", tenant, id, purpose, i),
			Recipient: fmt.Sprintf("r%d", i), Channel: "email", Address: fmt.Sprintf("r%d@example.com", i)})
	}
	return ts
}

// accept writes events at now; any error fails the test.
func accept(t *testing.T, s store.Store, now time.Time, in ...model.AcceptInput) []model.Accepted {
	t.Helper()
	out, errs, err := s.AcceptEvents(t.Context(), in, now)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if len(out) != len(in) || len(errs) != len(in) {
		t.Fatalf("accept of %d events: %d results, %d errors", len(in), len(out), len(errs))
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("accept event %q: %v", in[i].Event.EventID, e)
		}
	}
	return out
}

// ids are the notification ids an accept wrote, in fan-out order.
func ids(a model.Accepted) []int64 {
	out := make([]int64, len(a.Notifications))
	for i, n := range a.Notifications {
		out[i] = n.ID
	}
	return out
}

// eventKeys lists every notification of an event, in fan-out order, by key.
func eventKeys(t *testing.T, s store.Store, row int64) []string {
	t.Helper()
	ns := eventNotifications(t, s, row)
	keys := make([]string, len(ns))
	for i, n := range ns {
		keys[i] = n.Key
	}
	return keys
}

func eventNotifications(t *testing.T, s store.Store, row int64) []model.EventNotification {
	t.Helper()
	var all []model.EventNotification
	for after := -1; ; {
		ns, err := s.EventNotifications(t.Context(), row, after, 500)
		if err != nil {
			t.Fatalf("notifications of event %d: %v", row, err)
		}
		if len(ns) == 0 {
			return all
		}
		all = append(all, ns...)
		after += len(ns)
	}
}

func keysOf(ts []model.Target) []string {
	out := make([]string, len(ts))
	for i, tg := range ts {
		out[i] = tg.Key
	}
	return out
}

// everything lists every notification f matches, in id order.
func everything(t *testing.T, s store.Store, f model.ListFilter) []model.Notification {
	t.Helper()
	f.Limit = model.MaxListLimit
	var all []model.Notification
	for {
		ns, err := s.ListNotifications(t.Context(), f)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		if len(ns) == 0 {
			return all
		}
		all = append(all, ns...)
		f.After = ns[len(ns)-1].ID
	}
}

func counts(t *testing.T, s store.Store, now time.Time) map[string]int64 {
	t.Helper()
	st, err := s.Status(t.Context(), now)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st.Counts
}

// wantErr fails unless err is target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

// outcome is what settleAll makes of a claimed notification.
type outcome struct {
	status    string    // sent, failed, dead, unknown, skipped (without a call); pending (a retry at retryAt); sending (claimed, not settled)
	provider  string    // who was called; "" is "p"
	messageID string    // the provider's message id, which receipts name
	retryAt   time.Time // when a pending one is due again
}

// setupLease is the lease of a notification settleAll leaves in sending.
const setupLease = time.Minute

// settleAll is how the groups other than Dispatch bring notifications to a
// state: it claims every notification due at now and settles each with a
// call of the outcome want names for its id, at now. want must name
// exactly the notifications due at now.
func settleAll(t *testing.T, s store.Store, now time.Time, want map[int64]outcome) {
	t.Helper()
	cs := claim(t, s, model.ClaimRequest{Limit: len(want) + 1, Now: now, Lease: setupLease})
	got := claimIDs(cs)
	slices.Sort(got)
	if len(cs) != len(want) {
		t.Fatalf("setup: claimed %v at %s, want the %d named", got, now, len(want))
	}
	var ss []model.Settlement
	for _, c := range cs {
		o, ok := want[c.ID]
		if !ok {
			t.Fatalf("setup: claimed %d, not named (claimed %v)", c.ID, got)
		}
		if o.status == model.StatusSending {
			continue
		}
		if o.provider == "" {
			o.provider = "p"
		}
		a := model.Attempt{N: c.Attempt, Provider: o.provider, StartedAt: now, EndedAt: now, Outcome: "refused", HTTPStatus: 503,
			MessageID: o.messageID}
		d := model.Decision{Status: o.status, NextAttemptAt: now, Reason: o.status + " in setup"}
		switch o.status {
		case model.StatusSent:
			a.Outcome, a.HTTPStatus, a.Response, d.Reason = "sent", 202, "accepted", ""
		case model.StatusFailed:
			a.Permanent, a.HTTPStatus = true, 400
		case model.StatusUnknown:
			a.Outcome, a.HTTPStatus = "unknown", 504
		case model.StatusPending:
			d.NextAttemptAt = o.retryAt
		case model.StatusDead:
		case model.StatusSkipped: // a preference forbade it: no call
			ss = append(ss, model.Settlement{ID: c.ID, Token: c.Token, At: now, Decision: d})
			continue
		default:
			t.Fatalf("setup: no outcome %q", o.status)
		}
		ss = append(ss, model.Settlement{ID: c.ID, Token: c.Token, At: now, Attempt: &a, Decision: d})
	}
	if len(ss) == 0 {
		return
	}
	applied, err := s.Settle(t.Context(), ss)
	if err != nil {
		t.Fatalf("setup: settle: %v", err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("setup: settlement of %d not applied", ss[i].ID)
		}
	}
}

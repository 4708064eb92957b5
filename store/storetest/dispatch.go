package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Dispatch states what the relay relies on in the life of a claim: claim,
// settle (a call recorded, a claim released without one, given up), expired
// leases, retry, and the fence that keeps a process whose lease was taken
// over from changing anything.
func Dispatch(t *testing.T, open func(t *testing.T) store.Store) {
	dispatchClaims(t, open)
	dispatchSettlements(t, open)
	dispatchLeases(t, open)
}

// dispatchClaims: claims, their filters, and what a recorded or released call spends.
func dispatchClaims(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("claim takes due rows oldest first, each once, with a lease", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		accepted := dispatchEvent(t, s, "e", 3, "email")
		cs := claim(t, s, model.ClaimRequest{Limit: 2, Now: t0, Lease: time.Minute})
		if len(cs) != 2 || cs[0].ID != accepted[0] || cs[1].ID != accepted[1] {
			t.Fatalf("claimed %v, want the first two of %v", claimIDs(cs), accepted)
		}
		c := cs[0]
		if c.Attempt != 1 || c.CycleAttempts != 1 || c.EventID != "e" || c.Purpose != "receipt" || c.Tenant != "default" ||
			string(c.Message) != `{"subject":"hi"}` || !c.LeaseUntil.Equal(t0.Add(time.Minute)) || !c.ClaimedAt.Equal(t0) ||
			!c.CreatedAt.Equal(t0) {
			t.Errorf("claimed %+v", c)
		}
		if cs[0].Token == cs[1].Token && cs[0].ID == cs[1].ID {
			t.Errorf("two claims share a token")
		}
		rest := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute})
		if len(rest) != 1 || rest[0].ID != accepted[2] {
			t.Fatalf("second claim %v, want only %d: a leased row is claimed once", claimIDs(rest), accepted[2])
		}
		if more := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0.Add(time.Hour), Lease: time.Minute}); len(more) != 0 {
			t.Fatalf("claimed %v rows in sending, even after their leases ended", claimIDs(more))
		}
		due, later, sending, err := s.Live(ctx, t0)
		if err != nil || due != 0 || later != 0 || sending != 3 {
			t.Errorf("Live: %d %d %d %v, want 3 sending", due, later, sending, err)
		}
	})

	t.Run("a claim says when its row came due", func(t *testing.T) {
		s := open(t)
		dispatchEvent(t, s, "e", 1, "email")
		late := t0.Add(90 * time.Second)
		cs := claim(t, s, model.ClaimRequest{Limit: 1, Now: late, Lease: time.Minute})
		if len(cs) != 1 || !cs[0].DueAt.Equal(t0) || !cs[0].ClaimedAt.Equal(late) {
			t.Fatalf("claimed %+v, want it due at %s and claimed at %s (the dispatcher's lag is the difference)", cs, t0, late)
		}
	})

	t.Run("claim filters by channel", func(t *testing.T) {
		s := open(t)
		dispatchEvent(t, s, "e", 6, "email", "sms", "push")
		channels := func(cs []model.Claimed) string {
			var out []string
			for _, c := range cs {
				out = append(out, c.Channel)
			}
			slices.Sort(out)
			return strings.Join(out, " ")
		}
		if got := channels(claim(t, s, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute, Filter: model.ClaimFilter{Only: []string{"sms"}}})); got != "sms sms" {
			t.Errorf("only sms: %q", got)
		}
		if got := channels(claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute, Filter: model.ClaimFilter{Exclude: []string{"email"}}})); got != "push" {
			t.Errorf("one, excluding email: %q", got)
		}
		if got := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute, Filter: model.ClaimFilter{Only: []string{}}}); len(got) != 0 {
			t.Errorf("an empty Only claimed %q", channels(got))
		}
		if got := channels(claim(t, s, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute, Filter: model.ClaimFilter{Only: []string{"email", "push"}, Exclude: []string{"push"}}})); got != "email email" {
			t.Errorf("email and push less push: %q", got)
		}
	})

	t.Run("a recorded call counts, and the audit trail keeps it", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		dispatchEvent(t, s, "e", 1, "email")
		c := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})[0]
		a := model.Attempt{N: c.Attempt, Provider: "p", StartedAt: t0, EndedAt: t0.Add(time.Second), Outcome: "refused",
			HTTPStatus: 503, Response: "busy", Detail: "503 Service Unavailable"}
		d := model.Decision{Status: model.StatusPending, NextAttemptAt: t0.Add(time.Minute), Reason: "refused: 503; next attempt in 1m"}
		if !settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: a.EndedAt, Attempt: &a, Decision: d}) {
			t.Fatal("a current claim's settlement was not applied")
		}
		n := notification(t, s, c.ID)
		if n.Status != model.StatusPending || n.Attempts != 1 || n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(d.NextAttemptAt) ||
			n.Provider != "p" || n.Reason != d.Reason || len(n.AttemptLog) != 1 {
			t.Fatalf("after the record: %+v", n)
		}
		if got := n.AttemptLog[0]; got.Outcome != "refused" || got.HTTPStatus != 503 || got.Response != "busy" ||
			got.Decision != "pending: refused: 503; next attempt in 1m" || !got.StartedAt.Equal(t0) {
			t.Errorf("attempt row %+v", got)
		}
		// Not due before its time; then claimed as attempt 2.
		if cs := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(59 * time.Second), Lease: time.Minute}); len(cs) != 0 {
			t.Fatalf("claimed before its next attempt: %v", claimIDs(cs))
		}
		if next, ok, err := s.NextDue(ctx); err != nil || !ok || !next.Equal(d.NextAttemptAt) {
			t.Errorf("NextDue: %s %v %v, want %s", next, ok, err, d.NextAttemptAt)
		}
		c2 := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(time.Minute), Lease: time.Minute})
		if len(c2) != 1 || c2[0].Attempt != 2 || c2[0].CycleAttempts != 2 || c2[0].Token == c.Token {
			t.Fatalf("second claim %+v", c2)
		}
	})

	t.Run("a claim released without a call spends nothing", func(t *testing.T) {
		s := open(t)
		dispatchEvent(t, s, "e", 1, "email")
		c := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})[0]
		wait := model.Decision{Status: model.StatusPending, NextAttemptAt: t0.Add(2 * time.Second), Reason: "waiting, not an attempt: the gate"}
		if !settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Decision: wait}) {
			t.Fatal("release not applied")
		}
		n := notification(t, s, c.ID)
		if n.Status != model.StatusPending || n.Attempts != 0 || len(n.AttemptLog) != 0 || !n.NextAttemptAt.Equal(wait.NextAttemptAt) {
			t.Fatalf("after a release: %+v", n)
		}
		again := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(2 * time.Second), Lease: time.Minute})
		if len(again) != 1 || again[0].Attempt != 1 || again[0].CycleAttempts != 1 {
			t.Fatalf("claimed again %+v, want attempt 1 still", again)
		}
		// Giving up without a call ends it, with no attempt.
		dead := model.Decision{Status: model.StatusDead, NextAttemptAt: t0, Reason: "past the max age"}
		settle(t, s, model.Settlement{ID: c.ID, Token: again[0].Token, At: t0, Decision: dead})
		if n := notification(t, s, c.ID); n.Status != model.StatusDead || n.Attempts != 0 || n.Reason != "past the max age" {
			t.Errorf("given up: %+v", n)
		}
	})
}

// dispatchSettlements: the fence, and the provider a claim records.
func dispatchSettlements(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("a settlement under a replaced claim changes nothing", func(t *testing.T) {
		s := open(t)
		dispatchEvent(t, s, "e", 1, "email")
		old := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Second})[0]
		// The lease expires; another process settles it as unknown and
		// claims it again.
		exp := expired(t, s, t0.Add(2*time.Second))
		if len(exp) != 1 || exp[0].Token != old.Token {
			t.Fatalf("expired leases %+v", exp)
		}
		un := model.Attempt{N: exp[0].Attempt, Provider: "p", StartedAt: t0, EndedAt: t0.Add(2 * time.Second), Outcome: "unknown", Detail: "lease expired"}
		retryNow := model.Decision{Status: model.StatusPending, NextAttemptAt: t0.Add(2 * time.Second), Pinned: true}
		if !settle(t, s, model.Settlement{ID: old.ID, Token: exp[0].Token, At: un.EndedAt, Attempt: &un, Recovered: true, Decision: retryNow}) {
			t.Fatal("the recovery was not applied")
		}
		// A second process settling the same lease: nothing, not even a row.
		if settle(t, s, model.Settlement{ID: old.ID, Token: exp[0].Token, At: un.EndedAt, Attempt: &un, Recovered: true, Decision: retryNow}) {
			t.Fatal("the same expired lease was settled twice")
		}
		now := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(2 * time.Second), Lease: time.Minute})[0]
		// Pinned after an unknown, to the provider of that attempt, by name.
		if !now.Pinned || now.LastProvider != "p" {
			t.Fatalf("claimed after an unknown: pinned %v to %q, want pinned to p", now.Pinned, now.LastProvider)
		}
		// The first process's late answer: kept in the audit trail, applied
		// to nothing.
		late := model.Attempt{N: old.Attempt, Provider: "p", StartedAt: t0, EndedAt: t0.Add(3 * time.Second), Outcome: "sent"}
		if settle(t, s, model.Settlement{ID: old.ID, Token: old.Token, At: late.EndedAt, Attempt: &late,
			Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: late.EndedAt}}) {
			t.Fatal("a late answer under a replaced claim was applied")
		}
		// A release under the old token is refused as well.
		if settle(t, s, model.Settlement{ID: old.ID, Token: old.Token, At: late.EndedAt,
			Decision: model.Decision{Status: model.StatusPending, NextAttemptAt: late.EndedAt}}) {
			t.Fatal("a release under a replaced claim was applied")
		}
		n := notification(t, s, old.ID)
		if n.Status != model.StatusSending || n.Attempts != 1 || len(n.AttemptLog) != 2 {
			t.Fatalf("after stale settlements: %s, %d attempts, log %+v; want sending under the new claim, 1 attempt, 2 rows",
				n.Status, n.Attempts, n.AttemptLog)
		}
		if n.AttemptLog[1].Outcome != "sent" || !strings.Contains(n.AttemptLog[1].Decision, "not applied") {
			t.Errorf("the late answer's row: %+v", n.AttemptLog[1])
		}
		// The current claim settles normally.
		ok := model.Attempt{N: now.Attempt, Provider: "p", StartedAt: t0.Add(2 * time.Second), EndedAt: t0.Add(3 * time.Second), Outcome: "sent"}
		if !settle(t, s, model.Settlement{ID: old.ID, Token: now.Token, At: ok.EndedAt, Attempt: &ok,
			Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: ok.EndedAt}}) {
			t.Fatal("the current claim's record was not applied")
		}
		if n := notification(t, s, old.ID); n.Status != model.StatusSent || n.Attempts != 2 {
			t.Errorf("final: %s after %d attempts", n.Status, n.Attempts)
		}
	})

	t.Run("a claim records the provider each call goes to, and expired leases return it", func(t *testing.T) {
		s := open(t)
		routes := &model.ClaimRoutes{
			Default: map[string][]string{"email": {"a", "b"}, "*": {"star"}},
			Tenant: map[string]map[string][]string{
				"acme":        {"sms": {"s1", "s2", "s3"}, "*": {"acme-star"}, "push": {}},
				`we"ird.t[0]`: {"e.m\"a'il": {"odd"}},
			},
		}
		type row struct {
			tenant, channel string
			pos             int
			pinned          bool
			last            string
			want            string
		}
		rows := []row{
			{"default", "email", 0, false, "", "a"},
			{"default", "email", 1, false, "", "b"},
			{"default", "email", 5, false, "", "a"}, // past the end: the route starts over
			{"default", "email", 1, true, "gone", "gone"},
			{"default", "sms", 0, false, "", "star"},
			{"acme", "sms", 2, false, "", "s3"},
			{"acme", "sms", 1, true, "s1", "s1"},
			{"acme", "email", 1, false, "", "b"}, // the default route for the channel before the tenant's "*"
			{"acme", "chat", 0, false, "", "acme-star"},
			{"acme", "push", 0, false, "", ""}, // a route that exists and is empty: no provider
			{`we"ird.t[0]`, "e.m\"a'il", 0, false, "", "odd"},
			{`we"ird.t[0]`, "email", 0, false, "", "a"},
		}
		ids := map[int64]row{}
		for i, r := range rows {
			ev := model.NewEvent{Tenant: r.tenant, EventID: fmt.Sprint("e", i), Purpose: "receipt", Type: "payment", Payload: []byte(`{}`),
				Message: []byte(`{}`), Fingerprint: fmt.Sprint("fp", i), Targets: 1}
			id := acceptOne(t, s, ev, []model.Target{{Key: fmt.Sprint("k", i), Recipient: "u", Channel: r.channel, Address: "u@example.com"}})[0]
			ids[id] = r
		}
		// Put each at its route position and pin: a recorded attempt at
		// its last provider.
		for _, c := range claim(t, s, model.ClaimRequest{Limit: 100, Now: t0, Lease: time.Minute}) {
			if c.Provider != "" {
				t.Errorf("a claim without routes recorded provider %q", c.Provider)
			}
			r := ids[c.ID]
			a := model.Attempt{N: 1, Provider: r.last, StartedAt: t0, EndedAt: t0, Outcome: "refused"}
			settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a,
				Decision: model.Decision{Status: model.StatusPending, NextAttemptAt: t0, RoutePos: r.pos, Pinned: r.pinned}})
		}
		cs := claim(t, s, model.ClaimRequest{Limit: 100, Now: t0, Lease: time.Minute, Routes: routes})
		if len(cs) != len(rows) {
			t.Fatalf("claimed %d of %d", len(cs), len(rows))
		}
		for _, c := range cs {
			r := ids[c.ID]
			if c.Provider != r.want || c.Provider != routes.Provider(c.Tenant, c.Channel, c.RoutePos, c.Pinned, c.LastProvider) {
				t.Errorf("%+v: claimed for provider %q, want %q (ClaimRoutes.Provider: %q)", r, c.Provider, r.want,
					routes.Provider(c.Tenant, c.Channel, c.RoutePos, c.Pinned, c.LastProvider))
			}
		}
		ex := expired(t, s, t0.Add(2*time.Minute))
		if len(ex) != len(rows) {
			t.Fatalf("%d expired leases, want %d", len(ex), len(rows))
		}
		for _, c := range ex {
			if r := ids[c.ID]; c.Provider != r.want {
				t.Errorf("%+v: expired lease names provider %q, want %q", r, c.Provider, r.want)
			}
		}
	})
}

// dispatchLeases: expired leases, retries and receipts that come before their send.
func dispatchLeases(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("expired leases are those whose lease ended", func(t *testing.T) {
		s := open(t)
		dispatchEvent(t, s, "e", 2, "email")
		claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})
		claim(t, s, model.ClaimRequest{Limit: 1, Now: t0.Add(30 * time.Second), Lease: time.Minute})
		if ex := expired(t, s, t0.Add(59*time.Second)); len(ex) != 0 {
			t.Fatalf("%d expired early", len(ex))
		}
		if ex := expired(t, s, t0.Add(61*time.Second)); len(ex) != 1 || ex[0].EventID != "e" || ex[0].Purpose != "receipt" {
			t.Fatalf("expired at +61s: %+v", ex)
		}
		if ex := expired(t, s, t0.Add(2*time.Minute)); len(ex) != 2 || !ex[0].LeaseUntil.Before(ex[1].LeaseUntil) {
			t.Fatalf("expired at +2m: %+v, want both, oldest lease first", ex)
		}
	})

	t.Run("retry puts a final notification back with a fresh budget", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		ids := dispatchEvent(t, s, "e", 2, "email")
		cs := claim(t, s, model.ClaimRequest{Limit: 2, Now: t0, Lease: time.Minute})
		record(t, s, cs[0], "sent", model.StatusSent)
		record(t, s, cs[1], "refused", model.StatusFailed)
		var se *model.StateError
		if err := s.Retry(ctx, "", ids[0], false, t0); !errors.As(err, &se) || se.Status != model.StatusSent {
			t.Errorf("retry of a sent notification: %v, want a StateError", err)
		}
		if err := s.Retry(ctx, "", 99999, false, t0); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("retry of a missing notification: %v", err)
		}
		if err := s.Retry(ctx, "other", ids[1], false, t0); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("retry across tenants: %v, want ErrNotFound", err)
		}
		later := t0.Add(time.Hour)
		if err := s.Retry(ctx, "default", ids[1], false, later); err != nil {
			t.Fatal(err)
		}
		re := claim(t, s, model.ClaimRequest{Limit: 10, Now: later, Lease: time.Minute})
		if len(re) != 1 || re[0].Attempt != 2 || re[0].CycleAttempts != 1 || !re[0].CycleStartedAt.Equal(later) {
			t.Fatalf("after retry claimed %+v", re)
		}
	})

	t.Run("a receipt that came before its send applies when the send is recorded", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		dispatchEvent(t, s, "e", 1, "email")
		if _, err := s.AddReceipts(ctx, []model.Receipt{{Provider: "p", Dedupe: "r1", MessageID: "m-1", Status: "delivered"}}, t0); err != nil {
			t.Fatal(err)
		}
		c := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})[0]
		a := model.Attempt{N: 1, Provider: "p", StartedAt: t0, EndedAt: t0, Outcome: "sent", MessageID: "m-1"}
		settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: t0}})
		if n := notification(t, s, c.ID); n.Status != model.StatusDelivered || n.ProviderMessageID != "m-1" || len(n.Receipts) != 1 {
			t.Errorf("after the send: %s, message id %q, receipts %+v; want delivered", n.Status, n.ProviderMessageID, n.Receipts)
		}
	})
}

// t0 is the suite's clock: whole milliseconds, as stores keep time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// dispatchEvent accepts one event with n notifications on the channels
// given in turn, and returns their ids in fan-out order.
func dispatchEvent(t *testing.T, s store.Store, id string, n int, channels ...string) []int64 {
	t.Helper()
	ev := model.NewEvent{Tenant: "default", EventID: id, Purpose: "receipt", Type: "payment", Payload: []byte(`{}`),
		Message: []byte(`{"subject":"hi"}`), Fingerprint: "fp-" + id, Targets: n}
	var ts []model.Target
	for i := range n {
		ts = append(ts, model.Target{Key: fmt.Sprintf("%s-%d", id, i), Recipient: fmt.Sprintf("r%d", i),
			Channel: channels[i%len(channels)], Address: fmt.Sprintf("r%d@example.com", i)})
	}
	return acceptOne(t, s, ev, ts)
}

// dispatchEventFor accepts one tenant's event with one sms notification to
// phone.
func dispatchEventFor(t *testing.T, s store.Store, tenant, id, phone string) int64 {
	t.Helper()
	ev := model.NewEvent{Tenant: tenant, EventID: id, Purpose: "otp", Type: "otp", Payload: []byte(`{}`),
		Message: []byte(`{"body":"123"}`), Fingerprint: "fp-" + id, Targets: 1}
	return acceptOne(t, s, ev, []model.Target{{Key: tenant + "-" + id, Recipient: "u", Channel: "sms", Address: phone}})[0]
}

func acceptOne(t *testing.T, s store.Store, ev model.NewEvent, ts []model.Target) []int64 {
	t.Helper()
	accs, errs, err := s.AcceptEvents(context.Background(), []model.AcceptInput{{Event: ev, First: ts}}, t0)
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, n := range accs[0].Notifications {
		ids = append(ids, n.ID)
	}
	return ids
}

func claim(t *testing.T, s store.Store, req model.ClaimRequest) []model.Claimed {
	t.Helper()
	cs, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func claimIDs(cs []model.Claimed) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func expired(t *testing.T, s store.Store, now time.Time) []model.Claimed {
	t.Helper()
	cs, err := s.ExpiredLeases(context.Background(), now, 100)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func settle(t *testing.T, s store.Store, st model.Settlement) bool {
	t.Helper()
	applied, err := s.Settle(context.Background(), []model.Settlement{st})
	if err != nil {
		t.Fatal(err)
	}
	return applied[0]
}

// record settles c with a call of this outcome and status.
func record(t *testing.T, s store.Store, c model.Claimed, outcome, status string) {
	t.Helper()
	a := model.Attempt{N: c.Attempt, Provider: "p", StartedAt: t0, EndedAt: t0, Outcome: outcome}
	if !settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a, Decision: model.Decision{Status: status, NextAttemptAt: t0}}) {
		t.Fatalf("record of %d not applied", c.ID)
	}
}

// release sends c back to the queue, due at next, without a call.
func release(t *testing.T, s store.Store, c model.Claimed, next time.Time) {
	t.Helper()
	if !settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Decision: model.Decision{Status: model.StatusPending, NextAttemptAt: next}}) {
		t.Fatalf("release of %d not applied", c.ID)
	}
}

func notification(t *testing.T, s store.Store, id int64) model.Notification {
	t.Helper()
	n, err := s.Notification(context.Background(), "", id, "")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

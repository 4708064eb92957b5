package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
)

// Hole 2: a provider call must never outlive its lease. Two dispatchers on
// one file, short leases, slow providers that do not honour keys, more due
// notifications than workers, a bounded "*" route beside an unbounded
// channel of its own:
// every address gets its message once. (Before: the plan handed out the
// bounded route's capacity twice, claims waited for worker slots while
// their leases ran, and a call's deadline counted from its own start, so the
// other dispatcher settled live calls as unknown and sent them again.)
func TestTwoDispatchersShortLeasesSendOnce(t *testing.T) {
	t.Parallel()
	slow := sim.Rule{To: "*", Action: sim.ActionSlow, Delay: 1600 * time.Millisecond}
	email, chat := setupSim(t, false, slow), setupSim(t, false, slow)
	path := t.TempDir() + "/relay.db"
	// Each process may have 3 email calls of 1.6 s in flight, so a claim
	// that waited for a worker (the old bug) waited up to 24/3 x 1.6 s =
	// 12.8 s, twice the lease; the lease less its margin (4.5 s) leaves the
	// new code 2.9 s between a claim and its answer, which a loaded
	// scheduler does not eat (it did eat the 650 ms a 3 s lease left).
	lease := 6 * time.Second
	if raceEnabled() {
		lease = 9 * time.Second
	}
	opts := func() Options {
		pe, pc := email.provider(t, "none"), chat.provider(t, "none", "&name=chat-sim")
		return Options{Workers: 4, Lease: lease, Poll: 20 * time.Millisecond,
			Routes: Routes{"*": {pe}, "chat": {pc}}, Limits: map[string]Limit{pe.Name(): {Concurrency: 3}},
			Retry: Policy{MaxAttempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}
	}
	a, b := setupRelayAt(t, path, opts()), setupRelayAt(t, path, opts())
	const n = 24
	var rcpts []Recipient
	for i := range n {
		rcpts = append(rcpts, Recipient{ID: fmt.Sprint("u", i), Email: fmt.Sprintf("u%d@example.com", i),
			Addresses: map[string]string{"chat": fmt.Sprintf("u%d@chat.example", i)}})
	}
	accept(t, a, Event{ID: "evt", Type: "notice", Recipients: rcpts, Body: "hello"})
	for _, r := range []*Relay{a, b} {
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, bound, "every notification final", func() bool {
		c := counts(t, a)
		return c[model.StatusPending]+c[model.StatusSending] == 0
	})
	for _, r := range []*Relay{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.Stop(ctx)
		cancel()
	}
	if c := counts(t, a); c[model.StatusSent] != 2*n {
		t.Errorf("counts %v, want all %d sent", c, 2*n)
	}
	for i := range n {
		if got := email.srv.Counts()[fmt.Sprintf("u%d@example.com", i)]; got != 1 {
			t.Errorf("u%d@example.com received %d emails, want 1", i, got)
		}
		if got := chat.srv.Counts()[fmt.Sprintf("u%d@chat.example", i)]; got != 1 {
			t.Errorf("u%d@chat.example received %d messages, want 1", i, got)
		}
	}
	// No call outlived its lease: no attempt was settled as a crash.
	st, _ := a.store.Status(context.Background(), a.now())
	for p, o := range st.Providers {
		if o["unknown"] != 0 {
			t.Errorf("provider %s: %d unknown outcomes, want none (a lease expired under a live call)", p, o["unknown"])
		}
	}
}

// Hole 3: waiting at our own gate (a provider limited to a few calls a
// second) is never an attempt and never ends a notification. A tenant's
// route is not in the dispatcher's plan, so every one of its notifications
// is claimed at once and meets the closed gate; with max_attempts 2 and a
// short lease, all of them must still go out with one attempt each.
func TestGateWaitIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	s := setupSim(t, false)
	p := s.provider(t, "none")
	// The gate lets 4 calls a second through, so a claim that waited at it
	// would wait up to 30/4 = 7.5 s, past the 5 s lease; a call that does
	// not wait has 3.75 s of it (a 1 s lease left 750 ms, which a loaded
	// scheduler ate).
	lease := 5 * time.Second
	r := setupRelay(t, Options{Workers: 16, Lease: lease,
		Routes: Routes{"*": {providers.NewLog(discard{}, "log://discard")}}, TenantRoutes: map[string]Routes{"acme": {"email": {p}}},
		Limits: map[string]Limit{p.Name(): {Rate: 4, Burst: 1}},
		Retry:  Policy{MaxAttempts: 2, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}})
	const n = 30
	for i := range n {
		ev := receipt(fmt.Sprint("evt_", i), Recipient{ID: "u", Email: fmt.Sprintf("u%d@example.com", i)})
		ev.Tenant = "acme"
		accept(t, r, ev)
	}
	sum := runIdle(t, r, 5*time.Second)
	if sum.Sent != n || sum.Dead != 0 || sum.Attempts != n {
		t.Fatalf("summary %+v, want all %d sent with one attempt each", sum, n)
	}
	for id := int64(1); id <= n; id++ {
		if nt := notification(t, r, id); nt.Status != model.StatusSent || len(nt.AttemptLog) != 1 {
			t.Errorf("notification %d: %s after %d attempts, want sent after 1", id, nt.Status, len(nt.AttemptLog))
		}
	}
	if s.srv.Requests() != n {
		t.Errorf("the provider got %d requests, want %d", s.srv.Requests(), n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Hole 1, the spin: a fan-out whose stored payload gives fewer
// notifications than the event was accepted with never advances; it used
// to be retried for ever (and the dispatcher, whose context has no end,
// spun on it and claimed nothing). Now it is quarantined and the rest flows.
func TestFanOutThatDoesNotAdvanceIsQuarantined(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	r := setupRelayAt(t, path, Options{Routes: Routes{"*": {providers.NewLog(discard{}, "log://discard")}}})
	res := accept(t, r, receipt("evt_short", ada, Recipient{ID: "ben", Email: "ben@example.com"}))
	accept(t, r, receipt("evt_other", Recipient{ID: "cy", Email: "cy@example.com"}))
	// The event row claims 4 notifications; its payload gives 2.
	db := faultDB(t, path)
	execSQL(t, db, fmt.Sprintf(`UPDATE events SET targets = 4 WHERE id = %d`, res.EventRow))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sum, err := r.RunUntilIdle(ctx, time.Second)
	if err != nil || sum.Sent != 3 || sum.Quarantined != 1 {
		t.Fatalf("RunUntilIdle: %+v, %v; want the 3 notifications sent and the event quarantined", sum, err)
	}
	qs, err := r.store.QuarantinedEvents(context.Background(), "", 0, 10)
	if err != nil || len(qs) != 1 || qs[0].EventRow != res.EventRow || qs[0].Targets != 4 {
		t.Fatalf("quarantined %+v, %v", qs, err)
	}
	if want := "its stored payload gives 2 notifications, but it was accepted with 4"; qs[0].Reason != want {
		t.Errorf("reason %q, want %q", qs[0].Reason, want)
	}
	if n := notification(t, r, res.Notifications[0].ID); n.Quarantine == nil || n.Quarantine.EventRow != res.EventRow {
		t.Errorf("show of its notification: quarantine %+v", n.Quarantine)
	}
}

// Hole 6, expiry: a dead-address answer keeps the address on the
// suppression list for HardBounceTTL when one is set; afterwards the
// address is tried again.
func TestAddressMarkExpires(t *testing.T) {
	t.Parallel()
	var clk clock
	calls := 0
	p := &funcProvider{func(m *providers.Message) providers.Result {
		calls++
		return providers.Result{Outcome: providers.Refused, Permanent: true, InvalidAddress: true, Detail: "UNREGISTERED"}
	}}
	r := setupRelay(t, Options{Now: clk.now, HardBounceTTL: time.Hour, Routes: Routes{"push": {p}}})
	push := func(id string) {
		accept(t, r, Event{ID: id, Type: "t", Channels: []string{"push"}, Recipients: []Recipient{{ID: "u", DeviceToken: "tok"}}})
		runIdle(t, r, 0)
	}
	push("e1")
	clk.advance(59 * time.Minute)
	push("e2")
	if calls != 1 {
		t.Fatalf("%d calls within the mark's hour, want 1", calls)
	}
	marks, _ := r.Suppressions(context.Background(), model.SuppressionFilter{})
	if len(marks) != 1 || marks[0].ExpiresAt == nil || !marks[0].ExpiresAt.Equal(marks[0].CreatedAt.Add(time.Hour)) {
		t.Fatalf("marks %+v", marks)
	}
	clk.advance(2 * time.Minute)
	if marks, _ := r.Suppressions(context.Background(), model.SuppressionFilter{}); len(marks) != 0 {
		t.Errorf("an expired mark is still listed: %+v", marks)
	}
	push("e3")
	if calls != 2 {
		t.Errorf("%d calls after the mark expired, want 2", calls)
	}
}

// funcProvider is a provider made of a function, named "func".
type funcProvider struct {
	send func(m *providers.Message) providers.Result
}

func (*funcProvider) Name() string      { return "func" }
func (*funcProvider) HonoursKeys() bool { return false }
func (f *funcProvider) Send(_ context.Context, m *providers.Message) providers.Result {
	return f.send(m)
}

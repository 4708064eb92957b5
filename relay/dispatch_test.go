package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
)

func idempotency(honour bool) string {
	if honour {
		return "honoured"
	}
	return "none"
}

// deliverToAda accepts one receipt for ada, routes email to the simulator
// and runs until idle. It returns the notification as it ended.
type deliverCase struct {
	honour bool // the simulator honours keys, and the route says so
	mode   Mode
	retry  Policy // zero: fastRetry
	rules  []sim.Rule
}

func deliverToAda(t *testing.T, c deliverCase) (*simBundle, *Relay, model.Notification, Summary) {
	t.Helper()
	s := setupSim(t, c.honour, c.rules...)
	opts := Options{Routes: Routes{"email": {s.provider(t, idempotency(c.honour))}}, Retry: c.retry}
	if c.mode != "" {
		opts.Delivery = map[string]Mode{"payment.succeeded": c.mode}
	}
	r := setupRelay(t, opts)
	res := accept(t, r, receipt("evt_501", ada))
	sum := runIdle(t, r, 5*time.Second)
	return s, r, notification(t, r, res.Notifications[0].ID), sum
}

func outcomes(n model.Notification) []string {
	var out []string
	for _, a := range n.AttemptLog {
		out = append(out, a.Outcome)
	}
	return out
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		c          deliverCase
		status     string
		outcomes   []string // of each attempt, in order
		deliveries int      // emails ada really received
		reason     string   // substring of the notification's reason
	}{
		{"503 then ok", deliverCase{honour: true, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionRefuse, Status: 503}}},
			model.StatusSent, []string{"refused", "sent"}, 1, ""},
		{"429 then ok", deliverCase{honour: false, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionRefuse, Status: 429}}},
			model.StatusSent, []string{"refused", "sent"}, 1, ""},
		{"reject 422", deliverCase{honour: true, rules: []sim.Rule{
			{To: "*", Action: sim.ActionReject, Status: 422}}},
			model.StatusFailed, []string{"refused"}, 0, "422"},
		{"fail 500 until dead", deliverCase{honour: false, retry: Policy{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
			rules: []sim.Rule{{To: "*", Action: sim.ActionFail, Status: 500}}},
			model.StatusDead, []string{"unknown", "unknown", "unknown"}, 0, "gave up after 3 attempts"},
		{"lose answer, keys honoured", deliverCase{honour: true, mode: AtMostOnce, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionLoseAnswer}}},
			model.StatusSent, []string{"unknown", "sent"}, 1, ""},
		{"lose answer, no keys, at-most-once", deliverCase{honour: false, mode: AtMostOnce, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionLoseAnswer}}},
			model.StatusUnknown, []string{"unknown"}, 1, "at-most-once"},
		{"lose answer, no keys, at-least-once", deliverCase{honour: false, mode: AtLeastOnce, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionLoseAnswer}}},
			model.StatusSent, []string{"unknown", "sent"}, 2, ""},
		{"500 after delivering, keys honoured", deliverCase{honour: true, rules: []sim.Rule{
			{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionFail, Status: 502, Deliver: true}}},
			model.StatusSent, []string{"unknown", "sent"}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, n, sum := deliverToAda(t, tt.c)
			if n.Status != tt.status || !strings.Contains(n.Reason, tt.reason) {
				t.Errorf("status %s (reason %q), want %s with a reason containing %q", n.Status, n.Reason, tt.status, tt.reason)
			}
			if got := outcomes(n); fmt.Sprint(got) != fmt.Sprint(tt.outcomes) {
				t.Errorf("attempt outcomes %v, want %v", got, tt.outcomes)
			}
			for i, a := range n.AttemptLog {
				if a.N != i+1 || !strings.HasPrefix(a.Provider, "email-http://127.0.0.1:") || a.EndedAt.Before(a.StartedAt) || a.Decision == "" {
					t.Errorf("attempt %d: %+v", i+1, a)
				}
			}
			if n.Attempts != len(tt.outcomes) || sum.Attempts != len(tt.outcomes) {
				t.Errorf("notification counts %d attempts, summary %d; want %d", n.Attempts, sum.Attempts, len(tt.outcomes))
			}
			final := map[string]int{model.StatusSent: sum.Sent, model.StatusFailed: sum.Failed, model.StatusDead: sum.Dead, model.StatusUnknown: sum.Unknown}
			if final[tt.status] != 1 || sum.Sent+sum.Failed+sum.Dead+sum.Unknown != 1 || sum.Waiting != 0 {
				t.Errorf("summary %+v, want one %s", sum, tt.status)
			}
			// Every attempt carried the notification's key, and every email
			// ada received came with it.
			keys := s.requestKeys()
			if len(keys) != len(tt.outcomes) {
				t.Errorf("%d requests reached the provider, want %d", len(keys), len(tt.outcomes))
			}
			for i, k := range keys {
				if k != n.Key {
					t.Errorf("request %d had Idempotency-Key %q, want %q", i+1, k, n.Key)
				}
			}
			ds := s.srv.Deliveries()
			if len(ds) != tt.deliveries {
				t.Errorf("ada received %d emails, want %d", len(ds), tt.deliveries)
			}
			for _, d := range ds {
				if d.Key != n.Key || d.To != "ada@example.com" || d.Subject != "Your receipt" {
					t.Errorf("delivery %+v, want ada's receipt with key %s", d, n.Key)
				}
			}
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	_, _, n, _ := deliverToAda(t, deliverCase{honour: true, rules: []sim.Rule{
		{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionRefuse, Status: 429, RetryAfter: time.Second}}})
	if n.Status != model.StatusSent || len(n.AttemptLog) != 2 {
		t.Fatalf("status %s after %d attempts, want sent after 2", n.Status, len(n.AttemptLog))
	}
	first, second := n.AttemptLog[0], n.AttemptLog[1]
	if first.HTTPStatus != 429 {
		t.Errorf("first attempt %+v, want a 429", first)
	}
	// Backoff alone would have retried within 5ms.
	if gap := second.StartedAt.Sub(first.EndedAt); gap < time.Second {
		t.Errorf("second attempt started %s after the first ended, want at least the Retry-After of 1s", gap)
	}
}

func TestMaxAgeEndsDead(t *testing.T) {
	t.Parallel()
	_, _, n, sum := deliverToAda(t, deliverCase{honour: true,
		retry: Policy{MaxAge: 50 * time.Millisecond, MaxAttempts: 1000, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		rules: []sim.Rule{{To: "*", Action: sim.ActionRefuse, Status: 503}}})
	if n.Status != model.StatusDead || !strings.Contains(n.Reason, "max age") {
		t.Errorf("status %s, reason %q; want dead for max age", n.Status, n.Reason)
	}
	// How many attempts fit in 50ms depends on the machine's load (on a
	// loaded machine even none: the first claim may come after the max age,
	// and is given up without a call); that the age ended them, not the
	// attempt budget, does not.
	if len(n.AttemptLog) >= 1000 || sum.Dead != 1 {
		t.Errorf("%d attempts, summary %+v; want dead within the attempt budget", len(n.AttemptLog), sum)
	}
	// (The attempts' times are not bounded here: under load the gaps
	// between them grow without the age check being any different; the
	// attempt budget, which 5-50 ms backoffs would take about 40 s to use,
	// is the bound.)
}

func TestRetryDeadNotification(t *testing.T) {
	t.Parallel()
	s, r, n, _ := deliverToAda(t, deliverCase{honour: true,
		retry: Policy{MaxAttempts: 2, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		rules: []sim.Rule{{To: "*", Action: sim.ActionRefuse, Status: 503}}})
	ctx := context.Background()
	if n.Status != model.StatusDead || len(n.AttemptLog) != 2 {
		t.Fatalf("status %s after %d attempts, want dead after 2", n.Status, len(n.AttemptLog))
	}

	s.srv.SetScript(nil) // the provider is back
	if err := r.RetryLifting(ctx, "", n.ID, false); err != nil {
		t.Fatal(err)
	}
	if p := notification(t, r, n.ID); p.Status != model.StatusPending || p.Reason != "" || p.NextAttemptAt == nil {
		t.Errorf("after Retry: %+v, want pending, due, with no reason", p)
	}
	sum := runIdle(t, r, time.Second)
	n = notification(t, r, n.ID)
	if n.Status != model.StatusSent || sum.Sent != 1 || len(n.AttemptLog) != 3 || n.AttemptLog[2].N != 3 {
		t.Errorf("after Retry and a run: status %s, attempts %v, summary %+v; want sent on attempt 3", n.Status, outcomes(n), sum)
	}
	if ds := s.srv.Deliveries(); len(ds) != 1 || ds[0].Key != n.Key {
		t.Errorf("deliveries %+v, want one with key %s", ds, n.Key)
	}

	var se *model.StateError
	if err := r.RetryLifting(ctx, "", n.ID, false); !errors.As(err, &se) || se.Status != model.StatusSent {
		t.Errorf("Retry of a sent notification: %v, want a StateError saying sent", err)
	}
	if err := r.RetryLifting(ctx, "", n.ID+1000, false); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("Retry of no notification: %v, want ErrNotFound", err)
	}
}

// clock is a Now func whose offset from real time a test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// set moves the clock to about t (it goes on from there at the real pace).
func (c *clock) set(t time.Time) { c.offset.Store(int64(time.Until(t))) }

// A process claimed a notification and died before calling the provider.
// The next process, once the lease has expired, records that attempt as
// unknown and decides as for any unknown.
func TestCrashRecoveryAfterClaim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		honour   bool
		mode     Mode
		status   string
		outcomes []string
		requests int
	}{
		{"keys honoured", true, AtMostOnce, model.StatusSent, []string{"unknown", "sent"}, 1},
		{"no keys, at-least-once", false, AtLeastOnce, model.StatusSent, []string{"unknown", "sent"}, 1},
		{"no keys, at-most-once", false, AtMostOnce, model.StatusUnknown, []string{"unknown"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := setupSim(t, tt.honour)
			var clk clock
			opts := Options{
				Routes:   Routes{"email": {s.provider(t, idempotency(tt.honour))}},
				Delivery: map[string]Mode{"payment.succeeded": tt.mode},
				Now:      clk.now,
			}
			path := t.TempDir() + "/relay.db"
			dying, err := openAt(ctx, path, opts)
			if err != nil {
				t.Fatal(err)
			}
			res, err := dying.Accept(ctx, receipt("evt_501", ada))
			if err != nil {
				t.Fatal(err)
			}
			cs, err := dying.store.Claim(ctx, model.ClaimRequest{Limit: 10, Now: clk.now(), Lease: time.Minute})
			if err != nil || len(cs) != 1 {
				t.Fatalf("claim: %v, %v", cs, err)
			}
			if err := dying.Close(); err != nil {
				t.Fatal(err)
			}

			clk.advance(2 * time.Minute)
			r := setupRelayAt(t, path, opts)
			sum := runIdle(t, r, time.Second)
			n := notification(t, r, res.Notifications[0].ID)
			if n.Status != tt.status || fmt.Sprint(outcomes(n)) != fmt.Sprint(tt.outcomes) {
				t.Fatalf("status %s with attempts %v, want %s with %v", n.Status, outcomes(n), tt.status, tt.outcomes)
			}
			if a := n.AttemptLog[0]; a.N != 1 || !strings.Contains(a.Detail, "lease") || !a.StartedAt.Equal(cs[0].ClaimedAt) {
				t.Errorf("recovered attempt %+v, want attempt 1 started at the claim %s, its detail naming the lease", a, cs[0].ClaimedAt)
			}
			if len(n.AttemptLog) > 1 && n.AttemptLog[1].N != 2 {
				t.Errorf("second attempt numbered %d", n.AttemptLog[1].N)
			}
			if got := s.srv.Requests(); got != tt.requests {
				t.Errorf("provider got %d requests, want %d", got, tt.requests)
			}
			if len(s.srv.Deliveries()) != tt.requests {
				t.Errorf("deliveries %+v, want %d", s.srv.Deliveries(), tt.requests)
			}
			if sum.Attempts != len(tt.outcomes) || (tt.status == model.StatusUnknown) != (sum.Unknown == 1) {
				t.Errorf("summary %+v", sum)
			}
		})
	}
}

// fiveRecipients returns one event for five addresses.
func fiveRecipients() Event {
	ev := receipt("evt_5")
	for i := range 5 {
		ev.Recipients = append(ev.Recipients, Recipient{ID: fmt.Sprint("r", i), Email: fmt.Sprintf("r%d@example.com", i)})
	}
	return ev
}

// stopOptions route email to the simulator with exactly one worker per
// notification of fiveRecipients. Once the five calls are in flight the
// dispatcher waits for a free worker and writes nothing, so Stop cannot land
// while a claim is in the writer: that strands what the claim took (see
// TestStopDuringClaimLeavesNothingSending).
func stopOptions(t *testing.T, s *simBundle) Options {
	return Options{Workers: 5, Routes: Routes{"email": {s.provider(t, "honoured")}}}
}

func TestStopWaitsForCallsInFlight(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true, sim.Rule{To: "*", Action: sim.ActionSlow, Delay: 300 * time.Millisecond})
	r := setupRelay(t, stopOptions(t, s))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	accept(t, r, fiveRecipients())
	s.waitArrivals(t, 5) // all five calls are in flight, held 300ms by the provider
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v, want nil: the calls end well within 5s", err)
	}
	if c := counts(t, r); c[model.StatusSent] != 5 || c[model.StatusSending] != 0 || c[model.StatusPending] != 0 {
		t.Errorf("counts after Stop %v, want all 5 sent", c)
	}
	if n := len(s.srv.Deliveries()); n != 5 {
		t.Errorf("%d deliveries, want 5", n)
	}
	if err := r.Stop(ctx); err == nil {
		t.Error("second Stop returned nil, want not started")
	}
}

func TestStopPastDeadlineCancelsCalls(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true, sim.Rule{To: "*", Action: sim.ActionHang})
	r := setupRelay(t, stopOptions(t, s))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := accept(t, r, fiveRecipients())
	s.waitArrivals(t, 5) // the provider holds all five
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want context.DeadlineExceeded", err)
	}
	if c := counts(t, r); c[model.StatusPending] != 5 || c[model.StatusSending] != 0 {
		t.Errorf("counts after Stop %v, want all 5 pending, none left sending", c)
	}
	for _, en := range res.Notifications {
		n := notification(t, r, en.ID)
		if len(n.AttemptLog) != 1 || n.AttemptLog[0].Outcome != "unknown" || n.NextAttemptAt == nil {
			t.Errorf("notification %s: status %s, attempts %+v; want one unknown attempt and a retry scheduled", n.Recipient, n.Status, n.AttemptLog)
		}
	}
}

// hookHandler passes records on to a test's log and signals each record
// whose message is msg: a hook on what the relay reports doing.
type hookHandler struct {
	slog.Handler
	msg string
	c   chan struct{}
}

func (h *hookHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *hookHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == h.msg {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	if !h.Handler.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, rec)
}

// Stop must leave nothing in sending: what the dispatcher claimed, it calls
// and records. Accepts keep the writer busy and work coming, so the
// dispatcher claims again after each call it records; Stop, sent just after
// one is recorded, lands on a claim waiting in the writer's queue.
func TestStopDuringClaimLeavesNothingSending(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	attempted := &hookHandler{Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}),
		msg: "attempt", c: make(chan struct{}, 1)}
	r := setupRelay(t, Options{Logger: slog.New(attempted),
		Routes: Routes{"*": {providers.NewLog(&out, "log://test")}}})
	busy, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-busy:
				return
			default:
			}
			if _, err := r.Accept(context.Background(), receipt(fmt.Sprint("evt_", i), ada)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(busy); <-done }()
	for i := range 20 {
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-attempted.c:
		case <-time.After(bound):
			t.Fatal("no attempt recorded")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Stop %d: %v", i, err)
		}
		if c := counts(t, r); c[model.StatusSending] != 0 {
			t.Fatalf("after Start and Stop %d: counts %v, want none left sending", i, c)
		}
	}
}

// MaxAge bounds when a notification may still be attempted, so that no
// retry reaches a provider that has forgotten its key (README: exactly once
// in effect "as long as retries end within the provider's key lifetime").
// Here the answer to attempt 1 is lost, its retry is scheduled well within
// the max age, and then no dispatcher runs for an hour, long enough for the
// provider to forget the key. The retry must not be made: it would be a
// second email.
func TestNoRetryPastMaxAgeAfterDowntime(t *testing.T) {
	t.Parallel()
	// KeyTTL 1ns: the provider has forgotten every key by the next request,
	// as a real one has after 24 hours.
	s := setupSimWith(t, sim.Options{HonourKeys: true, KeyTTL: time.Nanosecond, Script: &sim.Script{Rules: []sim.Rule{
		{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionLoseAnswer}}}})
	var clk clock
	r := setupRelay(t, Options{Now: clk.now,
		Retry:  Policy{MaxAge: time.Minute, BaseDelay: 20 * time.Second, MaxDelay: 20 * time.Second},
		Routes: Routes{"email": {s.provider(t, "honoured")}}})
	res := accept(t, r, receipt("evt_501", ada))
	if sum := runIdle(t, r, time.Millisecond); sum.Attempts != 1 || sum.Waiting != 1 {
		t.Fatalf("first run: %+v, want one unknown attempt and its retry waiting", sum)
	}
	clk.advance(time.Hour) // the dispatcher was down
	sum := runIdle(t, r, time.Millisecond)
	n := notification(t, r, res.Notifications[0].ID)
	if len(n.AttemptLog) > 1 {
		a := n.AttemptLog[1]
		t.Errorf("attempt 2 made %s after creation, past the max age of 1m (%s, %s)", a.StartedAt.Sub(n.CreatedAt).Round(time.Second), a.Outcome, a.Decision)
	}
	if n.Status != model.StatusDead || !strings.Contains(n.Reason, "max age") {
		t.Errorf("status %s (%q), summary %+v; want dead for max age", n.Status, n.Reason, sum)
	}
	if c := s.srv.Counts()["ada@example.com"]; c != 1 {
		t.Errorf("ada received %d emails, want 1", c)
	}
}

// RunUntilIdle with maxWait 0 waits for nothing that is not due: it returns
// once nothing is due now (edgerelay dispatch --until-idle --max-wait 0).
func TestRunUntilIdleZeroMaxWait(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true, sim.Rule{To: "*", Action: sim.ActionRefuse, Status: 503})
	r := setupRelay(t, Options{Retry: Policy{BaseDelay: time.Hour, MaxDelay: time.Hour},
		Routes: Routes{"email": {s.provider(t, "honoured")}}})
	accept(t, r, receipt("evt_501", ada))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := r.RunUntilIdle(ctx, 0)
	if err != nil || sum.Attempts != 1 || sum.Waiting != 1 {
		t.Errorf("RunUntilIdle(ctx, 0): %+v, %v; want one attempt, one waiting, no error", sum, err)
	}
}

package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// callLog is a provider that notes each call's key; block, if set, holds
// a call until it is closed or the call's context ends.
type callLog struct {
	name   string
	honour bool
	block  chan struct{}
	called chan struct{} // one value per call, once it is in Send

	mu   sync.Mutex
	keys []string
}

func newCallLog(name string, honour bool) *callLog {
	return &callLog{name: name, honour: honour, called: make(chan struct{}, 10)}
}

func (p *callLog) Name() string      { return p.name }
func (p *callLog) HonoursKeys() bool { return p.honour }
func (p *callLog) Send(ctx context.Context, m *providers.Message) providers.Result {
	p.mu.Lock()
	p.keys = append(p.keys, m.Key)
	p.mu.Unlock()
	p.called <- struct{}{}
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
		}
	}
	return providers.Result{Outcome: providers.Sent}
}

func (p *callLog) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

// A process dies in the middle of its call to provider x (here: the call
// hangs, and the next process's clock is past the lease); the next process
// runs with other routes. The provider that may have sent it is the one the
// claim recorded, not whichever provider the new route has at the old
// position: the recovered attempt names x and pins the notification to x,
// so the retry goes to x with the same key, and y, which could deliver a
// second copy, is never given it. Where the new route no longer lists x,
// the pinned-provider-gone rule applies (at-most-once ends unknown; at-least-once
// starts the new route over, a duplicate possible, as the policy says).
func TestRecoveredCallKeepsTheProviderItWasMadeTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mode   Mode
		routes func(x, y providers.Provider) Routes
		// want: the provider of each recorded attempt; ycalls: whether y
		// is called at all.
		want   []string
		ycalls bool
		status string
	}{
		{"reordered to y, x: the retry goes to x with the same key", AtLeastOnce,
			func(x, y providers.Provider) Routes { return Routes{"email": {y, x}} }, []string{"x", "x"}, false, model.StatusSent},
		{"x dropped, at-most-once: not resent, unknown", AtMostOnce,
			func(x, y providers.Provider) Routes { return Routes{"email": {y}} }, []string{"x"}, false, model.StatusUnknown},
		{"x dropped, at-least-once: the new route, unpinned, after the attempt at x", AtLeastOnce,
			func(x, y providers.Provider) Routes { return Routes{"email": {y}} }, []string{"x", "y"}, true, model.StatusSent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "relay.db")
			delivery := map[string]Mode{"notice": tc.mode}
			slow := Policy{MaxAttempts: 5, MaxAge: time.Hour, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}

			// The first process: its call to x hangs (it died there).
			dead := newCallLog("x", true)
			dead.block = make(chan struct{})
			first := setupRelayAt(t, path, Options{Routes: Routes{"email": {dead}}, Delivery: delivery, Retry: slow, Lease: time.Minute})
			id := acceptOne(t, first, "evt_recover", "ada")
			if err := first.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				close(dead.block)
				first.Stop(ctx)
			})
			select {
			case <-dead.called:
			case <-time.After(10 * time.Second):
				t.Fatal("the first process never called x")
			}

			// The next process, past the lease, with the new routes.
			var clk clock
			clk.advance(2 * time.Minute)
			x, y := newCallLog("x", true), newCallLog("y", true)
			next := setupRelayAt(t, path, Options{Routes: tc.routes(x, y), Delivery: delivery, Retry: slow, Lease: time.Minute, Now: clk.now})
			runIdle(t, next, time.Second)

			n := notification(t, next, id)
			var got []string
			for _, a := range n.AttemptLog {
				got = append(got, a.Provider)
			}
			if n.Status != tc.status || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("status %s, attempts at %v; want %s, attempts at %v (log %+v)", n.Status, got, tc.status, tc.want, n.AttemptLog)
			}
			if a := n.AttemptLog[0]; !strings.Contains(a.Detail, "lease expired") {
				t.Errorf("attempt 1 %+v: want the recovered attempt", a)
			}
			if ys := y.calls(); len(ys) > 0 != tc.ycalls {
				t.Errorf("y was called %d times; want called: %v", len(ys), tc.ycalls)
			}
			if tc.want[len(tc.want)-1] == "x" && len(tc.want) > 1 {
				if xs := x.calls(); len(xs) != 1 || xs[0] != n.Key || dead.calls()[0] != n.Key {
					t.Errorf("x was called again with %v, want once with the key %s", xs, n.Key)
				}
			}
		})
	}
}

// The routes a claim is given name, for every tenant, channel and route
// position, the provider the dispatcher's own lookup finds (table.route,
// then Route.at): the stores resolve the names in SQL by
// model.ClaimRoutes.Provider (the conformance suite holds them to it), so
// the provider a claim records is the one the call is made to.
func TestClaimRoutesNameTheProviderTheRouteGives(t *testing.T) {
	t.Parallel()
	p := func(name string) providers.Provider { return newCallLog(name, true) }
	a, b, star, t1, t2, tstar := p("a"), p("b"), p("star"), p("t1"), p("t2"), p("tstar")
	tb, err := newTable(Routes{"email": {a, b}, "*": {star}},
		map[string]Routes{"acme": {"sms": {t1, t2}, "*": {tstar}, "push": {}}, "solo": {"email": {t2}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"default", "acme", "solo", "none"} {
		for _, channel := range []string{"email", "sms", "push", "chat"} {
			for pos := range 4 {
				want := ""
				if p := tb.route(tenant, channel).at(pos); p != nil {
					want = p.Name()
				}
				if got := tb.names.Provider(tenant, channel, pos, false, ""); got != want {
					t.Errorf("%s %s position %d: the claim's routes name %q, the route gives %q", tenant, channel, pos, got, want)
				}
			}
		}
	}
}

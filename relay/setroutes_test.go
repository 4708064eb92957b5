package relay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// closingProvider counts its calls in flight and notes a Close that came
// while one was running (or a call after Close): SetRoutes must close a
// dropped provider only after its last call.
type closingProvider struct {
	name     string
	send     func(*providers.Message) providers.Result
	inFlight atomic.Int32
	closed   atomic.Bool
	misuse   atomic.Value // string: what went wrong
}

func (p *closingProvider) Name() string      { return p.name }
func (p *closingProvider) HonoursKeys() bool { return true }
func (p *closingProvider) Send(ctx context.Context, m *providers.Message) providers.Result {
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	if p.closed.Load() {
		p.misuse.Store("called after Close")
	}
	if p.send == nil {
		return providers.Result{Outcome: providers.Sent}
	}
	return p.send(m)
}

func (p *closingProvider) Close() error {
	if p.inFlight.Load() > 0 {
		p.misuse.Store("closed with a call in flight")
	}
	if p.closed.Swap(true) {
		p.misuse.Store("closed twice")
	}
	return nil
}

func (p *closingProvider) check(t *testing.T) {
	t.Helper()
	if m, _ := p.misuse.Load().(string); m != "" {
		t.Errorf("provider %s: %s", p.name, m)
	}
}

func acceptOne(t *testing.T, r *Relay, id, to string) int64 {
	t.Helper()
	acc, err := r.Accept(context.Background(), Event{ID: id, Type: "notice", Channels: []string{"email"},
		Recipients: []Recipient{{ID: to, Email: to + "@example.com"}}, Subject: "s", Body: "b"})
	if err != nil || len(acc.Notifications) != 1 {
		t.Fatalf("accept %s: %+v %v", id, acc, err)
	}
	return acc.Notifications[0].ID
}

// A reload's new route is used by the next claim while the call that
// started on the old provider finishes there and is recorded as its; the
// old provider is closed after that call, not before.
func TestSetRoutesSwitchesWhileACallRunsOnTheOld(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	// Once: on a loaded machine the first call can outlast its timeout
	// (this provider does not watch it) and be retried, pinned, at old.
	callStarted := sync.OnceFunc(func() { close(started) })
	old := &closingProvider{name: "old", send: func(*providers.Message) providers.Result {
		callStarted()
		<-release
		return providers.Result{Outcome: providers.Sent}
	}}
	sentNew := make(chan string, 1)
	nu := &closingProvider{name: "new", send: func(m *providers.Message) providers.Result {
		sentNew <- m.RecipientID
		return providers.Result{Outcome: providers.Sent}
	}}
	r := setupRelay(t, Options{Routes: Routes{"email": {old}}})
	ended := sync.OnceFunc(func() { close(release) })
	t.Cleanup(ended) // before the relay's Close, even on a failure
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := acceptOne(t, r, "evt_1", "ada")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the old provider was never called")
	}
	if err := r.SetRoutes(Routes{"email": {nu}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r.Provider("new") != nu || r.Provider("old") != nil {
		t.Fatalf("Provider after SetRoutes: new=%v old=%v", r.Provider("new"), r.Provider("old"))
	}
	second := acceptOne(t, r, "evt_2", "ben")
	select {
	case who := <-sentNew:
		if who != "ben" {
			t.Fatalf("the new provider sent to %s", who)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the new route was not used while the old call ran")
	}
	if old.closed.Load() {
		t.Fatal("the old provider was closed while its call ran")
	}
	ended()
	waitFor(t, 10*time.Second, "the first notification recorded", func() bool { return statusOf(t, r, first) == model.StatusSent })
	if n := notification(t, r, first); n.Provider != "old" {
		t.Errorf("the call in flight was recorded as %q's, want old's", n.Provider)
	}
	// The new provider answered; its record may still be on its way.
	waitFor(t, 10*time.Second, "the second notification recorded", func() bool { return statusOf(t, r, second) == model.StatusSent })
	if n := notification(t, r, second); n.Status != model.StatusSent || n.Provider != "new" {
		t.Errorf("second: %s by %q", n.Status, n.Provider)
	}
	waitFor(t, 10*time.Second, "the old provider closed", old.closed.Load)
	old.check(t)
	if nu.closed.Load() {
		t.Error("the provider in use was closed")
	}
}

// SetRoutes refuses what New refuses, and then changes nothing.
func TestSetRoutesRefusesAndKeepsTheOld(t *testing.T) {
	t.Parallel()
	a := &closingProvider{name: "a"}
	r := setupRelay(t, Options{Routes: Routes{"email": {a}}})
	for _, tc := range []struct {
		routes Routes
		want   string
	}{
		{Routes{"email": {}}, `route "email" lists no provider`},
		{Routes{"email": {&closingProvider{name: "x"}}, "sms": {&closingProvider{name: "x"}}}, `two providers are named "x"`},
	} {
		if err := r.SetRoutes(tc.routes, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetRoutes(%v): %v, want %q", tc.routes, err, tc.want)
		}
	}
	if r.Provider("a") != a || r.Provider("x") != nil {
		t.Fatal("a refused SetRoutes changed the routes")
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := acceptOne(t, r, "evt_1", "ada")
	waitFor(t, 10*time.Second, "sent through the old route", func() bool { return statusOf(t, r, id) == model.StatusSent })
	if p := notification(t, r, id).Provider; p != "a" {
		t.Fatalf("sent by %q", p)
	}
}

// A provider that replaces one of the same name keeps its pause and, with
// the same limit, its slots: the old provider's call still counts. A new
// limit starts afresh (the pause still carries); a new name starts afresh.
func TestSetRoutesCarriesGateState(t *testing.T) {
	t.Parallel()
	now := time.Now()
	one := map[string]Limit{"a": {Concurrency: 1}}
	a := &closingProvider{name: "a"}
	rt, err := newRouter(Routes{"email": {a}}, nil, one)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rt.gates[a]
	if _, ok := g1.tryEnter(now); !ok {
		t.Fatal("the first call could not enter")
	}
	a2 := &closingProvider{name: "a"}
	if err := rt.publish(Routes{"email": {a2}}, nil, one); err != nil {
		t.Fatal(err)
	}
	rt.plan(now, 8) // adopts the new table
	g2 := rt.gates[a2]
	if g2 == nil || g2 == g1 {
		t.Fatal("the new provider has no gate of its own")
	}
	if _, ok := g2.tryEnter(now); ok {
		t.Fatal("same limit: the new provider entered while the old one's call held the only slot")
	}
	g1.leave(time.Millisecond, false) // the old call ends
	if _, ok := g2.tryEnter(now); !ok {
		t.Fatal("the slot the old call freed is not the new provider's")
	}
	g2.leave(time.Millisecond, false)

	// A pause (a Retry-After) carries over to a successor with a new limit;
	// a provider of another name is not paused.
	g2.pause(now.Add(time.Hour))
	a3, b := &closingProvider{name: "a"}, &closingProvider{name: "b"}
	if err := rt.publish(Routes{"email": {a3}, "sms": {b}}, nil, map[string]Limit{"a": {Concurrency: 2}}); err != nil {
		t.Fatal(err)
	}
	rt.plan(now, 8)
	if !rt.gates[a3].paused(now) {
		t.Error("the pause did not carry over to the provider of the same name")
	}
	if n := rt.gates[a3].win.current(); n != 2 {
		t.Errorf("new limit: %d slots, want 2", n)
	}
	if rt.gates[b].paused(now) {
		t.Error("a provider of another name inherited the pause")
	}
	// The dropped providers are closed once their calls are over.
	rt.retiring.Wait()
	for _, p := range []*closingProvider{a, a2} {
		if !p.closed.Load() {
			t.Errorf("dropped provider %p not closed", p)
		}
		p.check(t)
	}
	if a3.closed.Load() || b.closed.Load() {
		t.Error("a provider in use was closed")
	}
}

// Routes swapped again and again while notifications are dispatched: each
// is sent once, by a provider of the routes of its claim, and every
// dropped provider is closed once, after its calls, never called after.
// Run it under -race: SetRoutes, the dispatcher and Provider run at once.
func TestSetRoutesUnderLoad(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sent := map[string]int{}
	mk := func(i int) *closingProvider {
		return &closingProvider{name: fmt.Sprintf("p%d", i%3), send: func(m *providers.Message) providers.Result {
			mu.Lock()
			sent[m.Key]++
			mu.Unlock()
			return providers.Result{Outcome: providers.Sent}
		}}
	}
	var all []*closingProvider
	first := mk(0)
	all = append(all, first)
	r := setupRelay(t, Options{Routes: Routes{"email": {first}}, Workers: 8})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 200
	ev := Event{ID: "evt_load", Type: "notice", Channels: []string{"email"}, Subject: "s", Body: "b"}
	for i := range n {
		ev.Recipients = append(ev.Recipients, Recipient{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i)})
	}
	if _, err := r.Accept(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(sent)
	}
	// Swap while the notifications go out (each swap wakes the dispatcher).
	swaps := 0
	for i := 1; count() < n && i <= 100; i++ {
		p := mk(i)
		all = append(all, p)
		if err := r.SetRoutes(Routes{"email": {p}}, nil, map[string]Limit{p.name: {Concurrency: 1 + i%3}}); err != nil {
			t.Fatal(err)
		}
		if got := r.Provider(p.name); got != p {
			t.Fatalf("Provider(%s) is not the latest", p.name)
		}
		swaps++
	}
	waitFor(t, 30*time.Second, "every notification sent", func() bool { return count() == n })
	last := all[len(all)-1]
	waitFor(t, 10*time.Second, "every dropped provider closed", func() bool {
		for _, p := range all {
			if p != last && !p.closed.Load() {
				return false
			}
		}
		return true
	})
	t.Logf("%d swaps while %d notifications went out", swaps, n)
	mu.Lock()
	for k, c := range sent {
		if c != 1 {
			t.Errorf("%s sent %d times", k, c)
		}
	}
	mu.Unlock()
	for _, p := range all {
		p.check(t)
	}
	if last.closed.Load() {
		t.Error("the provider in use was closed")
	}
}

// A notification whose outcome was unknown is pinned to the provider that
// may have sent it, by name: after a reload reorders the route it goes to
// that provider again (with the same key), not to whichever provider took
// its old position; after a reload drops that provider, an at-most-once
// type ends unknown without a call, and an at-least-once type goes to the
// new route, unpinned.
func TestSetRoutesKeepsAPinnedNotificationOnItsProvider(t *testing.T) {
	t.Parallel()
	unknownOnce := func(name string, keys chan<- string) *closingProvider {
		var calls atomic.Int32
		return &closingProvider{name: name, send: func(m *providers.Message) providers.Result {
			keys <- name + " " + m.Key
			if calls.Add(1) == 1 {
				return providers.Result{Outcome: providers.Unknown, Detail: "timeout"}
			}
			return providers.Result{Outcome: providers.Sent}
		}}
	}
	slow := Policy{MaxAttempts: 5, MaxAge: time.Hour, BaseDelay: time.Second, MaxDelay: time.Second} // the retry comes at least 500 ms after the unknown: time to reload
	for _, tc := range []struct {
		name, mode string
		reroute    func(a, b providers.Provider) Routes
		want       []string // provider of each call, in order
		status     string
	}{
		{"reordered: the pinned provider again", "at-least-once",
			func(a, b providers.Provider) Routes { return Routes{"email": {b, a}} }, []string{"a", "a"}, model.StatusSent},
		{"dropped, at-most-once: no call, unknown", "at-most-once",
			func(a, b providers.Provider) Routes { return Routes{"email": {b}} }, []string{"a"}, model.StatusUnknown},
		{"dropped, at-least-once: the new route", "at-least-once",
			func(a, b providers.Provider) Routes { return Routes{"email": {b}} }, []string{"a", "b"}, model.StatusSent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := make(chan string, 10)
			a, b := unknownOnce("a", calls), &closingProvider{name: "b", send: func(m *providers.Message) providers.Result {
				calls <- "b " + m.Key
				return providers.Result{Outcome: providers.Sent}
			}}
			mode := AtLeastOnce
			if tc.mode == "at-most-once" {
				mode = AtMostOnce
			}
			r := setupRelay(t, Options{Routes: Routes{"email": {a}}, Retry: slow, Delivery: map[string]Mode{"notice": mode}})
			id := acceptOne(t, r, "evt_pin", "ada")
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			first := <-calls
			waitFor(t, 10*time.Second, "the unknown recorded", func() bool {
				n := notification(t, r, id)
				return n.Status == model.StatusPending || n.Status == model.StatusUnknown
			})
			if err := r.SetRoutes(tc.reroute(a, b), nil, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the notification settled", func() bool { return statusOf(t, r, id) == tc.status })
			got := []string{first}
			for len(calls) > 0 {
				got = append(got, <-calls)
			}
			key := strings.Fields(first)[1]
			for i, c := range got {
				if i >= len(tc.want) || c != tc.want[i]+" "+key {
					t.Fatalf("calls %q, want %v each with key %s", got, tc.want, key)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("calls %q, want %v", got, tc.want)
			}
		})
	}
}

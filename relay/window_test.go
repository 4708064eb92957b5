package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
)

// The window starts at its ceiling, is halved by an overload at most once
// per call time, and grows back by one call per window of good answers.
func TestWindowAIMD(t *testing.T) {
	t.Parallel()
	w := newWindow(16)
	for i := range 16 {
		if !w.enter() {
			t.Fatalf("call %d refused below the ceiling", i+1)
		}
	}
	if w.enter() || w.free() != 0 {
		t.Fatal("a 17th call entered a window of 16")
	}
	now := time.Now()
	w.leave(100*time.Millisecond, true, now)
	if got := w.current(); got != 8 {
		t.Fatalf("after an overload: %d, want 8", got)
	}
	// The calls in flight together heard the same overload: one cut.
	w.leave(100*time.Millisecond, true, now.Add(50*time.Millisecond))
	if got := w.current(); got != 8 {
		t.Fatalf("a second overload within the call time: %d, want still 8", got)
	}
	w.leave(100*time.Millisecond, true, now.Add(150*time.Millisecond))
	if got := w.current(); got != 4 {
		t.Fatalf("an overload a call time later: %d, want 4", got)
	}
	if w.enter() {
		t.Fatal("13 calls in flight entered a window of 4")
	}
	for range 13 {
		w.leave(time.Millisecond, false, now)
	}
	if got := w.current(); got < 6 || got > 7 {
		t.Fatalf("13 good answers from 4: %d, want 6 (4 + 1/4 + 1/5 …)", got)
	}
	for range 1000 {
		w.enter()
		w.leave(time.Millisecond, false, now)
	}
	if got := w.current(); got != 16 {
		t.Fatalf("after many good answers: %d, want the ceiling 16", got)
	}
	for range 10 {
		w.enter()
		w.leave(time.Millisecond, true, now.Add(time.Hour))
		now = now.Add(time.Hour)
	}
	if got := w.current(); got != 1 {
		t.Fatalf("after many overloads: %d, want the floor 1", got)
	}

	u := newWindow(0)
	for range 10000 {
		if !u.enter() {
			t.Fatal("an unbounded window refused a call")
		}
	}
	u.leave(time.Millisecond, true, time.Now())
	if u.free() <= 10000 {
		t.Fatal("an unbounded window shrank")
	}
}

// A provider that answers 429 to every call beyond the few it can take at
// once gets about that many: the window shrinks to it, instead of most
// calls being refused and retried. With a fixed pool of 64 calls, each
// notification would hear about 5 refusals before it went through (1,546
// for 300 in one run, with the cut disabled); with the window, runs see
// 95-232 in all, under -race and beside other tests.
func TestPushbackShrinksTheWindow(t *testing.T) {
	t.Parallel()
	const capacity, n = 4, 300
	var inflight, refused, served atomic.Int64
	var mu sync.Mutex
	got := map[string]int{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		if inflight.Add(1) > capacity {
			inflight.Add(-1)
			refused.Add(1)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		defer inflight.Add(-1)
		time.Sleep(5 * time.Millisecond) // a call takes a while: the calls of one wave overlap
		mu.Lock()
		got[req.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x"}`)
	}))
	t.Cleanup(ts.Close)
	p, err := providers.New("email-http+" + ts.URL + "/v1/emails?from=relay@example.com")
	if err != nil {
		t.Fatal(err)
	}
	r := setupRelay(t, Options{Workers: 64, Routes: Routes{"email": {p}},
		Retry: Policy{MaxAttempts: 100, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}})
	var rcpts []Recipient
	for i := range n {
		rcpts = append(rcpts, Recipient{ID: fmt.Sprint("u", i), Email: fmt.Sprintf("u%d@example.com", i)})
	}
	accept(t, r, Event{ID: "evt", Type: "notice", Recipients: rcpts, Body: "hello"})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every notification sent", func() bool { return counts(t, r)[model.StatusSent] == n })
	stop(t, r)
	if len(got) != n {
		t.Errorf("%d notifications delivered, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
	t.Logf("%d calls refused with 429 for %d delivered", refused.Load(), served.Load())
	if ws := r.Windows(); len(ws) != 1 || ws[0].Provider != p.Name() || ws[0].Ceiling != providers.HTTPConcurrency ||
		ws[0].Size >= ws[0].Ceiling || ws[0].InFlight != 0 {
		t.Errorf("Windows() = %+v, want %s's shrunk below its ceiling %d, nothing in flight", ws, p.Name(), providers.HTTPConcurrency)
	}
	if refused.Load() >= 2*n {
		t.Errorf("%d calls refused with 429 for %d notifications: the window did not shrink to what the provider takes", refused.Load(), n)
	}
}

// A provider whose calls hang holds no more than its window: the other
// provider's notifications go out meanwhile, on the workers it left.
func TestSlowProviderLeavesWorkersToTheFastOne(t *testing.T) {
	t.Parallel()
	slow := setupSim(t, true, sim.Rule{To: "*", Action: sim.ActionHang})
	fast := setupSim(t, true)
	// Neither the provider's timeout nor the lease ends a held call before
	// the test does: a loaded machine may take its time over the fast
	// provider's notifications, and a retried call would count as a fifth.
	ps, pf := slow.provider(t, "honoured", "&concurrency=4&name=slow&timeout=1h"), fast.provider(t, "honoured", "&name=fast")
	r := setupRelay(t, Options{Workers: 8, Lease: time.Hour, Routes: Routes{"email": {ps}, "chat": {pf}}})
	var rcpts []Recipient
	for i := range 40 {
		rcpts = append(rcpts, Recipient{ID: fmt.Sprint("u", i), Email: fmt.Sprintf("u%d@example.com", i),
			Addresses: map[string]string{"chat": fmt.Sprintf("u%d@chat.example", i)}})
	}
	accept(t, r, Event{ID: "evt", Type: "notice", Recipients: rcpts, Body: "hello"})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow.waitArrivals(t, 4)
	waitFor(t, time.Minute, "every chat notification delivered while email hangs", func() bool {
		return len(fast.srv.Deliveries()) == 40
	})
	if k := len(slow.requestKeys()); k != 4 {
		t.Errorf("%d calls to the hanging provider, want its window of 4", k)
	}
	slow.srv.Close() // ends the held calls, so Stop need not wait for their timeout
	stop(t, r)
}

func stop(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
)

// The lag is how long what the dispatcher claims had been due: ten
// seconds for notifications it finds ten seconds late, none once nothing
// is left waiting; and none for notifications that waited on their
// provider's rate limit, which is the provider's pace, not the relay
// falling behind (serve sheds on the lag).
func TestLagCountsOnlyTheRelaysOwnDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		limit   Limit
		wantLag bool
	}{
		{"behind", Limit{}, true},
		{"rate-limited", Limit{Rate: 200, Burst: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var clk clock
			const n = 10
			var mu sync.Mutex
			var seen time.Duration
			turns := 0
			p := &fakeProvider{name: "probe", send: func(*providers.Message) providers.Result { return providers.Result{Outcome: providers.Sent} }}
			r := setupRelay(t, Options{Now: clk.now, Routes: Routes{"email": {p}},
				Limits: map[string]Limit{p.name: tc.limit},
				Hooks: Hooks{Lag: func(lag time.Duration) {
					mu.Lock()
					seen, turns = max(seen, lag), turns+1
					mu.Unlock()
				}}})
			for i := range n {
				accept(t, r, receipt(fmt.Sprint("evt_lag_", i), Recipient{ID: "u", Email: fmt.Sprintf("u%d@example.com", i)}))
			}
			clk.advance(10 * time.Second) // ten seconds pass with no dispatcher
			if sum := runIdle(t, r, time.Millisecond); sum.Sent != n {
				t.Fatalf("summary %+v, want %d sent", sum, n)
			}
			mu.Lock()
			defer mu.Unlock()
			if turns == 0 {
				t.Fatal("no claim reported a lag")
			}
			if tc.wantLag && seen < 10*time.Second {
				t.Errorf("the longest lag a claim set: %s, want at least the 10s they waited", seen)
			}
			if !tc.wantLag && seen != 0 {
				t.Errorf("the longest lag a claim set: %s, want 0: they waited on the provider's rate", seen)
			}
			if got := r.Lag(); got != 0 {
				t.Errorf("lag after the run: %s, want 0 (nothing left waiting)", got)
			}
		})
	}
}

// heldCalls is a provider whose calls wait until release is closed.
type heldCalls struct {
	entered chan struct{}
	release chan struct{}
}

func (p *heldCalls) Name() string      { return "held" }
func (p *heldCalls) HonoursKeys() bool { return true }
func (p *heldCalls) Send(ctx context.Context, m *providers.Message) providers.Result {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return providers.Result{Outcome: providers.Sent}
}

// The lag is each provider's: one whose window is full of slow calls is
// behind, and stays so while its notifications wait; another with room,
// which delivered what it was given, is not. An event is behind by the
// providers its channels go to (serve sheds only those).
func TestLagIsPerProvider(t *testing.T) {
	t.Parallel()
	var clk clock
	slow := &heldCalls{entered: make(chan struct{}, 1), release: make(chan struct{})}
	fast := &fakeProvider{name: "fast", send: func(*providers.Message) providers.Result { return providers.Result{Outcome: providers.Sent} }}
	r := setupRelay(t, Options{Now: clk.now, Routes: Routes{"email": {slow}, "sms": {fast}},
		Limits: map[string]Limit{"held": {Concurrency: 1}}})
	for i := range 3 {
		accept(t, r, receipt(fmt.Sprint("evt_mail_", i), Recipient{ID: "u", Email: fmt.Sprintf("u%d@example.com", i)}))
		ev := receipt(fmt.Sprint("evt_sms_", i), Recipient{ID: "u", Phone: fmt.Sprintf("+1555000%04d", i)})
		ev.Channels = []string{"sms"}
		accept(t, r, ev)
	}
	clk.advance(10 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(slow.release)
		r.Stop(context.Background())
	}()
	<-slow.entered
	deadline := time.Now().Add(bound)
	for counts(t, r)[model.StatusSent] < 3 || mustBehind(r, "sms") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sms not caught up: %v, its lag %s", counts(t, r), mustBehind(r, "sms"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lag, who := r.Behind("default", []string{"email"}); lag < 10*time.Second || who != "held" {
		t.Errorf("email is behind by %s (%q), want 10s or more, by the held provider", lag, who)
	}
	if lag, _ := r.Behind("default", []string{"email", "sms"}); lag < 10*time.Second {
		t.Errorf("an event on both channels is behind by %s, want the email's", lag)
	}
	if r.Lag() < 10*time.Second {
		t.Errorf("Lag() %s, want the worst provider's", r.Lag())
	}
}

func mustBehind(r *Relay, channel string) time.Duration {
	lag, _ := r.Behind("default", []string{channel})
	return lag
}

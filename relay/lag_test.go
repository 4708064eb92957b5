package relay

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"edgerelay/providers"
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

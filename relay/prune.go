package relay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Retention: prune is the relay's, since only it knows the retry windows
// below which forgetting a notification would let a second copy out. The
// schedule package runs it as a job.

// PruneResult is what Prune deleted, and the age it used.
type PruneResult struct {
	model.PruneResult
	OlderThan time.Duration
	// Raised is set when the asked age was younger than the longest retry
	// window, and OlderThan was raised to it: a notification's row is its
	// idempotency key, and forgetting it while a retry (or a redelivery
	// within that window) may come would let a second copy out.
	Raised bool
}

// Prune deletes finished notifications (with their attempts and receipts),
// feed items, events left with neither, expired request keys and old job
// runs, older than olderThan, in small writes that never hold the writer
// for long.
func (r *Relay) Prune(ctx context.Context, olderThan time.Duration) (PruneResult, error) {
	floor := r.opts.Retry.MaxAge
	for _, p := range r.opts.ChannelRetry {
		floor = max(floor, p.MaxAge)
	}
	for _, p := range r.opts.TypeRetry {
		floor = max(floor, p.MaxAge)
	}
	res := PruneResult{OlderThan: olderThan}
	if olderThan < floor {
		res.OlderThan, res.Raised = floor, true
	}
	now := r.now()
	pr, err := r.store.Prune(ctx, now.Add(-res.OlderThan), now, 500)
	res.PruneResult = pr
	return res, err
}

// ParseAge reads an age: a Go duration ("36h") or whole days or weeks
// ("30d", "2w").
func ParseAge(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			var v int
			if _, err := fmt.Sscanf(n, "%d", &v); err == nil && v >= 0 && fmt.Sprint(v) == n {
				return time.Duration(v) * unit, nil
			}
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: write e.g. 30d, 2w or 36h", s)
	}
	return d, nil
}

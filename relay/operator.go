package relay

import (
	"context"
	"fmt"
)

// What an operator looks at and decides on: quarantined fan-outs (and
// suppression lists, suppress.go). tenant "" is every tenant (the CLI on the host);
// the API passes the caller's.

// RetryQuarantined lifts an event's quarantine (after a fix) and tries its
// fan-out again now; if it fails again it is quarantined again, with the
// new reason.
func (r *Relay) RetryQuarantined(ctx context.Context, tenant string, eventRow int64) error {
	if err := r.store.ReleaseEvent(ctx, tenant, eventRow); err != nil {
		return err
	}
	if err := r.finishFanOut(ctx); err != nil {
		return fmt.Errorf("event row %d released; its fan-out will be retried by the dispatcher: %w", eventRow, err)
	}
	r.notify()
	return nil
}

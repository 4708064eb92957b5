package relay

import (
	"context"
	"fmt"

	"edgerelay/model"
)

// What an operator looks at and decides on: quarantined fan-outs (and
// suppression lists, suppress.go). tenant "" is every tenant (the CLI on the host);
// the API passes the caller's.

// Quarantined lists events whose fan-out is quarantined, newest first, with
// row ids below before (0 for the newest).
func (r *Relay) Quarantined(ctx context.Context, tenant string, before int64, limit int) ([]model.QuarantinedEvent, error) {
	return r.store.QuarantinedEvents(ctx, tenant, before, limit)
}

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

// DropQuarantined gives up the rest of a quarantined event's fan-out (the
// notifications written so far stay and are delivered) and returns how
// many notifications were given up.
func (r *Relay) DropQuarantined(ctx context.Context, tenant string, eventRow int64) (int, error) {
	return r.store.DropEvent(ctx, tenant, eventRow, r.now())
}

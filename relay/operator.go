package relay

import (
	"context"
	"fmt"

	"edgerelay/store"
)

// What an operator looks at and decides on: quarantined fan-outs and
// addresses marked dead. tenant "" is every tenant (the CLI on the host);
// the API passes the caller's.

// Quarantined lists events whose fan-out is quarantined, newest first, with
// row ids below before (0 for the newest).
func (r *Relay) Quarantined(ctx context.Context, tenant string, before int64, limit int) ([]store.QuarantinedEvent, error) {
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

// InvalidAddresses lists live dead-address marks after the cursor (the
// last one of the previous page; the zero value for the first).
func (r *Relay) InvalidAddresses(ctx context.Context, tenant string, after store.InvalidAddress, limit int) ([]store.InvalidAddress, error) {
	return r.store.InvalidAddresses(ctx, tenant, r.now(), after, limit)
}

// ClearInvalidAddress lifts a tenant's mark on an address, so the next
// notification to it is tried again; store.ErrNotFound if there was none.
func (r *Relay) ClearInvalidAddress(ctx context.Context, tenant, channel, address string) error {
	ok, err := r.store.ClearInvalidAddress(ctx, tenant, channel, address)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no mark on %s address %q for tenant %q: %w", channel, address, tenant, store.ErrNotFound)
	}
	return nil
}

package relay

import (
	"context"

	"edgerelay/model"
)

// Tailed outboxes' rejected rows (package sources records them; the CLI,
// the API and the console read them). A rejected row belongs to a source,
// which the operator configures, not to a tenant: its event may not even
// decode, so it has no tenant to scope it by.

// SettleSource saves a tailer's batch in one transaction: the state it
// leads to (the position only moves forward), the rows it rejected and the
// answers to the retries it read (model.SourceSettle).
func (r *Relay) SettleSource(ctx context.Context, name string, set model.SourceSettle) error {
	r.hooks.at(PhaseSettle)
	return r.store.SettleSource(ctx, name, set, r.now())
}

// SourceRejects lists recorded rejected rows in (source, row) order.
func (r *Relay) SourceRejects(ctx context.Context, f model.SourceRejectFilter) ([]model.SourceReject, error) {
	return r.store.SourceRejects(ctx, f)
}

// RetrySourceRejects asks the tailer of source to read rows (every
// recorded one if rows is nil) again on its next round, and returns the
// rows that have a record.
func (r *Relay) RetrySourceRejects(ctx context.Context, source string, rows []int64) ([]int64, error) {
	return r.store.RetrySourceRejects(ctx, source, rows, r.now())
}

// DropSourceRejects removes the records of rows (every one if rows is nil)
// and returns the rows removed: the operator has seen them.
func (r *Relay) DropSourceRejects(ctx context.Context, source string, rows []int64) ([]int64, error) {
	return r.store.DropSourceRejects(ctx, source, rows)
}

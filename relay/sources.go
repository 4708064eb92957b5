package relay

import (
	"context"

	"github.com/edgerelay/edgerelay/model"
)

// Tailed outboxes: package sources settles each batch through the relay
// (the crash drills stop it here); the rejected rows it records the CLI
// and the API read from store.Sources. A rejected row belongs to a source,
// which the operator configures, not to a tenant: its event may not even
// decode, so it has no tenant to scope it by.

// SettleSource saves a tailer's batch in one transaction: the state it
// leads to (the position only moves forward), the rows it rejected and the
// answers to the retries it read (model.SourceSettle).
func (r *Relay) SettleSource(ctx context.Context, name string, set model.SourceSettle) error {
	r.hooks.at(PhaseSettle)
	return r.store.SettleSource(ctx, name, set, r.now())
}

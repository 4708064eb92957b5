package postgres

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"time"
)

// HoldLease takes or renews a lease (sqlstore.HoldLease). Of two nodes
// taking a lapsed lease at once, the second's upsert waits for the first's
// row lock, then finds the lease live and another's, and changes nothing.
func (s *Store) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return writeQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (bool, error) {
		return sqlstore.HoldLease(ctx, q, name, holder, now, ttl)
	})
}

// DropLease deletes the holder's lease.
func (s *Store) DropLease(ctx context.Context, name, holder string) error {
	return s.runWrite(ctx, func(q sqlstore.Querier) error { return sqlstore.DropLease(ctx, q, name, holder) })
}

package sqlite

import (
	"context"
	"time"

	"edgerelay/store/internal/sqlstore"
)

// HoldLease takes or renews a lease (sqlstore.HoldLease).
func (s *Store) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return writeQ(ctx, s, func(q sqlstore.Querier) (bool, error) { return sqlstore.HoldLease(ctx, q, name, holder, now, ttl) })
}

// DropLease deletes the holder's lease.
func (s *Store) DropLease(ctx context.Context, name, holder string) error {
	return s.runWrite(ctx, func(q sqlstore.Querier) error { return sqlstore.DropLease(ctx, q, name, holder) })
}

package postgres

import (
	"context"
	"edgerelay/model"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HoldLease takes or renews a lease in one upsert: the row changes only if
// the lease is free, lapsed or the holder's own, and RETURNING says who
// holds it after the write. Of two nodes taking a lapsed lease at once,
// the second's upsert waits for the first's row lock, then finds the lease
// live and another's, and changes nothing.
func (s *Store) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	var held bool
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		var who string
		err := tx.QueryRow(ctx, `INSERT INTO leases (name, holder, until) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
				WHERE leases.holder = excluded.holder OR leases.until <= $4
			RETURNING holder`, name, holder, ms(now.Add(ttl)), ms(now)).Scan(&who)
		switch {
		case isNoRows(err):
			held = false // another's, and live: the upsert changed nothing
		case err != nil:
			return fmt.Errorf("hold lease %q: %w", name, err)
		default:
			held = who == holder
		}
		return nil
	})
	return held, err
}

// DropLease deletes the holder's lease.
func (s *Store) DropLease(ctx context.Context, name, holder string) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
			return fmt.Errorf("drop lease %q: %w", name, err)
		}
		return nil
	})
}

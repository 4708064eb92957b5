package postgres

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"

	"github.com/jackc/pgx/v5"
)

// Requests' keys are sqlstore's (ClaimRequest …), each in one grouped write.

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many.
func (s *Store) PruneRequests(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		// The rows are chosen once, in a materialized CTE: as an IN
		// (… LIMIT … SKIP LOCKED) subquery the planner may run it more than
		// once, and the DELETE then goes past the limit (seen: 6 of a
		// limit of 4).
		tag, err := tx.Exec(ctx, `WITH doomed AS MATERIALIZED (
				SELECT tenant, key FROM request_keys
				WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			DELETE FROM request_keys r USING doomed d WHERE r.tenant = d.tenant AND r.key = d.key`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

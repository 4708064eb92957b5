package sqlite

import (
	"context"
	"fmt"
	"time"
)

// Requests' keys are sqlstore's (ClaimRequest …), each in one write.

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many.
// Call it again while it returns limit: small batches keep the writer free
// for everyone else.
func (s *Store) PruneRequests(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil // SQLite would read a negative LIMIT as no limit at all
	}
	var n int64
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`DELETE FROM request_keys WHERE rowid IN (
				SELECT rowid FROM request_keys
				WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

package sqlite

import (
	"context"
	"fmt"
	"time"
)

// PruneSessions deletes up to limit expired sessions in one write.
func (s *Store) PruneSessions(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil // SQLite would read a negative LIMIT as no limit at all
	}
	var n int64
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`DELETE FROM console_sessions WHERE id_hash IN (
				SELECT id_hash FROM console_sessions WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune sessions: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

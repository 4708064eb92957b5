package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
)

// PruneSessions deletes up to limit expired sessions in one write, the
// rows chosen once (see PruneRequests).
func (s *Store) PruneSessions(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `WITH doomed AS MATERIALIZED (
				SELECT id_hash FROM console_sessions
				WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			DELETE FROM console_sessions c USING doomed d WHERE c.id_hash = d.id_hash`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune sessions: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

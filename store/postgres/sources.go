package postgres

import (
	"context"
	"edgerelay/store"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SourcePosition returns how far a tailed source has been relayed: the id
// of the last row handled, 0 if none yet.
func (s *Store) SourcePosition(ctx context.Context, name string) (int64, error) {
	var pos int64
	err := s.read(ctx, func(q querier) error {
		err := q.QueryRow(ctx, `SELECT position FROM source_positions WHERE source = $1`, name).Scan(&pos)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read position of source %q: %w", name, err)
		}
		return nil
	})
	return pos, err
}

// SaveSourcePosition records that a source has been relayed up to pos. It
// only moves forward: a smaller pos (a second tailer behind the first, a
// retried batch) leaves the saved one, and its updated_at, as they were.
func (s *Store) SaveSourcePosition(ctx context.Context, name string, pos int64, now time.Time) error {
	return s.write(ctx, store.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO source_positions (source, position, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
			WHERE excluded.position > source_positions.position`, name, pos, ms(now))
		if err != nil {
			return fmt.Errorf("save position of source %q: %w", name, err)
		}
		return nil
	})
}

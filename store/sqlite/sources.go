package sqlite

import (
	"context"
	"fmt"
	"time"
)

// SourcePosition returns how far a tailed source has been relayed: the id
// of the last row handled, 0 if none yet.
func (s *Store) SourcePosition(ctx context.Context, name string) (int64, error) {
	var pos int64
	err := s.rdb.QueryRowContext(ctx, `SELECT position FROM source_positions WHERE source = ?`, name).Scan(&pos)
	if isNoRows(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read position of source %q: %w", name, err)
	}
	return pos, nil
}

// SaveSourcePosition records that a source has been relayed up to pos. It
// only moves forward: a smaller pos (a second tailer behind the first, a
// retried batch) leaves the saved one, and its updated_at, as they were.
func (s *Store) SaveSourcePosition(ctx context.Context, name string, pos int64, now time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`INSERT INTO source_positions (source, position, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
			WHERE excluded.position > source_positions.position`, name, pos, ms(now))
		if err != nil {
			return fmt.Errorf("save position of source %q: %w", name, err)
		}
		return nil
	})
}

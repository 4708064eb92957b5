package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"edgerelay/store"
)

// SourceState returns a source's position and its gaps in id order, the
// zero state for a source never saved.
func (s *Store) SourceState(ctx context.Context, name string) (store.SourceState, error) {
	var st store.SourceState
	err := s.read(ctx, func(q querier) error {
		st = store.SourceState{}
		err := q.QueryRow(ctx, `SELECT position FROM source_positions WHERE source = $1`, name).Scan(&st.Position)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read position of source %q: %w", name, err)
		}
		rows, err := q.Query(ctx, `SELECT first, last, since, mark FROM source_gaps WHERE source = $1 ORDER BY first`, name)
		if err != nil {
			return fmt.Errorf("read gaps of source %q: %w", name, err)
		}
		defer rows.Close()
		for rows.Next() {
			var g store.SourceGap
			var since int64
			if err := rows.Scan(&g.First, &g.Last, &since, &g.Mark); err != nil {
				return fmt.Errorf("read gaps of source %q: %w", name, err)
			}
			g.Since = fromMS(since)
			st.Gaps = append(st.Gaps, g)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read gaps of source %q: %w", name, err)
		}
		return nil
	})
	return st, err
}

// SaveSourceState saves a source's position and gaps in one transaction,
// unless the position would move back.
func (s *Store) SaveSourceState(ctx context.Context, name string, st store.SourceState, now time.Time) error {
	return s.write(ctx, store.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		fail := func(err error) error { return fmt.Errorf("save state of source %q: %w", name, err) }
		tag, err := tx.Exec(ctx, `INSERT INTO source_positions (source, position, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
			WHERE excluded.position >= source_positions.position`, name, st.Position, ms(now))
		if err != nil {
			return fail(err)
		}
		if tag.RowsAffected() == 0 {
			return nil // behind the saved position: left as it was
		}
		if _, err := tx.Exec(ctx, `DELETE FROM source_gaps WHERE source = $1`, name); err != nil {
			return fail(err)
		}
		for _, g := range st.Gaps {
			if _, err := tx.Exec(ctx, `INSERT INTO source_gaps (source, first, last, since, mark) VALUES ($1, $2, $3, $4, $5)`,
				name, g.First, g.Last, ms(g.Since), g.Mark); err != nil {
				return fail(err)
			}
		}
		return nil
	})
}

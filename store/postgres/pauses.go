package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
)

// PauseProvider keeps a provider's pause in one upsert that never moves
// its end earlier (of two nodes pausing at once, the later end stays).
func (s *Store) PauseProvider(ctx context.Context, provider string, until time.Time) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO provider_pauses (provider, until) VALUES ($1, $2)
			ON CONFLICT (provider) DO UPDATE SET until = excluded.until WHERE excluded.until > provider_pauses.until`,
			provider, ms(until)); err != nil {
			return fmt.Errorf("pause provider %q: %w", provider, err)
		}
		return nil
	})
}

// ProviderPauses reads the live pauses: one row per provider that ever
// paused, so the read stays small.
func (s *Store) ProviderPauses(ctx context.Context, now time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT provider, until FROM provider_pauses WHERE until > $1`, ms(now))
		if err != nil {
			return fmt.Errorf("provider pauses: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var until int64
			if err := rows.Scan(&name, &until); err != nil {
				return fmt.Errorf("provider pauses: %w", err)
			}
			out[name] = fromMS(until)
		}
		return rows.Err()
	})
	return out, err
}

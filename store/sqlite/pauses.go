package sqlite

import (
	"context"
	"fmt"
	"time"
)

// PauseProvider keeps a provider's pause in one upsert that never moves
// its end earlier.
func (s *Store) PauseProvider(ctx context.Context, provider string, until time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`INSERT INTO provider_pauses (provider, until) VALUES (?1, ?2)
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT provider, until FROM provider_pauses WHERE until > ?`, ms(now))
	if err != nil {
		return nil, fmt.Errorf("provider pauses: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var name string
		var until int64
		if err := rows.Scan(&name, &until); err != nil {
			return nil, fmt.Errorf("provider pauses: %w", err)
		}
		out[name] = fromMS(until)
	}
	return out, rows.Err()
}

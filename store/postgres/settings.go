package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
)

// Secret reads name's value (every call after the first); only when there
// is none does it write fresh, with an insert that leaves a value already
// there, and read back what the table holds then. The read is a statement
// of its own: under READ COMMITTED it sees a value another node committed
// while the insert waited on it.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	var v []byte
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT value FROM settings WHERE name = $1`, name).Scan(&v)
	})
	if err == nil {
		return v, nil
	}
	if !isNoRows(err) {
		return nil, fmt.Errorf("read setting %q: %w", name, err)
	}
	err = s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settings (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
			name, fresh, ms(time.Now())); err != nil {
			return fmt.Errorf("keep setting %q: %w", name, err)
		}
		if err := tx.QueryRow(ctx, `SELECT value FROM settings WHERE name = $1`, name).Scan(&v); err != nil {
			return fmt.Errorf("read setting %q: %w", name, err)
		}
		return nil
	})
	return v, err
}

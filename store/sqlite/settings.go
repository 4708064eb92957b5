package sqlite

import (
	"context"
	"fmt"
	"time"
)

// Secret reads name's value from the read pool (every call after the
// first, and a read-only file); only when there is none does it write
// fresh, with an insert that leaves a value already there, and read back
// what the table holds then: another process may have written first.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	var v []byte
	err := s.rdb.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !isNoRows(err) {
		return nil, fmt.Errorf("read setting %q: %w", name, err)
	}
	err = s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`INSERT INTO settings (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
			name, fresh, ms(time.Now())); err != nil {
			return fmt.Errorf("keep setting %q: %w", name, err)
		}
		if err := tx.queryRow(`SELECT value FROM settings WHERE name = ?`, name).Scan(&v); err != nil {
			return fmt.Errorf("read setting %q: %w", name, err)
		}
		return nil
	})
	return v, err
}

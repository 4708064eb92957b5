package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"edgerelay/model"
)

// CreateSession keeps a console session.
func (s *Store) CreateSession(ctx context.Context, ss model.Session) error {
	if ss.IDHash == "" {
		return errors.New("create session: empty id hash")
	}
	return s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`INSERT INTO console_sessions (id_hash, tenant, token_hash, who, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)`, ss.IDHash, ss.Tenant, ss.TokenHash, ss.Who, ms(ss.CreatedAt), ms(ss.ExpiresAt)); err != nil {
			return fmt.Errorf("create session: %w", err)
		}
		return nil
	})
}

// Session reads a live session from the read pool: one primary-key lookup.
func (s *Store) Session(ctx context.Context, idHash string, now time.Time) (model.Session, error) {
	ss := model.Session{IDHash: idHash}
	var created, expires int64
	err := s.rdb.QueryRowContext(ctx, `SELECT tenant, token_hash, who, created_at, expires_at FROM console_sessions
		WHERE id_hash = ? AND expires_at > ?`, idHash, ms(now)).Scan(&ss.Tenant, &ss.TokenHash, &ss.Who, &created, &expires)
	if isNoRows(err) {
		return model.Session{}, fmt.Errorf("session: %w", model.ErrNotFound)
	}
	if err != nil {
		return model.Session{}, fmt.Errorf("read session: %w", err)
	}
	ss.CreatedAt, ss.ExpiresAt = fromMS(created), fromMS(expires)
	return ss, nil
}

// DeleteSession ends a session.
func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	return s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`DELETE FROM console_sessions WHERE id_hash = ?`, idHash); err != nil {
			return fmt.Errorf("delete session: %w", err)
		}
		return nil
	})
}

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

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"edgerelay/model"
)

// CreateSession keeps a console session.
func (s *Store) CreateSession(ctx context.Context, ss model.Session) error {
	if ss.IDHash == "" {
		return errors.New("create session: empty id hash")
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, tenant, token_hash, who, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, ss.IDHash, ss.Tenant, ss.TokenHash, ss.Who, ms(ss.CreatedAt), ms(ss.ExpiresAt)); err != nil {
			return fmt.Errorf("create session: %w", err)
		}
		return nil
	})
}

// Session reads a live session: one primary-key lookup.
func (s *Store) Session(ctx context.Context, idHash string, now time.Time) (model.Session, error) {
	ss := model.Session{IDHash: idHash}
	var created, expires int64
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT tenant, token_hash, who, created_at, expires_at FROM console_sessions
			WHERE id_hash = $1 AND expires_at > $2`, idHash, ms(now)).Scan(&ss.Tenant, &ss.TokenHash, &ss.Who, &created, &expires)
	})
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
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
			return fmt.Errorf("delete session: %w", err)
		}
		return nil
	})
}

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

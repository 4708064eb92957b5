package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// CreateSession keeps a console session, in q, a write transaction.
func CreateSession(ctx context.Context, q Querier, ss model.Session) error {
	if ss.IDHash == "" {
		return errors.New("create session: empty id hash")
	}
	if _, err := q.Exec(ctx, `INSERT INTO console_sessions (id_hash, tenant, token_hash, who, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, ss.IDHash, ss.Tenant, ss.TokenHash, ss.Who, MS(ss.CreatedAt), MS(ss.ExpiresAt)); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// Session reads a live session: one primary-key lookup.
func Session(ctx context.Context, q Querier, idHash string, now time.Time) (model.Session, error) {
	ss := model.Session{IDHash: idHash}
	var created, expires int64
	err := q.QueryRow(ctx, `SELECT tenant, token_hash, who, created_at, expires_at FROM console_sessions
		WHERE id_hash = $1 AND expires_at > $2`, idHash, MS(now)).Scan(&ss.Tenant, &ss.TokenHash, &ss.Who, &created, &expires)
	if IsNoRows(err) {
		return model.Session{}, fmt.Errorf("session: %w", model.ErrNotFound)
	}
	if err != nil {
		return model.Session{}, fmt.Errorf("read session: %w", err)
	}
	ss.CreatedAt, ss.ExpiresAt = FromMS(created), FromMS(expires)
	return ss, nil
}

// DeleteSession ends a session, in q, a write transaction.
func DeleteSession(ctx context.Context, q Querier, idHash string) error {
	if _, err := q.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

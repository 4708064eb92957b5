package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// CreateToken stores a token's hash (hex sha256) for tenant, in q, a write
// transaction. ErrTokenExists: a token with that hash is already stored.
func CreateToken(ctx context.Context, q Querier, tenant, name, hash string, now time.Time) (model.Token, error) {
	if hash == "" {
		// An empty hash would match a lookup of an empty token.
		return model.Token{}, errors.New("create token: empty hash")
	}
	tok := model.Token{Tenant: tenant, Name: name, CreatedAt: FromMS(MS(now))}
	err := q.QueryRow(ctx, `INSERT INTO tokens (tenant, name, hash, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (hash) DO NOTHING RETURNING id`, tenant, name, hash, MS(now)).Scan(&tok.ID)
	if IsNoRows(err) {
		return model.Token{}, fmt.Errorf("create token %q: %w", name, model.ErrTokenExists)
	}
	if err != nil {
		return model.Token{}, fmt.Errorf("create token %q: %w", name, err)
	}
	return tok, nil
}

// TokenByHash returns the token whose hash is hash. ErrNotFound when absent.
func TokenByHash(ctx context.Context, q Querier, hash string) (model.Token, error) {
	if hash == "" {
		return model.Token{}, fmt.Errorf("token: %w", model.ErrNotFound)
	}
	tok, err := scanToken(q.QueryRow(ctx, `SELECT id, tenant, name, created_at FROM tokens WHERE hash = $1`, hash))
	if IsNoRows(err) {
		return model.Token{}, fmt.Errorf("token: %w", model.ErrNotFound)
	}
	if err != nil {
		return model.Token{}, fmt.Errorf("read token: %w", err)
	}
	return tok, nil
}

// Tokens lists every token, oldest first.
func Tokens(ctx context.Context, q Querier) ([]model.Token, error) {
	out, err := All(ctx, q, func(r Rows) (model.Token, error) { return scanToken(r) },
		`SELECT id, tenant, name, created_at FROM tokens ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	if out == nil {
		out = []model.Token{}
	}
	return out, nil
}

func scanToken(row Row) (model.Token, error) {
	var tok model.Token
	var created int64
	err := row.Scan(&tok.ID, &tok.Tenant, &tok.Name, &created)
	tok.CreatedAt = FromMS(created)
	return tok, err
}

// DeleteToken deletes a token, in q, a write transaction: it stops
// working with the next lookup. ErrNotFound when there is no such token.
func DeleteToken(ctx context.Context, q Querier, id int64) error {
	n, err := q.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete token %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("token %d: %w", id, model.ErrNotFound)
	}
	return nil
}

// HasTokens reports whether any token is stored. What an empty table means
// (for instance, refusing to serve) is the API's decision.
func HasTokens(ctx context.Context, q Querier) (bool, error) {
	var has bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tokens)`).Scan(&has); err != nil {
		return false, fmt.Errorf("count tokens: %w", err)
	}
	return has, nil
}

package postgres

import (
	"context"
	"edgerelay/model"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateToken stores a token's hash (hex sha256) for tenant.
// ErrTokenExists: a token with that hash is already stored.
func (s *Store) CreateToken(ctx context.Context, tenant, name, hash string, now time.Time) (model.Token, error) {
	if hash == "" {
		// An empty hash would match a lookup of an empty token.
		return model.Token{}, errors.New("create token: empty hash")
	}
	tok := model.Token{Tenant: tenant, Name: name, CreatedAt: fromMS(ms(now))}
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO tokens (tenant, name, hash, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (hash) DO NOTHING RETURNING id`, tenant, name, hash, ms(now)).Scan(&tok.ID)
		if isNoRows(err) {
			return fmt.Errorf("create token %q: %w", name, model.ErrTokenExists)
		}
		if err != nil {
			return fmt.Errorf("create token %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return model.Token{}, err
	}
	return tok, nil
}

// TokenByHash returns the token whose hash is hash. ErrNotFound when absent.
func (s *Store) TokenByHash(ctx context.Context, hash string) (model.Token, error) {
	if hash == "" {
		return model.Token{}, fmt.Errorf("token: %w", model.ErrNotFound)
	}
	var tok model.Token
	var created int64
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT id, tenant, name, created_at FROM tokens WHERE hash = $1`, hash).
			Scan(&tok.ID, &tok.Tenant, &tok.Name, &created)
	})
	if isNoRows(err) {
		return model.Token{}, fmt.Errorf("token: %w", model.ErrNotFound)
	}
	if err != nil {
		return model.Token{}, fmt.Errorf("read token: %w", err)
	}
	tok.CreatedAt = fromMS(created)
	return tok, nil
}

// Tokens lists every token, oldest first.
func (s *Store) Tokens(ctx context.Context) ([]model.Token, error) {
	out := []model.Token{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT id, tenant, name, created_at FROM tokens ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var tok model.Token
			var created int64
			if err := rows.Scan(&tok.ID, &tok.Tenant, &tok.Name, &created); err != nil {
				return err
			}
			tok.CreatedAt = fromMS(created)
			out = append(out, tok)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// DeleteToken deletes a token: it stops working with the next lookup.
// ErrNotFound when there is no such token.
func (s *Store) DeleteToken(ctx context.Context, id int64) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("delete token %d: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("token %d: %w", id, model.ErrNotFound)
		}
		return nil
	})
}

// HasTokens reports whether any token is stored.
func (s *Store) HasTokens(ctx context.Context) (bool, error) {
	var has bool
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tokens)`).Scan(&has)
	})
	if err != nil {
		return false, fmt.Errorf("count tokens: %w", err)
	}
	return has, nil
}

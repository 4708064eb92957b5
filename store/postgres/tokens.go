package postgres

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"time"
)

// Tokens are sqlstore's, read from the pool.

// CreateToken stores a token's hash (hex sha256) for tenant.
func (s *Store) CreateToken(ctx context.Context, tenant, name, hash string, now time.Time) (model.Token, error) {
	return writeQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (model.Token, error) {
		return sqlstore.CreateToken(ctx, q, tenant, name, hash, now)
	})
}

// TokenByHash returns the token whose hash is hash.
func (s *Store) TokenByHash(ctx context.Context, hash string) (model.Token, error) {
	return readQ(ctx, s, func(q sqlstore.Querier) (model.Token, error) { return sqlstore.TokenByHash(ctx, q, hash) })
}

// Tokens lists every token, oldest first.
func (s *Store) Tokens(ctx context.Context) ([]model.Token, error) {
	return readQ(ctx, s, func(q sqlstore.Querier) ([]model.Token, error) { return sqlstore.Tokens(ctx, q) })
}

// DeleteToken deletes a token: it stops working with the next lookup.
func (s *Store) DeleteToken(ctx context.Context, id int64) error {
	_, err := writeQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (struct{}, error) {
		return struct{}{}, sqlstore.DeleteToken(ctx, q, id)
	})
	return err
}

// HasTokens reports whether any token is stored.
func (s *Store) HasTokens(ctx context.Context) (bool, error) {
	return readQ(ctx, s, func(q sqlstore.Querier) (bool, error) { return sqlstore.HasTokens(ctx, q) })
}

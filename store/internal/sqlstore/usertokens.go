package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// CreateUserTokenKey keeps a new live key with its secret, in q, a write
// transaction; with retireOthers the tenant's other live keys are retired
// at k.CreatedAt first. ErrKeyExists: the tenant has a key with that id.
func CreateUserTokenKey(ctx context.Context, q Querier, k model.UserTokenKey, secret string, retireOthers bool) error {
	if secret == "" {
		// An empty secret would make any signature of an empty key hold.
		return fmt.Errorf("create user-token key %q: empty secret", k.KID)
	}
	if retireOthers {
		if _, err := q.Exec(ctx, `UPDATE user_token_keys SET retired_at = $1 WHERE tenant = $2 AND retired_at IS NULL`,
			MS(k.CreatedAt), k.Tenant); err != nil {
			return fmt.Errorf("retire user-token keys of %s: %w", k.Tenant, err)
		}
	}
	n, err := q.Exec(ctx, `INSERT INTO user_token_keys (tenant, kid, secret, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, kid) DO NOTHING`, k.Tenant, k.KID, secret, MS(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("create user-token key %q: %w", k.KID, err)
	}
	if n == 0 {
		return fmt.Errorf("user-token key %q of %s: %w", k.KID, k.Tenant, model.ErrKeyExists)
	}
	return nil
}

// UserTokenSecret is the secret of the tenant's live key kid: one
// primary-key lookup. ErrNotFound if there is none, or it is retired.
func UserTokenSecret(ctx context.Context, q Querier, tenant, kid string) (string, error) {
	var secret string
	err := q.QueryRow(ctx, `SELECT secret FROM user_token_keys WHERE tenant = $1 AND kid = $2 AND retired_at IS NULL`,
		tenant, kid).Scan(&secret)
	if IsNoRows(err) {
		return "", fmt.Errorf("user-token key %q: %w", kid, model.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("read user-token key %q: %w", kid, err)
	}
	return secret, nil
}

// UserTokenKeys lists the tenant's keys, retired ones too, oldest first.
func UserTokenKeys(ctx context.Context, q Querier, tenant string) ([]model.UserTokenKey, error) {
	out, err := All(ctx, q, func(r Rows) (model.UserTokenKey, error) {
		k := model.UserTokenKey{Tenant: tenant}
		var created int64
		var retired *int64
		err := r.Scan(&k.KID, &created, &retired)
		k.CreatedAt = FromMS(created)
		if retired != nil {
			k.RetiredAt = FromMS(*retired)
		}
		return k, err
	}, `SELECT kid, created_at, retired_at FROM user_token_keys WHERE tenant = $1 ORDER BY created_at, kid`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list user-token keys: %w", err)
	}
	if out == nil {
		out = []model.UserTokenKey{}
	}
	return out, nil
}

// RetireUserTokenKey retires the tenant's live key kid at now, in q, a
// write transaction. ErrNotFound if there is no such live key.
func RetireUserTokenKey(ctx context.Context, q Querier, tenant, kid string, now time.Time) error {
	n, err := q.Exec(ctx, `UPDATE user_token_keys SET retired_at = $1 WHERE tenant = $2 AND kid = $3 AND retired_at IS NULL`,
		MS(now), tenant, kid)
	if err != nil {
		return fmt.Errorf("retire user-token key %q: %w", kid, err)
	}
	if n == 0 {
		return fmt.Errorf("live user-token key %q: %w", kid, model.ErrNotFound)
	}
	return nil
}

// SetFeedOrigins replaces the tenant's allowed origins, in q, a write
// transaction: an origin kept keeps its row, one left out is deleted.
func SetFeedOrigins(ctx context.Context, q Querier, tenant string, origins []string, now time.Time) error {
	have, err := FeedOrigins(ctx, q, tenant)
	if err != nil {
		return err
	}
	for _, o := range have {
		if !slices.Contains(origins, o) {
			if _, err := q.Exec(ctx, `DELETE FROM feed_origins WHERE tenant = $1 AND origin = $2`, tenant, o); err != nil {
				return fmt.Errorf("remove origin %q: %w", o, err)
			}
		}
	}
	for _, o := range origins {
		if _, err := q.Exec(ctx, `INSERT INTO feed_origins (tenant, origin, created_at) VALUES ($1, $2, $3)
			ON CONFLICT (tenant, origin) DO NOTHING`, tenant, o, MS(now)); err != nil {
			return fmt.Errorf("add origin %q: %w", o, err)
		}
	}
	return nil
}

// FeedOrigins lists the tenant's allowed origins in byte order.
func FeedOrigins(ctx context.Context, q Querier, tenant string) ([]string, error) {
	out, err := All(ctx, q, func(r Rows) (string, error) {
		var o string
		return o, r.Scan(&o)
	}, `SELECT origin FROM feed_origins WHERE tenant = $1`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list origins of %s: %w", tenant, err)
	}
	// Sorted here, not by the database: PostgreSQL's collation would not
	// order them byte by byte as SQLite does.
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// OriginAllowed reports whether any tenant allows origin.
func OriginAllowed(ctx context.Context, q Querier, origin string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM feed_origins WHERE origin = $1)`, origin).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up origin %q: %w", origin, err)
	}
	return ok, nil
}

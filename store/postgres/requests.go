package postgres

import (
	"context"
	"edgerelay/store"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stored request idempotency (IETF Idempotency-Key draft, Stripe style): the
// response of a completed request is kept under its key until the key
// expires, so a retry gets the same answer instead of a second effect.
// Only completed requests are stored (see store/sqlite/requests.go): that a
// request is running is not a durable fact here either.

// LookupRequest returns the response stored for k, if a request with its
// key completed and the key has not expired by now; ErrKeyReused if the
// key was used for a different fingerprint; (nil, nil) if there is none.
func (s *Store) LookupRequest(ctx context.Context, k store.RequestKey, now time.Time) (*store.StoredResponse, error) {
	var (
		fp     string
		status int
		ctype  *string
		body   []byte
	)
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT fingerprint, status, content_type, body FROM request_keys
			WHERE tenant = $1 AND key = $2 AND state = 'done' AND expires_at > $3`, k.Tenant, k.Key, ms(now)).
			Scan(&fp, &status, &ctype, &body)
	})
	switch {
	case isNoRows(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read request key %q: %w", k.Key, err)
	case fp != k.Fingerprint:
		return nil, fmt.Errorf("%w: key %q", store.ErrKeyReused, k.Key)
	}
	if body == nil {
		body = []byte{}
	}
	return &store.StoredResponse{Status: status, ContentType: deref(ctype), Body: body}, nil
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl. A live response already stored under the key
// (another node ran the same request at the same moment) is kept: the
// first answer stays the answer.
func (s *Store) SaveResponse(ctx context.Context, k store.RequestKey, resp store.StoredResponse, now time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("save response for key %q: need a positive ttl, have %s", k.Key, ttl)
	}
	body := resp.Body
	if body == nil {
		body = []byte{} // an empty body, not a missing one
	}
	return s.write(ctx, store.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, status, content_type, body, created_at, expires_at)
			VALUES ($1, $2, $3, 'done', $4, $5, $6, $7, $4, $8)
			ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'done',
				locked_until = excluded.locked_until, status = excluded.status, content_type = excluded.content_type,
				body = excluded.body, created_at = excluded.created_at, expires_at = excluded.expires_at
			WHERE request_keys.state <> 'done' OR request_keys.expires_at <= $4`,
			k.Tenant, k.Key, k.Fingerprint, ms(now), resp.Status, resp.ContentType, body, ms(now.Add(ttl)))
		if err != nil {
			return fmt.Errorf("save response for key %q: %w", k.Key, err)
		}
		return nil
	})
}

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many.
func (s *Store) PruneRequests(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, store.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM request_keys WHERE (tenant, key) IN (
				SELECT tenant, key FROM request_keys
				WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

package postgres

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The requests' keys are sqlstore's, each in one write of this store.

// ClaimRequest takes the key for this request (sqlstore.ClaimRequest).
func (s *Store) ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	var claim model.RequestClaim
	err := s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) (err error) {
		claim, err = sqlstore.ClaimRequest(ctx, shared(tx), k, h)
		return err
	})
	return claim, err
}

// RenewRequest extends owner's claim on k, if it still has it.
func (s *Store) RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error) {
	var held bool
	err := s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) (err error) {
		held, err = sqlstore.RenewRequest(ctx, shared(tx), k, owner, until)
		return err
	})
	return held, err
}

// ReleaseRequest deletes this request's claim, if it still holds one.
func (s *Store) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	return s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) (err error) {
		return sqlstore.ReleaseRequest(ctx, shared(tx), k)
	})
}

// LookupRequest returns the response stored for k (sqlstore.LookupRequest).
func (s *Store) LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
	var r *model.StoredResponse
	err := s.read(ctx, func(q querier) (err error) {
		r, err = sqlstore.LookupRequest(ctx, shared(q), k, now)
		return err
	})
	return r, err
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl (sqlstore.SaveResponse).
func (s *Store) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	if err := sqlstore.CheckTTL(k, ttl); err != nil {
		return err
	}
	return s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) (err error) {
		return sqlstore.SaveResponse(ctx, shared(tx), k, resp, now, ttl)
	})
}

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many.
func (s *Store) PruneRequests(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		// The rows are chosen once, in a materialized CTE: as an IN
		// (… LIMIT … SKIP LOCKED) subquery the planner may run it more than
		// once, and the DELETE then goes past the limit (seen: 6 of a
		// limit of 4).
		tag, err := tx.Exec(ctx, `WITH doomed AS MATERIALIZED (
				SELECT tenant, key FROM request_keys
				WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			DELETE FROM request_keys r USING doomed d WHERE r.tenant = d.tenant AND r.key = d.key`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

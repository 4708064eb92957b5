package postgres

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Requests' keys are sqlstore's (ClaimRequest …), each in one grouped write.

// ClaimRequest takes the key for this request (sqlstore.ClaimRequest).
func (s *Store) ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	return groupedQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (model.RequestClaim, error) { return sqlstore.ClaimRequest(ctx, q, k, h) })
}

// RenewRequest extends owner's claim on k, if it still has it.
func (s *Store) RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error) {
	return groupedQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (bool, error) { return sqlstore.RenewRequest(ctx, q, k, owner, until) })
}

// ReleaseRequest deletes this request's claim, if it still holds one.
func (s *Store) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	_, err := groupedQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (struct{}, error) { return struct{}{}, sqlstore.ReleaseRequest(ctx, q, k) })
	return err
}

// LookupRequest returns the response stored for k (sqlstore.LookupRequest).
func (s *Store) LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
	return readQ(ctx, s, func(q sqlstore.Querier) (*model.StoredResponse, error) { return sqlstore.LookupRequest(ctx, q, k, now) })
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl (sqlstore.SaveResponse).
func (s *Store) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	_, err := groupedQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (struct{}, error) {
		return struct{}{}, sqlstore.SaveResponse(ctx, q, k, resp, now, ttl)
	})
	return err
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

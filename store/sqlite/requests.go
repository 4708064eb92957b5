package sqlite

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"fmt"
	"time"
)

// Requests' keys are sqlstore's (ClaimRequest …), each in one write.

// ClaimRequest takes the key for this request (sqlstore.ClaimRequest).
func (s *Store) ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	return writeQ(ctx, s, func(q sqlstore.Querier) (model.RequestClaim, error) { return sqlstore.ClaimRequest(ctx, q, k, h) })
}

// RenewRequest extends owner's claim on k, if it still has it.
func (s *Store) RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error) {
	return writeQ(ctx, s, func(q sqlstore.Querier) (bool, error) { return sqlstore.RenewRequest(ctx, q, k, owner, until) })
}

// ReleaseRequest deletes this request's claim, if it still holds one.
func (s *Store) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	_, err := writeQ(ctx, s, func(q sqlstore.Querier) (struct{}, error) { return struct{}{}, sqlstore.ReleaseRequest(ctx, q, k) })
	return err
}

// LookupRequest returns the response stored for k (sqlstore.LookupRequest).
func (s *Store) LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
	return sqlstore.LookupRequest(ctx, s.reader(), k, now)
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl (sqlstore.SaveResponse).
func (s *Store) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	_, err := writeQ(ctx, s, func(q sqlstore.Querier) (struct{}, error) {
		return struct{}{}, sqlstore.SaveResponse(ctx, q, k, resp, now, ttl)
	})
	return err
}

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many.
// Call it again while it returns limit: small batches keep the writer free
// for everyone else.
func (s *Store) PruneRequests(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil // SQLite would read a negative LIMIT as no limit at all
	}
	var n int64
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`DELETE FROM request_keys WHERE rowid IN (
				SELECT rowid FROM request_keys
				WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

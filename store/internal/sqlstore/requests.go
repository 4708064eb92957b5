package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Stored request idempotency (IETF Idempotency-Key draft, Stripe style): the
// response of a completed request is kept under its key until the key
// expires, so a retry gets the same answer instead of a second effect.
//
// A request running under a key holds a claim on it (state in_flight)
// until locked_until, so that a repeat at any process sharing the store is
// told it is in progress; a claim whose process died lapses at its end, so
// a crash blocks the client's retry for at most that long. The effects
// behind the API are idempotent by themselves (event dedupe, status
// transitions), which is what makes a repeat that runs again after a lapse
// safe.

// ClaimRequest takes the key for this request in one upsert, in q, a
// write transaction, which changes the row only where the key is free: a
// completed response that expired, or a claim that lapsed. Otherwise the
// row says who has it.
func ClaimRequest(ctx context.Context, q Querier, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	var claim model.RequestClaim
	var one int
	err := q.QueryRow(ctx, `INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, created_at, expires_at, owner)
			VALUES ($1, $2, $3, 'in_flight', $4, $5, $4, $6)
		ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_flight',
			locked_until = excluded.locked_until, status = NULL, content_type = NULL, body = NULL,
			created_at = excluded.created_at, expires_at = excluded.expires_at, owner = excluded.owner
			WHERE (request_keys.state = 'done' AND request_keys.expires_at <= $5)
			   OR (request_keys.state = 'in_flight' AND (request_keys.locked_until <= $5
			       OR ($7 <> '' AND request_keys.owner = $7 AND request_keys.fingerprint = $3)))
		RETURNING 1`, k.Tenant, k.Key, k.Fingerprint, MS(h.Until), MS(h.Now), h.Owner, h.Abandoned).Scan(&one)
	if err == nil {
		return claim, nil // held
	}
	if !IsNoRows(err) {
		return claim, fmt.Errorf("claim request key %q: %w", k.Key, err)
	}
	var (
		fp, state, owner string
		locked           int64
		status           *int
		ctype            *string
		body             []byte
	)
	if err := q.QueryRow(ctx, `SELECT fingerprint, state, locked_until, owner, status, content_type, body FROM request_keys
		WHERE tenant = $1 AND key = $2`, k.Tenant, k.Key).Scan(&fp, &state, &locked, &owner, &status, &ctype, &body); err != nil {
		return claim, fmt.Errorf("claim request key %q: %w", k.Key, err)
	}
	switch {
	case fp != k.Fingerprint:
		return claim, fmt.Errorf("%w: key %q", model.ErrKeyReused, k.Key)
	case state == "done":
		claim.Stored = stored(status, ctype, body)
	default:
		claim.Busy, claim.Owner = FromMS(locked), owner
	}
	return claim, nil
}

func stored(status *int, ctype *string, body []byte) *model.StoredResponse {
	r := &model.StoredResponse{Body: body}
	if r.Body == nil {
		r.Body = []byte{}
	}
	if status != nil {
		r.Status = *status
	}
	if ctype != nil {
		r.ContentType = *ctype
	}
	return r
}

// RenewRequest extends owner's claim on k, if it still has it, in q, a
// write transaction.
func RenewRequest(ctx context.Context, q Querier, k model.RequestKey, owner string, until time.Time) (bool, error) {
	n, err := q.Exec(ctx, `UPDATE request_keys SET locked_until = $1, expires_at = $1
		WHERE tenant = $2 AND key = $3 AND state = 'in_flight' AND owner = $4 AND fingerprint = $5`,
		MS(until), k.Tenant, k.Key, owner, k.Fingerprint)
	if err != nil {
		return false, fmt.Errorf("renew request key %q: %w", k.Key, err)
	}
	return n == 1, nil
}

// ReleaseRequest deletes this request's claim, if it still holds one, in
// q, a write transaction.
func ReleaseRequest(ctx context.Context, q Querier, k model.RequestKey) error {
	if _, err := q.Exec(ctx, `DELETE FROM request_keys WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND fingerprint = $3`,
		k.Tenant, k.Key, k.Fingerprint); err != nil {
		return fmt.Errorf("release request key %q: %w", k.Key, err)
	}
	return nil
}

// LookupRequest returns the response stored for k, if a request with its
// key completed and the key has not expired by now:
//
//   - (*StoredResponse, nil): the same request completed before: replay it.
//   - ErrKeyReused: the key was used for a different fingerprint.
//   - (nil, nil): no live response: run the request.
//
// Rows left in_flight are ignored: they are not answers.
func LookupRequest(ctx context.Context, q Querier, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
	var (
		fp     string
		status int
		ctype  *string
		body   []byte
	)
	err := q.QueryRow(ctx, `SELECT fingerprint, status, content_type, body FROM request_keys
		WHERE tenant = $1 AND key = $2 AND state = 'done' AND expires_at > $3`, k.Tenant, k.Key, MS(now)).
		Scan(&fp, &status, &ctype, &body)
	switch {
	case IsNoRows(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read request key %q: %w", k.Key, err)
	case fp != k.Fingerprint:
		return nil, fmt.Errorf("%w: key %q", model.ErrKeyReused, k.Key)
	}
	return stored(&status, ctype, body), nil
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl (ttl > 0), in q, a write transaction. A live
// response already stored under the key (another process ran the same
// request at the same moment) is kept: the first answer stays the answer.
func SaveResponse(ctx context.Context, q Querier, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("save response for key %q: need a positive ttl, have %s", k.Key, ttl)
	}
	body := resp.Body
	if body == nil {
		body = []byte{} // an empty body, not a missing one
	}
	_, err := q.Exec(ctx, `INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, status, content_type, body, created_at, expires_at)
		VALUES ($1, $2, $3, 'done', $4, $5, $6, $7, $4, $8)
		ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'done',
			locked_until = excluded.locked_until, status = excluded.status, content_type = excluded.content_type,
			body = excluded.body, created_at = excluded.created_at, expires_at = excluded.expires_at
		WHERE request_keys.state <> 'done' OR request_keys.expires_at <= $4`,
		k.Tenant, k.Key, k.Fingerprint, MS(now), resp.Status, resp.ContentType, body, MS(now.Add(ttl)))
	if err != nil {
		return fmt.Errorf("save response for key %q: %w", k.Key, err)
	}
	return nil
}

package postgres

import (
	"context"
	"edgerelay/model"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stored request idempotency (IETF Idempotency-Key draft, Stripe style): the
// response of a completed request is kept under its key until the key
// expires, so a retry gets the same answer instead of a second effect.
//
// A request running under a key holds a claim on it (state in_flight)
// until locked_until, so that a repeat at any node sharing the database is
// told it is in progress; a claim whose process died lapses at its end, so
// a crash blocks the client's retry for at most that long.

// ClaimRequest takes the key for this request in one upsert, which changes
// the row only where the key is free: a completed response that expired,
// or a claim that lapsed. Otherwise the row says who has it. Of two nodes
// claiming one key at once, the second's upsert waits for the first's
// commit and then finds the key held.
func (s *Store) ClaimRequest(ctx context.Context, k model.RequestKey, h model.RequestHold) (model.RequestClaim, error) {
	var claim model.RequestClaim
	err := s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		claim = model.RequestClaim{}
		var one int
		err := tx.QueryRow(ctx, `INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, created_at, expires_at, owner)
				VALUES ($1, $2, $3, 'in_flight', $4, $5, $4, $6)
			ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_flight',
				locked_until = excluded.locked_until, status = NULL, content_type = NULL, body = NULL,
				created_at = excluded.created_at, expires_at = excluded.expires_at, owner = excluded.owner
				WHERE (request_keys.state = 'done' AND request_keys.expires_at <= $5)
				   OR (request_keys.state = 'in_flight' AND (request_keys.locked_until <= $5
				       OR ($7 <> '' AND request_keys.owner = $7 AND request_keys.fingerprint = $3)))
			RETURNING 1`, k.Tenant, k.Key, k.Fingerprint, ms(h.Until), ms(h.Now), h.Owner, h.Abandoned).Scan(&one)
		if err == nil {
			return nil // held
		}
		if !isNoRows(err) {
			return fmt.Errorf("claim request key %q: %w", k.Key, err)
		}
		var (
			fp, state, owner string
			locked           int64
			status           *int
			ctype            *string
			body             []byte
		)
		if err := tx.QueryRow(ctx, `SELECT fingerprint, state, locked_until, owner, status, content_type, body FROM request_keys
			WHERE tenant = $1 AND key = $2`, k.Tenant, k.Key).Scan(&fp, &state, &locked, &owner, &status, &ctype, &body); err != nil {
			return fmt.Errorf("claim request key %q: %w", k.Key, err)
		}
		switch {
		case fp != k.Fingerprint:
			return fmt.Errorf("%w: key %q", model.ErrKeyReused, k.Key)
		case state == "done":
			if body == nil {
				body = []byte{}
			}
			st := 0
			if status != nil {
				st = *status
			}
			claim.Stored = &model.StoredResponse{Status: st, ContentType: deref(ctype), Body: body}
		default:
			claim.Busy, claim.Owner = fromMS(locked), owner
		}
		return nil
	})
	return claim, err
}

// RenewRequest extends owner's claim on k, if it still has it.
func (s *Store) RenewRequest(ctx context.Context, k model.RequestKey, owner string, until time.Time) (bool, error) {
	var held bool
	err := s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE request_keys SET locked_until = $1, expires_at = $1
			WHERE tenant = $2 AND key = $3 AND state = 'in_flight' AND owner = $4 AND fingerprint = $5`,
			ms(until), k.Tenant, k.Key, owner, k.Fingerprint)
		if err != nil {
			return fmt.Errorf("renew request key %q: %w", k.Key, err)
		}
		held = tag.RowsAffected() == 1
		return nil
	})
	return held, err
}

// ReleaseRequest deletes this request's claim, if it still holds one.
func (s *Store) ReleaseRequest(ctx context.Context, k model.RequestKey) error {
	return s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM request_keys WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND fingerprint = $3`,
			k.Tenant, k.Key, k.Fingerprint); err != nil {
			return fmt.Errorf("release request key %q: %w", k.Key, err)
		}
		return nil
	})
}

// LookupRequest returns the response stored for k, if a request with its
// key completed and the key has not expired by now; ErrKeyReused if the
// key was used for a different fingerprint; (nil, nil) if there is none.
func (s *Store) LookupRequest(ctx context.Context, k model.RequestKey, now time.Time) (*model.StoredResponse, error) {
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
		return nil, fmt.Errorf("%w: key %q", model.ErrKeyReused, k.Key)
	}
	if body == nil {
		body = []byte{}
	}
	return &model.StoredResponse{Status: status, ContentType: deref(ctype), Body: body}, nil
}

// SaveResponse stores the response of a completed request under k, to be
// replayed until now+ttl. A live response already stored under the key
// (another node ran the same request at the same moment) is kept: the
// first answer stays the answer.
func (s *Store) SaveResponse(ctx context.Context, k model.RequestKey, resp model.StoredResponse, now time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("save response for key %q: need a positive ttl, have %s", k.Key, ttl)
	}
	body := resp.Body
	if body == nil {
		body = []byte{} // an empty body, not a missing one
	}
	return s.grouped(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
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

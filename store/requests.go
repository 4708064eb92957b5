package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Stored request idempotency (IETF Idempotency-Key draft, Stripe style): a
// request carrying a key claims it before it runs, and its response is kept
// until the key expires, so a retry gets the same answer instead of a second
// effect. Every decision is made inside one writer op: the insert that
// claims, the read of the row that was there, and the take-over, so two
// requests with the same key can never both run.

// RequestKey identifies a request under an idempotency key. Fingerprint is
// the caller's sha256 of method, path and body.
type RequestKey struct{ Tenant, Key, Fingerprint string }

// StoredResponse is what a completed request answered, replayed to retries.
type StoredResponse struct {
	Status      int
	ContentType string
	Body        []byte
}

const (
	reqInFlight = "in_flight"
	reqDone     = "done"
)

// BeginRequest claims k for a request at now. The claim holds for lock (a
// claim older than that is taken to be abandoned: lock must exceed the
// longest a request can run); the key and any stored response last ttl from
// the claim. Outcomes:
//
//   - (nil, nil): claimed, because the key is new, or expired, or held by an
//     in-flight claim with the same fingerprint whose lock ended before now.
//     The caller runs the request, then calls FinishRequest or
//     ReleaseRequest.
//   - (*StoredResponse, nil): the same request completed before: replay it.
//   - ErrKeyInFlight: the first request with this key still holds its lock.
//   - ErrKeyReused: the key was used for a different fingerprint and has not
//     expired.
//
// A lock still held is never broken, not even past expires_at.
func (s *Store) BeginRequest(ctx context.Context, k RequestKey, now time.Time, lock, ttl time.Duration) (*StoredResponse, error) {
	if lock <= 0 || ttl < lock {
		return nil, fmt.Errorf("begin request: need 0 < lock <= ttl, have lock %s, ttl %s", lock, ttl)
	}
	t, lockUntil, expires := ms(now), ms(now.Add(lock)), ms(now.Add(ttl))
	var replay *StoredResponse
	err := s.w.do(ctx, func(tx *Tx) error {
		replay = nil
		var one int
		err := tx.queryRow(`INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, created_at, expires_at)
			VALUES (?, ?, ?, 'in_flight', ?, ?, ?)
			ON CONFLICT (tenant, key) DO NOTHING
			RETURNING 1`,
			k.Tenant, k.Key, k.Fingerprint, lockUntil, t, expires).Scan(&one)
		if err == nil {
			return nil // a new key: claimed
		}
		if !isNoRows(err) {
			return fmt.Errorf("claim request key %q: %w", k.Key, err)
		}
		var (
			fp, state        string
			locked, expireAt int64
			status           sql.NullInt64
			ctype            sql.NullString
			body             []byte
		)
		if err := tx.queryRow(`SELECT fingerprint, state, locked_until, expires_at, status, content_type, body
			FROM request_keys WHERE tenant = ? AND key = ?`, k.Tenant, k.Key).
			Scan(&fp, &state, &locked, &expireAt, &status, &ctype, &body); err != nil {
			return fmt.Errorf("read request key %q: %w", k.Key, err)
		}
		held := state == reqInFlight && locked >= t
		expired := expireAt <= t
		switch {
		case held && fp != k.Fingerprint && !expired:
			return fmt.Errorf("%w: key %q", ErrKeyReused, k.Key)
		case held:
			return fmt.Errorf("%w: key %q", ErrKeyInFlight, k.Key)
		case expired:
			// The key is free again: a new claim, whatever was there.
		case fp != k.Fingerprint:
			return fmt.Errorf("%w: key %q", ErrKeyReused, k.Key)
		case state == reqDone:
			replay = &StoredResponse{Status: int(status.Int64), ContentType: ctype.String, Body: body}
			return nil
		default:
			// In flight with its lock run out: the process that claimed it
			// died. Take it over.
		}
		if _, err := tx.exec(`UPDATE request_keys SET fingerprint = ?, state = 'in_flight', locked_until = ?,
				status = NULL, content_type = NULL, body = NULL, created_at = ?, expires_at = ?
			WHERE tenant = ? AND key = ?`,
			k.Fingerprint, lockUntil, t, expires, k.Tenant, k.Key); err != nil {
			return fmt.Errorf("take over request key %q: %w", k.Key, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return replay, nil
}

// FinishRequest stores the response of the request that claimed k, to be
// replayed until the key expires (expires_at is left as the claim set it).
// ErrClaimLost: k is no longer claimed by an in-flight request with this
// fingerprint.
func (s *Store) FinishRequest(ctx context.Context, k RequestKey, resp StoredResponse, now time.Time) error {
	body := resp.Body
	if body == nil {
		body = []byte{} // an empty body, not a missing one
	}
	return s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`UPDATE request_keys SET state = 'done', status = ?, content_type = ?, body = ?, locked_until = ?
			WHERE tenant = ? AND key = ? AND fingerprint = ? AND state = 'in_flight'`,
			resp.Status, resp.ContentType, body, ms(now), k.Tenant, k.Key, k.Fingerprint)
		if err != nil {
			return fmt.Errorf("finish request key %q: %w", k.Key, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("finish request key %q: %w", k.Key, ErrClaimLost)
		}
		return nil
	})
}

// ReleaseRequest deletes the in-flight claim on k, so that a retry runs the
// request again: for failures that must not be replayed (a 5xx). A stored
// response is never deleted. ErrClaimLost: there was no in-flight claim
// with this fingerprint.
func (s *Store) ReleaseRequest(ctx context.Context, k RequestKey) error {
	return s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`DELETE FROM request_keys WHERE tenant = ? AND key = ? AND fingerprint = ? AND state = 'in_flight'`,
			k.Tenant, k.Key, k.Fingerprint)
		if err != nil {
			return fmt.Errorf("release request key %q: %w", k.Key, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("release request key %q: %w", k.Key, ErrClaimLost)
		}
		return nil
	})
}

// PruneRequests deletes up to limit keys that expired by now, oldest first,
// in one write, and returns how many. A claim whose lock still holds is kept.
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
				WHERE expires_at <= ?1 AND NOT (state = 'in_flight' AND locked_until >= ?1)
				ORDER BY expires_at LIMIT ?2)`, ms(now), limit)
		if err != nil {
			return fmt.Errorf("prune request keys: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"edgerelay/model"

	"github.com/jackc/pgx/v5"
)

// Suppression lists (issue 17), as store/sqlite's: one row per tenant,
// channel and address (normalised by the relay), in suppressions
// (migration 0011).

const suppressionCols = `tenant, channel, address, reason, source, provider, notification, detail, created_at, expires_at`

// suppressUpsert ends every INSERT into suppressions: an address already
// listed keeps its entry unless the new one lasts longer (NULL, never,
// outlasts any time) or the old one has lapsed by the new one's time.
const suppressUpsert = ` ON CONFLICT (tenant, channel, address) DO UPDATE SET
		reason = excluded.reason, source = excluded.source, provider = excluded.provider,
		notification = excluded.notification, detail = excluded.detail,
		created_at = excluded.created_at, expires_at = excluded.expires_at
	WHERE suppressions.expires_at IS NOT NULL
	  AND (excluded.expires_at IS NULL OR excluded.expires_at > suppressions.expires_at
	       OR suppressions.expires_at <= excluded.created_at)`

// suppressNotification lists the address of notification $1 with reason
// $2, source $3, provider $4, detail $5, at $6, until $7 (NULL: never).
const suppressNotification = `INSERT INTO suppressions (` + suppressionCols + `)
	SELECT tenant, channel, coalesce(address_key, address), $2::text, $3::text, $4::text, id, $5::text, $6::bigint, $7::bigint
	FROM notifications WHERE id = $1` + suppressUpsert

// suppressFromReceipts lists the address of notification $3, which provider
// $1 sent as message $2, for each of its receipts (receiptAbout, with $4)
// that asks for it. It runs
// when a receipt comes in and again when a send is recorded, so a receipt
// that came first still counts; the upsert makes the repeat harmless. DISTINCT
// ON keeps one row per address: one INSERT may not touch a row twice.
const suppressFromReceipts = `INSERT INTO suppressions (` + suppressionCols + `)
	SELECT DISTINCT ON (n.tenant, n.channel, coalesce(n.address_key, n.address))
	       n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress, coalesce(r.source, 'receipt'),
	       r.provider, n.id, coalesce(r.detail, ''), r.received_at, r.suppress_until
	FROM receipts r JOIN notifications n ON n.provider = r.provider AND n.provider_message_id = r.message_id
	WHERE r.provider = $1 AND r.message_id = $2 AND n.id = $3 AND (r.notification = $3 OR (r.notification IS NULL AND $4::boolean))
	  AND r.suppress IS NOT NULL
	ORDER BY n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress_until DESC NULLS FIRST, r.id` + suppressUpsert

// suppressionEntry is the claimed notification's live entry at $1, as one
// JSON object (claimedCols), or NULL.
const suppressionEntry = `(SELECT json_build_object('address', s.address, 'reason', s.reason, 'source', s.source, 'provider', s.provider,
		'notification', s.notification, 'detail', s.detail, 'created_at', s.created_at, 'expires_at', s.expires_at)::text
	FROM suppressions s
	WHERE s.tenant = n.tenant AND s.channel = n.channel AND s.address = coalesce(n.address_key, n.address)
	  AND (s.expires_at IS NULL OR s.expires_at > $1))`

// Suppress writes entries in one transaction.
func (s *Store) Suppress(ctx context.Context, entries []model.Suppression, now time.Time) (int, error) {
	written := 0
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		written = 0
		for _, e := range entries {
			tag, err := tx.Exec(ctx, `INSERT INTO suppressions (`+suppressionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`+suppressUpsert,
				e.Tenant, e.Channel, e.Address, e.Reason, e.Source, e.Provider, nullInt64(e.Notification), e.Detail,
				ms(orNow(e.CreatedAt, now)), nullTime(e.ExpiresAt))
			if err != nil {
				return fmt.Errorf("suppress %s %q for tenant %q: %w", e.Channel, e.Address, e.Tenant, err)
			}
			written += int(tag.RowsAffected())
		}
		return nil
	})
	return written, err
}

// Suppressions lists live entries in (tenant, channel, address) order.
func (s *Store) Suppressions(ctx context.Context, f model.SuppressionFilter, now time.Time) ([]model.Suppression, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	out := []model.Suppression{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT `+suppressionCols+` FROM suppressions
			WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR channel = $2) AND ($3 = '' OR address = $3)
			  AND (expires_at IS NULL OR expires_at > $4)
			  AND (tenant, channel, address) > ($5, $6, $7)
			ORDER BY tenant, channel, address LIMIT $8`,
			f.Tenant, f.Channel, f.Address, ms(now), f.After.Tenant, f.After.Channel, f.After.Address, f.Limit)
		if err != nil {
			return fmt.Errorf("list suppressions: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanSuppression(rows)
			if err != nil {
				return fmt.Errorf("list suppressions: %w", err)
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	return out, err
}

// Unsuppress removes a tenant's entry for an address.
func (s *Store) Unsuppress(ctx context.Context, tenant, channel, address string) (bool, error) {
	var removed bool
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM suppressions WHERE tenant = $1 AND channel = $2 AND address = $3`, tenant, channel, address)
		if err != nil {
			return fmt.Errorf("remove suppression: %w", err)
		}
		removed = tag.RowsAffected() == 1
		return nil
	})
	return removed, err
}

// liveSuppression reads the live entry for an address in tx, or nil.
func liveSuppression(ctx context.Context, tx pgx.Tx, tenant, channel, address string, now time.Time) (*model.Suppression, error) {
	e, err := scanSuppression(tx.QueryRow(ctx, `SELECT `+suppressionCols+` FROM suppressions
		WHERE tenant = $1 AND channel = $2 AND address = $3 AND (expires_at IS NULL OR expires_at > $4)`,
		tenant, channel, address, ms(now)))
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read suppression: %w", err)
	}
	return &e, nil
}

func scanSuppression(row pgx.Row) (model.Suppression, error) {
	var e model.Suppression
	var note, expires *int64
	var created int64
	if err := row.Scan(&e.Tenant, &e.Channel, &e.Address, &e.Reason, &e.Source, &e.Provider, &note, &e.Detail,
		&created, &expires); err != nil {
		return e, err
	}
	e.CreatedAt = fromMS(created)
	if note != nil {
		e.Notification = *note
	}
	if expires != nil {
		t := fromMS(*expires)
		e.ExpiresAt = &t
	}
	return e, nil
}

// suppressionJSON is the entry the claim reads as one JSON object.
type suppressionJSON struct {
	Address      string `json:"address"`
	Reason       string `json:"reason"`
	Source       string `json:"source"`
	Provider     string `json:"provider"`
	Notification *int64 `json:"notification"`
	Detail       string `json:"detail"`
	CreatedAt    int64  `json:"created_at"`
	ExpiresAt    *int64 `json:"expires_at"`
}

// decodeSuppression reads the claim's entry column (nil: none).
func decodeSuppression(raw *string, tenant, channel string) (*model.Suppression, error) {
	if raw == nil {
		return nil, nil
	}
	var j suppressionJSON
	if err := json.Unmarshal([]byte(*raw), &j); err != nil {
		return nil, fmt.Errorf("read suppression entry: %w", err)
	}
	e := &model.Suppression{Tenant: tenant, Channel: channel, Address: j.Address, Reason: j.Reason, Source: j.Source,
		Provider: j.Provider, Detail: j.Detail, CreatedAt: fromMS(j.CreatedAt)}
	if j.Notification != nil {
		e.Notification = *j.Notification
	}
	if j.ExpiresAt != nil {
		t := fromMS(*j.ExpiresAt)
		e.ExpiresAt = &t
	}
	return e, nil
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

func nullInt64(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

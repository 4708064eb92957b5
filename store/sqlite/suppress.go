package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"edgerelay/model"
)

// Suppression lists (issue 17): one row per tenant, channel and address
// (normalised by the relay), in suppressions (migration 0011).

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

// suppressNotification lists the address of notification ?1 with reason
// ?2, source ?3, provider ?4, detail ?5, at ?6, until ?7 (NULL: never).
const suppressNotification = `INSERT INTO suppressions (` + suppressionCols + `)
	SELECT tenant, channel, coalesce(address_key, address), ?2, ?3, ?4, id, ?5, ?6, ?7
	FROM notifications WHERE id = ?1` + suppressUpsert

// suppressFromReceipts lists the address of notification ?3, which
// provider ?1 sent as message ?2, for each of its receipts (receiptAbout,
// with ?4) that asks for it. It runs when a receipt comes in and again when
// a send is recorded, so a receipt that came first still counts; the
// upsert makes the repeat harmless.
const suppressFromReceipts = `INSERT INTO suppressions (` + suppressionCols + `)
	SELECT n.tenant, n.channel, coalesce(n.address_key, n.address), r.suppress, coalesce(r.source, 'receipt'),
	       r.provider, n.id, coalesce(r.detail, ''), r.received_at, r.suppress_until
	FROM receipts r JOIN notifications n ON n.provider = r.provider AND n.provider_message_id = r.message_id
	WHERE r.provider = ?1 AND r.message_id = ?2 AND n.id = ?3 AND (r.notification = ?3 OR (r.notification IS NULL AND ?4))
	  AND r.suppress IS NOT NULL
	ORDER BY r.id` + suppressUpsert

// Suppress writes entries in one transaction.
func (s *Store) Suppress(ctx context.Context, entries []model.Suppression, now time.Time) (int, error) {
	written := 0
	err := s.w.do(ctx, func(tx *Tx) error {
		written = 0
		for _, e := range entries {
			res, err := tx.exec(`INSERT INTO suppressions (`+suppressionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`+suppressUpsert,
				e.Tenant, e.Channel, e.Address, e.Reason, e.Source, e.Provider, nullInt64(e.Notification), e.Detail,
				ms(orNow(e.CreatedAt, now)), nullTime(e.ExpiresAt))
			if err != nil {
				return fmt.Errorf("suppress %s %q for tenant %q: %w", e.Channel, e.Address, e.Tenant, err)
			}
			n, _ := res.RowsAffected()
			written += int(n)
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+suppressionCols+` FROM suppressions
		WHERE (?1 = '' OR tenant = ?1) AND (?2 = '' OR channel = ?2) AND (?3 = '' OR address = ?3)
		  AND (expires_at IS NULL OR expires_at > ?4)
		  AND (tenant, channel, address) > (?5, ?6, ?7)
		ORDER BY tenant, channel, address LIMIT ?8`,
		f.Tenant, f.Channel, f.Address, ms(now), f.After.Tenant, f.After.Channel, f.After.Address, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", err)
	}
	defer rows.Close()
	out := []model.Suppression{}
	for rows.Next() {
		e, err := scanSuppression(rows)
		if err != nil {
			return nil, fmt.Errorf("list suppressions: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Unsuppress removes a tenant's entry for an address.
func (s *Store) Unsuppress(ctx context.Context, tenant, channel, address string) (bool, error) {
	var removed bool
	err := s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`DELETE FROM suppressions WHERE tenant = ? AND channel = ? AND address = ?`, tenant, channel, address)
		if err != nil {
			return fmt.Errorf("remove suppression: %w", err)
		}
		n, _ := res.RowsAffected()
		removed = n == 1
		return nil
	})
	return removed, err
}

// liveSuppression reads the live entry for an address in tx, or nil.
func liveSuppression(tx *Tx, tenant, channel, address string, now time.Time) (*model.Suppression, error) {
	e, err := scanSuppression(tx.queryRow(`SELECT `+suppressionCols+` FROM suppressions
		WHERE tenant = ? AND channel = ? AND address = ? AND (expires_at IS NULL OR expires_at > ?)`,
		tenant, channel, address, ms(now)))
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read suppression: %w", err)
	}
	return &e, nil
}

func scanSuppression(row interface{ Scan(...any) error }) (model.Suppression, error) {
	var e model.Suppression
	var note, expires sql.NullInt64
	var created int64
	if err := row.Scan(&e.Tenant, &e.Channel, &e.Address, &e.Reason, &e.Source, &e.Provider, &note, &e.Detail,
		&created, &expires); err != nil {
		return e, err
	}
	e.Notification, e.CreatedAt = note.Int64, fromMS(created)
	if expires.Valid {
		t := fromMS(expires.Int64)
		e.ExpiresAt = &t
	}
	return e, nil
}

// suppressionJSON is the entry the claim reads as one JSON object
// (claimedCols).
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

func (j suppressionJSON) entry(tenant, channel string) *model.Suppression {
	e := &model.Suppression{Tenant: tenant, Channel: channel, Address: j.Address, Reason: j.Reason, Source: j.Source,
		Provider: j.Provider, Detail: j.Detail, CreatedAt: fromMS(j.CreatedAt)}
	if j.Notification != nil {
		e.Notification = *j.Notification
	}
	if j.ExpiresAt != nil {
		t := fromMS(*j.ExpiresAt)
		e.ExpiresAt = &t
	}
	return e
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

package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"strings"
	"time"
)

// Suppression lists: one row per tenant, channel and address (normalised
// by the relay), in suppressions (migration 0011).

// SuppressionCols are an entry's columns, in the order ScanSuppression
// reads them.
const SuppressionCols = `tenant, channel, address, reason, source, provider, notification, detail, created_at, expires_at`

// SuppressUpsert ends every INSERT into suppressions: an address already
// listed keeps its entry unless the new one lasts longer (NULL, never,
// outlasts any time) or the old one has lapsed by the new one's time.
const SuppressUpsert = ` ON CONFLICT (tenant, channel, address) DO UPDATE SET
		reason = excluded.reason, source = excluded.source, provider = excluded.provider,
		notification = excluded.notification, detail = excluded.detail,
		created_at = excluded.created_at, expires_at = excluded.expires_at
	WHERE suppressions.expires_at IS NOT NULL
	  AND (excluded.expires_at IS NULL OR excluded.expires_at > suppressions.expires_at
	       OR suppressions.expires_at <= excluded.created_at)`

// SuppressNotification lists the address of notification $1 with reason
// $2, source $3, provider $4, detail $5, at $6, until $7 (NULL: never).
// The casts type the parameters, which PostgreSQL cannot infer in a
// select list.
const SuppressNotification = `INSERT INTO suppressions (` + SuppressionCols + `)
	SELECT tenant, channel, coalesce(address_key, address), CAST($2 AS text), CAST($3 AS text), CAST($4 AS text), id,
		CAST($5 AS text), CAST($6 AS bigint), CAST($7 AS bigint)
	FROM notifications WHERE id = $1` + SuppressUpsert

// Suppress writes entries in q, a write transaction; it returns how many
// it wrote (an entry the upsert kept as it was is not one).
func Suppress(ctx context.Context, q Querier, entries []model.Suppression, now time.Time) (int, error) {
	written := 0
	for _, e := range entries {
		n, err := q.Exec(ctx, `INSERT INTO suppressions (`+SuppressionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`+SuppressUpsert,
			e.Tenant, e.Channel, e.Address, e.Reason, e.Source, e.Provider, NullInt64(e.Notification), e.Detail,
			MS(OrNow(e.CreatedAt, now)), NullTime(e.ExpiresAt))
		if err != nil {
			return 0, fmt.Errorf("suppress %s %q for tenant %q: %w", e.Channel, e.Address, e.Tenant, err)
		}
		written += int(n)
	}
	return written, nil
}

// Suppressions lists live entries in (tenant, channel, address) order.
func Suppressions(ctx context.Context, q Querier, f model.SuppressionFilter, now time.Time) ([]model.Suppression, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	out, err := All(ctx, q, func(r Rows) (model.Suppression, error) { return ScanSuppression(r) },
		`SELECT `+SuppressionCols+` FROM suppressions
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR channel = $2) AND ($3 = '' OR address = $3)
		  AND (expires_at IS NULL OR expires_at > $4)
		  AND (tenant, channel, address) > ($5, $6, $7)
		ORDER BY tenant, channel, address LIMIT $8`,
		f.Tenant, f.Channel, f.Address, MS(now), f.After.Tenant, f.After.Channel, f.After.Address, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list suppressions: %w", err)
	}
	if out == nil {
		out = []model.Suppression{}
	}
	return out, nil
}

// Unsuppress removes a tenant's entry for an address, in q, a write
// transaction; it reports whether there was one.
func Unsuppress(ctx context.Context, q Querier, tenant, channel, address string) (bool, error) {
	n, err := q.Exec(ctx, `DELETE FROM suppressions WHERE tenant = $1 AND channel = $2 AND address = $3`, tenant, channel, address)
	if err != nil {
		return false, fmt.Errorf("remove suppression: %w", err)
	}
	return n == 1, nil
}

// LiveSuppression reads the live entry for an address, or nil.
func LiveSuppression(ctx context.Context, q Querier, tenant, channel, address string, now time.Time) (*model.Suppression, error) {
	e, err := ScanSuppression(q.QueryRow(ctx, `SELECT `+SuppressionCols+` FROM suppressions
		WHERE tenant = $1 AND channel = $2 AND address = $3 AND (expires_at IS NULL OR expires_at > $4)`,
		tenant, channel, address, MS(now)))
	if IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read suppression: %w", err)
	}
	return &e, nil
}

// ScanSuppression reads an entry's SuppressionCols.
func ScanSuppression(row Row) (model.Suppression, error) {
	var e model.Suppression
	var note, expires *int64
	var created int64
	if err := row.Scan(&e.Tenant, &e.Channel, &e.Address, &e.Reason, &e.Source, &e.Provider, &note, &e.Detail,
		&created, &expires); err != nil {
		return e, err
	}
	e.CreatedAt, e.ExpiresAt = FromMS(created), FromMSPtr(expires)
	if note != nil {
		e.Notification = *note
	}
	return e, nil
}

// SuppressionJSON is the entry a claim reads as one JSON object.
type SuppressionJSON struct {
	Address      string `json:"address"`
	Reason       string `json:"reason"`
	Source       string `json:"source"`
	Provider     string `json:"provider"`
	Notification *int64 `json:"notification"`
	Detail       string `json:"detail"`
	CreatedAt    int64  `json:"created_at"`
	ExpiresAt    *int64 `json:"expires_at"`
}

// Entry is the entry for tenant and channel (the claimed notification's).
func (j SuppressionJSON) Entry(tenant, channel string) *model.Suppression {
	e := &model.Suppression{Tenant: tenant, Channel: channel, Address: j.Address, Reason: j.Reason, Source: j.Source,
		Provider: j.Provider, Detail: j.Detail, CreatedAt: FromMS(j.CreatedAt), ExpiresAt: FromMSPtr(j.ExpiresAt)}
	if j.Notification != nil {
		e.Notification = *j.Notification
	}
	return e
}

// Retry puts a failed, dead, unknown or suppressed notification
// (model.Retryable) back to pending, due now, with a fresh retry budget,
// in q, a write transaction; it returns the status the notification had.
// If its address is on its tenant's suppression list, the operator must
// say to lift the entry (the reason comes back in a *SuppressedError);
// lifting removes it in the same transaction. tenant "" is any tenant's.
func (d *Dialect) Retry(ctx context.Context, q Querier, tenant string, id int64, lift bool, now time.Time) (string, error) {
	var status, t, channel, address string
	err := q.QueryRow(ctx, `SELECT status, tenant, channel, coalesce(address_key, address) FROM notifications
		WHERE id = $1 AND ($2 = '' OR tenant = $2)`+d.ForUpdate, id, tenant).Scan(&status, &t, &channel, &address)
	if IsNoRows(err) {
		return "", fmt.Errorf("notification %d: %w", id, model.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("retry notification %d: %w", id, err)
	}
	if !model.Retryable(status) {
		return "", &model.StateError{ID: id, Status: status, Want: orList(model.RetryableStatuses())}
	}
	entry, err := LiveSuppression(ctx, q, t, channel, address, now)
	if err != nil {
		return "", fmt.Errorf("retry notification %d: %w", id, err)
	}
	if entry != nil && !lift {
		return "", &model.SuppressedError{ID: id, Entry: *entry}
	}
	if entry != nil {
		if _, err := Unsuppress(ctx, q, t, channel, address); err != nil {
			return "", fmt.Errorf("retry notification %d: lift its suppression: %w", id, err)
		}
	}
	if _, err := q.Exec(ctx, `UPDATE notifications SET status = 'pending', next_attempt_at = $1, cycle_attempts = 0,
			cycle_started_at = $1, reason = NULL, updated_at = $1
		WHERE id = $2 AND status = $3`, MS(now), id, status); err != nil {
		return "", fmt.Errorf("retry notification %d: %w", id, err)
	}
	return status, nil
}

// orList is "a, b or c".
func orList(ss []string) string {
	if len(ss) < 2 {
		return strings.Join(ss, "")
	}
	return strings.Join(ss[:len(ss)-1], ", ") + " or " + ss[len(ss)-1]
}

// SuppressSettled lists the address of a settled notification whose
// decision says to (a hard bounce), in q, the settlement's transaction.
func SuppressSettled(ctx context.Context, q Querier, st model.Settlement) error {
	d, a := st.Decision, st.Attempt
	if d.Suppress == nil {
		return nil
	}
	provider := ""
	if a != nil {
		provider = a.Provider
	}
	if _, err := q.Exec(ctx, SuppressNotification, st.ID, d.Suppress.Reason, model.SourceProvider, provider,
		d.Suppress.Detail, MS(st.At), NullTime(d.Suppress.ExpiresAt)); err != nil {
		return fmt.Errorf("suppress the address of notification %d: %w", st.ID, err)
	}
	return nil
}

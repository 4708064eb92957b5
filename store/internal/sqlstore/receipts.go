package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"strings"
	"time"
)

// ReceiptAbout holds a receipt to notification $3: it names $3, or names
// none and $4 (no other notification has its provider and message id).
const ReceiptAbout = `(notification = $3 OR (notification IS NULL AND $4))`

// ApplyReceipts moves each sent notification with this provider message
// id to the status its receipts add up to (model.ReceiptOutcome), and puts
// its address on its tenant's suppression list if a receipt asks for that
// (a hard bounce, a complaint), whatever its status: the address is dead
// either way. q is the write transaction that recorded the receipts.
//
// A receipt that names its notification applies to that one only; one
// that names none only while a single notification has this provider and
// message id: ids minted by many servers can collide, and a receipt about
// one customer's message must not bounce, or suppress the address of,
// another's, of another tenant perhaps.
func (d *Dialect) ApplyReceipts(ctx context.Context, q Querier, provider, messageID string, now time.Time) error {
	type target struct {
		id      int64
		unbound bool // the receipts that name no notification apply too
	}
	// Each notification once: the one that alone has the message id (the
	// receipts naming none apply to it too), and those receipts name.
	ts, err := All(ctx, q, func(r Rows) (target, error) {
		var t target
		return t, r.Scan(&t.id, &t.unbound)
	}, `SELECT id, max(unbound) = 1 FROM (
			SELECT id, 1 AS unbound FROM notifications WHERE provider = $1 AND provider_message_id = $2
				AND (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE provider = $1 AND provider_message_id = $2 LIMIT 2) x) = 1
			UNION ALL
			SELECT notification, 0 FROM receipts WHERE provider = $1 AND message_id = $2 AND notification IS NOT NULL) t
		GROUP BY id`, provider, messageID)
	if err != nil {
		return fmt.Errorf("find the receipts' notifications: %w", err)
	}
	for _, t := range ts {
		if _, err := q.Exec(ctx, d.SuppressFromReceipts, provider, messageID, t.id, t.unbound); err != nil {
			return fmt.Errorf("suppress from receipts: %w", err)
		}
		statuses, err := All(ctx, q, scanString, `SELECT DISTINCT status FROM receipts
			WHERE provider = $1 AND message_id = $2 AND `+ReceiptAbout, provider, messageID, t.id, t.unbound)
		if err != nil {
			return fmt.Errorf("rank receipts: %w", err)
		}
		status, ok := model.ReceiptOutcome(statuses)
		if !ok {
			continue
		}
		if _, err := q.Exec(ctx, `UPDATE notifications SET status = $1, updated_at = $2
			WHERE id = $3 AND provider = $4 AND provider_message_id = $5
			  AND status IN (`+quoted(model.ReceiptMovesFrom(status))+`)`, status, MS(now), t.id, provider, messageID); err != nil {
			return fmt.Errorf("apply receipt: %w", err)
		}
	}
	return nil
}

// AddReceipts records receipts, in q, a write transaction, and applies
// each new one to the notification it is about (ApplyReceipts). A receipt
// already recorded (same provider and dedupe key) is ignored: providers
// retry their callbacks. It returns how many were new.
func (d *Dialect) AddReceipts(ctx context.Context, q Querier, rs []model.Receipt, now time.Time) (int, error) {
	added := 0
	for _, r := range rs {
		var id int64
		var suppress, until any
		if r.Suppress != nil {
			suppress, until = r.Suppress.Reason, NullTime(r.Suppress.ExpiresAt)
		}
		err := q.QueryRow(ctx, `INSERT INTO receipts (provider, dedupe, message_id, status, detail, at, received_at,
				source, suppress, suppress_until, notification)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING id`,
			r.Provider, r.Dedupe, r.MessageID, r.Status, NullStr(r.Detail), NullTime(r.At), MS(now),
			NullStr(r.Source), suppress, until, NullInt64(r.Notification)).Scan(&id)
		if IsNoRows(err) {
			continue // a replay
		}
		if err != nil {
			return 0, fmt.Errorf("record receipt: %w", err)
		}
		added++
		if err := d.ApplyReceipts(ctx, q, r.Provider, r.MessageID, now); err != nil {
			return 0, err
		}
	}
	return added, nil
}

// ReceiptsFor lists the receipts about notification id, which provider
// sent as messageID, oldest first (those that apply to it: ReceiptAbout).
func ReceiptsFor(ctx context.Context, q Querier, id int64, provider, messageID string) ([]model.Receipt, error) {
	out, err := All(ctx, q, scanReceipt, `SELECT provider, message_id, status, coalesce(detail, ''), at, received_at,
			coalesce(source, ''), suppress, suppress_until
		FROM receipts WHERE provider = $1 AND message_id = $2 AND (notification = $3 OR (notification IS NULL
			AND NOT EXISTS (SELECT 1 FROM notifications WHERE provider = $1 AND provider_message_id = $2 AND id <> $3)))
		ORDER BY id`, provider, messageID, id)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	return out, nil
}

func scanReceipt(rows Rows) (model.Receipt, error) {
	var r model.Receipt
	var at, until *int64
	var recv int64
	var suppress *string
	if err := rows.Scan(&r.Provider, &r.MessageID, &r.Status, &r.Detail, &at, &recv, &r.Source, &suppress, &until); err != nil {
		return r, err
	}
	if suppress != nil {
		r.Suppress = &model.Suppress{Reason: *suppress, ExpiresAt: FromMSPtr(until)}
	}
	r.At = FromMSPtr(at)
	r.ReceivedAt = FromMS(recv)
	return r, nil
}

// FromMSPtr is FromMS of a nullable column: nil for NULL.
func FromMSPtr(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := FromMS(*v)
	return &t
}

func scanString(r Rows) (string, error) {
	var s string
	return s, r.Scan(&s)
}

// quoted is a list of SQL string literals; the values are the model's
// status constants, never input.
func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return strings.Join(q, ", ")
}

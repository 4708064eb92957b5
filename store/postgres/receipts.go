package postgres

import (
	"context"
	"edgerelay/model"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AddReceipts records receipts and applies each new one to the notification
// it is about. A receipt already recorded (same provider and dedupe key) is
// ignored: providers retry their callbacks, and two nodes may get the same
// one at once (the unique constraint keeps one). It returns how many were
// new.
//
// The notification's status is a function of the set of its receipts, not
// of their order: bounced (bounced, failed) outranks delivered (delivered,
// complained), which outranks sent.
func (s *Store) AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error) {
	added := 0
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		added = 0
		for _, r := range rs {
			var suppress, until any
			if r.Suppress != nil {
				suppress, until = r.Suppress.Reason, nullTime(r.Suppress.ExpiresAt)
			}
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO receipts (provider, dedupe, message_id, status, detail, at, received_at,
					source, suppress, suppress_until, notification)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING id`,
				r.Provider, r.Dedupe, r.MessageID, r.Status, nullStr(r.Detail), nullTime(r.At), ms(now),
				nullStr(r.Source), suppress, until, nullInt64(r.Notification)).Scan(&id)
			if isNoRows(err) {
				continue // a replay
			}
			if err != nil {
				return fmt.Errorf("record receipt: %w", err)
			}
			added++
			if err := applyReceipts(ctx, tx, r.Provider, r.MessageID, now); err != nil {
				return err
			}
		}
		return nil
	})
	return added, err
}

// applyReceipts moves each sent notification with this provider message id
// to the status its receipts add up to, and puts its address on its
// tenant's suppression list if a receipt asks for that (a hard bounce, a
// complaint), whatever its status: the address is dead either way.
//
// As in store/sqlite: a receipt that names its notification applies to
// that one only; one that names none only while a single notification has
// this provider and message id (ids minted by many servers can collide,
// and one customer's receipt must not bounce another's message).
func applyReceipts(ctx context.Context, tx pgx.Tx, provider, messageID string, now time.Time) error {
	// Each notification once: the one that alone has the message id (the
	// receipts naming none apply to it too), and those receipts name.
	rows, err := tx.Query(ctx, `SELECT id, bool_or(unbound) FROM (
			SELECT id, true AS unbound FROM notifications WHERE provider = $1 AND provider_message_id = $2
				AND (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE provider = $1 AND provider_message_id = $2 LIMIT 2) x) = 1
			UNION ALL
			SELECT notification, false FROM receipts WHERE provider = $1 AND message_id = $2 AND notification IS NOT NULL) t
		GROUP BY id`, provider, messageID)
	if err != nil {
		return fmt.Errorf("find the receipts' notifications: %w", err)
	}
	type target struct {
		id      int64
		unbound bool // the receipts that name no notification apply too
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (target, error) {
		var t target
		return t, r.Scan(&t.id, &t.unbound)
	})
	if err != nil {
		return fmt.Errorf("find the receipts' notifications: %w", err)
	}
	for _, t := range ts {
		if _, err := tx.Exec(ctx, suppressFromReceipts, provider, messageID, t.id, t.unbound); err != nil {
			return fmt.Errorf("suppress from receipts: %w", err)
		}
		var rank *int64
		if err := tx.QueryRow(ctx, `SELECT max(CASE status WHEN 'bounced' THEN 3 WHEN 'failed' THEN 3
				WHEN 'delivered' THEN 2 WHEN 'complained' THEN 2 ELSE 1 END)
			FROM receipts WHERE provider = $1 AND message_id = $2 AND `+receiptAbout, provider, messageID, t.id, t.unbound).Scan(&rank); err != nil {
			return fmt.Errorf("rank receipts: %w", err)
		}
		var status string
		switch {
		case rank != nil && *rank == 3:
			status = model.StatusBounced
		case rank != nil && *rank == 2:
			status = model.StatusDelivered
		default:
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE notifications SET status = $1, updated_at = $2
			WHERE id = $3 AND provider = $4 AND provider_message_id = $5
			  AND (status = 'sent' OR (status = 'delivered' AND $1::text = 'bounced'))`, status, ms(now), t.id, provider, messageID); err != nil {
			return fmt.Errorf("apply receipt: %w", err)
		}
	}
	return nil
}

// receiptAbout holds a receipt to notification $3: it names $3, or names
// none and $4 (no other notification has its provider and message id).
const receiptAbout = `(notification = $3 OR (notification IS NULL AND $4::boolean))`

// receiptsFor lists the receipts about notification id, which provider
// sent as messageID, oldest first (those that apply to it: receiptAbout).
func receiptsFor(ctx context.Context, q querier, id int64, provider, messageID string) ([]model.Receipt, error) {
	rows, err := q.Query(ctx, `SELECT provider, message_id, status, coalesce(detail, ''), at, received_at,
			coalesce(source, ''), suppress, suppress_until
		FROM receipts WHERE provider = $1 AND message_id = $2 AND (notification = $3 OR (notification IS NULL
			AND NOT EXISTS (SELECT 1 FROM notifications WHERE provider = $1 AND provider_message_id = $2 AND id <> $3)))
		ORDER BY id`, provider, messageID, id)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	defer rows.Close()
	var out []model.Receipt
	for rows.Next() {
		var r model.Receipt
		var at, until *int64
		var recv int64
		var suppress *string
		if err := rows.Scan(&r.Provider, &r.MessageID, &r.Status, &r.Detail, &at, &recv, &r.Source, &suppress, &until); err != nil {
			return nil, err
		}
		if suppress != nil {
			r.Suppress = &model.Suppress{Reason: *suppress}
			if until != nil {
				t := fromMS(*until)
				r.Suppress.ExpiresAt = &t
			}
		}
		if at != nil {
			t := fromMS(*at)
			r.At = &t
		}
		r.ReceivedAt = fromMS(recv)
		out = append(out, r)
	}
	return out, rows.Err()
}

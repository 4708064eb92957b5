package postgres

import (
	"context"
	"edgerelay/store"
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
func (s *Store) AddReceipts(ctx context.Context, rs []store.Receipt, now time.Time) (int, error) {
	added := 0
	err := s.write(ctx, store.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		added = 0
		for _, r := range rs {
			var suppress, until any
			if r.Suppress != nil {
				suppress, until = r.Suppress.Reason, nullTime(r.Suppress.ExpiresAt)
			}
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO receipts (provider, dedupe, message_id, status, detail, at, received_at,
					source, suppress, suppress_until)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING RETURNING id`,
				r.Provider, r.Dedupe, r.MessageID, r.Status, nullStr(r.Detail), nullTime(r.At), ms(now),
				nullStr(r.Source), suppress, until).Scan(&id)
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

// applyReceipts moves the sent notification with this provider message id
// to the status its receipts add up to, and puts its address on its
// tenant's suppression list if a receipt asks for that (a hard bounce, a
// complaint), whatever its status: the address is dead either way.
func applyReceipts(ctx context.Context, tx pgx.Tx, provider, messageID string, now time.Time) error {
	if _, err := tx.Exec(ctx, suppressFromReceipts, provider, messageID); err != nil {
		return fmt.Errorf("suppress from receipts: %w", err)
	}
	var rank *int64
	if err := tx.QueryRow(ctx, `SELECT max(CASE status WHEN 'bounced' THEN 3 WHEN 'failed' THEN 3
			WHEN 'delivered' THEN 2 WHEN 'complained' THEN 2 ELSE 1 END)
		FROM receipts WHERE provider = $1 AND message_id = $2`, provider, messageID).Scan(&rank); err != nil {
		return fmt.Errorf("rank receipts: %w", err)
	}
	var target string
	switch {
	case rank != nil && *rank == 3:
		target = store.StatusBounced
	case rank != nil && *rank == 2:
		target = store.StatusDelivered
	default:
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE notifications SET status = $1, updated_at = $2
		WHERE provider = $3 AND provider_message_id = $4
		  AND (status = 'sent' OR (status = 'delivered' AND $1::text = 'bounced'))`, target, ms(now), provider, messageID)
	if err != nil {
		return fmt.Errorf("apply receipt: %w", err)
	}
	return nil
}

// receiptsFor lists the receipts about one sent message, oldest first.
func receiptsFor(ctx context.Context, q querier, provider, messageID string) ([]store.Receipt, error) {
	rows, err := q.Query(ctx, `SELECT provider, message_id, status, coalesce(detail, ''), at, received_at,
			coalesce(source, ''), suppress, suppress_until
		FROM receipts WHERE provider = $1 AND message_id = $2 ORDER BY id`, provider, messageID)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	defer rows.Close()
	var out []store.Receipt
	for rows.Next() {
		var r store.Receipt
		var at, until *int64
		var recv int64
		var suppress *string
		if err := rows.Scan(&r.Provider, &r.MessageID, &r.Status, &r.Detail, &at, &recv, &r.Source, &suppress, &until); err != nil {
			return nil, err
		}
		if suppress != nil {
			r.Suppress = &store.Suppress{Reason: *suppress}
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

package sqlite

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
	"fmt"
	"time"
)

// AddReceipts records receipts and applies each new one to the notification
// it is about. A receipt already recorded (same provider and dedupe key) is
// ignored: providers retry their callbacks. It returns how many were new.
//
// The notification's status is a function of the set of its receipts, not
// of their order (model.ReceiptOutcome ranks them: bounced, failed outrank
// delivered, complained, which outrank sent). So a late "sent" never moves it out of
// delivered or bounced, and a receipt that arrived before the send was
// recorded is applied when it is (see Record).
func (s *Store) AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error) {
	added := 0
	err := s.w.do(ctx, func(tx *Tx) error {
		added = 0
		for _, r := range rs {
			var id int64
			var suppress, until any
			if r.Suppress != nil {
				suppress, until = r.Suppress.Reason, sqlstore.NullTime(r.Suppress.ExpiresAt)
			}
			err := tx.queryRow(`INSERT INTO receipts (provider, dedupe, message_id, status, detail, at, received_at,
					source, suppress, suppress_until, notification)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id`,
				r.Provider, r.Dedupe, r.MessageID, r.Status, sqlstore.NullStr(r.Detail), sqlstore.NullTime(r.At), ms(now),
				sqlstore.NullStr(r.Source), suppress, until, sqlstore.NullInt64(r.Notification)).Scan(&id)
			if isNoRows(err) {
				continue // a replay
			}
			if err != nil {
				return fmt.Errorf("record receipt: %w", err)
			}
			added++
			if err := dialect.ApplyReceipts(context.Background(), tx.shared(), r.Provider, r.MessageID, now); err != nil {
				return err
			}
		}
		return nil
	})
	return added, err
}

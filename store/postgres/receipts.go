package postgres

import (
	"context"
	"edgerelay/model"
	"edgerelay/store/internal/sqlstore"
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
// of their order (model.ReceiptOutcome ranks them: bounced, failed outrank
// delivered, complained), so a late "sent" never moves it back.
func (s *Store) AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error) {
	added := 0
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		added = 0
		for _, r := range rs {
			var suppress, until any
			if r.Suppress != nil {
				suppress, until = r.Suppress.Reason, sqlstore.NullTime(r.Suppress.ExpiresAt)
			}
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO receipts (provider, dedupe, message_id, status, detail, at, received_at,
					source, suppress, suppress_until, notification)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING id`,
				r.Provider, r.Dedupe, r.MessageID, r.Status, sqlstore.NullStr(r.Detail), sqlstore.NullTime(r.At), ms(now),
				sqlstore.NullStr(r.Source), suppress, until, sqlstore.NullInt64(r.Notification)).Scan(&id)
			if isNoRows(err) {
				continue // a replay
			}
			if err != nil {
				return fmt.Errorf("record receipt: %w", err)
			}
			added++
			if err := dialect.ApplyReceipts(ctx, shared(tx), r.Provider, r.MessageID, now); err != nil {
				return err
			}
		}
		return nil
	})
	return added, err
}

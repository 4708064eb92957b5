package sqlite

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"
)

// AddReceipts records receipts in one write and applies each new one
// (sqlstore's AddReceipts): a notification's status is a function of the
// set of its receipts (model.ReceiptOutcome), so a late "sent" never moves
// it back, and a receipt that arrived before the send was recorded is
// applied when it is (see Record).
func (s *Store) AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error) {
	return writeQ(ctx, s, func(q sqlstore.Querier) (int, error) { return dialect.AddReceipts(ctx, q, rs, now) })
}

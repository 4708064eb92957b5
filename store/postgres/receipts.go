package postgres

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"
)

// AddReceipts records receipts and applies each new one (sqlstore's
// AddReceipts). Two nodes may get the same callback at once: the unique
// constraint keeps one.
func (s *Store) AddReceipts(ctx context.Context, rs []model.Receipt, now time.Time) (int, error) {
	return writeQ(ctx, s, model.WriteOther, func(q sqlstore.Querier) (int, error) { return dialect.AddReceipts(ctx, q, rs, now) })
}

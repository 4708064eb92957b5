package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

// SourceRejects lists recorded rejects (sqlstore.SourceRejects).
func (s *Store) SourceRejects(ctx context.Context, f model.SourceRejectFilter) (out []model.SourceReject, err error) {
	err = s.read(ctx, func(q querier) (err error) {
		out, err = sqlstore.SourceRejects(ctx, shared(q), f, ` COLLATE "C"`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read rejected rows: %w", err)
	}
	return out, nil
}

// RetrySourceRejects asks for rows (all if nil) to be read again.
func (s *Store) RetrySourceRejects(ctx context.Context, source string, rows []int64, now time.Time) ([]int64, error) {
	return s.eachReject(ctx, source, rows, `UPDATE source_rejects SET retry_at = $3 WHERE source = $1 AND (row_id = ANY($2) OR $2 IS NULL) RETURNING row_id`, ms(now))
}

// DropSourceRejects removes the records of rows (all if nil).
func (s *Store) DropSourceRejects(ctx context.Context, source string, rows []int64) ([]int64, error) {
	return s.eachReject(ctx, source, rows, `DELETE FROM source_rejects WHERE source = $1 AND (row_id = ANY($2) OR $2 IS NULL) RETURNING row_id`)
}

// eachReject runs stmt ($1 the source, $2 the rows or NULL for all) in one
// transaction and returns the rows it reached in row order.
func (s *Store) eachReject(ctx context.Context, source string, rows []int64, stmt string, args ...any) ([]int64, error) {
	var done []int64
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		var arg any // NULL: every row
		if rows != nil {
			arg = rows
		}
		done, err = ids(ctx, tx, stmt, append([]any{source, arg}, args...)...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rejected rows of source %q: %w", source, err)
	}
	slices.Sort(done)
	return slices.Compact(done), nil
}

package sqlite

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

// SourceRejects lists recorded rejects in (source, row) order.
func (s *Store) SourceRejects(ctx context.Context, f model.SourceRejectFilter) ([]model.SourceReject, error) {
	out, err := sqlstore.SourceRejects(ctx, s.reader(), f, "")
	if err != nil {
		return nil, fmt.Errorf("read rejected rows: %w", s.closedOr(err))
	}
	return out, nil
}

// RetrySourceRejects asks for rows (all if nil) to be read again.
func (s *Store) RetrySourceRejects(ctx context.Context, source string, rows []int64, now time.Time) ([]int64, error) {
	return s.eachReject(ctx, source, rows, `UPDATE source_rejects SET retry_at = ? WHERE source = ?`, ms(now))
}

// DropSourceRejects removes the records of rows (all if nil).
func (s *Store) DropSourceRejects(ctx context.Context, source string, rows []int64) ([]int64, error) {
	return s.eachReject(ctx, source, rows, `DELETE FROM source_rejects WHERE source = ?`)
}

// eachReject runs stmt (ending in WHERE source = ?, args before it) on
// one source's rows, or all of them, in one transaction, and returns the
// rows it reached in row order.
func (s *Store) eachReject(ctx context.Context, source string, rows []int64, stmt string, args ...any) ([]int64, error) {
	var done []int64
	err := s.w.do(ctx, func(tx *Tx) error {
		done = nil
		run := func(q string, args ...any) error {
			rs, err := tx.query(q+` RETURNING row_id`, args...)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var id int64
				if err := rs.Scan(&id); err != nil {
					return err
				}
				done = append(done, id)
			}
			return rs.Err()
		}
		if rows == nil {
			return run(stmt, append(args, source)...)
		}
		for _, row := range rows {
			if err := run(stmt+` AND row_id = ?`, append(append([]any{}, args...), source, row)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rejected rows of source %q: %w", source, err)
	}
	slices.Sort(done)
	return slices.Compact(done), nil
}

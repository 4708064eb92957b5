package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// SettleRejects records a settle's rejected, accepted and gone rows of
// source name, in q, the settle's write transaction. A retry request is
// cleared only by the answer to it: one made after the row was read again
// stays for the next round.
func SettleRejects(ctx context.Context, q Querier, name string, set model.SourceSettle, now time.Time) error {
	for _, r := range set.Rejects {
		if _, err := q.Exec(ctx, `INSERT INTO source_rejects (source, row_id, event_id, reason, first_at, last_at, times)
			VALUES ($1, $2, $3, $4, $5, $5, 1)
			ON CONFLICT (source, row_id) DO UPDATE SET event_id = excluded.event_id, reason = excluded.reason,
				last_at = excluded.last_at, times = source_rejects.times + 1, gone_at = NULL,
				retry_at = CASE WHEN source_rejects.retry_at <= $6 THEN NULL ELSE source_rejects.retry_at END`,
			name, r.Row, r.EventID, r.Reason, MS(now), answered(r.RetryAt)); err != nil {
			return err
		}
	}
	for _, row := range set.Accepted {
		if _, err := q.Exec(ctx, `DELETE FROM source_rejects WHERE source = $1 AND row_id = $2`, name, row); err != nil {
			return err
		}
	}
	for _, r := range set.Gone {
		if _, err := q.Exec(ctx, `UPDATE source_rejects SET gone_at = $1,
			retry_at = CASE WHEN retry_at <= $2 THEN NULL ELSE retry_at END WHERE source = $3 AND row_id = $4`,
			MS(now), answered(r.RetryAt), name, r.Row); err != nil {
			return err
		}
	}
	return nil
}

// answered is the newest request time (ms) a settle answers, -1 for none.
func answered(t *time.Time) int64 {
	if t == nil {
		return -1
	}
	return MS(*t)
}

// SourceRejectCols are a rejected row's columns, as ScanSourceReject reads
// them.
const SourceRejectCols = `source, row_id, event_id, reason, first_at, last_at, times, retry_at, gone_at`

// ScanSourceReject reads a rejected row's SourceRejectCols.
func ScanSourceReject(rows Rows) (model.SourceReject, error) {
	var r model.SourceReject
	var first, last int64
	var retry, gone *int64
	err := rows.Scan(&r.Source, &r.Row, &r.EventID, &r.Reason, &first, &last, &r.Times, &retry, &gone)
	r.First, r.Last = FromMS(first), FromMS(last)
	r.RetryAt, r.GoneAt = FromMSPtr(retry), FromMSPtr(gone)
	return r, err
}

// RejectCounts counts the recorded rejected outbox rows by source (nil for
// none).
func RejectCounts(ctx context.Context, q Querier) (map[string]int64, error) {
	type count struct {
		src string
		n   int64
	}
	cs, err := All(ctx, q, func(r Rows) (count, error) {
		var c count
		return c, r.Scan(&c.src, &c.n)
	}, `SELECT source, count(*) FROM source_rejects GROUP BY source`)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	out := make(map[string]int64, len(cs))
	for _, c := range cs {
		out[c.src] = c.n
	}
	return out, nil
}

// SourceState returns a source's position and its gaps in id order, the
// zero state for a source never saved.
func SourceState(ctx context.Context, q Querier, name string) (model.SourceState, error) {
	var st model.SourceState
	err := q.QueryRow(ctx, `SELECT position FROM source_positions WHERE source = $1`, name).Scan(&st.Position)
	if IsNoRows(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read position of source %q: %w", name, err)
	}
	st.Gaps, err = All(ctx, q, func(r Rows) (model.SourceGap, error) {
		var g model.SourceGap
		var since int64
		err := r.Scan(&g.First, &g.Last, &since, &g.Mark)
		g.Since = FromMS(since)
		return g, err
	}, `SELECT first, last, since, mark FROM source_gaps WHERE source = $1 ORDER BY first`, name)
	if err != nil {
		return model.SourceState{}, fmt.Errorf("read gaps of source %q: %w", name, err)
	}
	return st, nil
}

// SourceState returns a source's position and its gaps (see the function
// SourceState).
func (m Methods) SourceState(ctx context.Context, name string) (model.SourceState, error) {
	return get(ctx, m.Read, func(q Querier) (model.SourceState, error) { return SourceState(ctx, q, name) })
}

// SettleSource saves a batch's state (unless its position would move
// back), its rejects and its retried rows, in q, one write transaction.
func SettleSource(ctx context.Context, q Querier, name string, set model.SourceSettle, now time.Time) error {
	fail := func(err error) error { return fmt.Errorf("save state of source %q: %w", name, err) }
	st := set.State
	n, err := q.Exec(ctx, `INSERT INTO source_positions (source, position, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
		WHERE excluded.position >= source_positions.position`, name, st.Position, MS(now))
	if err != nil {
		return fail(err)
	}
	if n > 0 { // else behind the saved position: left as it was
		if _, err := q.Exec(ctx, `DELETE FROM source_gaps WHERE source = $1`, name); err != nil {
			return fail(err)
		}
		for _, g := range st.Gaps {
			if _, err := q.Exec(ctx, `INSERT INTO source_gaps (source, first, last, since, mark) VALUES ($1, $2, $3, $4, $5)`,
				name, g.First, g.Last, MS(g.Since), g.Mark); err != nil {
				return fail(err)
			}
		}
	}
	if err := SettleRejects(ctx, q, name, set, now); err != nil {
		return fail(err)
	}
	return nil
}

// SettleSource saves a batch's state, its rejects and its retried rows in
// one write transaction (see the function SettleSource).
func (m Methods) SettleSource(ctx context.Context, name string, set model.SourceSettle, now time.Time) error {
	return m.Write(ctx, func(q Querier) error { return SettleSource(ctx, q, name, set, now) })
}

// SaveSourceState saves a source's position and gaps in one transaction,
// unless the position would move back.
func (m Methods) SaveSourceState(ctx context.Context, name string, st model.SourceState, now time.Time) error {
	return m.SettleSource(ctx, name, model.SourceSettle{State: st}, now)
}

// SourceRejects lists recorded rejects in (source, row) order, the
// sources' bytewise order: collate is "" where that is the default, else
// the collation clause that makes it so.
func SourceRejects(ctx context.Context, q Querier, f model.SourceRejectFilter, collate string) ([]model.SourceReject, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	query := `SELECT ` + SourceRejectCols + ` FROM source_rejects
		WHERE ($1 = '' OR source = $1) AND (source` + collate + `, row_id) > (CAST($2 AS text)` + collate + `, $3)`
	if f.Requested {
		query += ` AND retry_at IS NOT NULL`
	}
	return All(ctx, q, ScanSourceReject, query+` ORDER BY source`+collate+`, row_id LIMIT $4`, f.Source, f.AfterSource, f.AfterRow, f.Limit)
}

// SourceStates returns every saved source's state by name; each is read
// as SourceState reads it.
func (m Methods) SourceStates(ctx context.Context) (map[string]model.SourceState, error) {
	names, err := get(ctx, m.Read, func(q Querier) ([]string, error) {
		return All(ctx, q, scanString, `SELECT source FROM source_positions ORDER BY source`)
	})
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	out := make(map[string]model.SourceState, len(names))
	for _, n := range names {
		st, err := m.SourceState(ctx, n)
		if err != nil {
			return nil, err
		}
		out[n] = st
	}
	return out, nil
}

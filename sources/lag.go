package sources

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// LagSource is a source that can measure how far behind it the tailer is.
// It is optional: the tailer, serve's /metrics and edgerelay status use it
// when a source has it (every source here does).
type LagSource interface {
	Source
	// Backlog measures the committed rows not relayed yet: those with
	// id > after, and those in gaps (committed late; the next round reads
	// them).
	Backlog(ctx context.Context, after int64, gaps []model.SourceGap) (Backlog, error)
}

// Backlog is what a source holds that the tailer has not relayed yet.
type Backlog struct {
	// Rows counts the committed rows after the position: exactly up to
	// BacklogExact; beyond it (Estimated) the highest order value (id)
	// less the position, which also counts the ids of rolled-back
	// transactions.
	Rows      int64
	Estimated bool
	// GapRows counts the committed rows in the gaps.
	GapRows int64
	// OldestAge is how long ago, by the database's clock, the oldest of
	// these rows was created (0 if there are none; among the first
	// BacklogExact after the position). AgeKnown is false when the table
	// has no creation time column (created_column), or when none of the
	// rows has a time in it that the database can read.
	OldestAge time.Duration
	AgeKnown  bool
}

// BacklogExact is the most rows Backlog counts one by one: counting is an
// index range scan, so its cost is bounded by this, not by the backlog.
const BacklogExact = 10000

// defaultCreated is the column that dates a row when the table has it
// (the outbox DDLs do) and created_column does not name another.
const defaultCreated = "created_at"

// lagQueries are a source's backlog queries, in its dialect. Each returns
// a count and the oldest row's age in microseconds (NULL when there are no
// rows or no creation column).
type lagQueries struct {
	afterQ string             // args: after, limit
	maxQ   string             // the highest id
	gapQ   func(n int) string // args: n ranges (first, last)
	dated  bool               // the table has a creation column
}

// measure runs the queries on db.
func (q *lagQueries) measure(ctx context.Context, db *sql.DB, after int64, gaps []model.SourceGap) (Backlog, error) {
	b := Backlog{AgeKnown: q.dated}
	var age sql.NullInt64
	if err := db.QueryRowContext(ctx, q.afterQ, after, BacklogExact+1).Scan(&b.Rows, &age); err != nil {
		return b, err
	}
	if b.Rows > BacklogExact {
		var top int64
		if err := db.QueryRowContext(ctx, q.maxQ).Scan(&top); err != nil {
			return b, err
		}
		b.Rows, b.Estimated = max(top-after, b.Rows), true
	}
	oldest, dated := age.Int64, age.Valid
	for i := 0; i < len(gaps); i += gapChunk {
		chunk := gaps[i:min(i+gapChunk, len(gaps))]
		args := make([]any, 0, 2*len(chunk))
		for _, g := range chunk {
			args = append(args, g.First, g.Last)
		}
		var n int64
		var gapAge sql.NullInt64
		if err := db.QueryRowContext(ctx, q.gapQ(len(chunk)), args...).Scan(&n, &gapAge); err != nil {
			return b, err
		}
		b.GapRows += n
		oldest, dated = max(oldest, gapAge.Int64), dated || gapAge.Valid
	}
	if q.dated {
		b.OldestAge = max(0, time.Duration(oldest)*time.Microsecond)
	}
	// Rows behind, none with a time the database can read (NULL, or text
	// SQLite takes for no date): their age is unknown, not nil.
	if b.Rows+b.GapRows > 0 && !dated {
		b.AgeKnown = false
	}
	return b, nil
}

// createdColumn resolves created_column: the named column (which must
// exist and be one of timeTypes), or created_at if the table has it with
// such a type, or none. cols maps the table's columns (lower case) to
// their types.
func createdColumn(table, param string, cols map[string]string, timeTypes ...string) (string, error) {
	col := param
	if col == "" {
		col = defaultCreated
	}
	typ, ok := cols[col]
	switch {
	case !ok && param == "":
		return "", nil
	case !ok:
		return "", fmt.Errorf("table %q has no column %q (created_column: the row's creation time, for the age of the oldest row not relayed yet)", table, col)
	case !contains(timeTypes, typ):
		if param == "" {
			return "", nil // a created_at of another kind: not a time the database can subtract
		}
		return "", fmt.Errorf("table %q: created_column %q is %s; want one of %v", table, col, typ, timeTypes)
	}
	return col, nil
}

// newLagQueries builds the backlog queries for table t ordered by the
// column o, dated by the column created ("" for none; all three quoted):
// ageOf is the dialect's age in microseconds of min(c), ph its placeholder
// for argument i (0-based).
func newLagQueries(t, o, created string, ageOf func(c string) string, ph func(i int) string) lagQueries {
	col, age := o, "NULL"
	if created != "" {
		col, age = created, ageOf("c")
	}
	return lagQueries{
		afterQ: fmt.Sprintf(`SELECT count(*), %s FROM (SELECT %s AS c FROM %s WHERE %s > %s ORDER BY %s LIMIT %s) s`, age, col, t, o, ph(0), o, ph(1)),
		maxQ:   fmt.Sprintf(`SELECT coalesce(max(%s), 0) FROM %s`, o, t),
		gapQ: func(n int) string {
			return fmt.Sprintf(`SELECT count(*), %s FROM (SELECT %s AS c FROM %s WHERE %s) s`, age, col, t, betweens(o, n, ph))
		},
		dated: created != "",
	}
}

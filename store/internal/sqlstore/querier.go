package sqlstore

import (
	"context"
	"database/sql"
)

// Querier runs one statement: a driver's read transaction, pool or write
// transaction. Errors are the driver's; no rows is sql.ErrNoRows (pgx's
// ErrNoRows matches it with errors.Is).
type Querier interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Exec returns the number of rows the statement changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// Rows is a result being read; pgx.Rows is one.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a result of at most one row; *sql.Row and pgx.Row are one.
type Row interface {
	Scan(dest ...any) error
}

// SQLConn is what database/sql's *DB, *Conn and *Tx have in common.
type SQLConn interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// DB is a Querier over database/sql.
func DB(c SQLConn) Querier { return sqlDB{c} }

type sqlDB struct{ c SQLConn }

func (d sqlDB) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := d.c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return SQLRows{rows}, nil
}

func (d sqlDB) QueryRow(ctx context.Context, query string, args ...any) Row {
	return d.c.QueryRowContext(ctx, query, args...)
}

func (d sqlDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := d.c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SQLRows is *sql.Rows as Rows: Close's error is Err's too.
type SQLRows struct{ *sql.Rows }

// Close closes the rows; a read's errors come from Next, Scan and Err.
func (r SQLRows) Close() { _ = r.Rows.Close() }

// All runs query and reads every row of its result with scan.
func All[T any](ctx context.Context, q Querier, scan func(Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

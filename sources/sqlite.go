package sources

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/edgerelay/edgerelay/model"
)

// SQLite is an outbox table in an application's SQLite database:
//
//	sqlite:///abs/path/app.db?table=edgerelay_outbox&column=event&mark_processed=true
//	sqlite:relative/app.db
//
// Parameters: table (default edgerelay_outbox), shape, order, column and
// map (columns.go; by default the event JSON in column event, ordered by
// id), mark_processed (default false), busy_timeout (how long to wait for
// the application's write lock, default 5s), name (the name its position
// is kept under; default the URL's path and table, so set it to keep the
// position when the file moves).
// created_column (the row's creation time, for the age of the oldest
// row not relayed yet) defaults to created_at if the table has it.
//
// The database is opened read-only unless mark_processed is true; then it
// is opened read-write (never created) with busy_timeout, so the marking
// waits for the application's writer instead of failing. The journal mode
// is the application's to choose and is left alone (WAL lets the tailer
// read while the application writes).
//
// Ordering: ids are assigned at insert and visible at commit, so in a
// database with concurrent writers a transaction that commits later can
// hold a smaller id than rows already read, and reading "id > position"
// would skip it. SQLite cannot do this: it has one writer at a time, and
// the transaction that takes an id commits (or rolls back, and with
// AUTOINCREMENT its id is never handed out) before the next writer begins,
// so rows become visible in id order. PostgreSQL and MySQL sources are
// GapSources instead (sqldb.go).
type SQLite struct {
	db    *sql.DB
	name  string
	path  string
	table string
	cols  columns
	mark  bool
	readQ string
	// created dates a row (created_column; "" for none), lag its backlog
	// queries (lag.go).
	created string
	lag     lagQueries
	busy    time.Duration // busy_timeout
}

var (
	_ Source    = (*SQLite)(nil)
	_ LagSource = (*SQLite)(nil)
)

var sqliteParams = append([]string{"table", "mark_processed", "busy_timeout", "name", "created_column"}, columnParams...)

// markChunk bounds the ids of one UPDATE (SQLite caps bound parameters).
const markChunk = 500

func parseSQLite(u *url.URL) (*Spec, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadURL, u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Host != "" {
		return nil, bad("host %q: write sqlite:///abs/path/app.db (three slashes) or sqlite:relative/path/app.db", u.Host)
	}
	path := u.Path
	if u.Opaque != "" {
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return nil, bad("path: %v", err)
		}
		path = p
	}
	if path == "" {
		return nil, bad("no database path: write sqlite:///abs/path/app.db")
	}
	q, err := params(u, sqliteParams...)
	if err != nil {
		return nil, err
	}
	s := &SQLite{table: "edgerelay_outbox"}
	if v := q.Get("table"); v != "" {
		s.table = v
	}
	if err := checkIdent("table", s.table); err != nil {
		return nil, err
	}
	if s.cols, err = parseColumns(u, q); err != nil {
		return nil, err
	}
	s.created = q.Get("created_column")
	if s.created != "" {
		if err := checkIdent("created_column", s.created); err != nil {
			return nil, err
		}
	}
	if v := q.Get("mark_processed"); v != "" {
		if s.mark, err = strconv.ParseBool(v); err != nil {
			return nil, bad("mark_processed=%q: want true or false", v)
		}
	}
	s.busy = 5 * time.Second
	if v := q.Get("busy_timeout"); v != "" {
		if s.busy, err = time.ParseDuration(v); err != nil || s.busy < 0 {
			return nil, bad("busy_timeout=%q: want a duration such as 5s", v)
		}
	}
	if s.path, err = filepath.Abs(path); err != nil {
		return nil, bad("path: %v", err)
	}
	s.name = (&url.URL{Scheme: "sqlite", Path: s.path, RawQuery: "table=" + s.table}).String()
	if v := q.Get("name"); v != "" {
		s.name = v
	}
	return &Spec{name: s.name, open: func(ctx context.Context) (Source, error) {
		c := *s // each open its own: check fills in what the table has
		return c.open(ctx)
	}}, nil
}

// open opens the database and checks the table.
func (s *SQLite) open(ctx context.Context) (Source, error) {
	// Opening read-write would create a missing file: an empty database
	// at a mistyped path would then be "tailed" forever.
	if fi, err := os.Stat(s.path); err != nil {
		return nil, fmt.Errorf("source %s: %w", s.name, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("source %s: %s is not a file", s.name, s.path)
	}

	dq := url.Values{}
	dq.Add("_pragma", "busy_timeout("+strconv.FormatInt(s.busy.Milliseconds(), 10)+")")
	if s.mark {
		dq.Set("mode", "rw") // not rwc: never create
		dq.Set("_txlock", "immediate")
	} else {
		dq.Set("mode", "ro")
		dq.Add("_pragma", "query_only(ON)")
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: s.path}).EscapedPath()+"?"+dq.Encode())
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.name, err)
	}
	// One connection: the tailer reads one batch at a time, and a single
	// connection holds no more of the application's locks than needed.
	db.SetMaxOpenConns(1)
	s.db = db
	ctx, cancel := context.WithTimeout(ctx, s.busy+10*time.Second)
	defer cancel()
	if err := s.check(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("source %s: %w", s.name, err)
	}
	o := quote(s.cols.order)
	s.readQ = fmt.Sprintf(`SELECT %s FROM %s WHERE %s > ? ORDER BY %s LIMIT ?`,
		s.cols.list(quote, func(c string) string { return c }), quote(s.table), o, o)
	return s, nil
}

// check verifies the table and the columns the source uses, naming what is
// missing.
func (s *SQLite) check(ctx context.Context) error {
	var ddl string
	err := s.db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, s.table).Scan(&ddl)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("no table %q in %s (create it with outbox.sql, or set ?table=NAME)", s.table, s.path)
	}
	if err != nil {
		return fmt.Errorf("read schema of %s: %w", s.path, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT name, type, pk FROM pragma_table_info(?)`, s.table)
	if err != nil {
		return fmt.Errorf("read columns of %q: %w", s.table, err)
	}
	defer rows.Close()
	type column struct {
		typ string
		pk  int
	}
	cols := map[string]column{}
	types := map[string]string{}
	var names []string
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.pk); err != nil {
			return fmt.Errorf("read columns of %q: %w", s.table, err)
		}
		cols[strings.ToLower(name)] = c
		types[strings.ToLower(name)] = c.typ
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read columns of %q: %w", s.table, err)
	}
	missing := func(col, hint string) error {
		return fmt.Errorf("table %q has no column %q (it has: %s)%s", s.table, col, strings.Join(names, ", "), hint)
	}
	// The position is the order column: it must be the rowid (INTEGER
	// PRIMARY KEY), and AUTOINCREMENT, or SQLite may give the id of a
	// deleted newest row to the next insert, below a position already saved.
	err = s.cols.check(s.table, types, names, func(string) string {
		if c := cols[strings.ToLower(s.cols.order)]; strings.EqualFold(c.typ, "INTEGER") && c.pk == 1 && strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
			return ""
		}
		return "must be INTEGER PRIMARY KEY AUTOINCREMENT: without it SQLite gives a deleted newest row's id to the next insert, a row the saved position has passed (never relayed); " +
			"SQLite cannot alter it: create the table anew as outbox.sql does, copy the rows with their ids (INSERT INTO new SELECT ... FROM old), drop the old one and rename the new"
	})
	if err != nil {
		return err
	}
	// The creation time: text SQLite's date functions read (outbox.sql
	// writes ISO 8601 in UTC), or Unix seconds in an INTEGER column. The
	// age is by this host's clock, the one the application's SQLite used.
	created, ok := cols[strings.ToLower(cmp.Or(s.created, defaultCreated))]
	switch {
	case !ok && s.created != "":
		return missing(s.created, " (created_column: the row's creation time, for the age of the oldest row not relayed yet)")
	case !ok:
	default:
		s.created = cmp.Or(s.created, defaultCreated)
		mod := ""
		if strings.Contains(strings.ToUpper(created.typ), "INT") {
			mod = ", 'unixepoch'"
		}
		s.lag = newLagQueries(quote(s.table), quote(s.cols.order), quote(s.created), func(c string) string {
			return "CAST((julianday('now') - min(julianday(" + c + mod + "))) * 86400000000 AS INTEGER)"
		}, func(int) string { return "?" })
	}
	if !s.lag.dated {
		s.lag = newLagQueries(quote(s.table), quote(s.cols.order), "", nil, func(int) string { return "?" })
	}
	if s.mark {
		if _, ok := cols["processed_at"]; !ok {
			return missing("processed_at", " needed by mark_processed=true; add it (see outbox.sql) or drop mark_processed")
		}
		// SQLite opens a write-protected file read-only without a word;
		// find out now rather than at the first batch. BEGIN IMMEDIATE
		// (the DSN's _txlock) takes the write lock and so fails on such a
		// file; it waits up to busy_timeout for the application's writer.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("mark_processed=true needs write access to %s: %w", s.path, err)
		}
		tx.Rollback()
	}
	return nil
}

// Name is the name the source's position is kept under.
func (s *SQLite) Name() string { return s.name }

// Read returns at most limit rows with id > after, in id order.
func (s *SQLite) Read(ctx context.Context, after int64, limit int) ([]Row, error) {
	rows, err := s.db.QueryContext(ctx, s.readQ, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.name, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := s.cols.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.name, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.name, err)
	}
	return out, nil
}

// MarkProcessed sets processed_at on the rows that do not have it yet, in
// one transaction. A no-op unless the source has mark_processed=true.
func (s *SQLite) MarkProcessed(ctx context.Context, ids []int64) error {
	if !s.mark || len(ids) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark processed in %s: %w", s.name, err)
	}
	defer tx.Rollback()
	for i := 0; i < len(ids); i += markChunk {
		chunk := ids[i:min(i+markChunk, len(ids))]
		args := make([]any, len(chunk))
		for j, id := range chunk {
			args[j] = id
		}
		q := fmt.Sprintf(`UPDATE %s SET processed_at = strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')
			WHERE processed_at IS NULL AND %s IN (%s)`, quote(s.table), quote(s.cols.order), strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", "))
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("mark processed in %s: %w", s.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mark processed in %s: %w", s.name, err)
	}
	return nil
}

// Backlog measures the rows not relayed yet (lag.go); an SQLite source
// has no gaps.
func (s *SQLite) Backlog(ctx context.Context, after int64, gaps []model.SourceGap) (Backlog, error) {
	b, err := s.lag.measure(ctx, s.db, after, gaps)
	if err != nil {
		return b, fmt.Errorf("measure the backlog of %s: %w", s.name, err)
	}
	return b, nil
}

// Close closes the connection to the application's database.
func (s *SQLite) Close() error { return s.db.Close() }

package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"edgerelay/store/postgres"
	"edgerelay/store/sqlite"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the source is read with database/sql
)

// Sentinels callers and tests branch on.
var (
	// ErrSource: the source is missing, not an edgerelay database, or at
	// another schema version than this binary's.
	ErrSource = errors.New("source")
	// ErrLive: a process holds leases on the source (a serve, dispatch,
	// cron or tail still running there). Moving then could leave behind
	// what it does after the snapshot.
	ErrLive = errors.New("the source is in use")
	// ErrInService: the target has ids past every id of the source: it
	// has taken work of its own since a previous run, and a copy now
	// would merge two histories.
	ErrInService = errors.New("the target is in service")
	// ErrForeign: a row under one of the source's ids (or keys) in the
	// target is another row: the target holds another installation.
	ErrForeign = errors.New("the target holds other rows")
)

// Options tune a Run. The zero value is usable.
type Options struct {
	// Batch is the number of rows written per target transaction.
	// Default 1000.
	Batch int
	// Now is the clock leases are judged by. Default time.Now.
	Now func() time.Time
	// Progress, when set, is called after each batch and once when each
	// table is done.
	Progress func(Progress)
}

// Progress is how far the copy of one table has come.
type Progress struct {
	Table       string
	Read, Total int64 // source rows read so far, and in all
	Copied      int64 // rows written to the target so far
	Done        bool
}

// Count is what happened to one table.
type Count struct {
	Table   string `json:"table"`
	Source  int64  `json:"source"`  // rows in the source snapshot
	Copied  int64  `json:"copied"`  // rows inserted (or watermarks raised) in the target
	Present int64  `json:"present"` // rows whose key the target had already: left as they are
	Skipped string `json:"skipped,omitempty"`
}

// Result is a finished Run.
type Result struct {
	Source string  `json:"source"`
	Target string  `json:"target"` // without its password
	Tables []Count `json:"tables"`
	// NextID is, per table with ids, the lowest id the target can now
	// give: past every id the source ever gave.
	NextID map[string]int64 `json:"next_id"`
}

// Run copies the SQLite database at from into the PostgreSQL database at
// to (migrated to this binary's schema first; one newer is refused
// untouched). See the package comment and README "From one box to PostgreSQL".
//
// The source is read in one snapshot, read-only; it is refused while any
// lease on it is live. The target is written one batch per transaction: a
// run that fails part-way leaves whole batches, and running it again
// finishes the copy (rows already there are skipped by key). A target
// that is not empty must be a previous run of the same source: one with
// other rows under the source's ids is refused (ErrForeign), and so is
// one that has given ids of its own since (ErrInService).
func Run(ctx context.Context, from, to string, opts Options) (*Result, error) {
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	src, err := openSource(ctx, from)
	if err != nil {
		return nil, err
	}
	defer src.db.Close()

	st, err := postgres.Open(ctx, to, postgres.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	where := st.Where()
	st.Close()
	conn, err := pgx.Connect(ctx, to)
	if err != nil {
		return nil, fmt.Errorf("target %s: %s", where, postgres.Scrub(err.Error(), to))
	}
	defer conn.Close(context.Background())

	m := &mover{src: src, dst: conn, opts: opts, res: &Result{Source: from, Target: where, NextID: map[string]int64{}}}
	if err := m.run(ctx); err != nil {
		// pgx errors do not carry the URL; this is belt and braces.
		if msg := postgres.Scrub(err.Error(), to); msg != err.Error() {
			return nil, errors.New(msg)
		}
		return nil, err
	}
	return m.res, nil
}

type source struct {
	path string
	db   *sql.DB
}

// openSource opens the file read-only (mode=ro and query_only: nothing is
// created, migrated or written) and checks its schema is this binary's.
func openSource(ctx context.Context, path string) (*source, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %s: no such file (name the file serve ran with as --db)", ErrSource, path)
	} else if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrSource, path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w %s: not a file", ErrSource, path)
	}
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "query_only(ON)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrSource, path, err)
	}
	db.SetMaxOpenConns(1) // one connection: the snapshot's
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w %s: %w", ErrSource, path, err)
	}
	want := sqlite.SchemaVersion()
	switch {
	case v == 0:
		err = fmt.Errorf("%w %s: not an edgerelay database (no schema version)", ErrSource, path)
	case v > want:
		err = fmt.Errorf("%w %s: schema version %d is newer than this binary's %d: use the edgerelay that wrote it", ErrSource, path, v, want)
	case v < want:
		err = fmt.Errorf("%w %s: schema version %d, this binary's is %d: migrate the file first (any command on it does, e.g. edgerelay status --db %s), then move it",
			ErrSource, path, v, want, path)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &source{path: path, db: db}, nil
}

type mover struct {
	src  *source
	dst  *pgx.Conn
	tx   *sql.Tx // the source snapshot
	opts Options
	res  *Result
	seq  map[string]int64 // sqlite_sequence: the largest id each table gave
}

func (m *mover) run(ctx context.Context) error {
	// One read transaction: every table from the same snapshot, whatever
	// else reads the file meanwhile (WAL keeps it).
	tx, err := m.src.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	defer tx.Rollback()
	m.tx = tx
	if err := m.checkTables(ctx); err != nil {
		return err
	}
	if err := m.checkIdle(ctx); err != nil {
		return err
	}
	if err := m.readSequences(ctx); err != nil {
		return err
	}
	if err := m.checkTarget(ctx); err != nil {
		return err
	}
	// Sequences first: even a target served before the copy is complete
	// (against the README's advice) gives ids the source never gave.
	if err := m.setSequences(ctx); err != nil {
		return err
	}
	for _, t := range plan {
		if t.skip != "" {
			var n int64
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+quote(t.name)).Scan(&n); err != nil {
				return fmt.Errorf("source table %s: %w", t.name, err)
			}
			m.res.Tables = append(m.res.Tables, Count{Table: t.name, Source: n, Skipped: t.skip})
			continue
		}
		c, err := m.copyTable(ctx, t)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		m.res.Tables = append(m.res.Tables, c)
	}
	return nil
}

// checkTables refuses a source with a table the plan does not name (a
// binary whose plan was not updated with a migration; a test catches it).
func (m *mover) checkTables(ctx context.Context) error {
	rows, err := m.tx.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	names, err := collect[string](rows)
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	for _, n := range names {
		if _, ok := notMoved[n]; !ok && !slices.ContainsFunc(plan, func(t table) bool { return t.name == n }) {
			return fmt.Errorf("%w %s: table %s is not in migrate-store's plan (store/migrate/plan.go)", ErrSource, m.src.path, n)
		}
	}
	return nil
}

// checkIdle refuses a source that a process is using: a live singleton
// lease (serve's schedules or tails, cron, tail), a notification claimed
// under a lease that has not expired (a dispatcher mid-call), or a request
// key claimed in flight (an API request being accepted). What such a
// process does after the snapshot would stay behind. Leases that have
// lapsed are what a killed process leaves: they are moved as they are, and
// the target settles each claim as unknown once, as after any crash. An
// idle serve holds no lease and cannot be seen from the file: the README
// says to stop it first.
func (m *mover) checkIdle(ctx context.Context) error {
	now := m.opts.Now().UnixMilli()
	var name, holder string
	var until int64
	err := m.tx.QueryRowContext(ctx, "SELECT name, holder, until FROM leases WHERE until > ? ORDER BY until DESC LIMIT 1", now).Scan(&name, &holder, &until)
	if err == nil {
		return fmt.Errorf("%w: %s holds the lease %q until %s: stop serve (and cron, tail) on it first",
			ErrLive, holder, name, time.UnixMilli(until).UTC().Format(time.RFC3339))
	} else if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	var n int64
	var last sql.NullInt64
	if err := m.tx.QueryRowContext(ctx, "SELECT count(*), max(lease_until) FROM notifications WHERE status = 'sending' AND lease_until > ?", now).Scan(&n, &last); err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d notification(s) are claimed by a running dispatcher (leases until %s): stop serve and dispatch on it first",
			ErrLive, n, time.UnixMilli(last.Int64).UTC().Format(time.RFC3339))
	}
	if err := m.tx.QueryRowContext(ctx, "SELECT count(*) FROM request_keys WHERE state = 'in_flight' AND locked_until > ?", now).Scan(&n); err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d API request(s) are being accepted (Idempotency-Key claims in flight): stop serve on it first", ErrLive, n)
	}
	return nil
}

func (m *mover) readSequences(ctx context.Context) error {
	m.seq = map[string]int64{}
	rows, err := m.tx.QueryContext(ctx, "SELECT name, seq FROM sqlite_sequence")
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, m.src.path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return err
		}
		m.seq[name] = v
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// sqlite_sequence holds the largest id ever given (a pruned row's
	// too); max(id) covers a row written without AUTOINCREMENT's help.
	for _, t := range plan {
		if !t.id {
			continue
		}
		var mx int64
		if err := m.tx.QueryRowContext(ctx, "SELECT coalesce(max(id), 0) FROM "+quote(t.name)).Scan(&mx); err != nil {
			return fmt.Errorf("source table %s: %w", t.name, err)
		}
		m.seq[t.name] = max(m.seq[t.name], mx)
	}
	return nil
}

// checkTarget refuses a target that has given ids the source never gave:
// it has worked on its own since a previous run (or belongs to another
// installation), and copying into it would merge two histories.
func (m *mover) checkTarget(ctx context.Context) error {
	for _, t := range plan {
		if !t.id {
			continue
		}
		var mx int64
		if err := m.dst.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+pgIdent(t.name)).Scan(&mx); err != nil {
			return fmt.Errorf("target table %s: %w", t.name, err)
		}
		if mx > m.seq[t.name] {
			return fmt.Errorf("%w: its %s reach id %d, past the source's last (%d): it has taken work of its own since it was moved to (or holds another installation); migrate-store copies into an empty target or finishes a previous run, it does not merge",
				ErrInService, t.name, mx, m.seq[t.name])
		}
	}
	return nil
}

// setSequences moves each identity sequence past the source's largest id
// (and the target's), never back.
func (m *mover) setSequences(ctx context.Context) error {
	for _, t := range plan {
		if !t.id {
			continue
		}
		var seq string
		var last, mx int64
		err := m.dst.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, 'id'), coalesce(pg_sequence_last_value(pg_get_serial_sequence($1, 'id')::regclass), 0),
			(SELECT coalesce(max(id), 0) FROM `+pgIdent(t.name)+`)`, t.name).Scan(&seq, &last, &mx)
		if err != nil {
			return fmt.Errorf("target table %s: read its id sequence: %w", t.name, err)
		}
		v := max(m.seq[t.name], last, mx)
		if v > 0 {
			if _, err := m.dst.Exec(ctx, "SELECT setval($1::regclass, $2)", seq, v); err != nil {
				return fmt.Errorf("target table %s: set its id sequence: %w", t.name, err)
			}
		}
		next := v + 1
		m.res.NextID[t.name] = next
	}
	return nil
}

// copyTable streams the table from the snapshot in key order and writes
// it in batches.
func (m *mover) copyTable(ctx context.Context, t table) (Count, error) {
	c := Count{Table: t.name}
	if err := m.tx.QueryRowContext(ctx, "SELECT count(*) FROM "+quote(t.name)).Scan(&c.Source); err != nil {
		return c, fmt.Errorf("source: %w", err)
	}
	cols, types, err := m.columns(ctx, t)
	if err != nil {
		return c, err
	}
	quoted := make([]string, len(cols))
	for i, col := range cols {
		quoted[i] = quote(col)
	}
	keys := make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = quote(k)
	}
	rows, err := m.tx.QueryContext(ctx, "SELECT "+strings.Join(quoted, ", ")+" FROM "+quote(t.name)+" ORDER BY "+strings.Join(keys, ", "))
	if err != nil {
		return c, fmt.Errorf("source: %w", err)
	}
	defer rows.Close()
	var read int64
	batch := make([][]any, 0, m.opts.Batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := m.writeBatch(ctx, t, cols, batch)
		if err != nil {
			return err
		}
		c.Copied += n
		c.Present += int64(len(batch)) - n
		batch = batch[:0]
		if m.opts.Progress != nil {
			m.opts.Progress(Progress{Table: t.name, Read: read, Total: c.Source, Copied: c.Copied})
		}
		return nil
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return c, fmt.Errorf("source: %w", err)
		}
		for i, v := range vals {
			if vals[i], err = convert(v, types[i]); err != nil {
				return c, fmt.Errorf("source row %d, column %s: %w", read+1, cols[i], err)
			}
		}
		read++
		batch = append(batch, vals)
		if len(batch) == m.opts.Batch {
			if err := flush(); err != nil {
				return c, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("source: %w", err)
	}
	if err := flush(); err != nil {
		return c, err
	}
	if m.opts.Progress != nil {
		m.opts.Progress(Progress{Table: t.name, Read: read, Total: c.Source, Copied: c.Copied, Done: true})
	}
	return c, nil
}

// columns are the target table's columns and their types, checked to be
// the source's: the same migrations made both.
func (m *mover) columns(ctx context.Context, t table) ([]string, []string, error) {
	rows, err := m.dst.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, t.name)
	if err != nil {
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	var cols, types []string
	for rows.Next() {
		var c, ty string
		if err := rows.Scan(&c, &ty); err != nil {
			return nil, nil, err
		}
		cols, types = append(cols, c), append(types, ty)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	srows, err := m.tx.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", t.name)
	if err != nil {
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	have, err := collect[string](srows)
	if err != nil {
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	slices.Sort(have)
	want := slices.Clone(cols)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		return nil, nil, fmt.Errorf("the source's columns %v are not the target's %v: the two stores' migrations disagree", have, want)
	}
	return cols, types, nil
}

// writeBatch writes one batch in one transaction: COPY into a temporary
// table, refuse a row under one of its ids that is another row, insert
// what is not there by key (raising watermarks). It returns the rows
// written.
func (m *mover) writeBatch(ctx context.Context, t table, cols []string, batch [][]any) (int64, error) {
	tx, err := m.dst.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("target: %w", err)
	}
	defer tx.Rollback(context.Background())
	tmp := "migrate_" + t.name
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE "+pgIdent(tmp)+" (LIKE "+pgIdent(t.name)+") ON COMMIT DROP"); err != nil {
		return 0, fmt.Errorf("target: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{tmp}, cols, pgx.CopyFromRows(batch)); err != nil {
		return 0, fmt.Errorf("target: copy: %w", err)
	}
	if len(t.same) > 0 {
		var a, b []string
		for _, c := range t.same {
			a, b = append(a, "i."+pgIdent(c)), append(b, "x."+pgIdent(c))
		}
		var id int64
		err := tx.QueryRow(ctx, "SELECT i.id FROM "+pgIdent(tmp)+" i JOIN "+pgIdent(t.name)+" x ON x.id = i.id WHERE ("+
			strings.Join(a, ", ")+") IS DISTINCT FROM ("+strings.Join(b, ", ")+") ORDER BY i.id LIMIT 1").Scan(&id)
		if err == nil {
			return 0, fmt.Errorf("%w: the target's %s id %d is not the source's (%s differ): it holds another installation's rows, or it was moved to from another source",
				ErrForeign, t.name, id, strings.Join(t.same, ", "))
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("target: %w", err)
		}
	}
	var q strings.Builder
	ins := make([]string, len(cols))
	sel := make([]string, len(cols))
	for i, c := range cols {
		ins[i], sel[i] = pgIdent(c), "i."+pgIdent(c)
	}
	keys := make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = pgIdent(k)
	}
	fmt.Fprintf(&q, "INSERT INTO %s (%s) SELECT %s FROM %s i", pgIdent(t.name), strings.Join(ins, ", "), strings.Join(sel, ", "), pgIdent(tmp))
	if t.filter != "" {
		q.WriteString(" WHERE " + t.filter)
	}
	fmt.Fprintf(&q, " ON CONFLICT (%s) DO ", strings.Join(keys, ", "))
	switch {
	case t.conflict != "":
		q.WriteString(t.conflict)
	case len(t.raise) == 0:
		q.WriteString("NOTHING")
	default:
		var set, when []string
		for _, r := range t.raise {
			r = pgIdent(r)
			set = append(set, fmt.Sprintf("%s = greatest(%s.%s, excluded.%s)", r, pgIdent(t.name), r, r))
			when = append(when, fmt.Sprintf("excluded.%s > %s.%s", r, pgIdent(t.name), r))
		}
		fmt.Fprintf(&q, "UPDATE SET %s WHERE %s", strings.Join(set, ", "), strings.Join(when, " OR "))
	}
	tag, err := tx.Exec(ctx, q.String())
	if err != nil {
		return 0, fmt.Errorf("target: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("target: commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// convert turns a value SQLite returned into what the target column
// takes: SQLite keeps booleans as integers and the event's JSON as text.
func convert(v any, pgType string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch pgType {
	case "boolean":
		switch x := v.(type) {
		case int64:
			return x != 0, nil
		case bool:
			return x, nil
		}
	case "bytea":
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		}
	case "text":
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case "bigint", "integer", "smallint":
		if x, ok := v.(int64); ok {
			return x, nil
		}
	default:
		return v, nil
	}
	return nil, fmt.Errorf("a %T where the target has %s", v, pgType)
}

func collect[T any](rows *sql.Rows) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// quote is a SQLite identifier ("user" is a keyword in both dialects).
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func pgIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

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

	"github.com/edgerelay/edgerelay/store/postgres"
	"github.com/edgerelay/edgerelay/store/sqlite"

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
	// SourceWait bounds the wait for the source's write lock while
	// another process writes it. Default 10s.
	SourceWait time.Duration
	// Hooks are points a test (or the binary's EDGERELAY_CRASH_AT) can
	// stop or kill a run at.
	Hooks Hooks
	// Label names this run to another one refused while it holds the
	// target (PostgreSQL keeps 63 bytes of it). Default "edgerelay
	// migrate-store pid N on HOST".
	Label string
}

// Point is a place in a run where Hooks.At is called.
type Point string

// The points of a run, in order.
const (
	// Locked: both locks are held (the target's copy lock and the
	// source's write lock) and the target was found idle; nothing is
	// copied yet.
	Locked Point = "locked"
	// Copied: a batch has committed on the target (called once per batch).
	Copied Point = "copied"
)

// Points are the points Hooks.At is called at.
var Points = []Point{Locked, Copied}

// Hooks are called on the run's goroutine; a hook that blocks holds the
// run (and its locks) where it is.
type Hooks struct {
	At func(Point)
}

func (h Hooks) at(p Point) {
	if h.At != nil {
		h.At(p)
	}
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
	Source  int64  `json:"source"`            // rows in the source snapshot
	Copied  int64  `json:"copied"`            // rows inserted in the target
	Updated int64  `json:"updated"`           // rows already there that took the source's newer values (or a raised watermark)
	Present int64  `json:"present"`           // rows already there as the source has them: left as they are
	Deleted int64  `json:"deleted,omitempty"` // rows the source deleted since a run (tables mirrored: tokens)
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
// finishes the copy and carries over what the source changed since (a row
// already there takes the source's values where they differ: plan.go). A
// target that is not empty must be a previous run of the same source: one
// with other rows under the source's ids is refused (ErrForeign), and so is
// one that has given ids of its own since, or holds a row in a later state
// than the source's (ErrInService).
//
// One run at a time: the target's schema is held under
// postgres.LockCopy for the whole run, so a second run, or any store
// opening it, is refused with postgres.ErrCopying naming this one (Label);
// a target a relay works on (a live lease or claim) is refused
// (ErrInService); and the source's write lock is held from before the
// snapshot to the end, so nothing commits there that the copy misses.
func Run(ctx context.Context, from, to string, opts Options) (*Result, error) {
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SourceWait <= 0 {
		opts.SourceWait = 10 * time.Second
	}
	if opts.Label == "" {
		host, _ := os.Hostname()
		opts.Label = fmt.Sprintf("edgerelay migrate-store pid %d on %s", os.Getpid(), host)
	}
	src, err := openSource(ctx, from)
	if err != nil {
		return nil, err
	}
	defer src.db.Close()

	// Open migrates the target, and refuses it while another run holds
	// it (postgres.ErrCopying).
	st, err := postgres.Open(ctx, to, postgres.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	where := st.Where()
	st.Close()
	// The target's lock first: a second run is refused at once, naming
	// the first, before it waits for anything.
	lock, err := postgres.LockCopy(ctx, to, opts.Label)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", where, err)
	}
	defer lock.Release()
	if err := src.lock(ctx, opts.SourceWait); err != nil {
		return nil, err
	}
	defer src.unlock()
	// The copy's own connection, without the URL's search_path as a
	// startup parameter (PgBouncer refuses it): every name it writes is
	// qualified with the schema the lock resolved.
	cfg, _, err := postgres.ConnConfig(to)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", where, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: %s", where, postgres.Scrub(err.Error(), to))
	}
	defer conn.Close(context.Background())

	m := &mover{src: src, dst: conn, lock: lock, schema: lock.Schema, opts: opts, res: &Result{Source: from, Target: where, NextID: map[string]int64{}}}
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
	db   *sql.DB // read-only: the snapshot's
	// held is the write lock, on a connection of its own (a read-only
	// connection cannot take it): no process commits to the source from
	// before the snapshot to the end of the copy, so nothing is written
	// there that the target would not have.
	held   *sql.Tx
	heldDB *sql.DB
}

// lock takes the source's write lock (BEGIN IMMEDIATE, which writes
// nothing), waiting up to wait for a writer to finish.
func (s *source) lock(ctx context.Context, wait time.Duration) error {
	q := url.Values{}
	q.Add("mode", "rw") // never rwc: the file exists
	q.Add("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", wait.Milliseconds()))
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: s.path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrSource, s.path, err)
	}
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		if strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked") {
			return fmt.Errorf("%w: another process kept %s's write lock for %s (a serve, send, dispatch, cron or tail on it, or another migrate-store from it): stop it first",
				ErrLive, s.path, wait)
		}
		return fmt.Errorf("%w %s: take its write lock: %w", ErrSource, s.path, err)
	}
	s.held, s.heldDB = tx, db
	return nil
}

// unlock ends the write lock. It runs while the read-only connection is
// still open: SQLite checkpoints the WAL into the file when the last
// connection closes, and a read-only one does not, so the source's file
// is left as it was.
func (s *source) unlock() {
	if s.held != nil {
		s.held.Rollback()
		s.heldDB.Close()
		s.held, s.heldDB = nil, nil
	}
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
	src    *source
	dst    *pgx.Conn
	lock   *postgres.CopyLock
	schema string  // the target's: every name written is qualified with it
	tx     *sql.Tx // the source snapshot
	opts   Options
	res    *Result
	seq    map[string]int64 // sqlite_sequence: the largest id each table gave
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
	if err := m.checkTargetIdle(ctx); err != nil {
		return err
	}
	if err := m.readSequences(ctx); err != nil {
		return err
	}
	if err := m.checkTarget(ctx); err != nil {
		return err
	}
	m.opts.Hooks.at(Locked)
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
		if t.mirror {
			if c.Deleted, err = m.mirror(ctx, t); err != nil {
				return fmt.Errorf("table %s: %w", t.name, err)
			}
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
// installation), and copying into it would merge two histories. Two
// signs: an id past the source's last, or an identity sequence drawn from
// since a run set it (setSequences leaves each one not yet called; the
// source may have given the same ids since, as after a rollback). Only a
// relay (or a command such as send or token create) draws ids, and every
// send writes an attempt, so a target that sent or accepted anything since
// the last run is refused here, before any row is written. The copy then
// relies on this: every row the target holds under the source's keys is
// one an earlier run copied, and the source's row is the newer (plan.go).
func (m *mover) checkTarget(ctx context.Context) error {
	for _, t := range plan {
		if !t.id {
			continue
		}
		var mx int64
		if err := m.dst.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+m.table(t.name)).Scan(&mx); err != nil {
			return fmt.Errorf("target table %s: %w", t.name, err)
		}
		if mx > m.seq[t.name] {
			return fmt.Errorf("%w: its %s reach id %d, past the source's last (%d): it has taken work of its own since it was moved to (or holds another installation); migrate-store copies into an empty target or finishes a previous run, it does not merge",
				ErrInService, t.name, mx, m.seq[t.name])
		}
		_, last, called, err := m.sequence(ctx, t.name)
		if err != nil {
			return err
		}
		if called {
			return fmt.Errorf("%w: it has given %s ids of its own (up to %d) since migrate-store last set them: a relay or a command worked on it; migrate-store copies into an empty target or finishes a previous run, it does not merge",
				ErrInService, t.name, last)
		}
	}
	return nil
}

// sequence is the identity sequence of a table's id: its name, its last
// value, and whether that value was given (nextval) rather than set as the
// next to give (setval(…, false), or a sequence never used).
func (m *mover) sequence(ctx context.Context, table string) (name string, last int64, called bool, err error) {
	if err := m.dst.QueryRow(ctx, "SELECT pg_get_serial_sequence($1, 'id')", m.table(table)).Scan(&name); err != nil {
		return "", 0, false, fmt.Errorf("target table %s: find its id sequence: %w", table, err)
	}
	// name is quoted as needed by pg_get_serial_sequence.
	if err := m.dst.QueryRow(ctx, "SELECT last_value, is_called FROM "+name).Scan(&last, &called); err != nil {
		return "", 0, false, fmt.Errorf("target table %s: read its id sequence: %w", table, err)
	}
	return name, last, called, nil
}

// checkTargetIdle refuses a target a relay works on: a live lease (a
// serve's schedules or tails, cron, tail) or a claim under a lease that has
// not expired (a dispatcher mid-call). The source's leases are not moved,
// and its claims are refused live, so either is the target's own. A relay
// that starts on the target during the copy is refused by postgres.Open
// (ErrCopying); an idle one already running cannot be seen: the README
// says to start the nodes after the move.
func (m *mover) checkTargetIdle(ctx context.Context) error {
	now := m.opts.Now().UnixMilli()
	var name, holder string
	var until int64
	err := m.dst.QueryRow(ctx, "SELECT name, holder, until FROM "+m.table("leases")+" WHERE until > $1 ORDER BY until DESC LIMIT 1", now).Scan(&name, &holder, &until)
	if err == nil {
		return fmt.Errorf("%w: a relay runs on the target: %s holds its lease %q until %s; stop serve (and cron, tail) there, move, then start them",
			ErrInService, holder, name, time.UnixMilli(until).UTC().Format(time.RFC3339))
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("target: %w", err)
	}
	var n int64
	if err := m.dst.QueryRow(ctx, "SELECT count(*) FROM "+m.table("notifications")+" WHERE status = 'sending' AND lease_until > $1", now).Scan(&n); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w: a relay runs on the target: %d notification(s) are claimed there by a running dispatcher; stop serve and dispatch there, move, then start them",
			ErrInService, n)
	}
	return nil
}

// table is a target table's name, qualified with the target's schema.
func (m *mover) table(name string) string { return pgx.Identifier{m.schema, name}.Sanitize() }

// setSequences moves each identity sequence past the source's largest id
// (and the target's), never back. It sets each as the next id to give, not
// as given (setval(…, false)): checkTarget reads a sequence drawn from
// since as a target in service.
func (m *mover) setSequences(ctx context.Context) error {
	for _, t := range plan {
		if !t.id {
			continue
		}
		seq, last, called, err := m.sequence(ctx, t.name)
		if err != nil {
			return err
		}
		given := last - 1 // the largest id given or set past
		if called {
			given = last
		}
		var mx int64
		if err := m.dst.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+m.table(t.name)).Scan(&mx); err != nil {
			return fmt.Errorf("target table %s: %w", t.name, err)
		}
		v := max(m.seq[t.name], given, mx)
		if v > 0 {
			if _, err := m.dst.Exec(ctx, "SELECT setval($1::regclass, $2, false)", seq, v+1); err != nil {
				return fmt.Errorf("target table %s: set its id sequence: %w", t.name, err)
			}
		}
		m.res.NextID[t.name] = v + 1
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
		ins, upd, err := m.writeBatch(ctx, t, cols, batch)
		if err != nil {
			return err
		}
		c.Copied += ins
		c.Updated += upd
		c.Present += int64(len(batch)) - ins - upd
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

// mirror deletes the target's rows of t whose ids the source no longer
// has: deleted on the source after a run (a token revoked). checkTarget
// refused a target that gave an id of its own, so none is the target's.
func (m *mover) mirror(ctx context.Context, t table) (int64, error) {
	rows, err := m.tx.QueryContext(ctx, "SELECT id FROM "+quote(t.name))
	if err != nil {
		return 0, fmt.Errorf("source: %w", err)
	}
	ids, err := collect[int64](rows)
	if err != nil {
		return 0, fmt.Errorf("source: %w", err)
	}
	tx, err := m.dst.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("target: %w", err)
	}
	defer tx.Rollback(context.Background())
	tag, err := tx.Exec(ctx, "DELETE FROM "+m.table(t.name)+" WHERE id <> ALL($1::bigint[])", append([]int64{}, ids...))
	if err != nil {
		return 0, fmt.Errorf("target: %w", err)
	}
	if err := m.lock.Check(ctx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("target: commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// columns are the target table's columns and their types, checked to be
// the source's: the same migrations made both.
func (m *mover) columns(ctx context.Context, t table) ([]string, []string, error) {
	rows, err := m.dst.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, m.schema, t.name)
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
// table, refuse a row under one of its ids that is another row (or one the
// target changed since it was copied), insert what is not there by key and
// give a row that is there the source's newer values (raising watermarks).
// It returns the rows inserted and the rows updated.
func (m *mover) writeBatch(ctx context.Context, t table, cols []string, batch [][]any) (inserted, updated int64, err error) {
	tx, err := m.dst.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("target: %w", err)
	}
	defer tx.Rollback(context.Background())
	tmpID := pgx.Identifier{"pg_temp", "migrate_" + t.name}
	tmp := tmpID.Sanitize()
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE "+pgIdent(tmpID[1])+" (LIKE "+m.table(t.name)+") ON COMMIT DROP"); err != nil {
		return 0, 0, fmt.Errorf("target: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, tmpID, cols, pgx.CopyFromRows(batch)); err != nil {
		return 0, 0, fmt.Errorf("target: copy: %w", err)
	}
	keys := make([]string, len(t.key))
	join := make([]string, len(t.key))
	shown := make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = pgIdent(k)
		join[i] = "x." + keys[i] + " = i." + keys[i]
		shown[i] = "i." + keys[i] + "::text"
	}
	if len(t.same) > 0 {
		var a, b []string
		for _, c := range t.same {
			a, b = append(a, "i."+pgIdent(c)), append(b, "x."+pgIdent(c))
		}
		var id int64
		err := tx.QueryRow(ctx, "SELECT i.id FROM "+tmp+" i JOIN "+m.table(t.name)+" x ON x.id = i.id WHERE ("+
			strings.Join(a, ", ")+") IS DISTINCT FROM ("+strings.Join(b, ", ")+") ORDER BY i.id LIMIT 1").Scan(&id)
		if err == nil {
			return 0, 0, fmt.Errorf("%w: the target's %s id %d is not the source's (%s differ): it holds another installation's rows, or it was moved to from another source",
				ErrForeign, t.name, id, strings.Join(t.same, ", "))
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, fmt.Errorf("target: %w", err)
		}
	}
	newer := func(alias string) string { return strings.ReplaceAll(t.newer, "{r}", alias) }
	if t.newer != "" {
		// The target's row is a later state than the source's: something
		// worked on the target since this row was copied. Which of the two
		// histories is right cannot be told from here.
		var key string
		err := tx.QueryRow(ctx, "SELECT concat_ws(', ', "+strings.Join(shown, ", ")+") FROM "+tmp+" i JOIN "+m.table(t.name)+" x ON "+
			strings.Join(join, " AND ")+" WHERE "+newer("x")+" > "+newer("i")+" LIMIT 1").Scan(&key)
		if err == nil {
			return 0, 0, fmt.Errorf("%w: the target's %s row (%s) %s is later than the source's: it was changed on the target since it was copied; migrate-store does not merge two histories",
				ErrInService, t.name, strings.Join(t.key, ", "), key)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, fmt.Errorf("target: %w", err)
		}
	}
	var q strings.Builder
	ins := make([]string, len(cols))
	sel := make([]string, len(cols))
	for i, c := range cols {
		ins[i], sel[i] = pgIdent(c), "i."+pgIdent(c)
	}
	self := pgIdent(t.name)
	fmt.Fprintf(&q, "INSERT INTO %s AS %s (%s) SELECT %s FROM %s i", m.table(t.name), self, strings.Join(ins, ", "), strings.Join(sel, ", "), tmp)
	if t.filter != "" {
		q.WriteString(" WHERE " + strings.ReplaceAll(t.filter, "{schema}", pgIdent(m.schema)))
	}
	fmt.Fprintf(&q, " ON CONFLICT (%s) DO ", strings.Join(keys, ", "))
	switch {
	case t.conflict != "":
		q.WriteString(t.conflict)
	case t.fixed:
		q.WriteString("NOTHING")
	case len(t.raise) > 0:
		var set, when []string
		for _, r := range t.raise {
			r = pgIdent(r)
			set = append(set, fmt.Sprintf("%s = greatest(%s.%s, excluded.%s)", r, self, r, r))
			when = append(when, fmt.Sprintf("excluded.%s > %s.%s", r, self, r))
		}
		fmt.Fprintf(&q, "UPDATE SET %s WHERE %s", strings.Join(set, ", "), strings.Join(when, " OR "))
	default:
		// The source's row replaces the target's when they differ (and,
		// where the table orders its rows' states, when it is the later):
		// checkTarget refused a target that worked since the last run, so
		// a difference is what the source did after that run.
		var set, mine, theirs []string
		for _, c := range cols {
			if slices.Contains(t.key, c) {
				continue
			}
			c = pgIdent(c)
			set = append(set, c+" = excluded."+c)
			mine, theirs = append(mine, self+"."+c), append(theirs, "excluded."+c)
		}
		fmt.Fprintf(&q, "UPDATE SET %s WHERE (%s) IS DISTINCT FROM (%s)", strings.Join(set, ", "), strings.Join(mine, ", "), strings.Join(theirs, ", "))
		if t.newer != "" {
			fmt.Fprintf(&q, " AND %s < %s", newer(self), newer("excluded"))
		}
	}
	// xmax is 0 on a row this statement inserted, not on one it updated.
	q.WriteString(" RETURNING xmax = 0")
	rows, err := tx.Query(ctx, q.String())
	if err != nil {
		return 0, 0, fmt.Errorf("target: %w", err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, 0, fmt.Errorf("target: %w", err)
	}
	for _, fresh := range written {
		if fresh {
			inserted++
		} else {
			updated++
		}
	}
	// Still the only run on the target (its lock's transaction answers)
	// as this batch commits.
	if err := m.lock.Check(ctx); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("target: commit: %w", err)
	}
	m.opts.Hooks.at(Copied)
	return inserted, updated, nil
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

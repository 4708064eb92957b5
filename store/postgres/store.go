package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The store owns its SQL: migrations are embedded from this package
// (//go:embed cannot reach the repository root). The root
// schema_postgres.sql is the resulting schema for readers, and a test keeps
// the two identical.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Options tune the store. The zero value is usable.
type Options struct {
	// SimpleProtocol sends every statement with PostgreSQL's simple query
	// protocol, arguments inlined by pgx, and prepares nothing: what
	// PgBouncer in transaction pooling mode needs, since consecutive
	// transactions of one client may run on different server connections.
	// The URL parameter default_query_exec_mode=simple_protocol does the
	// same.
	SimpleProtocol bool
	// MaxConns bounds the pool. Default: pool_max_conns in the URL, else
	// 16. A quarter of it (at least 2) may commit groups of writes at once
	// (group.go); the rest serves reads and the writes that are not
	// grouped. Three nodes of 16 stay well inside max_connections' default
	// of 100.
	MaxConns int32
	// WriteTimeout bounds one write transaction once it has started (a
	// caller's context bounds only the wait for a connection: a write that
	// has started is finished, so no caller walks away from a write that
	// then commits). Default 30s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

const defaultMaxConns = 16

// IsURL reports whether s names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a file.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Store is one PostgreSQL schema (the first of the URL's search_path, or
// the user's default). The hot writes share transactions (group.go); the
// others are one transaction each on a pooled connection; reads use the
// pool directly.
type Store struct {
	pool         *pgxpool.Pool
	where        string
	log          *slog.Logger
	writeTimeout time.Duration
	// listLock is the advisory lock that orders notification ids with
	// paging (see ListNotifications), keyed by the schema.
	listLock int64
	// pin ends every BEGIN: it sets the URL's search_path for that
	// transaction alone ("" without one). See Open.
	pin string

	gate   sync.RWMutex // held for reading while entering an operation, for writing by Close
	closed bool
	busy   sync.WaitGroup // operations under way

	group grouper

	smu      sync.Mutex
	stats    model.WriterStats
	onCommit atomic.Pointer[func(writes int, took time.Duration)]

	// loseCommitAnswer, set by tests (export_test.go), makes a committed
	// transaction look as if its connection broke before the answer came.
	loseCommitAnswer func() bool

	// The methods written once (sessions, tokens, leases, request keys,
	// suppressions), over the pool, its writes and its grouped writes.
	sqlstore.Methods
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at connURL, migrates its schema to the
// current version (under an advisory lock, so nodes starting together
// migrate once) and checks that commits are durable (synchronous_commit is
// not off). Close it to close the pool.
func Open(ctx context.Context, connURL string, opts Options) (*Store, error) {
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	secrets := passwords(connURL)
	cfg, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		return nil, fmt.Errorf("open store: cannot parse the database URL: %s", scrub(err.Error(), secrets))
	}
	where := redact(connURL, cfg)
	// The URL's search_path is not sent as a startup parameter (a session
	// setting): PgBouncer refuses one it does not track, or drops it when
	// told to ignore it, and in transaction pooling a session's settings
	// do not follow the client from one transaction to the next. Every
	// transaction of the store sets it instead, as it begins.
	pin := ""
	if path, ok := cfg.ConnConfig.RuntimeParams["search_path"]; ok {
		delete(cfg.ConnConfig.RuntimeParams, "search_path")
		pin = "; SELECT set_config('search_path', '" + strings.ReplaceAll(path, "'", "''") + "', true)"
	}
	if opts.SimpleProtocol {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(connURL, "pool_max_conns"):
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %s", where, scrub(err.Error(), secrets))
	}
	s := &Store{pool: pool, where: where, log: opts.Logger, writeTimeout: opts.WriteTimeout, pin: pin}
	s.Methods = sqlstore.Methods{Read: s.runRead, Write: s.runWrite, Grouped: s.runGrouped, Record: s.runRecord, Dialect: dialect}
	// A quarter of the pool commits groups; the rest is left to reads
	// and the writes that are not grouped.
	s.group.committers = max(2, int(cfg.MaxConns)/4)
	if err := s.init(ctx); err != nil {
		pool.Close()
		return nil, s.openError(err, secrets)
	}
	return s, nil
}

// openError names the database (without its password) in an error from
// Open, which may come from connecting with the URL's credentials.
func (s *Store) openError(err error, secrets []string) error {
	if errors.Is(err, model.ErrTooNew) || errors.Is(err, errNotDurable) || errors.Is(err, ErrCopying) {
		return fmt.Errorf("database %s: %w", s.where, err)
	}
	err = s.failure(err)
	if msg := err.Error(); scrub(msg, secrets) != msg {
		err = &scrubbed{msg: scrub(msg, secrets), err: err}
	}
	return fmt.Errorf("open store %s: %w", s.where, err)
}

// scrubbed is an error whose message repeated the password: it says the
// same without it, and still unwraps to what callers test for
// (model.ErrUnavailable).
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

var errNotDurable = errors.New("synchronous_commit is off: a commit would be acknowledged before it is on disk, and an accepted event " +
	"could be lost in a crash; set synchronous_commit to on for this database or role")

// init migrates, then reads what the store depends on: durable commits and
// its lock keys.
func (s *Store) init(ctx context.Context) error {
	if err := s.migrate(ctx); err != nil {
		return err
	}
	var sync, fsync string
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync'),
			hashtextextended(coalesce(current_schema(), '') || ':edgerelay:notification ids', 0)`).Scan(&sync, &fsync, &s.listLock)
	})
	if err != nil {
		return err
	}
	if sync == "off" {
		return errNotDurable
	}
	// A schema migrate-store is still copying into holds half a box:
	// nothing may start on it before the copy ends.
	if err := s.read(ctx, func(q querier) error { return copying(ctx, q) }); err != nil {
		return err
	}
	if fsync != "on" {
		s.log.Warn("the PostgreSQL server runs with fsync off: a crash of its machine can lose commits the relay acknowledged", "db", s.where)
	}
	return nil
}

// Where is the database URL without its password.
func (s *Store) Where() string { return s.where }

// Close waits for the operations under way (each is answered: done, or
// failed), refuses later ones with model.ErrClosed, and closes the pool.
func (s *Store) Close() error {
	s.gate.Lock()
	if s.closed {
		s.gate.Unlock()
		return nil
	}
	s.closed = true
	s.gate.Unlock()
	s.busy.Wait()
	s.pool.Close()
	return nil
}

// enter starts an operation, or refuses it once the store is closing.
// Call the returned function when the operation is done.
func (s *Store) enter() (func(), error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return nil, model.ErrClosed
	}
	s.busy.Add(1)
	return s.busy.Done, nil
}

// maxTries bounds how often one write is run: again after a deadlock or a
// serialization failure (PostgreSQL rolled it back), or after its
// connection broke before the commit (a restarted server, a terminated
// session), on a new connection.
const maxTries = 4

// write runs fn in a transaction of its own and commits it: for the
// writes that are not grouped (see group.go), on the caller's goroutine.
// ctx bounds the wait for a connection; once the transaction has begun it
// runs to its end under WriteTimeout instead, so a caller never gives up
// on a write that then commits. fn may run more than once (see maxTries):
// it must start from scratch each time.
//
// A commit whose answer is lost (the connection breaks during COMMIT) is
// resolved by asking the server (commitOutcome); if it cannot tell, it is
// reported as model.ErrUnavailable although it may have committed: an
// accept repeated is a duplicate and a settlement repeated is fenced off,
// but a claim lost so is left to lease recovery (an unknown attempt).
func (s *Store) write(ctx context.Context, class model.WriteClass, fn func(ctx context.Context, tx pgx.Tx) error) error {
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.failure(err)
	}
	op := &groupOp{class: class, fn: fn, done: make(chan error, 1)}
	s.runGroup(&conn, []*groupOp{op})
	if conn != nil {
		conn.Release()
	}
	return <-op.done
}

// commitOutcome asks, on another connection, what became of the
// transaction xid whose COMMIT answer was lost: "committed" or "aborted"
// (pg_xact_status), or why it cannot tell. A COMMIT that the server has
// not finished is waited for, briefly: the backend whose client went away
// still commits or aborts it.
//
// Claims and settlements are resolved this way: a claim reported failed
// although it committed would leave its notifications to lease recovery,
// which would record an attempt that never happened (and end an
// at-most-once one unknown), and a settlement run again would add its
// attempt row twice.
func (s *Store) commitOutcome(ctx context.Context, xid string) string {
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		var st *string
		err := s.pool.QueryRow(ctx, `SELECT pg_xact_status($1::xid8)`, xid).Scan(&st)
		switch {
		case err != nil:
			return "outcome unknown: " + err.Error()
		case st == nil:
			return "outcome unknown: too old for pg_xact_status"
		case *st != "in progress":
			return *st
		case wait > time.Second:
			return "still in progress after its connection was lost"
		}
		select {
		case <-ctx.Done():
			return "outcome unknown: " + ctx.Err().Error()
		case <-time.After(wait):
		}
	}
}

// Stats counts the store's commits and the writes they made durable (a
// grouped commit holds many).
func (s *Store) Stats() model.WriterStats {
	s.smu.Lock()
	defer s.smu.Unlock()
	st := s.stats
	st.Classes = maps.Clone(st.Classes)
	return st
}

// OnCommit sets a function called after every commit with the number of
// writes it made durable and how long the transaction took. It runs on
// the committing goroutine: it must be quick.
func (s *Store) OnCommit(fn func(writes int, took time.Duration)) {
	s.onCommit.Store(&fn)
}

// Ping checks that a write transaction commits now: it writes the time
// into the schema's version row. (An empty transaction would commit on a
// read-only server too.)
func (s *Store) Ping(ctx context.Context) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE schema_version SET pinged_at = $1`, ms(time.Now()))
		return err
	})
}

// begin is how the store's transactions begin: BEGIN with mode, then the
// search_path pinned for the transaction (in the same round trip: a
// statement without arguments goes as a simple query, which may hold
// several).
func (s *Store) begin(mode string) pgx.TxOptions {
	return pgx.TxOptions{BeginQuery: strings.TrimSpace("BEGIN "+mode) + s.pin}
}

// read runs a read on the pool, refused once the store is closing. With a
// search_path to pin, it runs in a transaction that pins it (two more
// round trips); without, each statement is its own.
func (s *Store) read(ctx context.Context, fn func(q querier) error) error {
	if s.pin != "" {
		return s.readTx(ctx, "READ ONLY", fn)
	}
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if err := fn(s.pool); err != nil {
		return s.failure(err)
	}
	return nil
}

// snapshot runs a read in one read-only REPEATABLE READ transaction: every
// query sees the same committed state.
func (s *Store) snapshot(ctx context.Context, fn func(q querier) error) error {
	return s.readTx(ctx, "ISOLATION LEVEL REPEATABLE READ READ ONLY", fn)
}

func (s *Store) readTx(ctx context.Context, mode string, fn func(q querier) error) error {
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if err := pgx.BeginTxFunc(ctx, s.pool, s.begin(mode), func(tx pgx.Tx) error { return fn(tx) }); err != nil {
		return s.failure(err)
	}
	return nil
}

// querier is the pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// unavailableError is PostgreSQL refusing or failing a write for a reason
// of its own (down, shutting down, read-only, out of space or
// connections), not of the request: nothing was written (or, for a lost
// commit, maybe), and the same write may succeed later.
type unavailableError struct {
	where string
	err   error
}

func (e *unavailableError) Error() string {
	return "database " + e.where + " unavailable: " + e.err.Error()
}
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == model.ErrUnavailable }

// failure is err, as a model.ErrUnavailable naming the database if the
// database is the cause.
func (s *Store) failure(err error) error {
	var ue *unavailableError
	if err == nil || errors.As(err, &ue) || !unavailable(err) {
		return err
	}
	return &unavailableError{where: s.where, err: err}
}

// unavailable: err is the server or the connection failing, not the
// statement.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch code := pe.Code; {
		case strings.HasPrefix(code, "08"), // connection exception
			strings.HasPrefix(code, "53"), // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(code, "57"), // operator intervention: shutdown, cannot connect now, query canceled
			strings.HasPrefix(code, "58"), // system error: I/O
			strings.HasPrefix(code, "XX"), // internal error, corruption
			code == "25006",               // read-only transaction (a standby, default_transaction_read_only)
			code == "40001", code == "40P01", code == "55P03":
			return true
		}
		return false
	}
	return brokenConn(err) || errors.Is(err, context.DeadlineExceeded)
}

// brokenConn: the connection failed or could not be made (no PostgreSQL
// answer at all).
func brokenConn(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// retryable: PostgreSQL rolled the transaction back to break a deadlock or
// a serialization conflict; running it again is the remedy.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// passwords are the secrets a connection string holds, to be scrubbed from
// any message that might repeat it.
func passwords(conn string) []string {
	var out []string
	if u, err := url.Parse(conn); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
		for k, vs := range u.Query() {
			if strings.Contains(strings.ToLower(k), "password") {
				for _, v := range vs {
					if v != "" {
						out = append(out, v, url.QueryEscape(v))
					}
				}
			}
		}
	}
	return out
}

func scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

// Scrub is msg without the passwords the connection URL conn holds, for
// other code that reports errors about the same database (migrate-store).
func Scrub(msg, conn string) string { return scrub(msg, passwords(conn)) }

// redact is the connection URL without its password (and without any
// query parameter naming a password): what Where shows. A connection
// string that is not a URL is described from its parsed form.
func redact(conn string, cfg *pgxpool.Config) string {
	if u, err := url.Parse(conn); err == nil && IsURL(conn) {
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		var keep []string
		for _, kv := range strings.Split(u.RawQuery, "&") {
			k, _, _ := strings.Cut(kv, "=")
			if k, err := url.QueryUnescape(k); err == nil && !strings.Contains(strings.ToLower(k), "password") && kv != "" {
				keep = append(keep, kv)
			}
		}
		u.RawQuery = strings.Join(keep, "&")
		return u.String()
	}
	c := cfg.ConnConfig
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Host: net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), Path: "/" + c.Database}
	return u.String()
}

type migration = sqlstore.Migration

func migrations() ([]migration, error) { return sqlstore.Migrations(migrationFS, "migrations") }

// SchemaVersion is the schema version this binary writes: the same number
// means the same schema step as store/sqlite's.
func SchemaVersion() int {
	ms, _ := migrations()
	return len(ms)
}

// versionTable holds the schema's version (SQLite keeps it in PRAGMA
// user_version) in one row, and the time of the last Ping.
const versionTable = `CREATE TABLE schema_version (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    version   integer NOT NULL,
    pinged_at bigint
);
INSERT INTO schema_version (version) VALUES (0);`

// migrate brings the schema forward through the numbered migrations it
// lacks, all in one transaction with the version bump, so a failure
// mid-upgrade leaves the previous version intact. The transaction takes an
// advisory lock (per schema) before it reads the version, so of several
// nodes starting at once one migrates and the others find the work done. A
// schema newer than the binary is refused, never touched; one that is up
// to date is only read.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	var have int
	err = s.read(ctx, func(q querier) (err error) {
		have, err = schemaVersion(ctx, q)
		return err
	})
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(ms) {
		return tooNew(have, len(ms))
	}
	if have == len(ms) {
		return nil
	}
	return s.migratePending(ctx, ms)
}

func tooNew(have, know int) error {
	return fmt.Errorf("%w: it is version %d, this binary knows up to %d; use a newer edgerelay", model.ErrTooNew, have, know)
}

// schemaVersion reads the version, 0 for a schema without edgerelay's
// tables.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	// pg_class is read with the statement's snapshot: to_regclass would
	// consult the session's catalog cache, which may still remember that
	// the table was missing before another node's migration committed.
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relname = 'schema_version')`).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := q.QueryRow(ctx, `SELECT version FROM schema_version`).Scan(&v)
	return v, err
}

// migratePending applies the migrations still due once the lock is held.
func (s *Store) migratePending(ctx context.Context, ms []migration) error {
	var applied []migration
	first := 0
	err := pgx.BeginTxFunc(ctx, s.pool, s.begin(""), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(coalesce(current_schema(), '') || ':edgerelay:migrate', 0))`); err != nil {
			return fmt.Errorf("lock for migration: %w", err)
		}
		have, err := schemaVersion(ctx, tx)
		if err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if have > len(ms) {
			return tooNew(have, len(ms))
		}
		if have == len(ms) {
			return nil // another node migrated meanwhile
		}
		first = have
		if have == 0 {
			if _, err := tx.Exec(ctx, versionTable); err != nil {
				return fmt.Errorf("create schema_version: %w", err)
			}
		}
		for _, m := range ms[have:] {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if f := goMigrations[m.Version]; f != nil {
				if err := f(ctx, tx); err != nil {
					return fmt.Errorf("migration %s: %w", m.Name, err)
				}
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE schema_version SET version = $1`, len(ms)); err != nil {
			return fmt.Errorf("migrate to version %d: %w", len(ms), err)
		}
		applied = ms[have:]
		return nil
	})
	if err == nil && first > 0 {
		for _, m := range applied {
			s.log.Info("migrated database", "to", m.Version, "migration", m.Name)
		}
	}
	return err
}

// ms converts a time to the store's representation, Unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver; pure Go, no cgo
)

// The store owns its SQL: migrations are embedded from this package
// (//go:embed cannot reach the repository root). The root schema.sql is the
// resulting schema for readers, and a test keeps the two identical.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Options tune the store. The zero value is usable.
type Options struct {
	// BusyTimeout is how long a write waits for another process holding the
	// database lock (a CLI beside serve). Default 10s.
	BusyTimeout time.Duration
	// MaxBatch bounds how many queued writes share one transaction. Default 256.
	MaxBatch int
	// ReadConns bounds the read pool. Default 4.
	ReadConns int
	Logger    *slog.Logger
	// RequireWritable makes Open fail if SQLite can open the file only for
	// reading (a read-only file or mount), with "database PATH is
	// read-only (...)". Without it such a store opens for reads, every
	// write fails with that error, and Ping reports it.
	RequireWritable bool

	// synchronous overrides FULL; benchmarks use it to measure what FULL costs.
	synchronous string
}

// Store is one SQLite file. All writes go through one goroutine (see
// writer.go); reads use a separate pool of query-only connections.
type Store struct {
	path string
	wdb  *sql.DB // exactly one connection, owned by the writer goroutine
	rdb  *sql.DB // read-only pool
	log  *slog.Logger
	w    *writer

	reads sync.Map // query → *sql.Stmt on rdb, for reads on the send path

	// The methods written once (sessions, tokens, leases, request keys,
	// suppressions), over the read pool and the single writer.
	sqlstore.Methods
}

// readRow runs a hot read (one per provider call, say) through a statement
// prepared once, instead of parsing the SQL on every call.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, ok := s.reads.Load(query)
	if !ok {
		prepared, err := s.rdb.PrepareContext(ctx, query)
		if err != nil {
			return s.rdb.QueryRowContext(ctx, query, args...) // reports the error
		}
		var loaded bool
		if st, loaded = s.reads.LoadOrStore(query, prepared); loaded {
			prepared.Close()
		}
	}
	return st.(*sql.Stmt).QueryRowContext(ctx, args...)
}

func dsn(path string, busy time.Duration, readOnly bool, synchronous string) string {
	// Pragmas go in the DSN so every connection of a pool gets them; busy
	// timeout first so the others can wait for a lock held elsewhere.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	// FULL: a commit is on disk (WAL fsynced) before any caller is answered.
	// NORMAL would be faster but may lose the last commits on power loss,
	// after their events were acknowledged.
	if synchronous == "" {
		synchronous = "FULL"
	}
	q.Add("_pragma", "synchronous("+synchronous+")")
	q.Add("_pragma", "foreign_keys(ON)")
	// Each write runs in a savepoint; its sub-journal would otherwise go to
	// a temporary file, a write(2) per page touched.
	q.Add("_pragma", "temp_store(MEMORY)")
	if readOnly {
		q.Add("_pragma", "query_only(ON)")
	} else {
		q.Set("_txlock", "immediate") // a write transaction takes the lock at BEGIN, not at its first write
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path, migrates it to the
// current schema and starts the writer. Close it to stop the writer.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	wdb, err := sql.Open("sqlite", dsn(abs, opts.BusyTimeout, false, opts.synchronous))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	s := &Store{path: abs, wdb: wdb, log: opts.Logger}
	s.Methods = sqlstore.Methods{Read: s.runRead, Write: s.runWrite, Grouped: s.runWrite, Record: s.runRecord, Dialect: dialect}
	if err := s.init(ctx, opts.BusyTimeout); err != nil {
		wdb.Close()
		return nil, openError(path, abs, err)
	}
	rdb, err := sql.Open("sqlite", dsn(abs, opts.BusyTimeout, true, opts.synchronous))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	s.rdb = rdb
	conn, err := wdb.Conn(ctx)
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	readOnly, err := probeWrite(ctx, conn, abs, opts.BusyTimeout)
	if err == nil && readOnly != nil && opts.RequireWritable {
		err = readOnly
	}
	if err != nil {
		conn.Close()
		wdb.Close()
		rdb.Close()
		return nil, err
	}
	s.w = startWriter(conn, abs, opts.MaxBatch, opts.BusyTimeout, opts.Logger)
	if readOnly != nil {
		// Reads work (status, show); every write would fail, so Ping
		// fails from the start rather than after the first write.
		s.w.health.fail(readOnly, time.Now())
	}
	return s, nil
}

// probeWrite finds out whether SQLite opened the file for writing: it
// opens a read-only file (or one on a read-only mount) read-only without
// a word, BEGIN IMMEDIATE then starts a read transaction, and the first
// write fails. The probe writes the schema version over itself and rolls
// back: nothing reaches the disk, so it needs no space, and a database
// that is up to date is otherwise not written at Open at all. It does not
// wait for another process's write lock: busy means writable.
//
// It returns readOnly (a *fileErr) if the file cannot be written; other
// failures are left to the first real write to report. err is set only
// if the connection's busy timeout could not be restored.
func probeWrite(ctx context.Context, conn *sql.Conn, path string, busy time.Duration) (readOnly, err error) {
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return nil, nil
	}
	readOnly = func() error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return nil
		}
		defer tx.Rollback()
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return nil
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
		if sqliteCode(err)&0xff == sqliteReadOnly {
			fe, _ := fileError(path, err)
			return fe
		}
		return nil
	}()
	if _, err := conn.ExecContext(context.Background(), "PRAGMA busy_timeout = "+strconv.FormatInt(busy.Milliseconds(), 10)); err != nil {
		return nil, fmt.Errorf("open store %s: restore busy_timeout: %w", path, err)
	}
	return readOnly, nil
}

// openError describes why Open failed, in one line naming the file.
//
// Even a reader of a WAL database must create DB-wal and DB-shm beside it
// when they are not there (a clean close removes them): in a directory it
// may not write, SQLite fails with READONLY_DIRECTORY; on a read-only
// mount, with CANTOPEN, as for a file that does not exist.
func openError(path, abs string, err error) error {
	dir, base := filepath.Dir(abs), filepath.Base(abs)
	switch code := sqliteCode(err); {
	case code == sqliteReadOnlyDirectory:
		return fmt.Errorf("database %s: its directory %s is not writable (read-only): SQLite must create %s-wal and %s-shm there "+
			"to open a WAL database, even to read it (%w)", abs, dir, base, base, err)
	case code&0xff == sqliteReadOnly:
		fe, _ := fileError(abs, err) // a migration on a read-only file
		return fe
	case code&0xff == sqliteCantOpen && readable(abs) && !regularFile(abs+"-wal"):
		return fmt.Errorf("open store %s: %w (the file is there: is %s on a read-only file system? SQLite must create %s-wal and %s-shm "+
			"beside it to open a WAL database, even to read it)", path, err, dir, base, base)
	}
	return fmt.Errorf("open store %s: %w", path, err)
}

func regularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// readable: path is a regular file this process can open for reading.
func readable(path string) bool {
	if !regularFile(path) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// init opens the write connection, checks the journal mode and migrates.
func (s *Store) init(ctx context.Context, busy time.Duration) error {
	var mode string
	if err := openRetryingBusy(ctx, busy, func() error {
		return s.wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	}); err != nil {
		return err
	}
	if mode != "wal" {
		// A read-only directory or a file system without shared memory
		// leaves SQLite in another mode; group commit and concurrent reads
		// depend on WAL, so refuse rather than run degraded.
		return fmt.Errorf("journal_mode is %q, want wal (is the directory writable and on a local file system?)", mode)
	}
	return migrate(ctx, s.wdb, s.log)
}

// openRetryingBusy runs open (the first use of a pool, which opens a
// connection and runs the DSN's pragmas) until it does not fail with
// SQLITE_BUSY, for up to busy. The first connection to a new file turns it
// into a WAL database: SQLite reads page 1 and then upgrades to the write
// lock, and an upgrade does not wait on busy_timeout (waiting while holding
// a read lock could deadlock) but fails at once if another process is
// writing. With a dozen processes starting on one new file, about one open
// in three hundred failed so ("database is locked"). Trying again from
// nothing is what busy_timeout would have done.
func openRetryingBusy(ctx context.Context, busy time.Duration, open func() error) error {
	deadline := time.Now().Add(busy)
	wait := time.Millisecond
	for {
		err := open()
		if sqliteCode(err)&0xff != sqliteBusy || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Where is the absolute path of the database file.
func (s *Store) Where() string { return s.path }

var (
	_ store.Store    = (*Store)(nil)
	_ store.Backuper = (*Store)(nil)
)

// Close stops the writer after it has answered every queued write, then
// closes the connections.
func (s *Store) Close() error {
	if s.w != nil {
		s.w.close()
	}
	s.reads.Range(func(_, st any) bool { st.(*sql.Stmt).Close(); return true })
	return errors.Join(s.rdb.Close(), s.wdb.Close())
}

// Ping checks that writes succeed: that the writer is alive (it commits an
// empty transaction through it) and that no write failure episode is
// going on. An empty commit needs neither write access nor space, so on
// its own it says nothing of a read-only file, a full disk or corrupt
// pages; a failed real write does, and the writer remembers it (the error
// and when) until a later commit that wrote something succeeds, or for as
// long as the store is open if the file is read-only or corrupt. Ping then
// returns that error, naming the database file.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.health.check(s.path, time.Now()); err != nil {
		return err
	}
	err := s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec("SELECT 1")
		return err
	})
	if herr := s.w.health.check(s.path, time.Now()); herr != nil {
		return herr // this commit's failure, or one made meanwhile
	}
	return err
}

type migration = sqlstore.Migration

func migrations() ([]migration, error) { return sqlstore.Migrations(migrationFS, "migrations") }

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int {
	ms, _ := migrations()
	return len(ms)
}

// migrate brings the database forward through the numbered migrations it
// lacks, all in one transaction together with the version bump (PRAGMA
// user_version is transactional), so a crash or a failing migration
// mid-upgrade leaves the previous version intact. A database newer than the
// binary is refused, never touched.
//
// Processes started together on one file (cron lines, sidecars, serve and a
// CLI) would otherwise race: each read version 0 and ran 0001, and all but
// one failed with "table events already exists". So the upgrade takes the
// write lock first (the DSN's _txlock=immediate makes BeginTx a BEGIN
// IMMEDIATE; another process's upgrade is waited for up to busy_timeout) and
// only then reads the version: a process that finds the work done moves on.
// The version read without the lock only spares an up-to-date database the
// lock (most opens), and refuses a newer one; version numbers only grow, so
// neither answer can be stale in a way that matters.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	first, err := schemaVersion(ctx, db, len(ms))
	if err != nil || first == len(ms) {
		return err
	}
	applied, err := migratePending(ctx, db, ms)
	if err != nil {
		return err
	}
	if first > 0 {
		for _, m := range applied {
			log.Info("migrated database", "to", m.Version, "migration", m.Name)
		}
	}
	return nil
}

// migratePending runs, under the write lock and in one transaction, the
// migrations the database still needs (none if another process ran them
// first) and returns them. One transaction makes a new file's schema
// appear whole or not at all, and costs one commit rather than one per
// migration.
func migratePending(ctx context.Context, db *sql.DB, ms []migration) ([]migration, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: take the write lock: %w", err)
	}
	defer tx.Rollback()
	have, err := schemaVersion(ctx, tx, len(ms))
	if err != nil || have == len(ms) {
		return nil, err
	}
	for _, m := range ms[have:] {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if f := goMigrations[m.Version]; f != nil {
			if err := f(ctx, tx); err != nil {
				return nil, fmt.Errorf("migration %s: %w", m.Name, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms))); err != nil {
		return nil, fmt.Errorf("migrate to version %d: %w", len(ms), err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate to version %d: %w", len(ms), err)
	}
	return ms[have:], nil
}

// schemaVersion reads the database's schema version and refuses one newer
// than known, the number of migrations this binary has.
func schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, known int) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v > known {
		return v, fmt.Errorf("%w: it is version %d, this binary knows up to %d; use a newer edgerelay", model.ErrTooNew, v, known)
	}
	return v, nil
}

// ms converts a time to the store's representation, Unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// reader is the read pool as sqlstore's Querier: its single-row reads use
// the prepared statements of readRow.
func (s *Store) reader() sqlstore.Querier { return poolQuerier{s, sqlstore.DB(s.rdb)} }

type poolQuerier struct {
	s *Store
	sqlstore.Querier
}

func (q poolQuerier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.s.readRow(ctx, query, args...)
}

// writeQ runs fn in a write of the single writer, on its transaction as
// sqlstore's Querier, and returns what fn returns.
func writeQ[T any](ctx context.Context, s *Store, fn func(q sqlstore.Querier) (T, error)) (T, error) {
	var v T
	err := s.w.do(ctx, func(tx *Tx) (err error) {
		v, err = fn(tx.shared())
		return err
	})
	return v, err
}

// runRead and runWrite are the read pool and the single writer as
// sqlstore's Run.
func (s *Store) runRead(_ context.Context, fn func(q sqlstore.Querier) error) error {
	if err := fn(s.reader()); err != nil {
		return s.closedOr(err) // a read of a closed store is refused as a write is
	}
	return nil
}

func (s *Store) runWrite(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.w.do(ctx, func(tx *Tx) error { return fn(tx.shared()) })
}

// runRecord is a write of the dispatcher's (model.WriteRecord), queued
// ahead of the rest.
func (s *Store) runRecord(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return s.w.doAs(ctx, model.WriteRecord, func(tx *Tx) error { return fn(tx.shared()) })
}

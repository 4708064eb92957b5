package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
)

// The writer is the only code that writes to the database. Every write is a
// function queued here; the writer goroutine takes what is queued (up to
// maxBatch), runs each function inside its own savepoint of ONE transaction,
// commits, and only then answers each caller: group commit. A function that
// fails is rolled back to its savepoint alone; the others still commit.
//
// This replaces row locks and SKIP LOCKED: since one goroutine applies every
// write in order, a claim can never race another claim in this process, and
// other processes are kept out by SQLite's own file lock (busy_timeout).

type writeOp struct {
	fn    func(*Tx) error
	done  chan error
	class model.WriteClass
}

type writer struct {
	conn     *sql.Conn
	path     string // the database file, named in errors about the file
	queue    chan writeOp
	urgent   chan writeOp // claims and records: ahead of queue
	maxBatch int
	log      *slog.Logger

	closeOnce sync.Once
	closing   chan struct{}
	stopped   chan struct{}
	mu        sync.RWMutex // held for reading while enqueueing, for writing by close
	closed    bool

	stats model.WriterStats
	smu   sync.Mutex

	stmtCache map[string]*sql.Stmt // only touched by the writer goroutine

	health health
	busy   time.Duration // the connection's busy_timeout, put back after a checkpoint
	// diskFull: a write has failed for want of space (outOfSpace);
	// smallWAL: the WAL is kept short since (see checkpoint). Only the
	// writer goroutine touches them.
	diskFull, smallWAL bool

	onCommit atomic.Pointer[func(writes int, took time.Duration)]

	// feeds are the tenants whose feeds the batch in progress changed
	// (only the writer goroutine touches it); watchers hear them after
	// its commit.
	feeds    map[string]struct{}
	watchMu  sync.Mutex
	watchers map[*func([]string)]struct{}
}

// feedChanged notes that the transaction changes tenant's feeds ("": any).
func (t *Tx) feedChanged(tenant string) {
	if t.w.feeds == nil {
		t.w.feeds = map[string]struct{}{}
	}
	t.w.feeds[tenant] = struct{}{}
}

// signalFeeds tells the watchers the tenants the committed batch changed.
// A write rolled back to its savepoint may have noted its tenant too: a
// watcher then re-reads for nothing, which is harmless; one missed is not.
func (w *writer) signalFeeds() {
	if len(w.feeds) == 0 {
		return
	}
	tenants := make([]string, 0, len(w.feeds))
	for t := range w.feeds {
		tenants = append(tenants, t)
	}
	clear(w.feeds)
	w.watchMu.Lock()
	defer w.watchMu.Unlock()
	for fn := range w.watchers {
		(*fn)(tenants)
	}
}

// Tx is the write transaction handed to a write function. It is only valid
// during the call.
type Tx struct {
	w *writer
}

func startWriter(conn *sql.Conn, path string, maxBatch int, busy time.Duration, log *slog.Logger) *writer {
	w := &writer{
		conn:     conn,
		path:     path,
		busy:     busy,
		queue:    make(chan writeOp, maxBatch*4),
		urgent:   make(chan writeOp, maxBatch*4),
		maxBatch: maxBatch,
		log:      log,
		closing:  make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go w.run()
	return w
}

// do queues fn and waits until its transaction has committed (nil) or fn or
// the commit failed. ctx bounds only the wait for a place in the queue: if
// it ends first, nothing was queued and do returns ctx.Err().
func (w *writer) do(ctx context.Context, fn func(*Tx) error) error {
	return w.doAs(ctx, model.WriteOther, fn)
}

// doAs is do for a write of a class: claims and records are queued ahead
// of the rest, so a burst of accepts cannot stall delivery.
func (w *writer) doAs(ctx context.Context, class model.WriteClass, fn func(*Tx) error) error {
	op := writeOp{fn: fn, done: make(chan error, 1), class: class}
	q := w.queue
	if class == model.WriteClaim || class == model.WriteRecord {
		q = w.urgent
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return model.ErrClosed
	}
	select {
	case q <- op:
		w.mu.RUnlock()
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, the write will be made: wait for its answer whatever ctx
	// says, so a caller never walks away from a write that then commits
	// (a claim nobody sends, an accept nobody acknowledges). The wait is
	// bounded by the batch in front of it and busy_timeout.
	return <-op.done
}

// close stops accepting writes, lets the writer answer everything already
// queued, and waits for it to stop.
func (w *writer) close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		close(w.closing)
		w.mu.Unlock()
		<-w.stopped
		w.conn.Close()
	})
}

func (w *writer) run() {
	defer close(w.stopped)
	// Statements are prepared once per write connection and kept: preparing
	// costs more than running most of these statements.
	stmts := map[string]*sql.Stmt{}
	defer func() {
		for _, s := range stmts {
			s.Close()
		}
	}()
	tx := &Tx{w: w}
	w.stmtCache = stmts
	batch := make([]writeOp, 0, w.maxBatch)
	for {
		batch = batch[:0]
		select {
		case op := <-w.urgent:
			batch = append(batch, op)
		case op := <-w.queue:
			batch = append(batch, op)
		case <-w.closing:
			// Nothing can be queued any more; answer what is left.
			w.drain(tx, batch)
			return
		}
		// The dispatcher's writes first, then the rest: a claim or a record
		// waits for at most the commit in progress, however many accepts
		// are queued.
	urgent:
		for len(batch) < w.maxBatch {
			select {
			case op := <-w.urgent:
				batch = append(batch, op)
			default:
				break urgent
			}
		}
	fill:
		for len(batch) < w.maxBatch {
			select {
			case op := <-w.queue:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		w.commit(tx, batch)
	}
}

func (w *writer) drain(tx *Tx, batch []writeOp) {
	for {
		select {
		case op := <-w.urgent:
			batch = append(batch, op)
			if len(batch) < w.maxBatch {
				continue
			}
		case op := <-w.queue:
			batch = append(batch, op)
			if len(batch) < w.maxBatch {
				continue
			}
		default:
		}
		if len(batch) == 0 {
			return
		}
		w.commit(tx, batch)
		batch = batch[:0]
	}
}

func (w *writer) commit(tx *Tx, batch []writeOp) {
	clear(w.feeds) // a batch that did not commit signals nothing
	start := time.Now()
	ctx := context.Background()
	errs := make([]error, len(batch))
	// trouble is this batch's failure of the file or of the transaction
	// (not an op's own error, like a conflict): it starts or prolongs an
	// episode that Ping reports. It is recorded before any caller is
	// answered, so a caller that saw its write fail then finds Ping failing.
	var trouble error
	answer := func(commitErr error) {
		if commitErr != nil {
			commitErr = w.named(commitErr)
			trouble = commitErr
		}
		if trouble != nil {
			w.health.fail(trouble, time.Now())
			w.diskFull = w.diskFull || outOfSpace(trouble)
		}
		for i, op := range batch {
			if errs[i] == nil {
				errs[i] = commitErr
			}
			op.done <- errs[i]
		}
	}
	// While writes are failing, an episode ends only with a commit that
	// wrote something: an empty one (a Ping, a claim that found nothing)
	// needs neither space nor write access, so it proves nothing. Only
	// then are the rows each op changed counted (not those of an op rolled
	// back to its savepoint); a healthy writer does not pay for it.
	tracking, wrote := w.health.recoverable.Load(), false
	if tracking {
		w.checkpoint()
	}
	if _, err := tx.exec("BEGIN IMMEDIATE"); err != nil {
		answer(fmt.Errorf("begin: %w", err))
		return
	}
	took := make([]time.Duration, len(batch)) // each write's time, for the classes' shares
	if !tracking && w.fast(tx, batch, errs, took, &trouble, answer) {
		return
	}
	failed := 0
	for i, op := range batch {
		if _, err := tx.exec("SAVEPOINT op"); err != nil {
			errs[i] = w.named(err)
			trouble = errs[i]
			failed++
			continue
		}
		var before int64
		if tracking {
			before = tx.totalChanges()
		}
		t0 := time.Now()
		err := runOp(op.fn, tx)
		took[i] = time.Since(t0)
		if err == nil && tracking && !wrote && before >= 0 {
			wrote = tx.totalChanges() > before
		}
		if err != nil {
			failed++
			errs[i] = err
			if fe, ok := fileError(w.path, err); ok {
				// The write failed for a reason of the file (full, read-only,
				// corrupt, I/O), not of its own: name the file, and count it
				// as a failed write although the others may commit.
				errs[i] = fe
				trouble = fe
			}
			if _, rerr := tx.exec("ROLLBACK TO op"); rerr != nil {
				// The transaction is in an unknown state: give up on all of it.
				w.conn.ExecContext(ctx, "ROLLBACK")
				answer(fmt.Errorf("rollback to savepoint: %w", rerr))
				return
			}
		}
		if _, err := tx.exec("RELEASE op"); err != nil {
			w.conn.ExecContext(ctx, "ROLLBACK")
			answer(fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	w.finish(tx, batch, errs, took, failed, start, trouble == nil && wrote, answer)
}

// fast runs the batch's writes one after the other in the open
// transaction, without a savepoint each (a savepoint's journal cost more
// than most of the writes), and commits. If one fails, it rolls the whole
// transaction back and reports false: the caller runs the batch again, each
// write in its own savepoint, so that only the failing one fails. Write
// functions are made to run again from the start. One write alone is not
// run twice: its failure is its answer.
func (w *writer) fast(tx *Tx, batch []writeOp, errs []error, took []time.Duration, trouble *error, answer func(error)) bool {
	start := time.Now()
	for i, op := range batch {
		t0 := time.Now()
		err := runOp(op.fn, tx)
		took[i] = time.Since(t0)
		if err == nil {
			continue
		}
		w.conn.ExecContext(context.Background(), "ROLLBACK")
		if len(batch) > 1 {
			if _, err := tx.exec("BEGIN IMMEDIATE"); err != nil {
				answer(fmt.Errorf("begin: %w", err))
				return true
			}
			return false
		}
		errs[i] = err
		if fe, ok := fileError(w.path, err); ok {
			errs[i], *trouble = fe, fe
		}
		w.smu.Lock()
		w.stats.Failed++
		w.smu.Unlock()
		answer(nil)
		return true
	}
	w.finish(tx, batch, errs, took, 0, start, false, answer)
	return true
}

// finish commits the batch's transaction, counts it and answers every
// caller.
func (w *writer) finish(tx *Tx, batch []writeOp, errs []error, took []time.Duration, failed int, start time.Time, recovered bool, answer func(error)) {
	if _, err := tx.exec("COMMIT"); err != nil {
		w.conn.ExecContext(context.Background(), "ROLLBACK")
		for i := range errs {
			errs[i] = nil // every op, even a failed one, gets the commit error
		}
		answer(fmt.Errorf("commit: %w", err))
		return
	}
	d := time.Since(start)
	w.smu.Lock()
	w.stats.Commits++
	w.stats.Writes += int64(len(batch) - failed)
	w.stats.Failed += int64(failed)
	w.stats.CommitTime += d
	w.stats.MaxBatch = max(w.stats.MaxBatch, len(batch))
	if w.stats.Classes == nil {
		w.stats.Classes = map[model.WriteClass]model.ClassStats{}
	}
	for i, op := range batch {
		if errs[i] == nil {
			c := w.stats.Classes[op.class]
			c.Writes++
			c.Busy += took[i]
			w.stats.Classes[op.class] = c
		}
	}
	w.smu.Unlock()
	if fn := w.onCommit.Load(); fn != nil {
		(*fn)(len(batch)-failed, d)
	}
	if recovered {
		w.health.recover(time.Now(), w.log)
	}
	answer(nil)
	w.signalFeeds()
}

// checkpoint runs before each batch of a failure episode that a commit can
// end (a full disk, an I/O error): it copies the WAL into the database file
// and truncates the WAL to nothing. SQLite checkpoints on its own only once
// the WAL is 1000 pages (about 4 MB), so on a small disk the WAL holds most
// of the database when the disk fills, and a checkpoint then needs room for
// the database file to grow by the pages it lacks. Without this, space freed
// by someone else went to the WAL, which was soon full again, and every
// write was refused for good (4 MB tmpfs, 1 MB freed: 17 more events, then
// refused with a 4 MB WAL beside a 16 KB database). A checkpoint that
// cannot complete (no room yet, a reader on an older snapshot, a writer in
// another process) changes nothing, and the batch runs as it would have.
// Only TRUNCATE gives the WAL's space back: after PASSIVE or RESTART the
// file keeps its size, and the freed space was all but used up again.
//
// Once a write has failed for want of space (outOfSpace), SQLite is also
// made to checkpoint every smallWALPages pages for as long as the store is
// open: a WAL let grow to 4 MB filled the freed space again with pages the
// database file mostly had (66 events later, in the same drill). It costs a
// third to a half of the accepts per second from one caller.
func (w *writer) checkpoint() {
	ctx := context.Background()
	if w.diskFull && !w.smallWAL {
		if _, err := w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", smallWALPages)); err == nil {
			w.smallWAL = true
			w.log.Info("the disk was full: checkpointing the WAL every few hundred KB from now on", "pages", smallWALPages, "db", w.path)
		}
	}
	var walSize int64
	if fi, err := os.Stat(w.path + "-wal"); err == nil {
		walSize = fi.Size()
	}
	// A checkpoint that truncates waits for readers and writers; the
	// writer must not stall for busy_timeout (10 s) behind one.
	if _, err := w.conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(checkpointWait.Milliseconds(), 10)); err != nil {
		return
	}
	var busy, frames, copied int
	err := w.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &copied)
	if _, rerr := w.conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(w.busy.Milliseconds(), 10)); rerr != nil {
		w.log.Warn("restore busy_timeout after a checkpoint", "err", rerr)
	}
	switch {
	case err != nil:
		w.log.Debug("checkpoint during a write failure episode failed", "err", err)
	case busy != 0:
		w.log.Debug("checkpoint during a write failure episode could not complete", "wal_frames", frames, "copied", copied)
	case walSize > 0: // an empty WAL (truncated before) is not news
		w.log.Info("copied the WAL into the database file and truncated it", "wal_bytes", walSize, "db", w.path)
	}
}

// outOfSpace: err is a write refused for want of space. SQLite reports
// ENOSPC as SQLITE_FULL, but a quota (EDQUOT) or a file size limit (EFBIG)
// as SQLITE_IOERR_WRITE, like any failed write(2).
func outOfSpace(err error) bool {
	code := sqliteCode(err)
	return code&0xff == sqliteFull || code == sqliteIOErrWrite
}

const (
	// checkpointWait bounds how long a checkpoint in a failure episode
	// waits for another process's write or an old snapshot.
	checkpointWait = 100 * time.Millisecond
	// smallWALPages is the WAL's checkpoint threshold once the disk has
	// been full, about 400 KB, instead of SQLite's 1000 pages.
	smallWALPages = 100
)

// runOp runs fn, turning a panic into an error so one bad write cannot
// take the writer (and every later caller) down.
func runOp(fn func(*Tx) error, tx *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("write panicked: %v", r)
		}
	}()
	return fn(tx)
}

// OnCommit sets a function called after every commit with the number of
// writes it made durable and how long the transaction took (metrics). It
// runs on the writer goroutine: it must be quick.
func (s *Store) OnCommit(fn func(writes int, took time.Duration)) {
	s.w.onCommit.Store(&fn)
}

// Stats returns the writer's counters.
func (s *Store) Stats() model.WriterStats {
	s.w.smu.Lock()
	defer s.w.smu.Unlock()
	st := s.w.stats
	st.Classes = maps.Clone(st.Classes)
	return st
}

func (t *Tx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := t.w.stmtCache[query]; ok {
		return st, nil
	}
	st, err := t.w.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	t.w.stmtCache[query] = st
	return st, nil
}

func (t *Tx) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

func (t *Tx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

func (t *Tx) queryRow(query string, args ...any) *sql.Row {
	st, err := t.stmt(query)
	if err != nil {
		// sql.Row carries no way to inject an error; run the unprepared
		// query so the same error surfaces from Scan.
		return t.w.conn.QueryRowContext(context.Background(), query, args...)
	}
	return st.QueryRow(args...)
}

// SQLite result codes this file tells apart (the primary code is the low
// byte of an extended one).
const (
	sqliteBusy              = 5
	sqliteReadOnly          = 8
	sqliteIOErr             = 10
	sqliteIOErrWrite        = sqliteIOErr | 3<<8
	sqliteCorrupt           = 11
	sqliteFull              = 13
	sqliteCantOpen          = 14
	sqliteNotADB            = 26
	sqliteReadOnlyDirectory = sqliteReadOnly | 6<<8
)

// sqliteCode is the extended result code of the SQLite error in err's
// chain, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// fileErr is an error SQLite gave because of the database file rather
// than the statement: it names the file, which SQLite's message does not
// ("insert event: database or disk is full"). errors.Is and errors.As see
// through it to SQLite's error.
type fileErr struct {
	path string
	what string // follows the path: " is read-only", ": disk full"
	err  error
	// sticky: the condition lasts as long as the connection. A file
	// SQLite opened read-only stays so; corruption does not heal by
	// itself and may not show on every write.
	sticky bool
}

func (e *fileErr) Error() string { return "database " + e.path + e.what + " (" + e.err.Error() + ")" }
func (e *fileErr) Unwrap() error { return e.err }

// Is makes every file error a model.ErrUnavailable: the write was not
// made, and may succeed once the file is fixed.
func (e *fileErr) Is(target error) bool { return target == model.ErrUnavailable }

// fileError returns err naming the database file if SQLite failed because
// of the file (read-only, full, corrupt, I/O error): err itself if it
// already does, else err wrapped in a *fileErr. ok is false for any other
// error (a constraint, a conflict, a closed store).
func fileError(path string, err error) (named error, ok bool) {
	if err == nil {
		return nil, false
	}
	var fe *fileErr
	if errors.As(err, &fe) {
		return err, true
	}
	switch sqliteCode(err) & 0xff {
	case sqliteReadOnly:
		return &fileErr{path: path, what: " is read-only", err: err, sticky: true}, true
	case sqliteFull:
		return &fileErr{path: path, what: ": disk full", err: err}, true
	case sqliteCorrupt, sqliteNotADB:
		return &fileErr{path: path, what: " is corrupt", err: err, sticky: true}, true
	case sqliteIOErr:
		return &fileErr{path: path, what: ": I/O error", err: err}, true
	}
	return nil, false
}

// named is err, naming the database file if the file is the cause.
func (w *writer) named(err error) error {
	if fe, ok := fileError(w.path, err); ok {
		return fe
	}
	return err
}

// health remembers a failure episode: from a write that failed (a commit,
// or a write failing for a reason of the file) until a later commit that
// wrote something succeeds. Ping reports it: an empty commit, which is all
// Ping can make, needs neither space nor write access.
type health struct {
	// recoverable: an episode a commit can end (err != nil, not sticky);
	// read by the writer on every batch.
	recoverable atomic.Bool

	mu     sync.Mutex
	err    error     // the episode's last failure
	since  time.Time // its first
	last   time.Time
	count  int
	sticky bool // the episode lasts until the store is reopened
}

func (h *health) fail(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		// Not logged: the caller of the failed write reports it, and a
		// command's failure must stay one line.
		h.since, h.count = now, 0
	}
	var fe *fileErr
	if errors.As(err, &fe) && fe.sticky {
		h.sticky = true
	} else if h.sticky {
		// Keep the sticky cause: it is what explains the episode.
		h.count++
		h.last = now
		return
	}
	h.err, h.last = err, now
	h.count++
	h.recoverable.Store(!h.sticky)
}

func (h *health) recover(now time.Time, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil || h.sticky {
		return
	}
	if log != nil {
		log.Info("database writes succeed again", "failing_for", now.Sub(h.since).Round(time.Millisecond),
			"failures", h.count, "last_err", h.err)
	}
	h.err = nil
	h.recoverable.Store(false)
}

// check returns the episode's failure, naming the database, or nil.
func (h *health) check(path string, now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	var detail string
	if h.sticky {
		detail = fmt.Sprintf("first seen %s ago; this lasts until the database is reopened", now.Sub(h.since).Round(time.Millisecond))
	} else {
		detail = fmt.Sprintf("writes failing for %s: %d failed, the last %s ago",
			now.Sub(h.since).Round(time.Millisecond), h.count, now.Sub(h.last).Round(time.Millisecond))
	}
	var fe *fileErr
	if errors.As(h.err, &fe) {
		return fmt.Errorf("%w; %s", h.err, detail)
	}
	return fmt.Errorf("database %s: %s: %w", path, detail, h.err)
}

// totalChanges is the number of rows the connection has changed since it
// was opened, or -1.
func (t *Tx) totalChanges() int64 {
	var n int64
	if err := t.queryRow("SELECT total_changes()").Scan(&n); err != nil {
		return -1
	}
	return n
}

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }

// shared is the write transaction as sqlstore's Querier, for the
// behaviour both stores share. It ignores ctx, as every write function
// does: the writer runs a function to its end in its transaction.
func (t *Tx) shared() sqlstore.Querier { return txQuerier{t} }

type txQuerier struct{ t *Tx }

func (q txQuerier) Query(_ context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.t.query(query, args...)
	if err != nil {
		return nil, err
	}
	return sqlstore.SQLRows{Rows: rows}, nil
}

func (q txQuerier) QueryRow(_ context.Context, query string, args ...any) sqlstore.Row {
	return q.t.queryRow(query, args...)
}

// FeedChanged notes the tenant for the signal after the commit.
func (q txQuerier) FeedChanged(_ context.Context, tenant string) error {
	q.t.feedChanged(tenant)
	return nil
}

func (q txQuerier) Exec(_ context.Context, query string, args ...any) (int64, error) {
	res, err := q.t.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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
	fn   func(*Tx) error
	done chan error
}

type writer struct {
	conn     *sql.Conn
	queue    chan writeOp
	maxBatch int
	log      *slog.Logger

	closeOnce sync.Once
	closing   chan struct{}
	stopped   chan struct{}
	mu        sync.RWMutex // held for reading while enqueueing, for writing by close
	closed    bool

	stats WriterStats
	smu   sync.Mutex

	stmtCache map[string]*sql.Stmt // only touched by the writer goroutine

	onCommit atomic.Pointer[func(writes int, took time.Duration)]
}

// WriterStats counts commits since Open; the metrics endpoint and the
// benchmarks read it.
type WriterStats struct {
	Commits    int64
	Writes     int64 // functions committed
	Failed     int64 // functions rolled back to their savepoint
	CommitTime time.Duration
	MaxBatch   int
}

// Tx is the write transaction handed to a write function. It is only valid
// during the call.
type Tx struct {
	w *writer
}

func startWriter(conn *sql.Conn, maxBatch int, log *slog.Logger) *writer {
	w := &writer{
		conn:     conn,
		queue:    make(chan writeOp, maxBatch*4),
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
	op := writeOp{fn: fn, done: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.queue <- op:
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
		case op := <-w.queue:
			batch = append(batch, op)
		case <-w.closing:
			// Nothing can be queued any more; answer what is left.
			w.drain(tx, batch)
			return
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
	start := time.Now()
	ctx := context.Background()
	errs := make([]error, len(batch))
	answer := func(commitErr error) {
		for i, op := range batch {
			if errs[i] == nil {
				errs[i] = commitErr
			}
			op.done <- errs[i]
		}
	}
	if _, err := tx.exec("BEGIN IMMEDIATE"); err != nil {
		answer(fmt.Errorf("begin: %w", err))
		return
	}
	failed := 0
	for i, op := range batch {
		if _, err := tx.exec("SAVEPOINT op"); err != nil {
			errs[i] = err
			failed++
			continue
		}
		err := runOp(op.fn, tx)
		if err != nil {
			failed++
			errs[i] = err
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
	if _, err := tx.exec("COMMIT"); err != nil {
		w.conn.ExecContext(ctx, "ROLLBACK")
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
	w.smu.Unlock()
	if fn := w.onCommit.Load(); fn != nil {
		(*fn)(len(batch)-failed, d)
	}
	answer(nil)
}

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
func (s *Store) Stats() WriterStats {
	s.w.smu.Lock()
	defer s.w.smu.Unlock()
	return s.w.stats
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

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }

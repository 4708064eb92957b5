package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit. The hot writes (accepts, claims, settlements, request
// keys) are queued; a committer takes what is queued (up to maxGroup, the
// dispatcher's writes first), runs each write in ONE transaction on its
// connection, commits, and only then answers each caller. A committer is
// started by a write that finds none running, and ends when the queue is
// empty: one caller alone still gets a transaction of its own at once,
// and under load each commit, and the WAL flush it waits for, is shared by
// the writes that came while the one before ran. More committers (each
// on its own connection, up to a quarter of the pool) run only while
// more writes wait than the running ones can take in their next groups,
// or a claim waits (see needMore).
//
// The writes of a group first run one after the other without savepoints.
// If one fails for a reason of its own (a statement PostgreSQL refused, a
// key reused), the transaction is rolled back and the group runs again,
// each write in a savepoint of its own, so that only the failing one is
// rolled back and answered with its error. A failure of the transaction
// (a deadlock, a serialization failure, a broken connection, the write
// timeout) runs the whole group again on a fresh transaction, every
// member's function from its start, up to maxTries; so a write function
// must start from scratch each time (each resets its results).
//
// Only writes whose locks cannot make two groups wait on each other in a
// cycle that one write alone would not are grouped: a group holds the row
// locks of all its members until its commit. TakeThrottleSlots (advisory
// locks taken in sorted order, which two groups would interleave) and the
// rest stay one transaction each (write).

// maxGroup bounds how many writes share one transaction; maxGroupRows
// how many notifications its accepts may write (a write larger than that
// goes alone), so that a few large fan-outs do not make one transaction
// that all its members wait for, against one WriteTimeout.
const (
	maxGroup     = 128
	maxGroupRows = 4096
)

type groupOp struct {
	class model.WriteClass
	fn    func(ctx context.Context, tx pgx.Tx) error
	// accept, for an AcceptEvents call: the accepts of a group are
	// written together (acceptMany) rather than by their fns one by one.
	accept *acceptCall
	// settle, for a Settle call: likewise (settleMany).
	settle *settleCall
	done   chan error
	state  atomic.Int32 // opQueued, then opTaken by a committer or opAbandoned by its caller
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

type grouper struct {
	mu         sync.Mutex
	urgent     []*groupOp // claims and settlements: ahead of the rest
	queue      []*groupOp
	running    int // committers started and not yet ended
	committers int // how many may run at once

	// Set by tests (export_test.go) before any write: queued runs after a
	// write is queued, beforeGroup before a committer takes writes.
	queued, beforeGroup atomic.Pointer[func()]
}

// errMemberFailed: a write of a group run without savepoints failed for
// a reason of its own; the group is run again with a savepoint each.
var errMemberFailed = errors.New("a write of the group failed")

// txState is what one transaction of a group knows about itself, for its
// members (see drawingIDs).
type txState struct {
	drawing bool // holds the shared side of the notification ids lock
}

type txStateKey struct{}

// grouped runs fn in a transaction shared with other grouped writes (see
// above) and returns once that transaction has committed, or fn or the
// commit failed. ctx bounds the wait for a committer to take the write:
// once taken it runs to its end (WriteTimeout bounds the transaction), so
// a caller never gives up on a write that then commits.
func (s *Store) grouped(ctx context.Context, class model.WriteClass, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.groupedOp(ctx, &groupOp{class: class, fn: fn})
}

func (s *Store) groupedOp(ctx context.Context, op *groupOp) error {
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if err := ctx.Err(); err != nil {
		return err
	}
	op.done = make(chan error, 1)
	g := &s.group
	g.mu.Lock()
	if op.class == model.WriteClaim || op.class == model.WriteRecord {
		g.urgent = append(g.urgent, op)
	} else {
		g.queue = append(g.queue, op)
	}
	start := g.needMore(g.running)
	if start {
		g.running++
		s.busy.Add(1) // the caller's own count keeps Close waiting meanwhile
	}
	g.mu.Unlock()
	if h := g.queued.Load(); h != nil {
		(*h)()
	}
	if start {
		go s.commitLoop()
	}
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		if op.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		return <-op.done
	}
}

// take removes up to maxGroup writes from the queue, claims and
// settlements first, skipping those their callers gave up on. With none,
// the committer ends (counted under the same lock as the queue, so a
// write queued meanwhile starts another); so does one of several whose
// next group the others can take (more, see needMore, only while more
// is waiting). first: the committer has just started.
func (g *grouper) take(first bool) []*groupOp {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !first && g.running > 1 && !g.needMore(g.running-1) {
		g.running--
		return nil
	}
	var batch []*groupOp
	rows := 0
	for _, q := range []*[]*groupOp{&g.urgent, &g.queue} {
		i := 0
		for ; i < len(*q) && len(batch) < maxGroup; i++ {
			op := (*q)[i]
			n := op.accept.rows()
			if len(batch) > 0 && rows+n > maxGroupRows && op.state.Load() == opQueued {
				break // for the next group
			}
			if op.state.CompareAndSwap(opQueued, opTaken) {
				batch, rows = append(batch, op), rows+n
			}
		}
		rest := copy(*q, (*q)[i:])
		clear((*q)[rest:])
		*q = (*q)[:rest]
	}
	if len(batch) == 0 {
		g.running--
	}
	return batch
}

// needMore: running committers are too few for what is queued. One
// committer while the writes fit in its next group: the others wait for
// its commit and share the next (two committers with a write each would
// make two commits where one would do). More only when more than the
// running ones can take is waiting, or for a claim: a dispatcher waits
// for its claim before it starts any call, and a claim queued behind a
// group of accepts or settlements would wait for two commits.
func (g *grouper) needMore(running int) bool {
	if running == 0 {
		return true
	}
	if running >= g.committers {
		return false
	}
	if len(g.urgent)+len(g.queue) > maxGroup*running {
		return true
	}
	for _, op := range g.urgent {
		if op.class == model.WriteClaim && op.state.Load() == opQueued {
			return true
		}
	}
	return false
}

// commitLoop is one committer: it commits groups on one connection until
// the queue is empty.
func (s *Store) commitLoop() {
	defer s.busy.Done()
	var conn *pgxpool.Conn
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	for first := true; ; first = false {
		var acqErr error
		if conn != nil && conn.Conn().IsClosed() { // broken in the last group
			conn.Release()
			conn = nil
		}
		if conn == nil {
			// A connection first, then the writes: while it waits for
			// one, the callers can still give up on theirs.
			actx, cancel := context.WithTimeout(context.Background(), s.writeTimeout)
			conn, acqErr = s.pool.Acquire(actx)
			cancel()
		}
		if h := s.group.beforeGroup.Load(); h != nil {
			(*h)()
		}
		batch := s.group.take(first)
		if len(batch) == 0 {
			return
		}
		if acqErr != nil {
			conn = nil
			err := s.failure(acqErr)
			s.smu.Lock()
			s.stats.Failed += int64(len(batch))
			s.smu.Unlock()
			for _, op := range batch {
				op.done <- err
			}
			continue
		}
		s.runGroup(&conn, batch)
	}
}

// runGroup commits the writes of batch in one transaction on *conn (a new
// connection replaces it if it breaks; nil if none could be had) and
// answers each.
func (s *Store) runGroup(conn **pgxpool.Conn, batch []*groupOp) {
	wctx, cancel := context.WithTimeout(context.Background(), s.writeTimeout)
	defer cancel()
	errs := make([]error, len(batch))
	took := make([]time.Duration, len(batch))
	fail := func(err error) {
		s.smu.Lock()
		s.stats.Failed += int64(len(batch))
		s.smu.Unlock()
		if wctx.Err() != nil && errors.Is(err, wctx.Err()) {
			err = fmt.Errorf("no answer within %s: %w", s.writeTimeout, err)
		}
		err = s.failure(err)
		for _, op := range batch {
			op.done <- err
		}
	}
	savepoints := false
	for try := 1; ; try++ {
		clear(errs)
		start := time.Now()
		xid, committing, err := s.runGroupTx(wctx, *conn, batch, errs, took, savepoints)
		if errors.Is(err, errMemberFailed) {
			savepoints = true
			try--
			continue
		}
		if err != nil && committing && brokenConn(err) {
			// The COMMIT went out and its answer was lost with the
			// connection: ask the server what became of the transaction.
			st := "aborted" // it had written nothing: nothing to lose, so run it again
			if xid != "" {
				st = s.commitOutcome(wctx, xid)
			}
			switch st {
			case "committed":
				err = nil
			case "aborted":
				committing = false
			default:
				err = fmt.Errorf("%w (transaction %s: %s)", err, xid, st)
			}
		}
		if err == nil && len(batch) == 1 && errs[0] != nil {
			s.smu.Lock() // a lone write that failed: nothing was committed
			s.stats.Failed++
			s.smu.Unlock()
			batch[0].done <- s.failure(errs[0])
			return
		}
		if err == nil {
			s.committed(batch, errs, took, time.Since(start))
			for i, op := range batch {
				op.done <- errs[i]
			}
			return
		}
		again := try < maxTries && wctx.Err() == nil && (retryable(err) || !committing && brokenConn(err))
		if !again {
			fail(err)
			return
		}
		if (*conn).Conn().IsClosed() {
			(*conn).Release()
			c, err := s.pool.Acquire(wctx)
			if err != nil {
				*conn = nil
				fail(err)
				return
			}
			*conn = c
		}
	}
}

// groupWide: err, met by one write, is the transaction's failure rather
// than the write's own: every write of the group shares it.
func groupWide(ctx context.Context, err error) bool {
	return retryable(err) || brokenConn(err) || ctx.Err() != nil
}

// runGroupTx runs the writes of batch in one transaction on conn and
// commits it; committing reports that err (if any) came from COMMIT, whose
// outcome may be unknown. A write's own failure is errMemberFailed without
// savepoints (nothing committed), else in errs (rolled back to its
// savepoint) with the others committed. xid is the transaction's id if it
// wrote anything, read before the COMMIT so that a lost answer can be
// resolved (commitOutcome).
func (s *Store) runGroupTx(ctx context.Context, conn *pgxpool.Conn, batch []*groupOp, errs []error, took []time.Duration, savepoints bool) (xid string, committing bool, err error) {
	tx, err := conn.BeginTx(ctx, s.begin(""))
	if err != nil {
		return "", false, err
	}
	st := &txState{}
	tctx := context.WithValue(ctx, txStateKey{}, st)
	// Without savepoints, the group's accepts are written by one
	// acceptMany, and its settlements of different notifications by one
	// settleMany; the others by their own functions, below.
	done := make([]bool, len(batch))
	if !savepoints {
		var accepts []*acceptCall
		var settles []*settleCall
		var at, st []int
		ids := map[int64]bool{}
	ops:
		for i, op := range batch {
			switch {
			case op.accept != nil:
				accepts, at = append(accepts, op.accept), append(at, i)
			case op.settle != nil:
				for _, x := range op.settle.ss {
					if ids[x.ID] {
						continue ops
					}
				}
				for _, x := range op.settle.ss {
					ids[x.ID] = true
				}
				settles, st = append(settles, op.settle), append(st, i)
			}
		}
		for _, m := range []struct {
			n   int
			at  []int
			run func() error
		}{
			{len(accepts), at, func() error { return s.acceptMany(tctx, tx, accepts) }},
			{len(settles), st, func() error { return settleMany(tctx, tx, settles) }},
		} {
			if m.n < 2 {
				continue
			}
			t0 := time.Now()
			err := m.run()
			for _, i := range m.at {
				took[i], done[i] = time.Since(t0)/time.Duration(m.n), true
			}
			if err != nil {
				tx.Rollback(ctx)
				if groupWide(ctx, err) {
					return "", false, err
				}
				return "", false, errMemberFailed
			}
		}
	}
	for i, op := range batch {
		if done[i] {
			continue // written above
		}
		if savepoints {
			sp := "RELEASE SAVEPOINT w; SAVEPOINT w" // one round trip
			if i == 0 {
				sp = "SAVEPOINT w"
			}
			if _, err := tx.Exec(ctx, sp); err != nil {
				tx.Rollback(ctx)
				return "", false, err
			}
		}
		t0 := time.Now()
		err := op.fn(tctx, tx)
		took[i] = time.Since(t0)
		if err == nil {
			continue
		}
		if groupWide(ctx, err) {
			tx.Rollback(ctx)
			return "", false, err
		}
		if !savepoints {
			tx.Rollback(ctx)
			if len(batch) == 1 {
				errs[0] = err
				return "", false, nil // nothing to commit: its failure is its answer
			}
			return "", false, errMemberFailed
		}
		errs[i] = err
		st.drawing = false // a lock taken in the savepoint went with it
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT w"); err != nil {
			tx.Rollback(ctx)
			return "", false, err
		}
	}
	if len(batch) == 1 && errs[0] != nil {
		tx.Rollback(ctx)
		return "", false, nil
	}
	var id *string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&id); err != nil {
		tx.Rollback(ctx)
		return "", false, err
	}
	if id != nil {
		xid = *id
	}
	err = tx.Commit(ctx)
	if err == nil && s.loseCommitAnswer != nil && s.loseCommitAnswer() {
		conn.Conn().Close(ctx) // the fault a test injects: committed, but the answer is lost
		err = fmt.Errorf("commit: %w", io.ErrUnexpectedEOF)
	}
	return xid, true, err
}

// committed counts a group's commit and its writes, and reports it
// (OnCommit). A write that failed alone (errs) counts as failed, and its
// error is made to name the database if the database was its cause.
func (s *Store) committed(batch []*groupOp, errs []error, took []time.Duration, d time.Duration) {
	wrote := 0
	s.smu.Lock()
	s.stats.Commits++
	s.stats.CommitTime += d
	s.stats.MaxBatch = max(s.stats.MaxBatch, len(batch))
	if s.stats.Classes == nil {
		s.stats.Classes = map[model.WriteClass]model.ClassStats{}
	}
	for i, op := range batch {
		if errs[i] != nil {
			s.stats.Failed++
			errs[i] = s.failure(errs[i])
			continue
		}
		wrote++
		c := s.stats.Classes[op.class]
		c.Writes++
		c.Busy += took[i] // the write's time, waits for locks included
		s.stats.Classes[op.class] = c
	}
	s.stats.Writes += int64(wrote)
	s.smu.Unlock()
	if fn := s.onCommit.Load(); fn != nil {
		(*fn)(wrote, d)
	}
}

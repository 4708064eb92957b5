package relay

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
)

// Work one process at a time must do: of two relays on one database, one
// runs it; when that one stops (its context ends, as a killed process
// stops renewing), the other takes over within about the lease's TTL, and
// the two never run it at once.
func TestSinglyOneAtATime(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	ttl := 300 * time.Millisecond
	a := setupRelayAt(t, path, Options{SingletonTTL: ttl})
	b := setupRelayAt(t, path, Options{SingletonTTL: ttl})
	var running, overlaps atomic.Int32
	ran := map[string]*atomic.Int32{"a": {}, "b": {}}
	work := func(who string) func(context.Context) {
		return func(ctx context.Context) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			ran[who].Add(1)
			<-ctx.Done()
			running.Add(-1)
		}
	}
	actx, astop := context.WithCancel(context.Background())
	bctx, bstop := context.WithCancel(context.Background())
	adone, bdone := make(chan struct{}), make(chan struct{})
	var loops sync.WaitGroup
	// Both loops end before the test does, even when it fails: a loop
	// that logged after the end would panic and hide the failure.
	t.Cleanup(func() { astop(); bstop(); loops.Wait() })
	loops.Add(1)
	go func() { defer loops.Done(); a.Singly(actx, "schedules", work("a")); close(adone) }()
	waitFor(t, 5*time.Second, "a holds the lease", func() bool { return ran["a"].Load() == 1 })
	loops.Add(1)
	go func() { defer loops.Done(); b.Singly(bctx, "schedules", work("b")); close(bdone) }()
	time.Sleep(2 * ttl) // b tries several times meanwhile
	if ran["b"].Load() != 0 {
		t.Fatal("b ran while a held the lease")
	}
	// a stops and gives its lease up as it returns (it does not leave it
	// to lapse): by then the row is gone or already b's. b takes over at
	// its next try. (A bound on the takeover's latency would be a bound on
	// the scheduler: the mechanism is what is checked.)
	astop()
	<-adone
	var holder string
	switch err := faultDB(t, path).QueryRow(`SELECT holder FROM leases WHERE name = 'schedules'`).Scan(&holder); {
	case err == sql.ErrNoRows:
	case err != nil:
		t.Fatal(err)
	case holder == a.holder:
		t.Errorf("a still holds the lease after it stopped: b must wait for it to lapse")
	}
	waitFor(t, bound, "b takes the lease over", func() bool { return ran["b"].Load() == 1 })
	bstop()
	<-bdone
	if overlaps.Load() != 0 {
		t.Errorf("the work ran twice at once %d times", overlaps.Load())
	}
}

// A holder that cannot renew stops its work before its lease can lapse,
// so that a takeover never overlaps it: here another process takes the
// lease by force (it is written as lapsed), and the first one stops.
func TestSinglyStopsWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	ttl := 300 * time.Millisecond
	a := setupRelayAt(t, path, Options{SingletonTTL: ttl})
	var running atomic.Bool
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() {
		a.Singly(ctx, "tail:app", func(ctx context.Context) {
			running.Store(true)
			<-ctx.Done()
			running.Store(false)
		})
		close(done)
	}()
	waitFor(t, 5*time.Second, "a runs", running.Load)
	db := faultDB(t, path)
	execSQL(t, db, `UPDATE leases SET holder = 'someone-else', until = until + 60000 WHERE name = 'tail:app'`)
	waitFor(t, 5*time.Second, "a stops once it sees the lease is another's", func() bool { return !running.Load() })
	stop()
	<-done
}

// A holder that died (it stopped renewing, and never gave the lease up)
// hands its work over once its lease lapses: not before, and within a
// renewal period after.
func TestSinglyTakesOverALapsedLease(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/relay.db"
	ttl := 400 * time.Millisecond
	b := setupRelayAt(t, path, Options{SingletonTTL: ttl})
	db := faultDB(t, path)
	lapses := time.Now().Add(ttl)
	execSQL(t, db, `INSERT INTO leases (name, holder, until) VALUES ('schedules', 'dead/1/x', `+
		strconv.FormatInt(lapses.UnixMilli(), 10)+`)`)
	started := make(chan time.Time, 1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go b.Singly(ctx, "schedules", func(ctx context.Context) { started <- time.Now(); <-ctx.Done() })
	select {
	case at := <-started:
		if at.Before(lapses) {
			t.Errorf("took the lease %s before the dead holder's lapsed", lapses.Sub(at))
		}
		if late := at.Sub(lapses); late > ttl/3+200*time.Millisecond {
			t.Errorf("took over %s after the lease lapsed, want within a renewal period (%s)", late, ttl/3)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never took the lapsed lease over")
	}
}

// slowLeases is a store whose lease renewals (every HoldLease after the
// first) wait until hold is closed: a store slowed past the lease's TTL.
type slowLeases struct {
	store.Store
	calls atomic.Int32
	hold  chan struct{}
}

func (s *slowLeases) HoldLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if s.calls.Add(1) > 1 {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return s.Store.HoldLease(ctx, name, holder, now, ttl)
}

// The work stops on its own lease's clock: when a renewal does not come
// back in time (the store is slow, not failing), the work's context ends
// while the renewal is still waiting, before the lease lapses and another
// process could take it over; not only once the renewal answers.
func TestSinglyStopsWhenARenewalIsLate(t *testing.T) {
	t.Parallel()
	st, err := open.Store(context.Background(), t.TempDir()+"/relay.db", open.Options{Logger: testLogger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowLeases{Store: st, hold: make(chan struct{})}
	r, err := New(context.Background(), slow, Options{SingletonTTL: 1500 * time.Millisecond, Logger: testLogger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, stopped, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		once := false
		r.Singly(ctx, "schedules", func(wctx context.Context) {
			if once {
				return
			}
			once = true
			close(started)
			<-wctx.Done()
			close(stopped)
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		r.Close()
	})
	select {
	case <-started:
	case <-time.After(bound):
		t.Fatalf("the work did not start within %s", bound)
	}
	// Whether the stop comes before the first renewal is tried (a loaded
	// box took most of the TTL to write the take) or while it waits, no
	// renewal has come back: the lease's own clock stopped the work.
	select {
	case <-stopped:
	case <-time.After(bound):
		t.Fatalf("the work still runs %s after it took a 1.5s lease whose renewal has not come back", bound)
	}
	close(slow.hold)
}

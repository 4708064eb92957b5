package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// The dispatch floor: what this machine can do for one delivery with none
// of the relay around it. A backlog of pending notifications (written by
// the relay, so the schema, indexes and rows are the real ones) is POSTed
// to the simulator over loopback HTTP by `workers` callers that are never
// short of work, and the database sees one transaction per `workers`
// deliveries: it records a batch's results (one UPDATE … FROM (VALUES …)
// of the notifications, one multi-row INSERT of the attempts) and claims
// as many rows again (one UPDATE … RETURNING), on one connection with
// edgerelay's pragmas (synchronous=FULL). Three batches are claimed ahead,
// so the callers keep working while a batch is recorded. The relay's
// dispatch is reported as a share of it: what the relay adds is the gap.

// Floor drains a backlog of n notifications to the simulator as above.
func Floor(ctx context.Context, dir string, sim *Sim, n, workers int) (DispatchRun, error) {
	path := filepath.Join(dir, fmt.Sprintf("floor-%d.db", workers))
	if err := backlog(ctx, path, n); err != nil {
		return DispatchRun{}, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)&_pragma=temp_store(MEMORY)")
	if err != nil {
		return DispatchRun{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers, MaxIdleConns: workers,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}}
	defer client.CloseIdleConnections()

	const ahead = 3
	type job struct {
		id        int64
		claims, n int
		key, to   string
		start     time.Time
		status    int
		end       time.Time
		messageID string
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work, done := make(chan *job, ahead*workers), make(chan *job, ahead*workers)

	cpu0, err1 := ProcessCPU(0)
	sim0, err2 := ProcessCPU(sim.PID())
	st0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				var j *job
				select {
				case j = <-work:
				case <-ctx.Done():
					return
				}
				if j == nil { // work closed: all claimed
					return
				}
				body, _ := json.Marshal(map[string]any{"from": "relay@example.com", "to": []string{j.to},
					"subject": "Your receipt", "text": "Thanks for your order."})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sim.URL, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", j.key)
				j.start = time.Now()
				rep, err := client.Do(req)
				if err != nil {
					cancel(err)
					return
				}
				var v struct {
					ID string `json:"id"`
				}
				b, _ := io.ReadAll(rep.Body)
				rep.Body.Close()
				json.Unmarshal(b, &v)
				j.status, j.messageID, j.end = rep.StatusCode, v.ID, time.Now()
				done <- j
			}
		})
	}
	// The one writer: claim `ahead` batches, then for each batch done, one
	// transaction that records it and claims the next.
	claimed, recorded, closed := 0, 0, false
	step := func(batch []*job) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if len(batch) > 0 {
			if err := recordTx(ctx, tx, batch, func(j *job) []any {
				now := j.end.UnixMilli()
				return []any{j.id, j.claims, "sent", now, now, j.messageID, "200 OK"}
			}, func(j *job) []any {
				return []any{j.id, j.n, "sim", j.start.UnixMilli(), j.end.UnixMilli(), "sent", j.status, j.messageID, "200 OK", "sent"}
			}); err != nil {
				return err
			}
		}
		want := min(n-claimed, workers)
		if len(batch) == 0 {
			want = min(n, ahead*workers)
		}
		var cs []claimedRow
		if want > 0 {
			if cs, err = claimTx(ctx, tx, want); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		recorded += len(batch)
		claimed += len(cs)
		for _, c := range cs {
			work <- &job{id: c.id, claims: c.claims, n: c.n, key: c.key, to: c.to}
		}
		if claimed == n && !closed {
			close(work)
			closed = true
		}
		return nil
	}
	err = step(nil)
	batch := make([]*job, 0, workers)
	for err == nil && recorded < n {
		select {
		case j := <-done:
			batch = append(batch, j)
		case <-ctx.Done():
			err = context.Cause(ctx)
			continue
		}
		if len(batch) == workers || recorded+len(batch) == n {
			err = step(batch)
			batch = batch[:0]
		}
	}
	if err != nil {
		cancel(err) // a worker never waits on done: at most `ahead` batches are out
		wg.Wait()
		return DispatchRun{}, fmt.Errorf("floor: %w", err)
	}
	wg.Wait()
	run := DispatchRun{N: n, Elapsed: time.Since(st0)}
	cpu1, err3 := ProcessCPU(0)
	sim1, err4 := ProcessCPU(sim.PID())
	if err := errors.Join(err1, err2, err3, err4); err == nil {
		run.RelayCPU, run.SimCPU = cpu1-cpu0, sim1-sim0
	}
	return run, nil
}

// backlog writes n pending notifications through the relay, one event
// each, 100 events per commit, and closes it.
func backlog(ctx context.Context, path string, n int) error {
	r, _, err := openRelay(ctx, path, relay.Options{Logger: quiet})
	if err != nil {
		return err
	}
	defer r.Close()
	evs := make([]relay.Event, 0, 100)
	for i := 0; i < n; i += 100 {
		evs = evs[:0]
		for j := i; j < min(i+100, n); j++ {
			evs = append(evs, receipt(j))
		}
		_, errs := r.AcceptAll(ctx, evs, 0)
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

type claimedRow struct {
	id        int64
	claims, n int
	key, to   string
}

// claimTx claims up to limit due rows, as the relay's claim does.
func claimTx(ctx context.Context, tx *sql.Tx, limit int) ([]claimedRow, error) {
	now := time.Now().UnixMilli()
	rows, err := tx.QueryContext(ctx, `UPDATE notifications SET status = 'sending', claims = claims + 1, claimed_at = ?1, lease_until = ?2, updated_at = ?1
		WHERE id IN (SELECT id FROM notifications INDEXED BY notifications_due WHERE status = 'pending' AND next_attempt_at <= ?1
		             ORDER BY next_attempt_at, id LIMIT ?3)
		RETURNING id, claims, attempts + 1, key, address`, now, now+60000, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []claimedRow
	for rows.Next() {
		var c claimedRow
		if err := rows.Scan(&c.id, &c.claims, &c.n, &c.key, &c.to); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// recordTx writes a batch's states and attempts.
func recordTx[T any](ctx context.Context, tx *sql.Tx, batch []T, state func(T) []any, attempt func(T) []any) error {
	var sargs, aargs []any
	for _, b := range batch {
		sargs = append(sargs, state(b)...)
		aargs = append(aargs, attempt(b)...)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE notifications SET status = v.column3, next_attempt_at = v.column4, updated_at = v.column5,
			lease_until = NULL, claimed_at = NULL, attempts = attempts + 1, cycle_attempts = cycle_attempts + 1,
			provider = 'sim', provider_message_id = v.column6, last_response = v.column7
		FROM (VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?), ", len(batch)), ", ")+`) AS v
		WHERE notifications.id = v.column1 AND notifications.status = 'sending' AND notifications.claims = v.column2`, sargs...); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome, http_status,
			provider_message_id, response, decision) VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", len(batch)), ", "), aargs...)
	return err
}

// Drain measures the relay delivering a backlog: n notifications accepted
// before the clock starts, then the dispatcher (with workers) claims,
// calls the simulator and records until the last one is sent.
func Drain(ctx context.Context, dir string, sim *Sim, n, workers int) (DispatchRun, error) {
	path := filepath.Join(dir, fmt.Sprintf("drain-%d.db", workers))
	if err := backlog(ctx, path, n); err != nil {
		return DispatchRun{}, err
	}
	p, err := providers.New(sim.Route())
	if err != nil {
		return DispatchRun{}, err
	}
	count := &sentCounter{done: make(chan struct{}), want: int64(n)}
	r, st, err := openRelay(ctx, path, relay.Options{Logger: quiet, Routes: relay.Routes{"email": {p}}, Workers: workers, Observer: count})
	if err != nil {
		return DispatchRun{}, err
	}
	defer r.Close()
	st0 := st.Stats()
	if f := os.Getenv("EDGERELAY_BENCH_CPUPROFILE"); f != "" {
		// The drain alone, not the backlog's accepts: go test's -cpuprofile
		// would mix them.
		out, err := os.Create(f)
		if err != nil {
			return DispatchRun{}, err
		}
		defer out.Close()
		pprof.StartCPUProfile(out)
		defer pprof.StopCPUProfile()
	}
	cpu0, err1 := ProcessCPU(0)
	sim0, err2 := ProcessCPU(sim.PID())
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if f := os.Getenv("EDGERELAY_BENCH_ALLOCPROFILE"); f != "" {
		// Two snapshots of the allocations profile, before and after the
		// drain: go tool pprof -base F.before F.after
		writeAllocs(f + ".before")
		defer writeAllocs(f + ".after")
	}
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		return DispatchRun{}, err
	}
	defer r.Stop(context.Background())
	select {
	case <-count.done:
	case <-time.After(10 * time.Minute):
		return DispatchRun{}, fmt.Errorf("drain: %d of %d delivered after 10 minutes", count.sent.Load(), n)
	case <-ctx.Done():
		return DispatchRun{}, ctx.Err()
	}
	run := DispatchRun{N: n, Elapsed: time.Since(start)}
	runtime.ReadMemStats(&m1)
	run.AllocBytes = int64(m1.TotalAlloc - m0.TotalAlloc)
	st1 := st.Stats()
	run.Commits, run.Writes = st1.Commits-st0.Commits, st1.Writes-st0.Writes
	cpu1, err3 := ProcessCPU(0)
	sim1, err4 := ProcessCPU(sim.PID())
	if err := errors.Join(err1, err2, err3, err4); err == nil {
		run.RelayCPU, run.SimCPU = cpu1-cpu0, sim1-sim0
	}
	return run, nil
}

func writeAllocs(path string) {
	if out, err := os.Create(path); err == nil {
		pprof.Lookup("allocs").WriteTo(out, 0)
		out.Close()
	}
}

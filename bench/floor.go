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

	"edgerelay/providers"
	"edgerelay/relay"
)

// The dispatch floor: what this machine can do for one delivery with none
// of the relay around it. A backlog of pending notifications (written by
// the relay, so the schema, indexes and rows are the real ones) is claimed
// in batches with one UPDATE … RETURNING, each claimed row is POSTed to the
// simulator over loopback HTTP by as many workers as the dispatcher gets,
// and each batch of results is recorded with one multi-row INSERT of the
// attempts and one UPDATE … FROM (VALUES …) of the notifications, all on
// one connection with edgerelay's pragmas (synchronous=FULL). The relay's
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

	type job struct {
		id          int64
		claims, n   int
		key, to     string
		start       time.Time
		status      int
		end         time.Time
		messageID   string
		transportOK bool
	}
	work, done := make(chan *job, workers), make(chan *job, workers)
	slots := make(chan struct{}, workers)
	for range workers {
		slots <- struct{}{}
	}
	var mu sync.Mutex // the one connection, as the relay's one writer
	var failed error
	var fmu sync.Mutex
	fail := func(err error) {
		fmu.Lock()
		if failed == nil {
			failed = err
		}
		fmu.Unlock()
	}

	cpu0, err1 := ProcessCPU(0)
	sim0, err2 := ProcessCPU(sim.PID())
	st0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range work {
				body, _ := json.Marshal(map[string]any{"from": "relay@example.com", "to": []string{j.to},
					"subject": "Your receipt", "text": "Thanks for your order."})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sim.URL, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", j.key)
				j.start = time.Now()
				if rep, err := client.Do(req); err == nil {
					var v struct {
						ID string `json:"id"`
					}
					b, _ := io.ReadAll(rep.Body)
					rep.Body.Close()
					json.Unmarshal(b, &v)
					j.status, j.messageID, j.transportOK = rep.StatusCode, v.ID, true
				} else {
					fail(err)
				}
				j.end = time.Now()
				slots <- struct{}{}
				done <- j
			}
		})
	}
	// The recorder: what is done, in one transaction per batch.
	recorded := make(chan int, 1)
	go func() {
		total := 0
		for total < n {
			j, ok := <-done
			if !ok {
				break
			}
			batch := []*job{j}
		fill:
			for len(batch) < 256 {
				select {
				case j, ok := <-done:
					if !ok {
						break fill
					}
					batch = append(batch, j)
				default:
					break fill
				}
			}
			mu.Lock()
			err := recordBatch(ctx, db, batch, func(j *job) []any {
				now := j.end.UnixMilli()
				return []any{j.id, j.claims, "sent", now, now, j.messageID, "200 OK"}
			}, func(j *job) []any {
				return []any{j.id, j.n, "sim", j.start.UnixMilli(), j.end.UnixMilli(), "sent", j.status, j.messageID, "200 OK", "sent"}
			})
			mu.Unlock()
			if err != nil {
				fail(err)
				break
			}
			total += len(batch)
		}
		recorded <- total
	}()
	// The claimer: as many rows as there are free workers (a worker is free
	// when its call has ended, as in the relay).
	claimed := 0
	for claimed < n && ctx.Err() == nil {
		<-slots
		free := 1
	more:
		for free < workers {
			select {
			case <-slots:
				free++
			default:
				break more
			}
		}
		mu.Lock()
		js, err := claimBatch(ctx, db, free)
		mu.Unlock()
		if err != nil {
			fail(err)
			break
		}
		for range free - len(js) {
			slots <- struct{}{}
		}
		if len(js) == 0 {
			time.Sleep(time.Millisecond) // all claimed: the rest is in flight
			continue
		}
		claimed += len(js)
		for _, c := range js {
			work <- &job{id: c.id, claims: c.claims, n: c.n, key: c.key, to: c.to}
		}
	}
	close(work)
	wg.Wait()
	close(done)
	total := <-recorded
	if failed != nil {
		return DispatchRun{}, failed
	}
	if total != n {
		return DispatchRun{}, fmt.Errorf("floor: recorded %d of %d", total, n)
	}
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
	r, err := relay.Open(ctx, relay.Options{Path: path, Logger: quiet})
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

func claimBatch(ctx context.Context, db *sql.DB, limit int) ([]claimedRow, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := time.Now().UnixMilli()
	rows, err := tx.QueryContext(ctx, `UPDATE notifications SET status = 'sending', claims = claims + 1, claimed_at = ?1, lease_until = ?2, updated_at = ?1
		WHERE id IN (SELECT id FROM notifications INDEXED BY notifications_due WHERE status = 'pending' AND next_attempt_at <= ?1
		             ORDER BY next_attempt_at, id LIMIT ?3)
		RETURNING id, claims, attempts + 1, key, address`, now, now+60000, limit)
	if err != nil {
		return nil, err
	}
	var out []claimedRow
	for rows.Next() {
		var c claimedRow
		if err := rows.Scan(&c.id, &c.claims, &c.n, &c.key, &c.to); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// recordBatch writes a batch's states and attempts in one transaction.
func recordBatch[T any](ctx context.Context, db *sql.DB, batch []T, state func(T) []any, attempt func(T) []any) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
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
	if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome, http_status,
			provider_message_id, response, decision) VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", len(batch)), ", "), aargs...); err != nil {
		return err
	}
	return tx.Commit()
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
	r, err := relay.Open(ctx, relay.Options{Path: path, Logger: quiet, Routes: relay.Routes{"email": {p}}, Workers: workers, Observer: count})
	if err != nil {
		return DispatchRun{}, err
	}
	defer r.Close()
	st0 := r.WriterStats()
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
	st1 := r.WriterStats()
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

package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
)

// Fairness: serve's API and dispatcher on one writer, under a steady
// offered load over loopback HTTP (rate events per second for the given
// time), delivering to the simulator. It reports whether the backlog stays
// bounded while the load lasts, how long each notification took from its
// accept to its send, and the writer's share of work by class.
type FairnessRun struct {
	Offered           float64       // events per second asked for
	Accepted          int           // events accepted (202)
	Shed              int           // events refused with 503 overloaded
	Elapsed           time.Duration // the load's duration
	DeliveredDuring   int           // sent while the load lasted
	PendingMax        int64         // the largest backlog (due + sending) seen
	PendingEnd        int64         // the backlog when the load stopped
	P50, P99          time.Duration // accept to sent, for the load's notifications
	Busy              map[model.WriteClass]time.Duration
	DrainAfter        time.Duration // from the load's end to the last send
	AcceptP50, AccP99 time.Duration // the HTTP accept's own latency
}

// Fairness runs the load described above; workers is the dispatcher's.
func Fairness(ctx context.Context, dir string, sim *Sim, rate float64, d time.Duration, workers int, shedAbove int64) (FairnessRun, error) {
	path := filepath.Join(dir, fmt.Sprintf("fair-%.0f.db", rate))
	p, err := providers.New(sim.Route())
	if err != nil {
		return FairnessRun{}, err
	}
	r, st, err := openRelay(ctx, path, relay.Options{Logger: quiet, Routes: relay.Routes{"email": {p}}, Workers: workers})
	if err != nil {
		return FairnessRun{}, err
	}
	defer r.Close()
	a := api.New(r, st, api.Options{Open: true, Logger: quiet, ShedAbove: shedAbove})
	srv := httptest.NewServer(a)
	defer srv.Close()
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go a.ShedLoop(lctx, time.Second)
	if err := r.Start(ctx); err != nil {
		return FairnessRun{}, err
	}
	defer r.Stop(context.Background())

	run := FairnessRun{Offered: rate, Busy: map[model.WriteClass]time.Duration{}}
	st0 := st.Stats()
	// The pacer: event i is due at start + i/rate; 64 connections send
	// them, none before its time (an open-loop load, like many clients).
	const conns = 64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = conns, conns
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	total := int(rate * d.Seconds())
	var next, accepted, shed atomic.Int64
	lat := make([]time.Duration, total)
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
					time.Sleep(wait)
				}
				body := `{"id":"f` + strconv.Itoa(i) + `","type":"receipt","channels":["email"],"recipients":[{"id":"u` +
					strconv.Itoa(i) + `","email":"u` + strconv.Itoa(i) + `@example.com"}],"subject":"Your receipt","body":"Thanks."}`
				t := time.Now()
				rep, err := client.Post(srv.URL+"/v1/events", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Store(err)
					return
				}
				io.Copy(io.Discard, rep.Body)
				rep.Body.Close()
				lat[i] = time.Since(t)
				switch rep.StatusCode {
				case http.StatusAccepted:
					accepted.Add(1)
				case http.StatusServiceUnavailable:
					shed.Add(1)
				default:
					failed.Store(fmt.Errorf("POST /v1/events: %s", rep.Status))
					return
				}
			}
		})
	}
	// The backlog, sampled while the load lasts.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			due, _, sending, err := liveOf(ctx, st)
			if err == nil && due+sending > run.PendingMax {
				run.PendingMax = due + sending
			}
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	wg.Wait()
	run.Elapsed = time.Since(start)
	stop()
	<-sampled
	if err, _ := failed.Load().(error); err != nil {
		return FairnessRun{}, err
	}
	run.Accepted, run.Shed = int(accepted.Load()), int(shed.Load())
	due, _, sending, err := liveOf(ctx, st)
	if err != nil {
		return FairnessRun{}, err
	}
	run.PendingEnd = due + sending
	st1 := st.Stats()
	for c, s := range st1.Classes {
		run.Busy[c] = s.Busy - st0.Classes[c].Busy
	}
	slices.Sort(lat)
	run.AcceptP50, run.AccP99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	if err := drainThenRead(ctx, st, path, start, &run); err != nil {
		return FairnessRun{}, err
	}
	return run, nil
}

// drainThenRead waits for the relay at path to deliver what the load left,
// then reads each notification's accept-to-sent time from the store
// (created_at and updated_at, in milliseconds) into run.
func drainThenRead(ctx context.Context, st store.Dispatch, path string, start time.Time, run *FairnessRun) error {
	drainStart := time.Now()
	for {
		due, _, sending, err := liveOf(ctx, st)
		if err != nil {
			return err
		}
		if due+sending == 0 {
			break
		}
		if time.Since(drainStart) > 10*time.Minute {
			return fmt.Errorf("fairness: %d still due 10 minutes after the load", due+sending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.DrainAfter = time.Since(drainStart)
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT updated_at - created_at, updated_at FROM notifications WHERE status = 'sent'`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var took []time.Duration
	end := start.Add(run.Elapsed).UnixMilli()
	for rows.Next() {
		var ms, at int64
		if err := rows.Scan(&ms, &at); err != nil {
			return err
		}
		took = append(took, time.Duration(ms)*time.Millisecond)
		if at <= end {
			run.DeliveredDuring++
		}
	}
	if len(took) > 0 {
		slices.Sort(took)
		run.P50, run.P99 = took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
	}
	return rows.Err()
}

// liveOf is the queue: due now, due later, and being sent.
func liveOf(ctx context.Context, st store.Dispatch) (due, later, sending int64, err error) {
	return st.Live(ctx, time.Now())
}

// BusyShares is each class's part of the writer's busy time, as "accept
// 61%, claim 14%, record 25%".
func (f FairnessRun) BusyShares() string {
	var all time.Duration
	for _, d := range f.Busy {
		all += d
	}
	var parts []string
	for _, c := range []model.WriteClass{model.WriteAccept, model.WriteClaim, model.WriteRecord, model.WriteOther} {
		if d := f.Busy[c]; d > 0 && all > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, 100*float64(d)/float64(all)))
		}
	}
	return strings.Join(parts, ", ")
}

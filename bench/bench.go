// Package bench measures edgerelay on the machine it runs on. Every figure
// in the README and in docs/PROOF.md comes from these functions, run by
// `edgerelay bench` (one table) or by `go test ./bench -bench .` (the same
// measurements as Go benchmarks).
//
// Each measurement opens its own database under a directory the caller
// gives, with the settings edgerelay ships with (WAL, synchronous=FULL):
// an accept is counted once its commit is durable, as the API answers it.
package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

var quiet = slog.New(slog.DiscardHandler)

// Rate is a throughput measurement: N items in Elapsed, and, when measured
// per call, the latency percentiles of one call.
type Rate struct {
	N        int
	Callers  int
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// PerSecond is N divided by the elapsed time.
func (r Rate) PerSecond() float64 { return float64(r.N) / r.Elapsed.Seconds() }

// receipt is the one-recipient event every ingest measurement accepts.
func receipt(i int) relay.Event {
	return relay.Event{ID: "e" + strconv.Itoa(i), Type: "receipt", Channels: []string{"email"},
		Recipients: []relay.Recipient{{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"}},
		Subject:    "Your receipt", Body: "Thanks for your order."}
}

// Ceiling is the raw SQLite baseline for ingest: one goroutine inserting,
// for each of n items, the very rows an accept of receipt(i) writes (the
// event with its payload, message and fingerprint, and its notification
// with its key), with ON CONFLICT DO NOTHING, 1,000 items per transaction,
// on edgerelay's schema with the same pragmas. The rows are made before the
// clock starts: no JSON, no hashing, no callers, only what the file can
// take, against which the relay's accept path is compared.
func Ceiling(ctx context.Context, dir string, n int) (Rate, error) {
	path := filepath.Join(dir, "ceiling.db")
	r, _, err := openRelay(ctx, path, relay.Options{Logger: quiet})
	if err != nil {
		return Rate{}, err
	}
	if err := r.Close(); err != nil { // the schema; then raw SQL on the same file
		return Rate{}, err
	}
	type item struct {
		ev model.NewEvent
		tg model.Target
	}
	items := make([]item, n)
	for i := range items {
		ev, ts, err := receipt(i).Rows(0)
		if err != nil {
			return Rate{}, err
		}
		items[i] = item{ev, ts[0]}
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)")
	if err != nil {
		return Rate{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	now := time.Now().UnixMilli()
	start := time.Now()
	for i := 0; i < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return Rate{}, err
		}
		ev, err := tx.Prepare(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, 1, ?) ON CONFLICT DO NOTHING`)
		if err != nil {
			return Rate{}, err
		}
		no, err := tx.Prepare(`INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address,
			next_attempt_at, cycle_started_at, created_at, updated_at)
			VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`)
		if err != nil {
			return Rate{}, err
		}
		for j := 0; j < 1000 && i < n; j, i = j+1, i+1 {
			e, t := items[i].ev, items[i].tg
			res, err := ev.Exec(e.Tenant, e.EventID, e.Purpose, e.Type, e.Payload, e.Message, e.Fingerprint, now)
			if err != nil {
				return Rate{}, err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return Rate{}, err
			}
			if _, err := no.Exec(t.Key, id, e.Tenant, e.Type, t.Recipient, t.Channel, t.Address, now, now, now, now); err != nil {
				return Rate{}, err
			}
		}
		ev.Close()
		no.Close()
		if err := tx.Commit(); err != nil {
			return Rate{}, err
		}
	}
	return Rate{N: n, Callers: 1, Elapsed: time.Since(start)}, nil
}

// concurrently runs call(i) for i in [0, n) from callers goroutines and
// times each call. The first error stops the run.
func concurrently(ctx context.Context, n, callers int, call func(ctx context.Context, i int) error) (Rate, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				if err := call(ctx, i); err != nil {
					cancel(err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return Rate{}, err
	}
	slices.Sort(lat)
	return Rate{N: n, Callers: callers, Elapsed: elapsed, P50: lat[n/2], P99: lat[min(n-1, n*99/100)]}, nil
}

// AcceptGo accepts n one-recipient events through relay.Accept from
// callers goroutines; each call returns once its event is durable.
func AcceptGo(ctx context.Context, dir string, callers, n int) (Rate, error) {
	return acceptGoAt(ctx, filepath.Join(dir, fmt.Sprintf("accept-go-%d.db", callers)), callers, n)
}

// acceptGoAt is AcceptGo on the database at path (a file or a URL).
func acceptGoAt(ctx context.Context, path string, callers, n int) (Rate, error) {
	r, _, err := openRelay(ctx, path, relay.Options{Logger: quiet})
	if err != nil {
		return Rate{}, err
	}
	defer r.Close()
	return concurrently(ctx, n, callers, func(ctx context.Context, i int) error {
		_, err := r.Accept(ctx, receipt(i))
		return err
	})
}

// AcceptHTTP posts n one-recipient events to POST /v1/events on a loopback
// server from callers goroutines, each over its own kept-alive connection;
// a call ends with its 202.
func AcceptHTTP(ctx context.Context, dir string, callers, n int) (Rate, error) {
	return acceptHTTPAt(ctx, filepath.Join(dir, fmt.Sprintf("accept-http-%d.db", callers)), callers, n)
}

// acceptHTTPAt is AcceptHTTP on the database at path (a file or a URL).
func acceptHTTPAt(ctx context.Context, path string, callers, n int) (Rate, error) {
	r, st, err := openRelay(ctx, path, relay.Options{Logger: quiet})
	if err != nil {
		return Rate{}, err
	}
	defer r.Close()
	srv := httptest.NewServer(api.New(r, st, api.Options{Open: true, Logger: quiet}))
	defer srv.Close()
	return postEvents(ctx, srv.URL, callers, n, 0)
}

// postEvents posts events from..from+n to base/v1/events.
func postEvents(ctx context.Context, base string, callers, n, from int) (Rate, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = callers
	tr.MaxConnsPerHost = callers
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	return concurrently(ctx, n, callers, func(ctx context.Context, i int) error {
		body := `{"id":"e` + strconv.Itoa(from+i) + `","type":"receipt","channels":["email"],"recipients":[{"id":"u` +
			strconv.Itoa(from+i) + `","email":"u` + strconv.Itoa(from+i) + `@example.com"}],"subject":"Your receipt","body":"Thanks for your order."}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		rep, err := client.Do(req)
		if err != nil {
			return err
		}
		msg, _ := io.ReadAll(rep.Body)
		rep.Body.Close()
		if rep.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST /v1/events: %s: %s", rep.Status, msg)
		}
		return nil
	})
}

// FanOut times accepting one event with the given number of recipients on
// a fresh database, until the event and every notification are durable.
func FanOut(ctx context.Context, dir string, recipients int) (time.Duration, error) {
	return fanOutAt(ctx, filepath.Join(dir, fmt.Sprintf("fanout-%d.db", recipients)), recipients)
}

// fanOutAt is FanOut on the database at path (a file or a URL).
func fanOutAt(ctx context.Context, path string, recipients int) (time.Duration, error) {
	r, _, err := openRelay(ctx, path, relay.Options{Logger: quiet, MaxRecipients: recipients})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	ev := relay.Event{ID: "big", Type: "announcement", Channels: []string{"email"}, Subject: "News", Body: "Something happened."}
	for i := range recipients {
		ev.Recipients = append(ev.Recipients, relay.Recipient{ID: "u" + strconv.Itoa(i), Email: "u" + strconv.Itoa(i) + "@example.com"})
	}
	start := time.Now()
	res, err := r.Accept(ctx, ev)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.Count != recipients {
		return 0, fmt.Errorf("fan-out: %d notifications, want %d", res.Count, recipients)
	}
	return took, nil
}

// ProcessCPU is the user+system CPU time a process has used so far, from
// /proc (Linux); pid 0 means this process.
func ProcessCPU(pid int) (time.Duration, error) {
	p := "/proc/self/stat"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from after ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: short", p)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unreadable times", p)
	}
	const ticks = 100 // USER_HZ on every Linux platform Go supports
	return time.Duration(utime+stime) * time.Second / ticks, nil
}

// ProcessRSS returns a process's resident memory now and its peak (VmRSS,
// VmHWM) from /proc (Linux); pid 0 means this process.
func ProcessRSS(pid int) (now, peak int64, err error) {
	p := "/proc/self/status"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			now = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	if now == 0 {
		return 0, 0, fmt.Errorf("%s: no VmRSS", p)
	}
	return now, peak, nil
}

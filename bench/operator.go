package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Measured the way an operator runs edgerelay: every part is the binary
// with its defaults, in a process of its own. A backlog is written with
// `edgerelay batch send` and delivered by `edgerelay dispatch --until-idle`;
// live traffic goes to `edgerelay serve` from `edgerelay bench load`, another
// process; the provider is `edgerelay sim`, optionally with a latency. Only
// what an operator must say is given: the database, the route to the
// simulator and, for serve, a tenant's token. No tuning flag (--workers
// and the like) is set.

// BoxCPU is the machine's CPU time so far, from the first line of
// /proc/stat (Linux), in clock ticks.
type BoxCPU struct{ Idle, Total uint64 }

// ReadBoxCPU reads BoxCPU now.
func ReadBoxCPU() (BoxCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return BoxCPU{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return BoxCPU{}, errors.New("/proc/stat: no cpu line")
	}
	var c BoxCPU
	for i, s := range f[1:min(len(f), 9)] { // user nice system idle iowait irq softirq steal
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return BoxCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
		c.Total += v
		if i == 3 || i == 4 {
			c.Idle += v
		}
	}
	return c, nil
}

// IdleSince is the share of the machine's CPU left idle since c (0 to 1),
// or -1 if /proc/stat cannot be read.
func (c BoxCPU) IdleSince() float64 {
	now, err := ReadBoxCPU()
	if err != nil || now.Total <= c.Total {
		return -1
	}
	return float64(now.Idle-c.Idle) / float64(now.Total-c.Total)
}

// Reset makes the simulator forget its deliveries and keys, so that each
// measurement finds it as fresh as the first.
func (s *Sim) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.URL, "/v1/emails")+"/reset", nil)
	if err != nil {
		return err
	}
	rep, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	rep.Body.Close()
	if rep.StatusCode != http.StatusNoContent {
		return fmt.Errorf("simulator /reset: %s", rep.Status)
	}
	return nil
}

// BinaryDrain is one `dispatch --until-idle` of a backlog.
type BinaryDrain struct {
	N        int           // notifications sent
	Elapsed  time.Duration // from the exec of dispatch to its exit
	RelayCPU time.Duration // the dispatch process's user+system time
	SimCPU   time.Duration // the simulator's, meanwhile
	Idle     float64       // the machine's idle share meanwhile (-1: unknown)
}

// PerSecond is deliveries per second.
func (d BinaryDrain) PerSecond() float64 { return float64(d.N) / d.Elapsed.Seconds() }

// RelayCPUPer is the dispatch process's CPU per delivery.
func (d BinaryDrain) RelayCPUPer() time.Duration { return d.RelayCPU / time.Duration(max(1, d.N)) }

// writeBacklogFile writes n one-recipient events as JSON Lines, the batch
// file format.
func writeBacklogFile(path, prefix string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		id := prefix + strconv.Itoa(i)
		fmt.Fprintf(w, `{"id":"%s","type":"receipt","channels":["email"],"recipients":[{"id":"u%s","email":"u%s@example.com"}],"subject":"Your receipt","body":"Thanks for your order."}`+"\n", id, id, id)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run runs exe with args to its end, its stderr to logPath, and returns
// its stdout and its state.
func run(ctx context.Context, exe, logPath string, args ...string) ([]byte, *os.ProcessState, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, exe, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, logf
	err = cmd.Run()
	if err != nil {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return out.Bytes(), cmd.ProcessState, fmt.Errorf("%s %s: %w\n%s", filepath.Base(exe), args[0], err, tail)
	}
	return out.Bytes(), cmd.ProcessState, nil
}

// DrainWithBinary writes n events with `exe batch send`, then times
// `exe dispatch --until-idle` delivering them to the simulator, the way a
// cron job does: its defaults, the route and the database its only
// settings. The database and logs go in dir, named by name.
func DrainWithBinary(ctx context.Context, exe, dir, name string, sim *Sim, n int) (BinaryDrain, error) {
	db := filepath.Join(dir, name+".db")
	file := filepath.Join(dir, name+".jsonl")
	if err := writeBacklogFile(file, name+"-", n); err != nil {
		return BinaryDrain{}, err
	}
	route := "email=" + sim.Route()
	if _, _, err := run(ctx, exe, filepath.Join(dir, name+"-batch.log"), "batch", "send", file, "--db", db, "--route", route); err != nil {
		return BinaryDrain{}, err
	}
	if err := sim.Reset(ctx); err != nil {
		return BinaryDrain{}, err
	}
	box, errBox := ReadBoxCPU()
	sim0, errSim := ProcessCPU(sim.PID())
	start := time.Now()
	out, st, err := run(ctx, exe, filepath.Join(dir, name+"-dispatch.log"), "dispatch", "--until-idle", "--json", "--db", db, "--route", route)
	elapsed := time.Since(start)
	if err != nil {
		return BinaryDrain{}, err
	}
	d := BinaryDrain{Elapsed: elapsed, RelayCPU: st.UserTime() + st.SystemTime(), Idle: -1}
	if errBox == nil {
		d.Idle = box.IdleSince()
	}
	if sim1, err := ProcessCPU(sim.PID()); err == nil && errSim == nil {
		d.SimCPU = sim1 - sim0
	}
	var sum struct {
		Sent int `json:"sent"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		return BinaryDrain{}, fmt.Errorf("dispatch --json: %w (%q)", err, out)
	}
	if sum.Sent != n {
		return BinaryDrain{}, fmt.Errorf("dispatch sent %d of %d", sum.Sent, n)
	}
	d.N = sum.Sent
	return d, nil
}

// Serve is `edgerelay serve` running in a process of its own.
type Serve struct {
	URL   string // http://127.0.0.1:PORT
	Token string // the one tenant's API token
	DB    string // its SQLite file
	cmd   *exec.Cmd
	log   *os.File
	done  chan struct{} // closed when the process has exited
}

// StartServe runs `exe serve` on a fresh database dir/name.db, listening
// on a free loopback port, with a config that gives one tenant ("bench") a
// token and a route to the simulator, and waits until /readyz answers 200.
// Nothing else is set: the dispatcher, shedding and limits are serve's
// defaults.
func StartServe(ctx context.Context, exe, dir, name string, sim *Sim) (*Serve, error) {
	var tok [16]byte
	rand.Read(tok[:])
	s := &Serve{Token: "bench_" + hex.EncodeToString(tok[:]), DB: filepath.Join(dir, name+".db")}
	cfg := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte("tenants:\n  bench:\n    tokens: [\""+s.Token+"\"]\n"), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + addr
	if s.log, err = os.Create(filepath.Join(dir, name+"-serve.log")); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(exe, "serve", "--config", cfg, "--db", s.DB, "--listen", addr, "--route", "email="+sim.Route())
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.log.Close()
		return nil, fmt.Errorf("start serve: %w", err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := http.Get(s.URL + "/readyz")
		if err == nil {
			rep.Body.Close()
			if rep.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			s.log.Close()
			b, _ := os.ReadFile(s.log.Name())
			return nil, fmt.Errorf("serve exited before it was ready: %s", b)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("serve not ready after 30s (last: %v)", err)
		}
	}
}

// Stop ends serve with SIGTERM (it finishes what is in flight), or kills
// it after 30 s.
func (s *Serve) Stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.log.Close()
}

// RunLoad runs `exe bench load` against s with o (URL and Token filled in
// from s): the load is a process of its own.
func RunLoad(ctx context.Context, exe, dir string, s *Serve, o LoadOptions) (LoadResult, error) {
	args := []string{"bench", "load", "--url", s.URL, "--token", s.Token, "--conns", strconv.Itoa(o.Conns), "--prefix", o.Prefix}
	if o.Rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(o.Rate, 'f', 0, 64), "--for", o.For.String())
	} else {
		args = append(args, "--events", strconv.Itoa(o.Events))
	}
	out, _, err := run(ctx, exe, filepath.Join(dir, o.Prefix+"load.log"), args...)
	if err != nil {
		return LoadResult{}, err
	}
	var r LoadResult
	if err := json.Unmarshal(out, &r); err != nil {
		return LoadResult{}, fmt.Errorf("bench load: %w (%q)", err, out)
	}
	return r, nil
}

// ServeIngest is what `serve` accepts: events posted by a load process
// over conns connections as fast as they are answered, every event new,
// while serve delivers them to the simulator.
type ServeIngest struct {
	Load LoadResult
	Idle float64 // the machine's idle share while the load ran (-1: unknown)
}

// MeasureServeIngest starts serve, posts n new events from conns
// connections (the load in its own process), and stops serve.
func MeasureServeIngest(ctx context.Context, exe, dir string, sim *Sim, n, conns int) (ServeIngest, error) {
	if err := sim.Reset(ctx); err != nil {
		return ServeIngest{}, err
	}
	s, err := StartServe(ctx, exe, dir, "serve-ingest", sim)
	if err != nil {
		return ServeIngest{}, err
	}
	defer s.Stop()
	box, errBox := ReadBoxCPU()
	r, err := RunLoad(ctx, exe, dir, s, LoadOptions{Conns: conns, Events: n, Prefix: "ingest-"})
	if err != nil {
		return ServeIngest{}, err
	}
	in := ServeIngest{Load: r, Idle: -1}
	if errBox == nil {
		in.Idle = box.IdleSince()
	}
	if r.Accepted != n {
		return in, fmt.Errorf("serve accepted %d of %d (shed %d, other %d, errors %d: %s)", r.Accepted, n, r.Shed, r.Other, r.Errors, r.FirstError)
	}
	return in, nil
}

// ServeFairness is serve under a steady load of new events from another
// process, delivering them to the simulator.
type ServeFairness struct {
	Offered float64 // events per second asked for
	Load    LoadResult
	// SentDuring is how many notifications were sent (their attempt ended)
	// while the load lasted.
	SentDuring int
	// PendingEnd is the backlog (pending or sending) when the load ended.
	PendingEnd int64
	Idle       float64 // the machine's idle share while the load ran
	// P50 and P99 are accept to sent (the notification's creation to its
	// sent attempt's end, from the audit trail), once all were sent; zero
	// if the backlog was not waited for.
	P50, P99   time.Duration
	DrainAfter time.Duration // from the load's end until nothing was pending
}

// OfferedPerSecond is the rate the load really offered (answered or not).
func (f ServeFairness) OfferedPerSecond() float64 {
	return float64(f.Load.Sent+f.Load.Errors) / max(1e-3, f.Load.Elapsed().Seconds())
}

// SentPerSecond is the delivery rate while the load lasted.
func (f ServeFairness) SentPerSecond() float64 {
	return float64(f.SentDuring) / max(1e-3, f.Load.Elapsed().Seconds())
}

// MeasureServeFairness starts serve, offers rate new events per second for
// d from another process (conns connections), reads the backlog at the
// end from serve's database (read-only), and, if wait, waits for the
// backlog to be delivered and reads each notification's accept-to-sent
// time from the audit trail. Then it stops serve.
func MeasureServeFairness(ctx context.Context, exe, dir string, sim *Sim, rate float64, d time.Duration, conns int, wait bool) (ServeFairness, error) {
	if err := sim.Reset(ctx); err != nil {
		return ServeFairness{}, err
	}
	name := fmt.Sprintf("serve-fair-%.0f", rate)
	s, err := StartServe(ctx, exe, dir, name, sim)
	if err != nil {
		return ServeFairness{}, err
	}
	defer s.Stop()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: s.DB}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return ServeFairness{}, err
	}
	defer db.Close()
	f := ServeFairness{Offered: rate, Idle: -1}
	box, errBox := ReadBoxCPU()
	if f.Load, err = RunLoad(ctx, exe, dir, s, LoadOptions{Conns: conns, Rate: rate, For: d, Prefix: name + "-"}); err != nil {
		return f, err
	}
	pending := func() (int64, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM notifications WHERE status IN ('pending', 'sending')`).Scan(&n)
		return n, err
	}
	if f.PendingEnd, err = pending(); err != nil {
		return f, err
	}
	if errBox == nil {
		f.Idle = box.IdleSince()
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM attempts WHERE outcome = 'sent' AND ended_at <= ?`, f.Load.End).Scan(&f.SentDuring); err != nil {
		return f, err
	}
	if !wait {
		return f, nil
	}
	drainStart := time.Now()
	for left := f.PendingEnd; left > 0; {
		if time.Since(drainStart) > 10*time.Minute {
			return f, fmt.Errorf("fairness: %d still pending 10 minutes after the load", left)
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if left, err = pending(); err != nil {
			return f, err
		}
	}
	f.DrainAfter = time.Since(drainStart)
	rows, err := db.QueryContext(ctx, `SELECT a.ended_at - n.created_at FROM notifications n JOIN attempts a ON a.notification = n.id WHERE a.outcome = 'sent'`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	var took []time.Duration
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			return f, err
		}
		took = append(took, time.Duration(ms)*time.Millisecond)
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	if len(took) > 0 {
		slices.Sort(took)
		f.P50, f.P99 = took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
	}
	return f, nil
}

// AsRunRows measures the way an operator runs edgerelay (see the top of
// this file), each figure beside what this run measured of the machine:
// the dispatch floor (Floor, 128 callers, zero latency: the floor for
// every latency, since a provider's latency costs the machine nothing) and
// the raw SQLite ceiling for ingest.
func AsRunRows(ctx context.Context, cfg Config, ceiling Rate) ([]Row, error) {
	n := cfg.Events
	ln := cfg.LatencyEvents
	if ln <= 0 {
		ln = min(n, 4000)
	}
	fairFor := cfg.FairFor
	if fairFor <= 0 {
		fairFor = 15 * time.Second
	}
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	idle := func(v float64) string {
		if v < 0 {
			return "box idle unknown"
		}
		return fmt.Sprintf("box %.0f%% idle", 100*v)
	}
	var rows []Row
	sim, err := StartSim(ctx, cfg.Exe)
	if err != nil {
		return nil, err
	}
	defer sim.Stop()
	// The floor is measured twice, before and after the drain at zero
	// latency, on fresh files; the higher is the baseline (a neighbour's
	// load can only lower it).
	var floors [2]DispatchRun
	var floor DispatchRun
	measureFloor := func(i int) error {
		say("as run: the dispatch floor (%d of 2), %d notifications, 128 callers, one transaction per 128 deliveries", i+1, n)
		if err := sim.Reset(ctx); err != nil {
			return err
		}
		d, err := os.MkdirTemp(cfg.Dir, "floor-")
		if err != nil {
			return err
		}
		if floors[i], err = Floor(ctx, d, sim, n, 128); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		if i == 0 || floors[i].PerSecond() > floor.PerSecond() {
			floor = floors[i]
		}
		return nil
	}
	if err := measureFloor(0); err != nil {
		return nil, err
	}
	floorRow := len(rows)
	rows = append(rows, Row{})
	for _, lat := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond} {
		s, count := sim, n
		if lat > 0 {
			count = ln
			if s, err = StartSim(ctx, cfg.Exe, "--latency", lat.String()); err != nil {
				return nil, err
			}
		}
		say("as run: `batch send` %d events, then `dispatch --until-idle` with its defaults, simulator latency %s", count, lat)
		d, err := DrainWithBinary(ctx, cfg.Exe, cfg.Dir, fmt.Sprintf("asrun-drain-%dms", lat.Milliseconds()), s, count)
		if s != sim {
			s.Stop()
		}
		if err != nil {
			return nil, fmt.Errorf("drain at latency %s: %w", lat, err)
		}
		if lat == 0 {
			if err := measureFloor(1); err != nil {
				return nil, err
			}
		}
		floorCPU := floor.RelayCPU / time.Duration(floor.N)
		target := map[time.Duration]string{0: "target 75%, CPU ≤ 1.5×", 100 * time.Millisecond: "target 50%", 300 * time.Millisecond: "target 30%"}[lat]
		rows = append(rows, Row{fmt.Sprintf("as run: drain %s notifications, `batch send` then `dispatch --until-idle` (defaults), provider latency %s",
			thousands(float64(count)), latText(lat)),
			fmt.Sprintf("%s; relay CPU per delivery %s (%.1f× the floor's), simulator %s; %s", perSec(d.PerSecond(), "deliveries"),
				us(d.RelayCPUPer()), float64(d.RelayCPUPer())/float64(max(1, floorCPU)), us(d.SimCPU/time.Duration(d.N)), idle(d.Idle)),
			fmt.Sprintf("%.2f of the floor (%s)", d.PerSecond()/floor.PerSecond(), target)})
	}

	rows[floorRow] = Row{"as run: dispatch floor, no relay: 128 callers over loopback HTTP to the simulator (no latency), one claim+record transaction per 128 deliveries, synchronous=FULL; measured before and after the drain at latency 0, the higher kept",
		fmt.Sprintf("%s and %s; CPU per delivery of the higher: client and database %s, simulator %s",
			perSec(floors[0].PerSecond(), "deliveries"), perSec(floors[1].PerSecond(), "deliveries"),
			us(floor.RelayCPU/time.Duration(floor.N)), us(floor.SimCPU/time.Duration(floor.N))), "the baseline for every latency"}

	// Ingest is measured at 256 connections; a steady load gets more, so
	// that slow answers do not hold the offer back (serve's default
	// --max-conns is 1,024).
	const conns, fairConns = 256, 512
	say("as run: `serve` (defaults) taking %d new events over HTTP from `bench load` (%d connections), delivering them", n, conns)
	in, err := MeasureServeIngest(ctx, cfg.Exe, cfg.Dir, sim, n, conns)
	if err != nil {
		return nil, fmt.Errorf("serve ingest: %w", err)
	}
	capacity := in.Load.AcceptedPerSecond()
	rows = append(rows, Row{fmt.Sprintf("as run: `serve` ingest over HTTP, %d connections from another process, dispatch on, every event new", conns),
		fmt.Sprintf("%s; accept p50 %s, p99 %s; %s", perSec(capacity, "events"), ms(in.Load.P50), ms(in.Load.P99), idle(in.Idle)),
		fmt.Sprintf("%.2f of the ceiling (target 0.50)", capacity/ceiling.PerSecond())})

	for _, share := range []float64{0.5, 0.9, 1.5} {
		rate := share * capacity
		wait := share < 1
		say("as run: fairness, %.0f new events/s (%.0f%% of what serve accepts) over HTTP from another process for %s", rate, 100*share, fairFor)
		f, err := MeasureServeFairness(ctx, cfg.Exe, cfg.Dir, sim, rate, fairFor, fairConns, wait)
		if err != nil {
			return nil, fmt.Errorf("fairness at %.0f%%: %w", 100*share, err)
		}
		offered := perSec(f.OfferedPerSecond(), "events")
		if f.Load.Unsent > 0 {
			offered += fmt.Sprintf(" (%s not sent: all %d connections were waiting)", thousands(float64(f.Load.Unsent)), fairConns)
		}
		fig := fmt.Sprintf("offered %s, accepted %s, sent %s (%.2f of the offer) while it lasted; pending at the end %s (%.1f s of the offer)",
			offered, perSec(f.Load.AcceptedPerSecond(), "events"), perSec(f.SentPerSecond(), "deliveries"),
			f.SentPerSecond()/max(1, f.OfferedPerSecond()), thousands(float64(f.PendingEnd)), float64(f.PendingEnd)/max(1, rate))
		if wait {
			fig += fmt.Sprintf("; accept to sent p50 %s, p99 %s; the rest sent %s after", ms(f.P50), ms(f.P99), secs(f.DrainAfter))
		}
		fig += fmt.Sprintf("; accept p99 %s", ms(f.Load.P99))
		if f.Load.Shed > 0 {
			fig += fmt.Sprintf("; shed %s (503, %d without Retry-After), the first after %s", thousands(float64(f.Load.Shed)), f.Load.ShedNoRetryAfter, secs(f.Load.FirstShed))
		} else {
			fig += "; none shed"
		}
		if f.Load.Errors+f.Load.Other > 0 {
			fig += fmt.Sprintf("; %d unanswered, %d other answers (%s)", f.Load.Errors, f.Load.Other, f.Load.FirstError)
		}
		fig += "; " + idle(f.Idle)
		against := map[float64]string{0.5: "target: pending < 2 s of the offer, p99 < 1 s", 0.9: "target: bounded",
			1.5: "target: shed (503 + Retry-After) before the backlog grows without bound"}[share]
		rows = append(rows, Row{fmt.Sprintf("as run: fairness at %.0f%% of serve's ingest: %s asked over HTTP for %s from another process (%d connections), delivered by the same serve",
			100*share, perSec(rate, "events"), fairFor, fairConns), fig, against})
	}
	return rows, nil
}

func latText(d time.Duration) string {
	if d == 0 {
		return "0 (answered at once)"
	}
	return d.String()
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

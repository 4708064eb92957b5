package main

// The cluster drill: three real `edgerelay serve` processes on one
// PostgreSQL database (internal/pgtest) take events over HTTP, spread at
// random over the live ones, and dispatch them to the simulated email
// provider while the driver SIGKILLs a random node (half the time the one
// holding the schedules' lease) every second or two and restarts it on a
// fresh port. A batch job runs @every 1s on whichever node holds the
// schedules, so kills land on leaders with scheduled runs in flight, and
// the application commits an order with its outbox row every 50 ms, which
// whichever node holds that tail's lease relays. A
// client's event not answered 2xx is posted again to another live node,
// same event id. After the load, the nodes stop (SIGTERM) and a final
// `dispatch --until-idle` settles what the kills left.
//
// Two variants, each on its own schema with its own simulator, as the
// SQLite drill (drill_test.go), whose checks and ledger it shares:
// honoured-keys (every acknowledged notification delivered exactly once)
// and no-keys (at-most-once otp: at most one delivery, unknown only after an
// attempt of unknown outcome; at-least-once notice: every extra delivery
// matched by an attempt of unknown outcome, a kill's or a lost answer's). On top of those: every scheduled run
// from the first to the last ran, once (its event exists once and was
// delivered as its type says), every order's event was accepted once from
// the outbox and delivered, and every lease a killed node held (the
// schedules, the pruning of request keys, the tail) moved to a live node within the
// failover bound (--leader-ttl × 4/3), as the driver saw it polling the
// leases table.
//
// Defaults (12 s of load, about 600 events and 6 kills per variant) keep
// the test near 30 s per variant on a 2-core machine; EDGERELAY_DRILL_LONG=1
// runs 2 minutes, 10,000 events. EDGERELAY_DRILL_SEED=N replays a kill plan.
// Skipped with -short, and when PostgreSQL is not installed (pgtest says
// how to enable it).

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/postgres"
)

const (
	clusterNodes   = 3
	clusterWorkers = 6 // concurrent POSTs from the driver, spread over the nodes
	// clusterTTL is the nodes' --leader-ttl: a lease renewed every 500 ms,
	// moved within 2 s of its holder's death.
	clusterTTL = 1500 * time.Millisecond
	// clusterSlack is what the measured failover may take beyond the bound:
	// the driver's polling of the leases table and a loaded machine's
	// timer delays.
	clusterSlack = 500 * time.Millisecond
)

func TestClusterDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and SIGKILLs real processes")
	}
	longtest.Require(t)
	bin := binary(t)
	load, n := 12*time.Second, 600
	if os.Getenv("EDGERELAY_DRILL_LONG") == "1" {
		load, n = 2*time.Minute, 10000
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDGERELAY_DRILL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDGERELAY_DRILL_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("cluster drill: %d nodes, %s of load, %d events per variant, seed %d (EDGERELAY_DRILL_SEED)", clusterNodes, load, n, seed)
	for i, v := range []struct {
		name   string
		honour bool
	}{{"honoured-keys", true}, {"no-keys", false}} {
		t.Run(v.name, func(t *testing.T) {
			runClusterDrill(t, bin, v.honour, n, load, seed+uint64(i))
		})
	}
}

// kill is one SIGKILL of a node, with the leases it held then.
type kill struct {
	at     time.Time
	node   int
	holder string
	leases []string
}

// leaseChange is a lease seen passing to another holder.
type leaseChange struct {
	at     time.Time
	name   string
	from   string
	holder string
}

type cluster struct {
	d   *drill
	pg  *pgxpool.Pool // the driver's own: the leases and job_runs tables
	app *sql.DB       // the application with the tailed outbox
	rng *rand.Rand    // the posters' picks, under mu
	// plan is the kill plan's own: killLoop runs beside the posters,
	// and a seed replays the same plan whatever they drew.
	plan *rand.Rand
	load time.Duration

	orders int // placed in the outbox so far

	mu      sync.Mutex
	nodes   [clusterNodes]*serveProc // nil while the node is down
	posters map[*serveProc]*poster
	kills   []kill
	changes []leaseChange
	busy    int // events handed to a worker and not yet answered or given back
}

func runClusterDrill(t *testing.T, bin string, honour bool, n int, load time.Duration, seed uint64) {
	start := time.Now()
	db := pgtest.Start(t)
	dir := t.TempDir()
	// Every call takes a while, so kills land with calls in flight.
	server := sim.New(sim.Options{HonourKeys: honour, Script: &sim.Script{Rules: []sim.Rule{
		{To: "*", Action: sim.ActionSlow, Delay: 30 * time.Millisecond},
	}}})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })
	idem := "none"
	if honour {
		idem = "honoured"
	}
	// The application whose outbox the nodes tail, one at a time.
	outbox := filepath.Join(dir, "app.db")
	app := tailApp(t, outbox)
	ticks := filepath.Join(dir, "tick.jsonl")
	if err := os.WriteFile(ticks, []byte(`{"id":"t","type":"`+drillNotice+`","channels":["email"],"recipients":[{"id":"tick","email":"tick@example.com"}],"subject":"tick","body":"b"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`routes:
  email: "email-http+%s/v1/emails?from=relay@example.com&idempotency=%s&timeout=2s"
types:
  %s:
    delivery: at-most-once
  %s:
    delivery: at-least-once
retry:
  max_attempts: 20
  max_age: 1h
  base_delay: 100ms
  max_delay: 1s
dispatch:
  workers: 8
  lease: 1s
jobs:
  tick:
    schedule: "@every 1s"
    batch:
      file: %s
tail:
  - source: "sqlite:%s"
    poll: 20ms
`, hs.URL, idem, drillOTP, drillNotice, ticks, outbox)
	d := &drill{
		t: t, bin: bin, dir: dir, db: db, config: filepath.Join(dir, "edgerelay.yaml"),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), honour: honour, kills: map[string]int{},
		serveArgs: []string{"--leader-ttl", clusterTTL.String()},
	}
	if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		typ := drillNotice
		if i%2 == 1 {
			typ = drillOTP
		}
		ev := relay.Event{ID: fmt.Sprintf("drill-%05d", i), Type: typ, Channels: []string{"email"},
			Subject: "drill " + strconv.Itoa(i), Body: "b"}
		recipients := 1
		if i%25 == 0 {
			recipients = 3
		}
		for r := range recipients {
			id := fmt.Sprintf("u%d-%d", i, r)
			ev.Recipients = append(ev.Recipients, relay.Recipient{ID: id, Email: id + "@example.com"})
		}
		body, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		d.events = append(d.events, &drillEvent{ev: ev, body: body})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	c := &cluster{d: d, pg: pg, app: app, rng: rand.New(rand.NewPCG(seed^1, seed^2)), plan: rand.New(rand.NewPCG(seed^3, seed^4)), load: load, posters: map[*serveProc]*poster{}}

	for i := range clusterNodes {
		c.up(i)
	}
	var bg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	bg.Go(func() { c.watchLeases(watchCtx) })
	var loaders sync.WaitGroup
	interval := load * clusterWorkers / time.Duration(n) // paced to spread the events over the load
	for range clusterWorkers {
		loaders.Go(func() { c.post(interval, start.Add(load+60*time.Second)) })
	}
	loaders.Go(func() { c.placeOrders(start.Add(load)) })
	c.killLoop(start.Add(load))
	loaders.Wait()
	if t.Failed() {
		stopWatch()
		bg.Wait()
		return
	}
	// One more failover bound with every node up, so that the runs due
	// since the last kill are caught up, then a clean stop of every node.
	lastKill := c.lastKill()
	c.waitRun(lastKill.Add(2 * 2 * clusterTTL))
	c.waitOrders()
	stopWatch()
	bg.Wait()
	for i := range clusterNodes {
		c.down(i, syscall.SIGTERM)
	}
	d.finalDispatch()
	if t.Failed() {
		return
	}
	st, err := postgres.Open(ctx, db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs, missed, others := c.verifyRuns(st, server)
	c.verifyOrders(st, server, others)
	d.verifyStore(st, server, time.Since(start), others)
	c.verifyFailovers(runs, missed)
}

// up starts node i and its poster.
func (c *cluster) up(i int) {
	p := c.d.start("")
	ps := &poster{d: c.d, p: p, down: make(chan struct{}),
		client: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clusterWorkers}}}
	c.mu.Lock()
	c.nodes[i], c.posters[p] = p, ps
	c.mu.Unlock()
}

// down stops node i with sig and waits for it to exit.
func (c *cluster) down(i int, sig syscall.Signal) {
	c.mu.Lock()
	p := c.nodes[i]
	c.nodes[i] = nil
	ps := c.posters[p]
	delete(c.posters, p)
	c.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	<-p.exited
	ps.client.CloseIdleConnections()
	if sig == syscall.SIGKILL && !p.killedBySIGKILL() {
		c.d.t.Errorf("node %d was not killed by SIGKILL: %v\n%s", i, p.err, p.stderr.String())
	}
	if sig == syscall.SIGTERM && p.err != nil {
		c.d.t.Errorf("node %d after SIGTERM: %v\n%s", i, p.err, p.stderr.String())
	}
}

// next hands out an event to post: one waiting for a repost first, then a
// fresh one; nil and false when every event is acknowledged, nil and true
// when the rest are with other workers.
func (c *cluster) next() (*drillEvent, bool) {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	var e *drillEvent
	switch {
	case len(d.todo) > 0:
		e, d.todo = d.todo[0], d.todo[1:]
	case d.fresh < len(d.events):
		e = d.events[d.fresh]
		d.fresh++
	default:
		c.mu.Lock()
		busy := c.busy
		c.mu.Unlock()
		return nil, busy > 0
	}
	c.mu.Lock()
	c.busy++
	c.mu.Unlock()
	return e, true
}

// pick is a random live node's poster.
func (c *cluster) pick() *poster {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*poster
	for _, p := range c.nodes {
		if p != nil && !p.dead() {
			live = append(live, c.posters[p])
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[c.rng.IntN(len(live))]
}

// post is one of the driver's workers: it posts events to random live
// nodes, one every interval, until every event is acknowledged.
func (c *cluster) post(interval time.Duration, deadline time.Time) {
	d := c.d
	for time.Now().Before(deadline) && !d.t.Failed() {
		e, more := c.next()
		if e == nil {
			if !more {
				return
			}
			time.Sleep(10 * time.Millisecond) // pacing: the others' answers
			continue
		}
		ps := c.pick()
		ok := ps != nil && ps.post(e)
		c.mu.Lock()
		c.busy--
		c.mu.Unlock()
		if !ok {
			d.mu.Lock()
			d.todo = append(d.todo, e)
			d.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // the node is dying: give the others a turn
			continue
		}
		time.Sleep(interval) // pacing: the load spreads over the kills
	}
	d.mu.Lock()
	left := len(d.todo) + len(d.events) - d.fresh
	d.mu.Unlock()
	if left > 0 && !d.t.Failed() {
		d.t.Errorf("%d events not acknowledged by a live node before the deadline", left)
	}
}

// placeOrders commits an order with its outbox row every 50 ms until end.
func (c *cluster) placeOrders(end time.Time) {
	for time.Now().Before(end) && !c.d.t.Failed() {
		if _, err := placeOrder(c.app, c.orders+1); err != nil {
			c.d.t.Errorf("place order: %v", err)
			return
		}
		c.orders++
		time.Sleep(50 * time.Millisecond) // pacing: the application's own rate
	}
}

// ordersIn counts the orders' events the nodes accepted from the outbox.
func (c *cluster) ordersIn() int {
	var n int
	if err := c.pg.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE event_id LIKE 'ord\_%'`).Scan(&n); err != nil {
		c.d.t.Fatal(err)
	}
	return n
}

// waitOrders waits until every order's event is in.
func (c *cluster) waitOrders() {
	deadline := time.Now().Add(30 * time.Second)
	for c.ordersIn() < c.orders {
		if time.Now().After(deadline) {
			c.d.t.Fatalf("%d of %d orders relayed from the outbox within 30s", c.ordersIn(), c.orders)
		}
		time.Sleep(50 * time.Millisecond) // polling the table
	}
}

// verifyOrders checks that every order's event was accepted once, from the
// outbox, and its notification delivered (exactly once with keys); it adds
// their keys to keys.
func (c *cluster) verifyOrders(st store.Store, server *sim.Server, keys map[string]bool) {
	t := c.d.t
	ctx := context.Background()
	perKey := map[string]int{}
	for _, dl := range server.Deliveries() {
		perKey[dl.Key]++
	}
	if in := c.ordersIn(); in != c.orders {
		t.Errorf("%d order events, want the %d orders placed, once each", in, c.orders)
	}
	for i := 1; i <= c.orders; i++ {
		refs, err := st.EventRows(ctx, "default", fmt.Sprintf("ord_%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 1 {
			t.Errorf("order %d: %d events, want 1", i, len(refs))
			continue
		}
		notes, err := st.EventNotifications(ctx, refs[0].Row, -1, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range notes {
			keys[n.Key] = true
			switch got := perKey[n.Key]; {
			case got == 0:
				t.Errorf("order %d: notification %s never delivered", i, n.Key)
			case got > 1 && c.d.honour:
				t.Errorf("order %d: notification %s delivered %d times with keys honoured", i, n.Key, got)
			}
		}
	}
}

// leases reads who holds which lease now.
func (c *cluster) leases(ctx context.Context) (map[string]string, error) {
	rows, err := c.pg.Query(ctx, `SELECT name, holder FROM leases WHERE until > $1`, time.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var name, holder string
		if err := rows.Scan(&name, &holder); err != nil {
			return nil, err
		}
		out[name] = holder
	}
	return out, rows.Err()
}

// holderPID is the process id in a lease holder's name (host/pid/random).
func holderPID(holder string) int {
	parts := strings.Split(holder, "/")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

// killLoop kills a node every second or two until end, half the time the
// one holding the schedules, and restarts it after a moment.
func (c *cluster) killLoop(end time.Time) {
	d := c.d
	for !d.t.Failed() {
		time.Sleep(time.Duration(300+c.plan.IntN(1200)) * time.Millisecond) // the kill plan's spacing
		if time.Now().After(end) {
			return
		}
		ctx := context.Background()
		held, err := c.leases(ctx)
		if err != nil {
			d.t.Fatalf("read leases: %v", err)
		}
		victim := c.plan.IntN(clusterNodes)
		if c.plan.IntN(2) == 0 {
			if pid := holderPID(held["schedules"]); pid != 0 {
				c.mu.Lock()
				for i, p := range c.nodes {
					if p != nil && p.cmd.Process.Pid == pid {
						victim = i
					}
				}
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		p := c.nodes[victim]
		c.mu.Unlock()
		k := kill{node: victim}
		for name, h := range held {
			if holderPID(h) == p.cmd.Process.Pid {
				k.holder = h
				k.leases = append(k.leases, name)
			}
		}
		sort.Strings(k.leases)
		k.at = time.Now()
		c.down(victim, syscall.SIGKILL)
		c.mu.Lock()
		c.kills = append(c.kills, k)
		c.mu.Unlock()
		d.mu.Lock()
		d.kills["driver"]++
		d.mu.Unlock()
		d.t.Logf("kill %d: node %d (pid %d) at +%s, holding %v", len(c.kills), victim, p.cmd.Process.Pid,
			time.Since(end.Add(-c.load)).Round(time.Millisecond), k.leases)
		time.Sleep(time.Duration(200+c.plan.IntN(800)) * time.Millisecond) // down a moment before the restart
		c.up(victim)
	}
}

func (c *cluster) lastKill() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.kills) == 0 {
		return time.Now()
	}
	return c.kills[len(c.kills)-1].at
}

// watchLeases polls the leases table every 25 ms and notes each change of
// holder.
func (c *cluster) watchLeases(ctx context.Context) {
	seen := map[string]string{}
	for ctx.Err() == nil {
		held, err := c.leases(ctx)
		if err == nil {
			now := time.Now()
			c.mu.Lock()
			for name, h := range held {
				if seen[name] != h {
					c.changes = append(c.changes, leaseChange{at: now, name: name, from: seen[name], holder: h})
					seen[name] = h
				}
			}
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond): // the watcher's resolution
		}
	}
}

// waitRun waits until the tick job has run for a time after at.
func (c *cluster) waitRun(at time.Time) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last int64
		if err := c.pg.QueryRow(context.Background(), `SELECT coalesce(max(scheduled_at), 0) FROM job_runs WHERE job = 'tick' AND status = 'done'`).Scan(&last); err != nil {
			c.d.t.Fatal(err)
		}
		if last > at.UnixMilli() {
			return
		}
		if time.Now().After(deadline) {
			c.d.t.Fatalf("no tick run after %s within 30s", at.Format(time.TimeOnly))
		}
		time.Sleep(50 * time.Millisecond) // polling the table
	}
}

// verifyRuns checks that the tick job ran at every second from its first
// run to its last, each run once in effect: its one event exists once and
// its notification was delivered as at-least-once says (exactly once with
// keys). It returns how many runs there were and the runs' notification
// keys.
func (c *cluster) verifyRuns(st store.Store, server *sim.Server) (runs, missed int, keys map[string]bool) {
	t := c.d.t
	ctx := context.Background()
	rows, err := c.pg.Query(ctx, `SELECT scheduled_at, status FROM job_runs WHERE job = 'tick' ORDER BY scheduled_at`)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		at     time.Time
		status string
	}
	var all []run
	for rows.Next() {
		var at int64
		var status string
		if err := rows.Scan(&at, &status); err != nil {
			t.Fatal(err)
		}
		all = append(all, run{time.UnixMilli(at).UTC(), status})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(all) < 5 {
		t.Fatalf("%d runs of the tick job, want one a second", len(all))
	}
	perKey := map[string]int{}
	for _, dl := range server.Deliveries() {
		perKey[dl.Key]++
	}
	keys = map[string]bool{}
	var gaps []string
	for i, r := range all {
		if i > 0 {
			for gap := all[i-1].at.Add(time.Second); gap.Before(r.at); gap = gap.Add(time.Second) {
				gaps = append(gaps, gap.Format(time.TimeOnly))
			}
		}
		// The last run may have been cut by the final SIGTERM: the next
		// start would finish it.
		if r.status != "done" && i < len(all)-1 {
			t.Errorf("run of %s: %s, want done", r.at.Format(time.TimeOnly), r.status)
		}
		refs, err := st.EventRows(ctx, "default", "tick@"+r.at.Format(time.RFC3339)+"/t")
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 1 {
			if r.status == "done" {
				t.Errorf("run of %s: %d events, want 1", r.at.Format(time.TimeOnly), len(refs))
			}
			continue
		}
		notes, err := st.EventNotifications(ctx, refs[0].Row, -1, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range notes {
			keys[n.Key] = true
			got := perKey[n.Key]
			switch {
			case got == 0:
				t.Errorf("run of %s: notification %s never delivered", r.at.Format(time.TimeOnly), n.Key)
			case got > 1 && c.d.honour:
				t.Errorf("run of %s: notification %s delivered %d times with keys honoured", r.at.Format(time.TimeOnly), n.Key, got)
			}
		}
	}
	if len(gaps) > 0 {
		t.Errorf("scheduled runs that never ran: %v", gaps)
	}
	return len(all), len(gaps), keys
}

// verifyFailovers checks that every lease a killed node held passed to
// another holder within the bound, and logs the cluster's ledger.
func (c *cluster) verifyFailovers(runs, missed int) {
	t := c.d.t
	bound := clusterTTL + clusterTTL/3
	c.mu.Lock()
	defer c.mu.Unlock()
	var failovers int
	var worst time.Duration
	for _, k := range c.kills {
		for _, name := range k.leases {
			var took time.Duration = -1
			for _, ch := range c.changes {
				if ch.name == name && ch.from == k.holder && ch.holder != k.holder && !ch.at.Before(k.at.Add(-25*time.Millisecond)) {
					took = max(ch.at.Sub(k.at), 0)
					break
				}
			}
			switch {
			case took < 0:
				t.Errorf("lease %s of node %d (killed at %s) never passed to another holder", name, k.node, k.at.Format(time.TimeOnly))
			case took > bound+clusterSlack:
				t.Errorf("lease %s of node %d passed to another holder %s after the kill, beyond the bound %s (+%s slack)", name, k.node, took, bound, clusterSlack)
			}
			failovers++
			worst = max(worst, took)
		}
	}
	leaderKills := 0
	for _, k := range c.kills {
		for _, name := range k.leases {
			if name == "schedules" {
				leaderKills++
			}
		}
	}
	if leaderKills == 0 {
		t.Errorf("no kill hit the schedules' holder: the drill proves no failover")
	}
	t.Logf("cluster ledger: %d nodes, %d kills (%d of the schedules' holder); %d lease failovers, slowest %s (bound %s: --leader-ttl %s × 4/3); "+
		"tick runs %d (one a second from the first to the last, each its one event), missed %d; orders tailed from the outbox %d, each one event",
		clusterNodes, len(c.kills), leaderKills, failovers, worst.Round(time.Millisecond), bound, clusterTTL, runs, missed, c.orders)
}

// A leader TTL too short to renew (every third of it) is a usage error,
// said before anything opens.
func TestServeLeaderTTLBelowASecondIsRefused(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	r := runCLI(t, "", "serve", "--db", db, "--listen", "127.0.0.1:0", "--leader-ttl", "300ms")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--leader-ttl 300ms: want at least 1s") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming --leader-ttl", r.code, r.stderr)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("the database was opened (%v) before the flag was refused", err)
	}
}

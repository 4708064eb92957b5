package main

// The crash drill: a real `edgerelay serve` process accepts events over HTTP
// and dispatches them to the simulated email provider (in this process, on
// loopback) while the driver kills it with SIGKILL, again and again, and
// restarts it on a fresh port. Kills land at each crash point of
// relay/crashpoint.go (EDGERELAY_CRASH_AT=phase:n: accept, accepted,
// claimed, called, with a random n) and at random moments chosen by the
// driver. The driver behaves like a real client: an event not answered 2xx
// (the kill dropped the connection) is posted again, same event id, after
// the restart. A last clean serve posts what is left and a final
// `dispatch --until-idle` settles the attempts the kills interrupted (short
// leases, so that takes a second).
//
// Two variants, each with its own simulator and database:
//
//   - honoured-keys: the provider honours Idempotency-Key and the route says
//     idempotency=honoured. Every acknowledged event's notifications are
//     delivered exactly once (deliveries, not requests), all end sent.
//   - no-keys: the provider does not honour keys (idempotency=none), type
//     "otp" is at-most-once, type "notice" at-least-once. otp: at most one
//     delivery each, those whose outcome a kill lost end unknown (listed).
//     notice: at least one delivery each, and every extra delivery of a key
//     is matched by an attempt of that key of unknown outcome: one a kill
//     interrupted ("lease expired" in its attempt log), or one whose answer
//     was lost (a timeout on a loaded machine), as the guarantee says.
//     Kills interrupt at least as many attempts as they hit claims or calls.
//
// Each variant logs one `ledger:` line. Defaults (300 events, 7 kills) keep
// the test well under 30 s on a 2-core machine; EDGERELAY_DRILL_LONG=1 runs
// 5,000 events and 40 kills. EDGERELAY_DRILL_SEED=N replays a kill plan
// (the seed is logged; process timing still varies). Skipped with -short.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// The crash phases of relay/crashpoint.go, and the driver's own kill.
var drillPhases = []string{"accept", "accepted", "claimed", "called", "driver"}

const (
	drillWorkers = 4 // concurrent POSTs from the driver
	drillOTP     = "otp"
	drillNotice  = "notice"
)

type drillEvent struct {
	ev    relay.Event
	body  []byte
	posts int       // POSTs sent for it
	acked bool      // answered 2xx
	notes []apiNote // from the 2xx answer
}

// apiNote is a line of an accept's answer: the API shows opaque ids.
type apiNote struct {
	ID string `json:"id"`
	model.EventNotification
}

type drill struct {
	t      *testing.T
	bin    string
	dir    string
	db     string
	config string
	rng    *rand.Rand
	honour bool
	// serveArgs are added to every serve command line (the cluster drill's
	// --leader-ttl).
	serveArgs []string

	mu       sync.Mutex
	events   []*drillEvent
	fresh    int           // events[fresh:] have never been posted
	todo     []*drillEvent // posted without a 2xx answer, or handed out but not posted
	kills    map[string]int
	reposts  int // POSTs of an event already posted once
	dupAns   int // 2xx answers marked duplicate (the event was accepted before)
	stale    int // 409 request-in-progress from a lock a killed process left
	postErrs int // POSTs that got no answer
}

func TestCrashDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and SIGKILLs real processes")
	}
	longtest.Require(t)
	bin := binary(t)
	n, k := 300, 7
	if os.Getenv("EDGERELAY_DRILL_LONG") == "1" {
		n, k = 5000, 40
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDGERELAY_DRILL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDGERELAY_DRILL_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("drill: %d events, %d kills per variant, seed %d (EDGERELAY_DRILL_SEED)", n, k, seed)
	for i, v := range []struct {
		name   string
		honour bool
	}{{"honoured-keys", true}, {"no-keys", false}} {
		t.Run(v.name, func(t *testing.T) {
			runDrill(t, bin, v.honour, n, k, seed+uint64(i))
		})
	}
}

func runDrill(t *testing.T, bin string, honour bool, n, kills int, seed uint64) {
	start := time.Now()
	dir := t.TempDir()
	// Every call is a little slow, so kills land with calls in flight.
	server := sim.New(sim.Options{HonourKeys: honour, Script: &sim.Script{Rules: []sim.Rule{
		{To: "*", Action: sim.ActionSlow, Delay: 5 * time.Millisecond},
	}}})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	idem := "none"
	if honour {
		idem = "honoured"
	}
	// Short leases and retries, so interrupted attempts are recovered and
	// retried within the test. otp is at-most-once in both variants: with a
	// provider that honours keys it must end sent all the same.
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
  workers: 16
  lease: 1s
`, hs.URL, idem, drillOTP, drillNotice)
	d := &drill{
		t: t, bin: bin, dir: dir, db: filepath.Join(dir, "relay.db"), config: filepath.Join(dir, "edgerelay.yaml"),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), honour: honour, kills: map[string]int{},
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
			recipients = 3 // a few events fan out
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

	// The kill plan: every phase at least once, the rest at random, shuffled.
	var plan []string
	for len(plan)+len(drillPhases) <= kills {
		plan = append(plan, drillPhases...)
	}
	for len(plan) < kills {
		plan = append(plan, drillPhases[d.rng.IntN(len(drillPhases))])
	}
	d.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	for i, phase := range plan {
		runsLeft := len(plan) - i + 1 // this one, the others, and the clean run
		quota := max(1, (len(d.events)-d.fresh)/runsLeft)
		d.serveAndKill(i, phase, quota)
		if t.Failed() {
			return
		}
	}
	d.serveClean()
	if t.Failed() {
		return
	}
	d.finalDispatch()
	if t.Failed() {
		return
	}
	d.verify(server, time.Since(start))
}

// serveProc is one serve process.
type serveProc struct {
	cmd    *exec.Cmd
	base   string
	stderr *bytes.Buffer // read only after exited is closed
	exited chan struct{}
	err    error // from Wait
}

// start runs serve on a fresh loopback port, with EDGERELAY_CRASH_AT=crashAt
// if not empty, and waits until /readyz answers.
func (d *drill) start(crashAt string) *serveProc {
	t := d.t
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cmd := exec.Command(d.bin, append([]string{"serve", "--db", d.db, "--config", d.config, "--listen", addr, "--log-level", "warn"}, d.serveArgs...)...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "EDGERELAY_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if crashAt != "" {
			cmd.Env = append(cmd.Env, "EDGERELAY_CRASH_AT="+crashAt)
		}
		p := &serveProc{cmd: cmd, base: "http://" + addr, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
		cmd.Stderr = p.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.err = cmd.Wait(); close(p.exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
		if p.ready() {
			return p
		}
		select {
		case <-p.exited:
			// Someone took the port between our probe and serve's listen:
			// try another, a few times.
			if strings.Contains(p.stderr.String(), "listen:") && try < 3 {
				continue
			}
			// The crash point fired during start-up (recovering the last
			// run's work before answering /readyz): a kill like any other.
			if crashAt != "" && strings.Contains(p.stderr.String(), "crash point "+crashAt+" reached") {
				return p
			}
			t.Fatalf("serve exited before it was ready: %v\n%s", p.err, p.stderr.String())
		default:
			cmd.Process.Kill()
			<-p.exited
			t.Fatalf("serve not ready after 20s\n%s", p.stderr.String())
		}
		return nil
	}
}

func (p *serveProc) ready() bool {
	c := &http.Client{Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return false
		default:
		}
		resp, err := c.Get(p.base + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func (p *serveProc) dead() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// killedBySIGKILL reports whether the process ended by SIGKILL.
func (p *serveProc) killedBySIGKILL() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// poster posts events to one process from drillWorkers goroutines.
type poster struct {
	d      *drill
	p      *serveProc
	client *http.Client
	jobs   chan *drillEvent
	wg     sync.WaitGroup
	// down is closed at the first POST without an answer: the process is
	// dying, so the rest wait for the next one instead of hitting a closed
	// port.
	down     chan struct{}
	downOnce sync.Once
}

func (d *drill) newPoster(p *serveProc) *poster {
	ps := &poster{d: d, p: p, jobs: make(chan *drillEvent), down: make(chan struct{}),
		client: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: drillWorkers}}}
	for range drillWorkers {
		ps.wg.Go(func() {
			for e := range ps.jobs {
				if ps.stopped() || !ps.post(e) {
					d.mu.Lock()
					d.todo = append(d.todo, e)
					d.mu.Unlock()
				}
			}
		})
	}
	return ps
}

// feed hands out the events waiting for a repost, then up to quota new
// ones, until the process dies. It reports whether it handed out all.
func (ps *poster) feed(quota int) bool {
	d := ps.d
	d.mu.Lock()
	items := d.todo
	d.todo = nil
	fresh := min(quota, len(d.events)-d.fresh)
	items = append(items, d.events[d.fresh:d.fresh+fresh]...)
	d.fresh += fresh
	d.mu.Unlock()
	for i, e := range items {
		if !ps.stopped() {
			select {
			case ps.jobs <- e:
				continue
			case <-ps.p.exited:
			case <-ps.down:
			}
		}
		d.mu.Lock()
		d.todo = append(d.todo, items[i:]...)
		d.mu.Unlock()
		return false
	}
	return true
}

func (ps *poster) stopped() bool {
	select {
	case <-ps.p.exited:
		return true
	case <-ps.down:
		return true
	default:
		return false
	}
}

// done stops the posters and waits for them.
func (ps *poster) done() {
	close(ps.jobs)
	ps.wg.Wait()
	ps.client.CloseIdleConnections()
}

// post posts one event as a client would (no Idempotency-Key header: the
// event's identity dedupes, and the API holds a request key derived from
// it while the request runs), and reports whether it was answered 2xx. A
// repost goes to a process started after the one that had the first POST
// was killed, so nothing can still be running it: a 409
// request-in-progress would be a key the killed process left locked, which
// the client's retry budget must not have to wait out. It fails the drill.
func (ps *poster) post(e *drillEvent) bool {
	d := ps.d
	req, err := http.NewRequest(http.MethodPost, ps.p.base+"/v1/events", bytes.NewReader(e.body))
	if err != nil {
		d.t.Error(err)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	d.mu.Lock()
	e.posts++
	if e.posts > 1 {
		d.reposts++
	}
	d.mu.Unlock()
	resp, err := ps.client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		d.mu.Lock()
		d.postErrs++
		d.mu.Unlock()
		ps.downOnce.Do(func() { close(ps.down) })
		return false // no answer: the process died with the request
	}
	switch {
	case resp.StatusCode == http.StatusAccepted:
		var acc struct {
			EventID       string    `json:"event_id"`
			Duplicate     bool      `json:"duplicate"`
			Count         int       `json:"count"`
			Notifications []apiNote `json:"notifications"`
		}
		if err := json.Unmarshal(body, &acc); err != nil || acc.EventID != e.ev.ID ||
			acc.Count != len(e.ev.Recipients) || len(acc.Notifications) != acc.Count {
			d.t.Errorf("POST %s: 202 with an unexpected body (%v): %s", e.ev.ID, err, body)
			return false
		}
		d.mu.Lock()
		if e.acked && !sameNotes(e.notes, acc.Notifications) {
			d.t.Errorf("POST %s answered twice with different notifications: %v, then %v", e.ev.ID, e.notes, acc.Notifications)
		}
		e.acked, e.notes = true, acc.Notifications
		if acc.Duplicate {
			d.dupAns++
		}
		d.mu.Unlock()
		return true
	case resp.StatusCode == http.StatusConflict && strings.Contains(string(body), "request-in-progress") && e.posts > 1:
		d.mu.Lock()
		d.stale++
		d.mu.Unlock()
		d.t.Errorf("POST %s (post %d): 409 request-in-progress from a process killed before: a key left locked: %s", e.ev.ID, e.posts, body)
		return false
	default:
		d.t.Errorf("POST %s (post %d): %d %s", e.ev.ID, e.posts, resp.StatusCode, body)
		return false
	}
}

func sameNotes(a, b []apiNote) bool {
	return slices.EqualFunc(a, b, func(x, y apiNote) bool { return x.ID == y.ID && x.Key == y.Key })
}

// serveAndKill runs one serve process until it is killed: by the crash
// point of phase, or, for "driver", by the driver at a random moment.
func (d *drill) serveAndKill(run int, phase string, quota int) {
	t := d.t
	crashAt := ""
	n := 0
	if phase != "driver" {
		n = 1 + d.rng.IntN(quota)
		crashAt = fmt.Sprintf("%s:%d", phase, n)
	}
	p := d.start(crashAt)
	ps := d.newPoster(p)
	var killer sync.WaitGroup
	if phase == "driver" {
		delay := time.Duration(10+d.rng.IntN(250)) * time.Millisecond
		killer.Go(func() {
			select {
			case <-time.After(delay):
				p.cmd.Process.Signal(syscall.SIGKILL)
			case <-p.exited:
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for !p.dead() {
		wait := 2 * time.Second // everything handed out: give the dispatcher time to reach the crash point
		if !ps.feed(quota) {
			// A POST went unanswered: the process is dying, or, if it still
			// lives after a moment, the next poster carries on.
			wait = 200 * time.Millisecond
		}
		select {
		case <-p.exited:
		case <-time.After(wait):
		}
		if !p.dead() && ps.stopped() {
			ps.done()
			ps = d.newPoster(p)
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			<-p.exited
			ps.done()
			t.Fatalf("run %d: crash point %s never reached (%d events handed out)\n%s", run, crashAt, d.fresh, p.stderr.String())
		}
	}
	ps.done()
	killer.Wait()
	stderr := p.stderr.String()
	if !p.killedBySIGKILL() {
		t.Fatalf("run %d (%s): serve was not killed by SIGKILL: %v\n%s", run, phase, p.err, stderr)
	}
	reached := strings.Contains(stderr, "crash point ")
	if phase == "driver" && reached {
		t.Fatalf("run %d: the driver's kill run hit a crash point\n%s", run, stderr)
	}
	if want := fmt.Sprintf("crash point %s reached", crashAt); phase != "driver" && !strings.Contains(stderr, want) {
		t.Fatalf("run %d: serve died without %q: the drill proves nothing\n%s", run, want, stderr)
	}
	d.mu.Lock()
	d.kills[phase]++
	d.mu.Unlock()
	t.Logf("run %d: killed at %s; %d of %d events posted, %d waiting for a repost", run,
		map[bool]string{true: crashAt, false: "a random moment (driver)"}[phase != "driver"], d.fresh, len(d.events), len(d.todo))
}

// serveClean runs serve without a crash point until every event is
// acknowledged, then stops it with SIGTERM.
func (d *drill) serveClean() {
	t := d.t
	p := d.start("")
	for try := 0; ; try++ {
		ps := d.newPoster(p)
		ps.feed(len(d.events))
		ps.done()
		if len(d.todo) == 0 || try == 3 || t.Failed() {
			break
		}
	}
	if len(d.todo) > 0 {
		t.Errorf("%d events never acknowledged by a live process", len(d.todo))
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	if p.err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", p.err, p.stderr.String())
	}
}

// finalDispatch settles what is left: attempts the kills interrupted (their
// leases expire after 1s) and retries.
func (d *drill) finalDispatch() {
	cmd := exec.Command(d.bin, "dispatch", "--db", d.db, "--config", d.config, "--until-idle", "--max-wait", "10s",
		"--lease", "1s", "--log-level", "warn")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDGERELAY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case !d.honour && errors.As(err, &ee) && ee.ExitCode() == exitFailed:
		// Without keys, an at-most-once attempt recovered here ends unknown.
	default:
		d.t.Fatalf("final dispatch: %v\n%s", err, out)
	}
	d.t.Logf("final dispatch: %s", strings.TrimSpace(lastLine(string(out))))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// verify checks the final state against what the simulator delivered and
// logs the ledger.
func (d *drill) verify(server *sim.Server, took time.Duration) {
	st, err := sqlite.Open(context.Background(), d.db, sqlite.Options{})
	if err != nil {
		d.t.Fatal(err)
	}
	defer st.Close()
	d.verifyStore(st, server, took, nil)
}

// verifyStore checks the events' notifications in st; others are the keys
// of the notifications st holds beside them (the cluster drill's scheduled
// runs), whose deliveries the caller checks.
func (d *drill) verifyStore(st store.Store, server *sim.Server, took time.Duration, others map[string]bool) {
	t := d.t
	ctx := context.Background()
	key, err := st.Secret(ctx, relay.IDKeyName, nil) // made by the first serve
	if err != nil {
		t.Fatal(err)
	}
	ids, err := relay.NewIDs(key)
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	deliveries := server.Deliveries()
	for _, dl := range deliveries {
		perKey[dl.Key]++
	}
	known := map[string]bool{}
	var acked, notes, delivered, duplicates, unknown, lost, interrupted int
	var unknownList []string
	for _, e := range d.events {
		if !e.acked {
			continue
		}
		acked++
		for _, an := range e.notes {
			notes++
			known[an.Key] = true
			row, ok := ids.NotificationRow(an.ID)
			if !ok {
				t.Errorf("event %s: the answer's id %q is not an id", e.ev.ID, an.ID)
			}
			n, err := st.Notification(ctx, "", row, "")
			if err != nil || n.Key != an.Key {
				t.Errorf("event %s: notification %s (%s) acknowledged but not found: %v", e.ev.ID, an.ID, an.Key, err)
				lost++
				continue
			}
			// recovered counts the attempts a kill interrupted; maybe, those
			// whose outcome is unknown (those, and calls whose answer was
			// lost: a timeout on a loaded machine): by the guarantee, each
			// may have delivered, and only they explain an extra copy.
			recovered, maybe := 0, 0
			for _, a := range n.AttemptLog {
				if strings.Contains(a.Detail, "lease expired") {
					recovered++
				}
				if a.Outcome == "unknown" {
					maybe++
				}
			}
			interrupted += recovered
			c := perKey[an.Key]
			if c > 0 {
				delivered++
			}
			if c > 1 {
				duplicates += c - 1
			}
			if n.Status == model.StatusUnknown {
				unknown++
				unknownList = append(unknownList, fmt.Sprintf("%d %s (%s, delivered %d)", n.ID, n.Key, e.ev.ID, c))
			}
			what := fmt.Sprintf("notification %d key %s (event %s, type %s): status %s, %d deliveries, %d attempts (%d interrupted, %d unknown)",
				n.ID, n.Key, e.ev.ID, n.Type, n.Status, c, len(n.AttemptLog), recovered, maybe)
			switch {
			case d.honour:
				// Exactly once in effect, whatever the type.
				if c == 0 {
					lost++
				}
				if c != 1 || n.Status != model.StatusSent {
					t.Errorf("honoured keys: %s; want sent, delivered exactly once", what)
				}
			case n.Type == drillOTP:
				// At most once: never a second copy; unknown only after an
				// attempt of unknown outcome.
				if n.Status == model.StatusSent && c == 0 {
					lost++
				}
				switch {
				case c > 1:
					t.Errorf("at-most-once delivered more than once: %s", what)
				case n.Status == model.StatusSent && c != 1:
					t.Errorf("at-most-once sent but not delivered: %s", what)
				case n.Status == model.StatusUnknown && maybe == 0:
					t.Errorf("at-most-once unknown without an attempt of unknown outcome: %s", what)
				case n.Status != model.StatusSent && n.Status != model.StatusUnknown:
					t.Errorf("at-most-once: %s; want sent or unknown", what)
				}
			default:
				// At least once; every extra copy is explained by an attempt
				// of unknown outcome.
				if c == 0 {
					lost++
				}
				switch {
				case c == 0 || n.Status != model.StatusSent:
					t.Errorf("at-least-once: %s; want sent, delivered at least once", what)
				case c-1 > maybe:
					t.Errorf("at-least-once duplicate not explained by an attempt of unknown outcome: %s", what)
				}
			}
		}
	}
	if acked != len(d.events) {
		t.Errorf("%d of %d events acknowledged", acked, len(d.events))
	}
	for k, c := range perKey {
		if !known[k] && !others[k] {
			t.Errorf("%d deliveries with key %q, which no acknowledged notification has", c, k)
		}
	}
	status, err := st.Status(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range status.Counts {
		total += c
	}
	if total != int64(notes+len(others)) || status.Counts[model.StatusSent]+status.Counts[model.StatusUnknown] != total {
		t.Errorf("statuses %v: want %d notifications, all sent or unknown", status.Counts, notes+len(others))
	}
	// Each claimed or called kill left at least one attempt in flight.
	if floor := d.kills["claimed"] + d.kills["called"]; interrupted < floor {
		t.Errorf("%d interrupted attempts recovered, fewer than the %d claimed/called kills", interrupted, floor)
	}
	for _, u := range unknownList {
		t.Logf("unknown (at-most-once, outcome lost to a kill or a timeout): %s", u)
	}
	var kills []string
	nk := 0
	for _, ph := range drillPhases {
		kills = append(kills, fmt.Sprintf("%s %d", ph, d.kills[ph]))
		nk += d.kills[ph]
	}
	t.Logf("ledger: accepted %d events, %d notifications; delivered %d (%d deliveries); duplicates %d; unknown %d; lost %d; "+
		"kills %d (%s); interrupted attempts recovered %d; HTTP requests to the sim %d; "+
		"event POSTs unanswered %d, reposts %d (%d answered duplicate, %d stale request locks); %s",
		acked, notes, delivered, len(deliveries), duplicates, unknown, lost,
		nk, strings.Join(kills, ", "), interrupted, server.Requests(),
		d.postErrs, d.reposts, d.dupAns, d.stale, took.Round(100*time.Millisecond))
}

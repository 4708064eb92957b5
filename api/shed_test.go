package api_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// Above the backlog limit, new events are refused with 503 overloaded and
// Retry-After, and nothing is stored; reads still answer; once the backlog
// is delivered, accepts work again.
func TestShedAboveBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, options{API: api.Options{ShedAbove: 5}, Metrics: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.api.ShedLoop(ctx, 10*time.Millisecond)
	var first string
	for i := range 6 {
		res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt(fmtID(i), 1))))
		if i == 0 {
			first = res.Notifications[0].ID
		}
	}
	// The loop reads a backlog of 6 > 5 within a few of its periods.
	deadline := time.Now().Add(bound)
	var rep reply
	for {
		rep = b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_over", 1)))
		if rep.status != http.StatusAccepted || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := wantProblem(t, rep, http.StatusServiceUnavailable, "overloaded")
	if rep.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "nothing was stored") {
		t.Errorf("overloaded answer: Retry-After %q, detail %q", rep.header.Get("Retry-After"), p.Detail)
	}
	wantProblem(t, b.do(t, "POST", "/v1/events:batch", `{"events": [`+jsonOf(t, receipt("evt_b", 1))+`]}`), http.StatusServiceUnavailable, "overloaded")
	if rep := b.do(t, "GET", "/v1/notifications/"+first, ""); rep.status != http.StatusOK {
		t.Errorf("a read while shedding: %s", rep)
	}
	if st, _ := b.st.Status(context.Background(), b.r.Now()); st.Counts["pending"] > 7 {
		t.Errorf("refused events were stored: %v", st.Counts)
	}
	if m := regexp.MustCompile(`edgerelay_events_shed_total (\d+)`).FindStringSubmatch(string(b.do(t, "GET", "/metrics", "").body)); m == nil || m[1] == "0" {
		t.Errorf("/metrics does not count shed events: %v", m)
	}
	runIdle(t, b.r)
	deadline = time.Now().Add(bound)
	for {
		rep = b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_after", 1)))
		if rep.status == http.StatusAccepted || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	accepted(t, rep)
}

func fmtID(i int) string { return "evt_" + string(rune('a'+i)) }

// heldProvider holds each call until release is closed.
type heldProvider struct {
	entered chan struct{}
	release chan struct{}
}

func (p *heldProvider) Name() string      { return "held" }
func (p *heldProvider) HonoursKeys() bool { return true }
func (p *heldProvider) Send(ctx context.Context, m *providers.Message) providers.Result {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return providers.Result{Outcome: providers.Sent}
}

// While delivery through a provider is further behind than ShedBehind
// (what was claimed for it had been due for longer), new events for it are
// refused with 503 overloaded, Retry-After and the reason, and events for
// another provider are not; once it has caught up they are accepted.
// The clock jumps ten seconds so that the backlog's wait is real to the
// relay without the test waiting for it.
func TestShedBehindLag(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	p := &heldProvider{entered: make(chan struct{}, 1), release: make(chan struct{})}
	b := setup(t, options{API: api.Options{ShedBehind: time.Second}, Metrics: true,
		Relay: relay.Options{Now: now, Workers: 1, Routes: relay.Routes{"email": {p}, "sms": {providers.NewLog(io.Discard, "log://discard")}}}})
	for i := range 3 {
		accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt(fmtID(i), 1))))
	}
	offset.Store(int64(10 * time.Second)) // the three have waited ten seconds
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.r.Stop(context.Background())
	<-p.entered // claimed ten seconds late; its one worker is busy
	rep := b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_late", 1)))
	prob := wantProblem(t, rep, http.StatusServiceUnavailable, "overloaded")
	if !strings.Contains(prob.Detail, "behind") || !strings.Contains(prob.Detail, "nothing was stored") {
		t.Errorf("detail %q: want how far behind, and that nothing was stored", prob.Detail)
	}
	if ra, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || ra < 1 || ra > 30 {
		t.Errorf("Retry-After %q: want 1 to 30 s", rep.header.Get("Retry-After"))
	}
	wantProblem(t, b.do(t, "POST", "/v1/events:batch", `{"events": [`+jsonOf(t, receipt("evt_late_b", 1))+`]}`), http.StatusServiceUnavailable, "overloaded")
	// An event for another provider, which is not behind, is accepted.
	sms := relay.Event{ID: "evt_sms", Type: "login", Purpose: "otp", Channels: []string{"sms"},
		Recipients: []relay.Recipient{{ID: "u1", Phone: "+15550001111"}}, Body: "code 123456"}
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, sms)))
	m := regexp.MustCompile(`\nedgerelay_dispatch_lag_seconds (\S+)\n`).FindStringSubmatch(string(b.do(t, "GET", "/metrics", "").body))
	if len(m) != 2 {
		t.Errorf("/metrics has no edgerelay_dispatch_lag_seconds")
	} else if lag, err := strconv.ParseFloat(m[1], 64); err != nil || lag < 10 {
		t.Errorf("/metrics' lag: %q, want the 10 s the claimed notification waited", m[1])
	}
	close(p.release)
	deadline := time.Now().Add(bound)
	for {
		rep = b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_after_lag", 1)))
		if rep.status == http.StatusAccepted || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	accepted(t, rep)
}

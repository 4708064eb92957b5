package api_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"edgerelay/api"
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

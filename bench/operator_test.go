package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
)

// The load generator counts what came back: accepted, shed with and
// without Retry-After, other answers; and it sends the token and new ids.
func TestLoadCounts(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/v1/events" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch i := n.Add(1); {
		case i%10 == 0:
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
		case i%10 == 5:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	r, err := Load(context.Background(), LoadOptions{URL: srv.URL, Token: "tok", Conns: 4, Events: 100, Prefix: "t-"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 100 || r.Accepted != 80 || r.Shed != 20 || r.ShedNoRetryAfter != 10 || r.Other != 0 || r.Errors != 0 {
		t.Fatalf("load: %+v", r)
	}
	if r.End < r.Start || r.P99 < r.P50 || r.FirstShed <= 0 {
		t.Fatalf("load times: %+v", r)
	}
	// Open loop: Rate × For events.
	r, err = Load(context.Background(), LoadOptions{URL: srv.URL, Token: "wrong", Conns: 2, Rate: 200, For: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Every one of the 20 is sent or counted unsent (on a loaded box the
	// senders can fall behind the schedule); none is lost from the count.
	if r.Sent+r.Unsent != 20 || r.Sent == 0 || r.Other != r.Sent || !strings.Contains(r.FirstError, "401") {
		t.Fatalf("open-loop load: %+v", r)
	}
}

func TestBoxCPU(t *testing.T) {
	t.Parallel()
	c, err := ReadBoxCPU()
	if err != nil {
		t.Skip(err) // not Linux
	}
	if c.Total == 0 || c.Idle > c.Total {
		t.Fatalf("box CPU: %+v", c)
	}
}

// The "as run" rows, small: every process they start (batch send,
// dispatch, serve, the load, simulators with latency) runs, and each row
// has its figure.
func TestAsRunRowsRun(t *testing.T) {
	longtest.Require(t)
	ctx := context.Background()
	dir := t.TempDir()
	ceiling, err := Ceiling(ctx, dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := AsRunRows(ctx, Config{Exe: edgerelay(t), Dir: dir, Events: 300, LatencyEvents: 100, FairFor: time.Second}, ceiling)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8: %+v", len(rows), rows)
	}
	for _, r := range rows {
		t.Logf("%s | %s | %s", r.Measure, r.Figure, r.Against)
		if r.Figure == "" || strings.Contains(r.Figure, "NaN") || strings.Contains(r.Figure, "Inf") {
			t.Errorf("row %q: figure %q", r.Measure, r.Figure)
		}
	}
}

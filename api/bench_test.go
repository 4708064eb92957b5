package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgerelay/api"
	"edgerelay/relay"
)

// BenchmarkFanOut10k times accepting one event with 10,000 recipients on a
// fresh database: until the event and all its notifications are durable.
// Opening and closing the database are outside the timer.
func BenchmarkFanOut10k(b *testing.B) {
	ev := receipt("evt_big", 10000)
	body := jsonOf(b, ev)
	fresh := func(b *testing.B) *bundle {
		return setup(b, options{Quiet: true, Relay: relay.Options{MaxRecipients: 10000}, API: api.Options{MaxBody: 4 << 20}})
	}
	b.Run("relay", func(b *testing.B) {
		var took time.Duration
		b.StopTimer()
		for range b.N {
			bu := fresh(b)
			start := time.Now()
			b.StartTimer()
			res, err := bu.r.Accept(context.Background(), ev)
			b.StopTimer()
			took += time.Since(start)
			if err != nil || res.Count != 10000 {
				b.Fatalf("accept: %v, count %d", err, res.Count)
			}
			bu.srv.Close()
			if err := bu.closeRelay(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(took)/float64(time.Millisecond)/float64(b.N), "ms/op")
	})
	b.Run("http", func(b *testing.B) {
		var took time.Duration
		b.StopTimer()
		for range b.N {
			bu := fresh(b)
			start := time.Now()
			b.StartTimer()
			rep := bu.do(b, "POST", "/v1/events", body)
			b.StopTimer()
			took += time.Since(start)
			if res := accepted(b, rep); res.Count != 10000 {
				b.Fatalf("count %d", res.Count)
			}
			bu.srv.Close()
			if err := bu.closeRelay(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(took)/float64(time.Millisecond)/float64(b.N), "ms/op")
	})
}

// BenchmarkAcceptHTTP times POST /v1/events of one-recipient events, each
// new, from 1 and from 16 concurrent callers: the writer's group commit is
// what lets the second go faster.
func BenchmarkAcceptHTTP(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			bu := setup(b, options{Quiet: true})
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = callers
			bu.client = &http.Client{Transport: tr}
			b.Cleanup(tr.CloseIdleConnections)
			bodies := make([]string, b.N)
			for i := range bodies {
				bodies[i] = jsonOf(b, receipt("evt_"+strconv.Itoa(i), 1))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var next atomic.Int64
			var failed atomic.Pointer[string]
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range callers {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= len(bodies) {
							return
						}
						rep, err := bu.send(ctx, "POST", "/v1/events", bodies[i])
						if err != nil || rep.status != http.StatusAccepted {
							msg := fmt.Sprintf("event %d: %v %s", i, err, rep)
							failed.Store(&msg)
							return
						}
					}
				})
			}
			wg.Wait()
			took := time.Since(start)
			b.StopTimer()
			if msg := failed.Load(); msg != nil {
				b.Fatal(*msg)
			}
			b.ReportMetric(float64(b.N)/took.Seconds(), "events/s")
		})
	}
}

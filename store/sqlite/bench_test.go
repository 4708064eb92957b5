package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// BenchmarkAcceptEvent measures durable accepts (one event, one
// notification, acknowledged after its commit) from 1 and from 16
// concurrent callers, with synchronous=FULL (what edgerelay runs) and
// NORMAL (what FULL costs). Group commit is what makes many callers cheap:
// they share one fsync.
//
//	go test ./store -run '^$' -bench AcceptEvent -benchtime 2000x
func BenchmarkAcceptEvent(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("sync=%s/callers=%d", sync, callers), func(b *testing.B) {
				s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), Options{synchronous: sync})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var seq atomic.Int64
				accept := func() {
					i := seq.Add(1)
					ev, ts := testEvent(fmt.Sprintf("evt_%d", i), 1)
					if _, err := s.AcceptEvent(context.Background(), ev, ts, time.Now()); err != nil {
						b.Error(err)
					}
				}
				before := s.Stats()
				b.ResetTimer()
				if callers == 1 {
					for range b.N {
						accept()
					}
				} else {
					b.SetParallelism(callers / max(1, runtimeProcs()))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							accept()
						}
					})
				}
				b.StopTimer()
				st := s.Stats()
				commits := st.Commits - before.Commits
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				b.ReportMetric(float64(st.Writes-before.Writes)/float64(max(commits, 1)), "writes/commit")
			})
		}
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// benchRoutes are routes as a dispatcher passes them with each claim (a
// failover route, a "*" route, one tenant's own), so that a claim records
// each call's provider as it does in dispatch.
var benchRoutes = &model.ClaimRoutes{
	Default: map[string][]string{"email": {"p", "q"}, "*": {"log"}},
	Tenant:  map[string]map[string][]string{"acme": {"email": {"acme-p"}}},
}

// BenchmarkClaimSettle claims 32 due notifications at a time and settles
// each as sent, in one Settle per claim: the store's share of dispatch,
// with the routes the dispatcher passes (each claim records its call's
// provider) and without (what a claim cost before it did).
//
//	go test ./store/sqlite -run '^$' -bench ClaimSettle -benchtime 5000x
func BenchmarkClaimSettle(b *testing.B) {
	for _, rc := range []struct {
		name   string
		routes *model.ClaimRoutes
	}{{"routes=given", benchRoutes}, {"routes=none", nil}} {
		b.Run(rc.name, func(b *testing.B) {
			s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			now := time.Now()
			for i := 0; i < b.N; i += 500 {
				ev, ts := testEvent(fmt.Sprintf("evt_%d", i), min(500, b.N-i))
				if _, err := s.AcceptEvent(context.Background(), ev, ts, now); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for done := 0; done < b.N; {
				cs, err := s.Claim(context.Background(), model.ClaimRequest{Limit: 32, Now: now, Lease: time.Minute, Routes: rc.routes})
				if err != nil || len(cs) == 0 {
					b.Fatalf("claim: %d, %v", len(cs), err)
				}
				if rc.routes != nil && cs[0].Provider != "p" {
					b.Fatalf("claimed for provider %q, want p", cs[0].Provider)
				}
				ss := make([]model.Settlement, len(cs))
				for i, c := range cs {
					a := model.Attempt{N: c.Attempt, Provider: "p", StartedAt: now, EndedAt: now, Outcome: "sent", MessageID: fmt.Sprint("m", c.ID)}
					ss[i] = model.Settlement{ID: c.ID, Token: c.Token, At: now, Attempt: &a, Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: now}}
				}
				if _, err := s.Settle(context.Background(), ss); err != nil {
					b.Fatal(err)
				}
				done += len(cs)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkOpenNew measures opening a new database file: the first run of
// every command on a fresh box, and of every test that opens a store.
func BenchmarkOpenNew(b *testing.B) {
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		st, err := Open(context.Background(), filepath.Join(dir, fmt.Sprintf("%d.db", i)), Options{})
		if err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}

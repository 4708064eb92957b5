package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// BenchmarkAcceptEvents measures durable accepts (one event, one
// notification, answered after its commit) from 1, 16 and 256 concurrent
// callers: each accept is its own transaction here (no group commit), so
// concurrency is what PostgreSQL's own WAL group flush and the pool make
// of it. And one claim-and-settle round per notification, as a dispatcher
// makes them.
//
//	go test ./store/postgres -run '^$' -bench . -benchtime 5000x
func BenchmarkAcceptEvents(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s, err := postgres.Open(context.Background(), pgtest.Start(b), postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var seq atomic.Int64
			accept := func() {
				in := event("default", fmt.Sprintf("evt_%d", seq.Add(1)), 1)
				if _, _, err := s.AcceptEvents(context.Background(), []model.AcceptInput{in}, time.Now()); err != nil {
					b.Error(err)
				}
			}
			b.ResetTimer()
			if callers == 1 {
				for range b.N {
					accept()
				}
			} else {
				b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						accept()
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkClaimSettle claims 32 due notifications at a time and settles
// each as sent, in one Settle per claim: the store's share of dispatch,
// with the routes the dispatcher passes (each claim records its call's
// provider) and without (what a claim cost before it did).
func BenchmarkClaimSettle(b *testing.B) {
	routes := &model.ClaimRoutes{
		Default: map[string][]string{"email": {"p", "q"}, "*": {"log"}},
		Tenant:  map[string]map[string][]string{"acme": {"email": {"acme-p"}}},
	}
	for _, rc := range []struct {
		name   string
		routes *model.ClaimRoutes
	}{{"routes=given", routes}, {"routes=none", nil}} {
		b.Run(rc.name, func(b *testing.B) { benchClaimSettle(b, rc.routes) })
	}
}

func benchClaimSettle(b *testing.B, routes *model.ClaimRoutes) {
	s, err := postgres.Open(context.Background(), pgtest.Start(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i := 0; i < b.N; i += 500 {
		in := event("default", fmt.Sprintf("evt_%d", i), min(500, b.N-i))
		if _, _, err := s.AcceptEvents(context.Background(), []model.AcceptInput{in}, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		cs, err := s.Claim(context.Background(), model.ClaimRequest{Limit: 32, Now: now, Lease: time.Minute, Routes: routes})
		if err != nil || len(cs) == 0 {
			b.Fatalf("claim: %d, %v", len(cs), err)
		}
		if routes != nil && cs[0].Provider == "" {
			b.Fatalf("a claim with routes recorded no provider: %+v", cs[0])
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
}

package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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

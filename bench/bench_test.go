package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/testbin"
)

// The whole table as Go benchmarks, each sub-benchmark one row, in one run:
//
//	go test ./bench -run '^$' -bench . -benchtime 20000x
//
// -benchtime Nx sets the number of events per ingest and dispatch row (the
// fan-out row always accepts one event of 10,000 recipients).

// edgerelay is the binary built from this tree, once per run for all the
// test binaries (internal/testbin): the simulator runs as its own process.
func edgerelay(tb testing.TB) string {
	tb.Helper()
	return testbin.Edgerelay(tb)
}

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

func reportRate(b *testing.B, r Rate) {
	b.ReportMetric(r.PerSecond(), "events/s")
	if r.P50 > 0 {
		b.ReportMetric(float64(r.P50.Microseconds()), "p50-µs")
		b.ReportMetric(float64(r.P99.Microseconds()), "p99-µs")
	}
	b.ReportMetric(0, "ns/op")
}

func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	b.Run("ceiling", func(b *testing.B) {
		r, err := Ceiling(ctx, b.TempDir(), b.N)
		if err != nil {
			b.Fatal(err)
		}
		reportRate(b, r)
	})
	for _, callers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("go/callers=%d", callers), func(b *testing.B) {
			r, err := AcceptGo(ctx, b.TempDir(), callers, b.N)
			if err != nil {
				b.Fatal(err)
			}
			reportRate(b, r)
		})
	}
	for _, callers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("http/callers=%d", callers), func(b *testing.B) {
			r, err := AcceptHTTP(ctx, b.TempDir(), callers, b.N)
			if err != nil {
				b.Fatal(err)
			}
			reportRate(b, r)
		})
	}
}

func BenchmarkTail(b *testing.B) {
	r, err := Tail(context.Background(), b.TempDir(), b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PerSecond(), "rows/s")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkDispatch(b *testing.B) {
	ctx := context.Background()
	sim, err := StartSim(ctx, edgerelay(b))
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Stop()
	for _, workers := range []int{32, 128, 512} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			d, err := Dispatch(ctx, b.TempDir(), sim, b.N, 256, workers)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(d.PerSecond(), "deliveries/s")
			b.ReportMetric(d.CommitsPerSecond(), "commits/s")
			b.ReportMetric(d.MeanBatch(), "writes/commit")
			b.ReportMetric(100*d.SimShare(), "sim-cpu-%")
			b.ReportMetric(float64(d.RelayCPU.Microseconds())/float64(d.N), "relay-cpu-µs/delivery")
			b.ReportMetric(float64(d.SimCPU.Microseconds())/float64(d.N), "sim-cpu-µs/delivery")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func BenchmarkFanOut10k(b *testing.B) {
	var total time.Duration
	for range b.N {
		took, err := FanOut(context.Background(), b.TempDir(), 10000)
		if err != nil {
			b.Fatal(err)
		}
		total += took
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/event")
	b.ReportMetric(0, "ns/op")
}

// Every measurement runs, small, as a test: the benchmark code cannot rot.
func TestMeasurementsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simulator process")
	}
	ctx := context.Background()
	dir := t.TempDir()
	if r, err := Ceiling(ctx, dir, 2000); err != nil || r.N != 2000 {
		t.Fatalf("ceiling: %+v %v", r, err)
	}
	if r, err := AcceptGo(ctx, dir, 4, 200); err != nil || r.P99 < r.P50 {
		t.Fatalf("accept: %+v %v", r, err)
	}
	if _, err := AcceptHTTP(ctx, dir, 4, 200); err != nil {
		t.Fatalf("accept over HTTP: %v", err)
	}
	if r, err := Tail(ctx, dir, 300); err != nil || r.N != 300 {
		t.Fatalf("tail: %+v %v", r, err)
	}
	if took, err := FanOut(ctx, dir, 1000); err != nil || took <= 0 {
		t.Fatalf("fan-out: %v %v", took, err)
	}
	sim, err := StartSim(ctx, edgerelay(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	d, err := Dispatch(ctx, dir, sim, 300, 8, 16)
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 300 || d.Commits == 0 || d.Writes < int64(d.N) || d.SimCPU <= 0 || d.RelayCPU <= 0 { // at least one write per accept (records are batched)
		t.Fatalf("dispatch: %+v", d)
	}
}

// The floor and the relay's drain, side by side: the drain as a share of
// what the machine allows.
func BenchmarkDrain(b *testing.B) {
	ctx := context.Background()
	sim, err := StartSim(ctx, edgerelay(b))
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Stop()
	for _, workers := range []int{32, 128} {
		for _, kind := range []struct {
			name string
			fn   func(context.Context, string, *Sim, int, int) (DispatchRun, error)
		}{{"floor", Floor}, {"relay", Drain}} {
			b.Run(fmt.Sprintf("%s/workers=%d", kind.name, workers), func(b *testing.B) {
				d, err := kind.fn(ctx, b.TempDir(), sim, b.N, workers)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(d.PerSecond(), "deliveries/s")
				b.ReportMetric(float64(d.RelayCPU.Microseconds())/float64(d.N), "relay-cpu-µs/delivery")
				b.ReportMetric(float64(d.SimCPU.Microseconds())/float64(d.N), "sim-cpu-µs/delivery")
				if d.AllocBytes > 0 {
					b.ReportMetric(float64(d.AllocBytes)/float64(d.N), "alloc-B/delivery")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// Fairness under a steady load at two rates (EDGERELAY_BENCH_RATE sets the
// capacity they are fractions of; default 3000 events/s).
func BenchmarkFairness(b *testing.B) {
	ctx := context.Background()
	sim, err := StartSim(ctx, edgerelay(b))
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Stop()
	capacity := 3000.0
	if v, err := strconv.ParseFloat(os.Getenv("EDGERELAY_BENCH_RATE"), 64); err == nil && v > 0 {
		capacity = v
	}
	for _, share := range []float64{0.5, 0.9} {
		b.Run(fmt.Sprintf("load=%.0f%%", 100*share), func(b *testing.B) {
			f, err := Fairness(ctx, b.TempDir(), sim, share*capacity, 10*time.Second, 128, 100000)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(f.Accepted)/f.Elapsed.Seconds(), "accepted/s")
			b.ReportMetric(float64(f.DeliveredDuring)/f.Elapsed.Seconds(), "delivered/s")
			b.ReportMetric(float64(f.PendingMax), "pending-max")
			b.ReportMetric(float64(f.PendingEnd), "pending-end")
			b.ReportMetric(float64(f.P50.Milliseconds()), "p50-ms")
			b.ReportMetric(float64(f.P99.Milliseconds()), "p99-ms")
			b.ReportMetric(0, "ns/op")
			b.Logf("writer busy: %s; drained %s after the load; accept p50 %s p99 %s; shed %d", f.BusyShares(), f.DrainAfter, f.AcceptP50, f.AccP99, f.Shed)
		})
	}
}

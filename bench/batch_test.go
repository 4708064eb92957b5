package bench

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkBatch: go test ./bench -run '^$' -bench Batch -benchtime 20000x
func BenchmarkBatch(b *testing.B) {
	for _, group := range []int{16, 32, 64} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			r, err := Batch(context.Background(), b.TempDir(), b.N, group)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.PerSecond(), "lines/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func TestBatchMeasures(t *testing.T) {
	t.Parallel()
	if r, err := Batch(context.Background(), t.TempDir(), 300, 0); err != nil || r.N != 300 {
		t.Fatalf("batch: %+v %v", r, err)
	}
}

package sources_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"edgerelay/relay"
	"edgerelay/sources"
)

// BenchmarkTailServer relays b.N outbox rows from each database (SQLite
// too, for comparison) into a SQLite store, beside a plain read of the same rows in the same run
// (select-rows/s): what the tailer costs over reading.
//
//	go test ./sources -run '^$' -bench TailServer -benchtime 5000x
func BenchmarkTailServer(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres", "mariadb"} {
		b.Run(kind, func(b *testing.B) {
			app := setupLegacy(b, kind)
			b.StopTimer()
			const chunk = 500
			for i := 0; i < b.N; i += chunk {
				tx, err := app.db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				for j := i; j < min(i+chunk, b.N); j++ {
					ph := "?"
					if kind == "postgres" {
						ph = "$1"
					}
					if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (`+ph+`)`, string(mustJSON(orderEvent(j+1)))); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			src, err := sources.Open(app.sourceURL(""))
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			// The plain read.
			start := time.Now()
			var n int
			for after := int64(0); ; {
				rows, err := src.Read(context.Background(), after, 100)
				if err != nil {
					b.Fatal(err)
				}
				if len(rows) == 0 {
					break
				}
				n += len(rows)
				after = rows[len(rows)-1].ID
			}
			selectRate := float64(n) / time.Since(start).Seconds()

			r, err := relay.Open(context.Background(), relay.Options{Path: filepath.Join(b.TempDir(), "relay.db")})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tl := sources.NewTailer(r, src, sources.TailOptions{Poll: time.Millisecond, OnBatch: func(st sources.TailStats) {
				if st.Accepted >= int64(b.N) {
					cancel()
				}
			}})
			b.StartTimer()
			start = time.Now()
			if err := tl.Run(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if st := tl.Stats(); st.Accepted != int64(b.N) {
				b.Fatalf("stats %+v, want %d accepted", st, b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
			b.ReportMetric(selectRate, "select-rows/s")
		})
	}
}

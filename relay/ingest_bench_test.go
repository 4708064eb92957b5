package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIngest compares durable accepts through the relay (one event,
// one recipient, acknowledged after its commit) from 1, 16 and 256
// concurrent callers with the raw SQLite ceiling for the same rows: one
// goroutine inserting an event and a notification per item with ON
// CONFLICT DO NOTHING, 1,000 items per transaction, the same pragmas
// (WAL, synchronous=FULL). Run all in one invocation and compare the
// ratios:
//
//	go test ./relay -run '^$' -bench Ingest -benchtime 4000x
func BenchmarkIngest(b *testing.B) {
	b.Run("ceiling", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "ceiling.db")
		r, err := Open(context.Background(), Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		r.Close() // the schema, then raw SQL on the same file
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		b.ResetTimer()
		now := time.Now().UnixMilli()
		for i := 0; i < b.N; {
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			ev, _ := tx.Prepare(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
				VALUES ('default', ?, 'receipt', 'receipt', '{}', '{}', 'fp', 1, 1, ?) ON CONFLICT DO NOTHING RETURNING id`)
			no, _ := tx.Prepare(`INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address,
				next_attempt_at, cycle_started_at, created_at, updated_at)
				VALUES (?, ?, 0, 'default', 'receipt', 'u', 'email', 'u@example.com', ?, ?, ?, ?) ON CONFLICT DO NOTHING`)
			for j := 0; j < 1000 && i < b.N; j, i = j+1, i+1 {
				var id int64
				if err := ev.QueryRow(fmt.Sprint("e", i), now).Scan(&id); err != nil {
					b.Fatal(err)
				}
				if _, err := no.Exec(fmt.Sprint("k", i), id, now, now, now, now); err != nil {
					b.Fatal(err)
				}
			}
			ev.Close()
			no.Close()
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	for _, callers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("accept/callers=%d", callers), func(b *testing.B) {
			r, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "relay.db"), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			var next atomic.Int64
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						start := time.Now()
						_, err := r.Accept(context.Background(), Event{ID: fmt.Sprint("e", i), Type: "receipt",
							Channels: []string{"email"}, Recipients: []Recipient{{ID: "u", Email: "u@example.com"}}, Body: "thanks"})
						lat[i] = time.Since(start)
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
		})
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := append([]time.Duration(nil), d...)
	slicesSortDurations(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

func slicesSortDurations(s []time.Duration) { slices.Sort(s) }

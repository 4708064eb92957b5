package sources_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

var benchKinds = []string{"sqlite", "postgres", "mariadb"}

// BenchmarkTailServer reads one outbox table per database (SQLite too,
// for comparison) twice in the same run: select is a plain SELECT of b.N
// rows, 100 at a time, as the source's query reads them (on the app's own
// connections: the floor); tail relays the same first b.N rows into a
// fresh SQLite store with the tailer (read, accept, save the position).
// Both report rows/s; their ratio is what the tailer costs over reading.
// The rows are loaded before the timer starts, once for both.
//
//	go test ./sources -run '^$' -bench 'TailServer' -benchtime 5000x
//	go test ./sources -run '^$' -bench 'TailServer' -benchtime 200x   # a quick check that it runs
func BenchmarkTailServer(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			app := setupLegacy(b, kind)
			ph := func(i int) string { return "?" }
			if kind == "postgres" {
				ph = func(i int) string { return fmt.Sprintf("$%d", i) }
			}
			loaded := 0
			load := func(b *testing.B, n int) {
				const chunk = 500
				for loaded < n {
					tx, err := app.db.Begin()
					if err != nil {
						b.Fatal(err)
					}
					for end := min(n, loaded+chunk); loaded < end; loaded++ {
						if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (`+ph(1)+`)`, string(mustJSON(orderEvent(loaded+1)))); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			event := "event"
			if kind == "postgres" {
				event = "event::text" // as the source reads it
			}
			selectQ := `SELECT id, ` + event + ` FROM edgerelay_outbox WHERE id > ` + ph(1) + ` ORDER BY id LIMIT ` + ph(2)

			b.Run("select", func(b *testing.B) {
				load(b, b.N)
				b.ResetTimer()
				n, after := 0, int64(0)
				for n < b.N {
					rows, err := app.db.Query(selectQ, after, min(100, b.N-n))
					if err != nil {
						b.Fatal(err)
					}
					for rows.Next() {
						var ev []byte
						if err := rows.Scan(&after, &ev); err != nil {
							b.Fatal(err)
						}
						n++
					}
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					rows.Close()
				}
				b.StopTimer()
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
			})
			b.Run("tail", func(b *testing.B) {
				load(b, b.N)
				var last int64
				if err := app.db.QueryRow(`SELECT id FROM edgerelay_outbox ORDER BY id LIMIT 1 OFFSET ` + fmt.Sprint(b.N-1)).Scan(&last); err != nil {
					b.Fatal(err)
				}
				src, err := sources.Open(app.sourceURL(""))
				if err != nil {
					b.Fatal(err)
				}
				defer src.Close()
				r, err := relaytest.Open(context.Background(), filepath.Join(b.TempDir(), "relay.db"), relay.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				tl := sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: time.Millisecond, OnBatch: func(st sources.TailStats) {
					if st.Position >= last {
						cancel()
					}
				}})
				b.ResetTimer()
				if err := tl.Run(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st := tl.Stats()
				if st.Accepted < int64(b.N) || st.Rejected != 0 {
					b.Fatalf("stats %+v, want at least %d accepted", st, b.N)
				}
				b.ReportMetric(float64(st.Accepted)/b.Elapsed().Seconds(), "rows/s")
			})
		})
	}
}

// The steady load of BenchmarkTailLag.
const (
	lagRate    = 500 // rows/s, all writers together
	lagWriters = 4
	lagPoll    = 100 * time.Millisecond // the tailer's poll (tail --poll; its default is 1s)
)

// BenchmarkTailLag is the lag under a steady write rate, per database:
// the app inserts b.N outbox rows at lagRate rows/s from lagWriters
// goroutines, each row in a transaction of its own (so rows commit out of
// id order, and some are read late from gaps), while the tailer relays
// them into a SQLite store (poll lagPoll). A row's lag is from just before
// its COMMIT to the end of the tailer's batch that accepted it (its
// position saved; later than accepted by one store write, and while gaps
// are open by the store read that finds which ids they hold). It reports
// p50, p99 and the max lag in ms, and the write rate the app reached
// (below lagRate, the machine could not keep the pace and the lag means
// little). b.N rows take b.N/lagRate seconds.
//
//	go test ./sources -run '^$' -bench 'TailLag' -benchtime 5000x   # 10 s of writes per database
//	go test ./sources -run '^$' -bench 'TailLag' -benchtime 50x     # a quick check that it runs
func BenchmarkTailLag(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			app := setupLegacy(b, kind)
			insertQ := `INSERT INTO edgerelay_outbox (event) VALUES (?)`
			if kind == "postgres" {
				insertQ = `INSERT INTO edgerelay_outbox (event) VALUES ($1) RETURNING id`
			}
			src, err := sources.Open(app.sourceURL(""))
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			r, err := relaytest.Open(context.Background(), filepath.Join(b.TempDir(), "relay.db"), relay.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			// Long enough for the writes, and a bound if the tailer stalls.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*time.Second/lagRate+2*time.Minute)
			defer cancel()

			var mu sync.Mutex
			committing := map[int64]time.Time{} // row id → just before its COMMIT
			var lags []time.Duration
			onBatch := func(st sources.TailStats) {
				now := time.Now()
				var gaps []model.SourceGap
				if st.Gaps > 0 {
					saved, err := r.Store().SourceState(ctx, st.Source)
					if err != nil {
						b.Error(err)
						cancel()
						return
					}
					gaps = saved.Gaps
				}
				mu.Lock()
				defer mu.Unlock()
				for id, at := range committing {
					if id <= st.Position && !slices.ContainsFunc(gaps, func(g model.SourceGap) bool { return id >= g.First && id <= g.Last }) {
						lags = append(lags, now.Sub(at))
						delete(committing, id)
					}
				}
				if len(lags) >= b.N {
					cancel()
				}
			}
			tl := sources.NewTailer(r, r.Store(), src, sources.TailOptions{Poll: lagPoll, OnBatch: onBatch})
			done := make(chan error, 1)
			go func() { done <- tl.Run(ctx) }()

			b.ResetTimer()
			start := time.Now()
			interval := time.Second / lagRate
			var wg sync.WaitGroup
			for w := range lagWriters {
				wg.Go(func() {
					for k := w; k < b.N; k += lagWriters {
						time.Sleep(time.Until(start.Add(time.Duration(k) * interval))) // pacing, not waiting
						if err := insertTimed(app.db, kind, insertQ, k+1, &mu, committing); err != nil {
							b.Error(err)
							cancel()
							return
						}
					}
				})
			}
			wg.Wait()
			wrote := time.Since(start)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if ctx.Err() == context.DeadlineExceeded || len(lags) < b.N {
				b.Fatalf("%d of %d rows relayed (tailer at %+v)", len(lags), b.N, tl.Stats())
			}
			slices.Sort(lags)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lags[len(lags)/2]), "p50-lag-ms")
			b.ReportMetric(ms(lags[min(len(lags)-1, len(lags)*99/100)]), "p99-lag-ms")
			b.ReportMetric(ms(lags[len(lags)-1]), "max-lag-ms")
			b.ReportMetric(float64(b.N)/wrote.Seconds(), "app-rows/s")
			b.ReportMetric(0, "ns/op") // the rate is set, not measured
			st := tl.Stats()
			b.ReportMetric(float64(st.Late), "late-rows")
		})
	}
}

// insertTimed is one app transaction: an outbox row, its commit time
// noted just before the COMMIT (the row is not visible before it).
func insertTimed(db *sql.DB, kind, q string, i int, mu *sync.Mutex, committing map[int64]time.Time) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ev := string(mustJSON(orderEvent(i)))
	var id int64
	if kind == "postgres" {
		err = tx.QueryRow(q, ev).Scan(&id)
	} else {
		var res sql.Result
		if res, err = tx.Exec(q, ev); err == nil {
			id, err = res.LastInsertId()
		}
	}
	if err != nil {
		return err
	}
	mu.Lock()
	committing[id] = time.Now()
	mu.Unlock()
	return tx.Commit()
}

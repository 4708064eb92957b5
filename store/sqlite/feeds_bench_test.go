package sqlite

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkFeed measures the feed reads and read-all against one database
// of EDGERELAY_BENCH_FEEDS_ROWS feed items (default 1,000,000; 100,000
// with -short) across 1,000 tenants and 100,000 users. Each tenant has a
// "*" feed, 10 team feeds and a personal feed per user; each user reads
// "*", two teams and their own feed. The database is built once, by
// BenchmarkFeed itself, and removed when its sub-benchmarks are done.
//
//	go test ./store/sqlite -run '^$' -bench Feed -benchtime 2000x
func BenchmarkFeed(b *testing.B) {
	rows := 1_000_000
	if testing.Short() {
		rows = 100_000
	}
	if v := os.Getenv("EDGERELAY_BENCH_FEEDS_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("EDGERELAY_BENCH_FEEDS_ROWS=%q: want a number of feed items, at least 1000", v)
		}
		rows = n
	}
	dir, err := os.MkdirTemp("", "edgerelay-bench-feeds-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	start := time.Now()
	fb, err := buildFeedBench(filepath.Join(dir, "feeds.db"), rows)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fb.s.Close() })
	size := int64(0)
	if fi, err := os.Stat(filepath.Join(dir, "feeds.db")); err == nil {
		size = fi.Size()
	}
	msg := fmt.Sprintf("built %d feed items (%d tenants, %d users, %d memberships) in %s; database %d MiB",
		rows, benchTenants, benchTenants*benchUsersPerTenant, fb.members, time.Since(start).Round(time.Millisecond), size>>20)
	if testing.Verbose() {
		b.Log(msg)
	} else {
		fmt.Fprintln(os.Stderr, "BenchmarkFeed: "+msg) // a parent benchmark's log shows only with -v
	}
	ctx := context.Background()

	b.Run("FirstPage", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 1))
		var items int
		latencies(b, func() {
			t, u := fb.randomUser(rng)
			page, _, err := fb.s.FeedPage(ctx, t, u, 0, 50)
			if err != nil {
				b.Fatal(err)
			}
			items += len(page)
		})
		b.ReportMetric(float64(items)/float64(b.N), "items/op")
	})
	b.Run("UnreadCount", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(2, 2))
		var unread int64
		latencies(b, func() {
			t, u := fb.randomUser(rng)
			n, err := fb.s.UnreadCount(ctx, t, u)
			if err != nil {
				b.Fatal(err)
			}
			unread += n
		})
		b.ReportMetric(float64(unread)/float64(b.N), "unread/op")
	})
	b.Run("MarkAll", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(3, 3))
		latencies(b, func() {
			t, u := fb.randomUser(rng)
			newest := fb.maxSeq[t]
			upTo := newest/2 + rng.Int64N(newest/2+1)
			if _, err := fb.s.MarkAll(ctx, t, u, model.MarkRead, upTo); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// latencies runs op b.N times and reports the median and 99th percentile
// beside the mean (ns/op).
func latencies(b *testing.B, op func()) {
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		op()
		ds = append(ds, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-ns")
}

const (
	benchTenants        = 1000
	benchUsersPerTenant = 100 // 100,000 users in all
	benchTeams          = 10
)

type feedBench struct {
	s       *Store
	maxSeq  map[string]int64 // each tenant's newest seq
	members int
}

func (fb *feedBench) randomUser(rng *rand.Rand) (tenant, user string) {
	return benchTenant(rng.IntN(benchTenants)), benchUser(rng.IntN(benchUsersPerTenant))
}

func benchTenant(i int) string { return "t" + strconv.Itoa(i) }
func benchUser(i int) string   { return "u" + strconv.Itoa(i) }
func benchTeam(i int) string   { return "team:" + strconv.Itoa(i) }

// buildFeedBench writes the benchmark database with multi-row INSERTs
// through the store's writer, many rows a transaction: items interleave
// across tenants as they would in production, one event per item, each
// item with its tenant's next seq and its feed's next position.
func buildFeedBench(path string, rows int) (*feedBench, error) {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		return nil, err
	}
	fb := &feedBench{s: s, maxSeq: map[string]int64{}}
	rng := rand.New(rand.NewPCG(42, 42))
	created := ms(t0)

	// Items: a fifth to "*", two fifths to a team, two fifths to a user.
	type item struct {
		tenant, feed string
		seq          int64
		pos          int
	}
	pos := map[string]int{}
	tenantItems := make([][]int64, benchTenants) // "*" items, for item marks
	next := func() item {
		t := rng.IntN(benchTenants)
		fb.maxSeq[benchTenant(t)]++
		seq := fb.maxSeq[benchTenant(t)]
		var f string
		switch r := rng.IntN(5); {
		case r == 0:
			f = model.TenantFeed
			tenantItems[t] = append(tenantItems[t], seq)
		case r <= 2:
			f = benchTeam(rng.IntN(benchTeams))
		default:
			f = model.PersonalFeed(benchUser(rng.IntN(benchUsersPerTenant)))
		}
		k := benchTenant(t) + "\x00" + f
		pos[k]++
		return item{tenant: benchTenant(t), feed: f, seq: seq, pos: pos[k]}
	}
	const perStmt, perTx = 500, 25_000
	for lo := int64(1); lo <= int64(rows); lo += perTx {
		hi := min(lo+perTx-1, int64(rows))
		items := make([]item, 0, hi-lo+1)
		for range hi - lo + 1 {
			items = append(items, next())
		}
		err := s.w.do(ctx, func(tx *Tx) error {
			for i := 0; i < len(items); i += perStmt {
				chunk := items[i:min(i+perStmt, len(items))]
				first := lo + int64(i)
				evArgs := make([]any, 0, len(chunk)*7)
				itArgs := make([]any, 0, len(chunk)*6)
				for j, it := range chunk {
					row := first + int64(j)
					evArgs = append(evArgs, row, it.tenant, "b"+strconv.FormatInt(row, 10), `{"subject":"item `+strconv.FormatInt(it.seq, 10)+`"}`, created)
					itArgs = append(itArgs, it.seq, it.tenant, it.feed, it.pos, row, created)
				}
				if _, err := tx.exec(`INSERT INTO events (id, tenant, event_id, purpose, type, payload, message, fingerprint, targets, created_at) VALUES `+
					rowsOf(len(chunk), `(?, ?, ?, 'feed', 'note', '{}', ?, 'fp', 0, ?)`), evArgs...); err != nil {
					return fmt.Errorf("insert events: %w", err)
				}
				if _, err := tx.exec(`INSERT INTO feed_items (seq, tenant, feed, pos, event, created_at) VALUES `+
					rowsOf(len(chunk), `(?, ?, ?, ?, ?, ?)`), itArgs...); err != nil {
					return fmt.Errorf("insert feed items: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			s.Close()
			return nil, err
		}
	}

	// Memberships: two teams a user, from the start. Marks: half the users
	// have read up to somewhere, one in ten has read a few items one by one.
	type member struct{ tenant, feed, user string }
	var members []member
	type mark struct {
		tenant, user string
		mark         int64
	}
	var marks []mark
	type itemMark struct {
		tenant, user string
		seq          int64
	}
	var itemMarks []itemMark
	for t := range benchTenants {
		for u := range benchUsersPerTenant {
			a := rng.IntN(benchTeams)
			b := (a + 1 + rng.IntN(benchTeams-1)) % benchTeams
			members = append(members, member{benchTenant(t), benchTeam(a), benchUser(u)}, member{benchTenant(t), benchTeam(b), benchUser(u)})
			var m int64
			if rng.IntN(2) == 0 {
				m = rng.Int64N(fb.maxSeq[benchTenant(t)] + 1)
				marks = append(marks, mark{benchTenant(t), benchUser(u), m})
			}
			if rng.IntN(10) == 0 {
				seen := map[int64]bool{}
				for range 5 {
					if all := tenantItems[t]; len(all) > 0 {
						if seq := all[rng.IntN(len(all))]; seq > m && !seen[seq] {
							seen[seq] = true
							itemMarks = append(itemMarks, itemMark{benchTenant(t), benchUser(u), seq})
						}
					}
				}
			}
		}
	}
	fb.members = len(members)
	err = s.w.do(ctx, func(tx *Tx) error {
		var counters []any
		for t, seq := range fb.maxSeq {
			counters = append(counters, t, seq)
		}
		for i := 0; i < len(counters); i += 2 * perStmt {
			chunk := counters[i:min(i+2*perStmt, len(counters))]
			if _, err := tx.exec(`INSERT INTO feed_counters (tenant, seq) VALUES `+rowsOf(len(chunk)/2, `(?, ?)`), chunk...); err != nil {
				return fmt.Errorf("insert counters: %w", err)
			}
		}
		for i := 0; i < len(members); i += perStmt {
			chunk := members[i:min(i+perStmt, len(members))]
			args := make([]any, 0, len(chunk)*3)
			for _, m := range chunk {
				args = append(args, m.tenant, m.feed, m.user)
			}
			if _, err := tx.exec(`INSERT INTO feed_members (tenant, feed, user, joined_seq) VALUES `+rowsOf(len(chunk), `(?, ?, ?, 0)`), args...); err != nil {
				return fmt.Errorf("insert members: %w", err)
			}
		}
		for i := 0; i < len(marks); i += perStmt {
			chunk := marks[i:min(i+perStmt, len(marks))]
			args := make([]any, 0, len(chunk)*3)
			for _, m := range chunk {
				args = append(args, m.tenant, m.user, m.mark)
			}
			if _, err := tx.exec(`INSERT INTO feed_marks (tenant, user, kind, mark) VALUES `+rowsOf(len(chunk), `(?, ?, 'read', ?)`), args...); err != nil {
				return fmt.Errorf("insert marks: %w", err)
			}
		}
		for i := 0; i < len(itemMarks); i += perStmt {
			chunk := itemMarks[i:min(i+perStmt, len(itemMarks))]
			args := make([]any, 0, len(chunk)*3)
			for _, m := range chunk {
				args = append(args, m.tenant, m.user, m.seq)
			}
			if _, err := tx.exec(`INSERT INTO feed_item_marks (tenant, user, kind, seq, feed) VALUES `+rowsOf(len(chunk), `(?, ?, 'read', ?, '*')`), args...); err != nil {
				return fmt.Errorf("insert item marks: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return fb, nil
}

// rowsOf is n copies of a VALUES row, comma-separated.
func rowsOf(n int, row string) string {
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

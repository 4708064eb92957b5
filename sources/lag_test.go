package sources_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// kinds runs f as one parallel subtest per database: the two servers and
// SQLite.
func kinds(t *testing.T, f func(t *testing.T, app *legacyApp)) {
	for _, kind := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, setupLegacy(t, kind))
		})
	}
}

// insertAged commits ev's outbox row created an hour ago by the
// database's clock, as an application would have written it then.
func (a *legacyApp) insertAged(t *testing.T, ev relay.Event) {
	t.Helper()
	q := map[string]string{
		"postgres": `INSERT INTO edgerelay_outbox (event, created_at) VALUES ($1, now() - interval '1 hour')`,
		"mariadb":  `INSERT INTO edgerelay_outbox (event, created_at) VALUES (?, NOW(6) - INTERVAL 1 HOUR)`,
		"sqlite":   `INSERT INTO edgerelay_outbox (event, created_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour'))`,
	}[a.kind]
	if _, err := a.db.Exec(q, string(mustJSON(ev))); err != nil {
		t.Fatal(err)
	}
}

func backlog(t *testing.T, src sources.Source, after int64, gaps ...model.SourceGap) sources.Backlog {
	t.Helper()
	ls, ok := src.(sources.LagSource)
	if !ok {
		t.Fatalf("%T is no LagSource", src)
	}
	b, err := ls.Backlog(context.Background(), after, gaps)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// near reports whether d is within a minute of want (the databases' clock
// against itself: only the test's own steps lie between).
func near(d, want time.Duration) bool { return d >= want-time.Second && d < want+time.Minute }

// Each source measures its backlog: the committed rows after a position
// and in its gaps, and the oldest one's age by the database's clock from
// created_at. A transaction still open holds an id that is no row yet
// (not behind: a gap, waited on); once it commits, its row is counted in
// the gap. A table without a creation column says the age is unknown; a
// created_column that does not exist or is not a time is refused at open.
func TestSourceBacklog(t *testing.T) {
	t.Parallel()
	kinds(t, func(t *testing.T, app *legacyApp) {
		src := app.source(t, "")
		if b := backlog(t, src, 0); b.Rows != 0 || b.GapRows != 0 || b.OldestAge != 0 || !b.AgeKnown {
			t.Fatalf("empty outbox: %+v, want nothing behind, age known", b)
		}
		app.insertAged(t, orderEvent(1)) // id 1, an hour old
		var held *sql.Tx
		if app.kind != "sqlite" { // SQLite has one writer: no id is held while others commit
			held, _ = app.insert(t, orderEvent(2)) // id 2, open
		} else {
			commit(t, func() *sql.Tx { tx, _ := app.insert(t, orderEvent(2)); return tx }())
		}
		for i := 3; i <= 5; i++ {
			tx, _ := app.insert(t, orderEvent(i))
			commit(t, tx)
		}
		b := backlog(t, src, 0)
		want := int64(4)
		if held == nil {
			want = 5
		}
		if b.Rows != want || b.Estimated || !near(b.OldestAge, time.Hour) {
			t.Fatalf("after 0: %+v, want %d rows, the oldest an hour old", b, want)
		}
		if b := backlog(t, src, 1); b.Rows != want-1 || b.OldestAge > time.Minute {
			t.Fatalf("after 1: %+v, want %d rows, all new", b, want-1)
		}
		gap := model.SourceGap{First: 2, Last: 2}
		if held != nil {
			if b := backlog(t, src, 5, gap); b.Rows != 0 || b.GapRows != 0 || b.OldestAge != 0 {
				t.Fatalf("id 2 still open: %+v, want nothing behind", b)
			}
			commit(t, held)
		}
		if b := backlog(t, src, 5, gap); b.Rows != 0 || b.GapRows != 1 || b.OldestAge > time.Minute || !b.AgeKnown {
			t.Fatalf("id 2 committed: %+v, want one row in the gap, new", b)
		}

		// No creation column.
		bare := map[string]string{
			"postgres": `CREATE TABLE bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event text NOT NULL)`,
			"mariadb":  `CREATE TABLE bare (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event TEXT NOT NULL)`,
			"sqlite":   `CREATE TABLE bare (id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL)`,
		}[app.kind]
		if _, err := app.db.Exec(bare); err != nil {
			t.Fatal(err)
		}
		if _, err := app.db.Exec(`INSERT INTO bare (event) VALUES ('{}')`); err != nil {
			t.Fatal(err)
		}
		if b := backlog(t, app.source(t, "&table=bare"), 0); b.Rows != 1 || b.AgeKnown {
			t.Fatalf("table without created_at: %+v, want 1 row, age unknown", b)
		}
		bad := []struct{ param, want string }{{"created_column=nope", `no column "nope"`}}
		if app.kind != "sqlite" { // SQLite's columns have no strict type
			bad = append(bad, struct{ param, want string }{"created_column=event", `created_column "event" is`})
		}
		for _, tc := range bad {
			_, err := sources.Open(app.sourceURL("&" + tc.param))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error naming %q", tc.param, err, tc.want)
			}
		}
	})
}

// Past BacklogExact rows the count stops and the backlog is estimated from
// the highest id, so measuring costs the same however far behind.
func TestSourceBacklogEstimatedPastExact(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "sqlite")
	n := sources.BacklogExact + 50
	if _, err := app.db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO edgerelay_outbox (event) SELECT '{}' FROM n`, n); err != nil {
		t.Fatal(err)
	}
	src := app.source(t, "")
	if b := backlog(t, src, 0); b.Rows != int64(n) || !b.Estimated {
		t.Fatalf("%d rows behind: %+v, want %d estimated", n, b, n)
	}
	if b := backlog(t, src, 100); b.Rows != int64(n-100) || b.Estimated {
		t.Fatalf("%d rows behind: %+v, want %d exact", n-100, b, n-100)
	}
}

// The tailer keeps its lag in its counters: while it works through a
// backlog, the rows behind it (exact, measured after the batch) and when
// the oldest was created; caught up, none; an id held by an open
// transaction below its position, a gap waited on since it was seen, until
// its row commits.
func TestTailerReportsLag(t *testing.T) {
	t.Parallel()
	kinds(t, func(t *testing.T, app *legacyApp) {
		r := setupRelay(t, relay.Options{})
		for i := 1; i <= 5; i++ {
			tx, _ := app.insert(t, orderEvent(i))
			commit(t, tx)
		}
		for i := 6; i <= 30; i++ {
			app.insertAged(t, orderEvent(i))
		}
		first := make(chan sources.TailStats, 1)
		start := time.Now()
		rn := startTailer(t, r, app.source(t, ""), sources.TailOptions{Poll: 10 * time.Millisecond, Batch: 5, LagEvery: time.Nanosecond,
			OnBatch: func(st sources.TailStats) {
				select {
				case first <- st:
				default:
				}
			}})
		st := <-first
		if st.Position != 5 || st.RowsBehind != 25 || st.RowsBehindEstimated || st.AgeUnknown ||
			!near(start.Sub(st.OldestUnrelayed), time.Hour) || st.LagMeasured.Before(start) {
			t.Fatalf("after the first batch: %+v; want at 5, 25 rows behind, the oldest created an hour ago", st)
		}
		st = rn.waitStats(t, "caught up", func(s sources.TailStats) bool { return s.Position == 30 && !s.CaughtUp.IsZero() })
		if st.RowsBehind != 0 || !st.OldestUnrelayed.IsZero() || st.LagMeasured.Before(st.CaughtUp.Add(-time.Second)) {
			t.Fatalf("caught up: %+v, want nothing behind", st)
		}
		if app.kind == "sqlite" {
			return
		}
		held, id := app.insert(t, orderEvent(31))
		seen := time.Now()
		tx, _ := app.insert(t, orderEvent(32))
		commit(t, tx)
		st = rn.waitStats(t, "the gap", func(s sources.TailStats) bool { return s.Position == id+1 })
		if st.Gaps != 1 || st.GapIDs != 1 || st.OldestGap.Before(seen.Add(-time.Second)) || st.OldestGap.After(time.Now()) || st.RowsBehind != 0 {
			t.Fatalf("id %d held open: %+v, want one gap of one id, seen since %s, nothing behind", id, st, seen)
		}
		commit(t, held)
		st = rn.waitStats(t, "the gap's row", func(s sources.TailStats) bool { return s.Gaps == 0 })
		if !st.OldestGap.IsZero() || st.Late != 1 || st.RowsBehind != 0 {
			t.Fatalf("after the held row committed: %+v, want no gap, one late row", st)
		}
	})
}

// BenchmarkBacklog measures one backlog query of each database past the
// exact count (BacklogExact+1000 rows behind, one gap): the most a
// measurement costs the tailer, at most every LagEvery while it is busy.
//
//	go test ./sources -run '^$' -bench Backlog -benchtime 200x
func BenchmarkBacklog(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres", "mariadb"} {
		b.Run(kind, func(b *testing.B) {
			app := setupLegacy(b, kind)
			q := map[string]string{
				"postgres": `INSERT INTO edgerelay_outbox (event) SELECT '{}'::jsonb FROM generate_series(1, $1)`,
				"sqlite":   `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) INSERT INTO edgerelay_outbox (event) SELECT '{}' FROM n`,
				// MariaDB's Sequence engine (its recursion stops at 1000).
				"mariadb": `INSERT INTO edgerelay_outbox (event) SELECT '{}' FROM seq_1_to_` + strconv.Itoa(sources.BacklogExact+1000),
			}[kind]
			args := []any{sources.BacklogExact + 1000}
			if kind == "mariadb" {
				args = nil
			}
			if _, err := app.db.Exec(q, args...); err != nil {
				b.Fatal(err)
			}
			src, err := sources.Open(app.sourceURL(""))
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			ls := src.(sources.LagSource)
			gap := []model.SourceGap{{First: 5, Last: 5}}
			b.ResetTimer()
			for b.Loop() {
				bl, err := ls.Backlog(context.Background(), 0, gap)
				if err != nil || !bl.Estimated {
					b.Fatalf("%+v, %v", bl, err)
				}
			}
		})
	}
}

// A Debezium outbox is measured by its order column (seq), not its UUID
// id; with a created_column of its own the age is known too.
func TestSourceBacklogDebezium(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "sqlite")
	if _, err := app.db.Exec(`CREATE TABLE outbox (
		seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, aggregatetype TEXT NOT NULL,
		aggregateid TEXT NOT NULL, type TEXT NOT NULL, payload TEXT, ts TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"f47ac10b", "0b6e1b5c", "c9bf9e57"} {
		if _, err := app.db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, ts)
			VALUES (?, 'order', ?, 'order.created', '{}', strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?))`, id, i, fmt.Sprintf("-%d hours", 3-i)); err != nil {
			t.Fatal(err)
		}
	}
	if b := backlog(t, app.source(t, "&table=outbox&shape=debezium"), 1); b.Rows != 2 || b.AgeKnown {
		t.Fatalf("after seq 1: %+v, want 2 rows, age unknown (no created_at)", b)
	}
	if b := backlog(t, app.source(t, "&table=outbox&shape=debezium&created_column=ts"), 1); b.Rows != 2 || !near(b.OldestAge, 2*time.Hour) {
		t.Fatalf("after seq 1, dated by ts: %+v, want 2 rows, the oldest 2 hours old", b)
	}
}

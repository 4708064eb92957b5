package sources_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/mysqltest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// The README's claims about how the oldest row's age is read ("Seeing the
// lag"), each held to a test that fails if the claim is false.

// SQLite dates a row by ISO 8601 text (with Z, with an offset, or bare:
// UTC, as SQLite's own datetime() and CURRENT_TIMESTAMP write it) or by
// Unix seconds in an INTEGER column: each row below was created an hour
// ago, however it is written.
func TestSQLiteBacklogAgeOfEachTimeFormat(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "sqlite")
	for i, tc := range []struct{ name, typ, value string }{
		{"unix seconds in INTEGER", "INTEGER", `CAST(strftime('%s', 'now') AS INTEGER) - 3600`},
		{"unix seconds in BIGINT", "BIGINT NOT NULL", `CAST(strftime('%s', 'now') AS INTEGER) - 3600`},
		{"ISO 8601 with Z", "TEXT", `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour')`},
		// An hour ago, written at +05:00: 4 hours ahead of UTC's clock.
		{"ISO 8601 with an offset", "TEXT", `strftime('%Y-%m-%dT%H:%M:%S', 'now', '+4 hours') || '+05:00'`},
		{"ISO 8601 bare (UTC)", "DATETIME", `datetime('now', '-1 hour')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("dated_%d", i)
			app.exec(t, fmt.Sprintf(`CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, made %s)`, table, tc.typ))
			app.exec(t, fmt.Sprintf(`INSERT INTO %s (event, made) VALUES ('{}', %s)`, table, tc.value))
			b := backlog(t, app.source(t, "&table="+table+"&created_column=made"), 0)
			if b.Rows != 1 || !b.AgeKnown || !near(b.OldestAge, time.Hour) {
				t.Fatalf("%s written as %s: %+v, want one row an hour old", tc.typ, tc.value, b)
			}
		})
	}
}

// A row whose creation time the database cannot read as one (NULL, or
// text that is no date) has an unknown age, not none: the rows behind
// are not shown as just written.
func TestSQLiteBacklogAgeOfAnUnreadableTimeIsUnknown(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "sqlite")
	app.exec(t, `CREATE TABLE undated (id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, made INTEGER)`)
	app.exec(t, `INSERT INTO undated (event, made) VALUES ('{}', 'yesterday'), ('{}', NULL)`)
	src := app.source(t, "&table=undated&created_column=made")
	if b := backlog(t, src, 0); b.Rows != 2 || b.AgeKnown {
		t.Fatalf("rows dated 'yesterday' and NULL: %+v, want 2 rows, their age unknown", b)
	}
	app.exec(t, `INSERT INTO undated (event, made) VALUES ('{}', CAST(strftime('%s', 'now') AS INTEGER) - 3600)`)
	if b := backlog(t, src, 0); b.Rows != 3 || !b.AgeKnown || !near(b.OldestAge, time.Hour) {
		t.Fatalf("and one an hour old: %+v, want 3 rows, the oldest known an hour old", b)
	}
	if b := backlog(t, src, 3); b.Rows != 0 || !b.AgeKnown {
		t.Fatalf("nothing behind: %+v, want no rows, the age known (none)", b)
	}
}

// MySQL/MariaDB: a DATETIME is taken as written in UTC, and a TIMESTAMP
// as the instant it stores, whatever time zone the server gives the
// tailer's session and whatever the application's session wrote in. The
// server here puts the tailer's user in +05:00 (init_connect, as a
// server's default_time_zone would) and the application writes from a
// +05:00 session: a source that took the server's zone would be 5 hours
// off on the DATETIME.
func TestMySQLBacklogAgeIgnoresTheServersTimeZone(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "mariadb")
	app.exec(t, `CREATE TABLE dated (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event TEXT NOT NULL,
		dt DATETIME(6) NOT NULL, ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`)
	ctx := context.Background()
	conn, err := app.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The application's session in +05:00: it writes the DATETIME in UTC
	// (UTC_TIMESTAMP, as the README asks) and the TIMESTAMP by its NOW().
	for _, q := range []string{`SET time_zone = '+05:00'`,
		`INSERT INTO dated (event, dt, ts) VALUES ('{}', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR)`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	u, err := url.Parse(app.url)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.Trim(u.Path, "/")
	tailer := mysqltest.User(t, app.url, "GRANT ALL ON "+dbName+".* TO %s")
	tu, err := url.Parse(tailer)
	if err != nil {
		t.Fatal(err)
	}
	// init_connect is global, so it names this test's user alone: every
	// other session keeps its zone. (It runs for users without SUPER.)
	var was string
	if err := app.db.QueryRow(`SELECT @@global.init_connect`).Scan(&was); err != nil {
		t.Fatal(err)
	}
	set := fmt.Sprintf(`SET time_zone = IF(SUBSTRING_INDEX(USER(), '@', 1) = '%s', '+05:00', @@session.time_zone)`, tu.User.Username())
	if was != "" {
		t.Skipf("the server has an init_connect of its own (%q): not replaced", was)
	}
	if _, err := app.db.Exec(`SET GLOBAL init_connect = ?`, set); err != nil {
		t.Skipf("cannot set init_connect (needs SUPER on %s): %v", mysqltest.EnvURL, err)
	}
	t.Cleanup(func() { app.db.Exec(`SET GLOBAL init_connect = ''`) })
	// The server does put the tailer's sessions in +05:00.
	plain := openMySQL(t, tailer)
	defer plain.Close()
	var zone string
	if err := plain.QueryRow(`SELECT @@session.time_zone`).Scan(&zone); err != nil || zone != "+05:00" {
		t.Fatalf("the tailer's session is in %q (%v), want +05:00: the test would prove nothing", zone, err)
	}

	for _, col := range []string{"dt", "ts"} {
		src, err := sources.Open(tailer + "?table=dated&created_column=" + col)
		if err != nil {
			t.Fatal(err)
		}
		b := backlog(t, src, 0)
		src.Close()
		if b.Rows != 1 || !b.AgeKnown || !near(b.OldestAge, time.Hour) {
			t.Errorf("created_column=%s: %+v (oldest %s), want one row an hour old", col, b, b.OldestAge)
		}
	}
}

// PostgreSQL: a timestamptz is an instant, whatever the sessions' zones;
// a timestamp (without time zone) is read in the tailer's session zone
// (here its role's, UTC+5): right when the application wrote it in the
// same zone, 5 hours off when it wrote in UTC.
func TestPostgresBacklogAgeAndTheSessionsTimeZone(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "postgres")
	app.exec(t, `CREATE TABLE dated (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event text NOT NULL,
		tz timestamptz NOT NULL, local timestamp NOT NULL)`)
	ctx := context.Background()
	write := func(zone string) {
		t.Helper()
		conn, err := app.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, q := range []string{`SET TimeZone = '` + zone + `'`,
			`INSERT INTO dated (event, tz, local) VALUES ('{}', now() - interval '1 hour', now() - interval '1 hour')`} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	tailer := pgUser(t, app)
	role := mustParse(t, tailer).User.Username()
	app.exec(t, `ALTER ROLE `+role+` SET TimeZone = 'Asia/Karachi'`) // UTC+5 all year
	age := func(col string, after int64) sources.Backlog {
		t.Helper()
		src, err := sources.Open(tailer + "&table=dated&created_column=" + col)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		return backlog(t, src, after)
	}
	// Row 1, written in the tailer's zone: both right.
	write("Asia/Karachi")
	for _, col := range []string{"tz", "local"} {
		if b := age(col, 0); b.Rows != 1 || !near(b.OldestAge, time.Hour) {
			t.Errorf("created_column=%s, written in the tailer's zone: %+v (oldest %s), want an hour", col, b, b.OldestAge)
		}
	}
	// Row 2, written in UTC: the timestamptz is right; the timestamp's
	// wall clock is read as UTC+5's, an instant 5 hours earlier.
	write("UTC")
	if b := age("tz", 1); b.Rows != 1 || !near(b.OldestAge, time.Hour) {
		t.Errorf("timestamptz written in UTC: %+v, want an hour", b)
	}
	if b := age("local", 1); b.Rows != 1 || !near(b.OldestAge, 6*time.Hour) {
		t.Errorf("timestamp written in UTC, read in UTC+5: %+v, want 6 hours (5 too many)", b)
	}
}

// counting counts a source's reads and backlog queries.
type counting struct {
	sources.Source
	reads, backlogs atomic.Int64
}

func (c *counting) Read(ctx context.Context, after int64, limit int) ([]sources.Row, error) {
	c.reads.Add(1)
	return c.Source.Read(ctx, after, limit)
}

func (c *counting) Backlog(ctx context.Context, after int64, gaps []model.SourceGap) (sources.Backlog, error) {
	c.backlogs.Add(1)
	return c.Source.(sources.LagSource).Backlog(ctx, after, gaps)
}

// countingGap is counting for a GapSource, which the tailer must still
// see as one.
type countingGap struct {
	*counting
	gs sources.GapSource
}

func (c countingGap) ReadGaps(ctx context.Context, gaps []model.SourceGap, limit int) ([]sources.Row, error) {
	return c.gs.ReadGaps(ctx, gaps, limit)
}
func (c countingGap) Clock(ctx context.Context) (int64, error)   { return c.gs.Clock(ctx) }
func (c countingGap) Horizon(ctx context.Context) (int64, error) { return c.gs.Horizon(ctx) }
func (c countingGap) GapTimeout() time.Duration                  { return c.gs.GapTimeout() }

// "A round that read every committed row (fewer than a batch, every gap
// read) and relayed them is behind by nothing, which costs no query":
// with LagEvery as short as it goes, the tailer measures after each of
// the two full batches of 25 rows (10 at a time), and never again once a
// round reads less than a batch, however many rounds it polls.
func TestTailerCaughtUpQueriesNoBacklog(t *testing.T) {
	t.Parallel()
	kinds(t, func(t *testing.T, app *legacyApp) {
		r := setupRelay(t, relay.Options{})
		for i := 1; i <= 25; i++ {
			tx, _ := app.insert(t, orderEvent(i))
			commit(t, tx)
		}
		c := &counting{Source: app.source(t, "")}
		var src sources.Source = c
		if gs, ok := c.Source.(sources.GapSource); ok {
			src = countingGap{counting: c, gs: gs}
		}
		rn := startTailer(t, r, src, sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 10, LagEvery: time.Nanosecond})
		st := rn.waitStats(t, "caught up", func(s sources.TailStats) bool { return s.Position == 25 && !s.CaughtUp.IsZero() })
		if st.RowsBehind != 0 || st.LagMeasured.IsZero() {
			t.Fatalf("caught up: %+v, want nothing behind, measured", st)
		}
		busy, reads := c.backlogs.Load(), c.reads.Load()
		if busy != 2 {
			t.Errorf("%d backlog queries while two full batches were read, want 2 (one after each)", busy)
		}
		deadline := time.Now().Add(bound)
		for c.reads.Load() < reads+5 {
			if time.Now().After(deadline) {
				t.Fatalf("the tailer stopped polling: %d reads", c.reads.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := c.backlogs.Load(); n != busy {
			t.Fatalf("%d backlog queries in %d rounds caught up, want none", n-busy, c.reads.Load()-reads)
		}
		if st := rn.tl.Stats(); st.RowsBehind != 0 || !st.LagMeasured.After(st.CaughtUp.Add(-time.Second)) {
			t.Fatalf("caught up: %+v, want nothing behind as of the last round", st)
		}
	})
}

package migrate_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/testpar"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/migrate"
	"github.com/edgerelay/edgerelay/store/postgres"
	"github.com/edgerelay/edgerelay/store/sqlite"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) {
	testpar.Raise()
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// newSource is a migrated, empty SQLite store file, and a raw handle on it
// to write the rows a test needs.
func newSource(t *testing.T) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "box.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return path, db
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// addEvent writes an event with one notification, as an accept leaves it.
func addEvent(t *testing.T, db *sql.DB, eventID string, status string, leaseUntil any) {
	t.Helper()
	now := time.Now().UnixMilli()
	res, err := db.Exec(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
		VALUES ('default', ?, 'p', 't', '{}', '{}', 'fp-'||?, 1, 1, ?)`, eventID, eventID, now)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	exec(t, db, `INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, status, cycle_started_at,
		next_attempt_at, lease_until, created_at, updated_at, pinned) VALUES (?, ?, 0, 'default', 't', 'ada', 'email', 'ada@example.com', ?, ?, ?, ?, ?, ?, 1)`,
		"k-"+eventID, id, status, now, now, leaseUntil, now, now)
}

func tables(t *testing.T, q func(string) ([]string, error)) []string {
	t.Helper()
	names, err := q("")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// Every table of both schemas is in the plan (moved, or not and why): a
// migration that adds a table fails here until migrate-store knows it.
func TestPlanCoversSchema(t *testing.T) {
	t.Parallel()
	_, db := newSource(t)
	lite := tables(t, func(string) ([]string, error) {
		rows, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'table'")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			rows.Scan(&n)
			out = append(out, n)
		}
		return out, rows.Err()
	})
	planned := migrate.Tables()
	for _, n := range lite {
		if _, ok := planned[n]; !ok {
			t.Errorf("SQLite table %s is not in the plan (store/migrate/plan.go): say whether it is moved and why", n)
		}
	}
	for n, why := range planned {
		if why == "" {
			t.Errorf("plan: table %s does not say why", n)
		}
		if !slices.Contains(lite, n) {
			t.Errorf("plan: table %s is not in the SQLite schema", n)
		}
	}
	url := pgtest.Start(t)
	st, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(t.Context(), "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
	pg, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range pg {
		if _, ok := planned[n]; !ok && n != "schema_version" {
			t.Errorf("PostgreSQL table %s is not in the plan", n)
		}
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// What cannot be moved is refused with an error naming what is wrong, the
// target's password never in it, and nothing written to the source.
func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	target := pgtest.Start(t)

	t.Run("missing source", func(t *testing.T) {
		t.Parallel()
		missing := filepath.Join(t.TempDir(), "nope.db")
		_, err := migrate.Run(ctx, missing, target, migrate.Options{})
		if !errors.Is(err, migrate.ErrSource) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err %v", err)
		}
		if _, serr := os.Stat(missing); serr == nil {
			t.Fatal("the missing source was created")
		}
	})
	t.Run("not edgerelay", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "other.db")
		os.WriteFile(path, nil, 0o644)
		_, err := migrate.Run(ctx, path, target, migrate.Options{})
		if !errors.Is(err, migrate.ErrSource) || !strings.Contains(err.Error(), "not an edgerelay database") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("older source", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		exec(t, db, "PRAGMA user_version = 1")
		sum := fileSum(t, path)
		_, err := migrate.Run(ctx, path, target, migrate.Options{})
		if !errors.Is(err, migrate.ErrSource) || !strings.Contains(err.Error(), "migrate the file first") {
			t.Fatalf("err %v", err)
		}
		if fileSum(t, path) != sum {
			t.Fatal("the source changed")
		}
	})
	t.Run("target unreachable", func(t *testing.T) {
		t.Parallel()
		path, _ := newSource(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = migrate.Run(ctx, path, "postgres://relay:s3cr3t-pw@"+addr+"/relay?connect_timeout=5", migrate.Options{})
		if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") || !strings.Contains(err.Error(), addr) {
			t.Fatalf("err %v: want the address named, without the password", err)
		}
	})
	t.Run("target newer", func(t *testing.T) {
		t.Parallel()
		path, _ := newSource(t)
		url := pgtest.Start(t)
		st, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "UPDATE schema_version SET version = version + 1"); err != nil {
			t.Fatal(err)
		}
		_, err = migrate.Run(ctx, path, url, migrate.Options{})
		if !errors.Is(err, model.ErrTooNew) {
			t.Fatalf("err %v, want ErrTooNew", err)
		}
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n)
		if n != 0 {
			t.Fatal("the newer target was written")
		}
	})
	t.Run("live lease", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		addEvent(t, db, "e1", "sending", time.Now().Add(time.Minute).UnixMilli())
		_, err := migrate.Run(ctx, path, pgtest.Start(t), migrate.Options{})
		if !errors.Is(err, migrate.ErrLive) || !strings.Contains(err.Error(), "claimed by a running dispatcher") {
			t.Fatalf("err %v", err)
		}
		path, db = newSource(t)
		exec(t, db, "INSERT INTO leases (name, holder, until) VALUES ('schedules', 'box/42/ab', ?)", time.Now().Add(time.Minute).UnixMilli())
		_, err = migrate.Run(ctx, path, pgtest.Start(t), migrate.Options{})
		if !errors.Is(err, migrate.ErrLive) || !strings.Contains(err.Error(), `"schedules"`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("source being written", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		addEvent(t, db, "e1", "pending", nil)
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil { // a writer mid-transaction
			t.Fatal(err)
		}
		defer c.ExecContext(context.Background(), "ROLLBACK")
		url := pgtest.Start(t)
		_, err = migrate.Run(ctx, path, url, migrate.Options{SourceWait: 100 * time.Millisecond})
		if !errors.Is(err, migrate.ErrLive) || !strings.Contains(err.Error(), "write lock for 100ms") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("relay on the target", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		addEvent(t, db, "e1", "pending", nil)
		url := pgtest.Start(t)
		st, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "INSERT INTO leases (name, holder, until) VALUES ('schedules', 'node-2/7/cd', $1)", time.Now().Add(time.Minute).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		_, err = migrate.Run(ctx, path, url, migrate.Options{})
		if !errors.Is(err, migrate.ErrInService) || !strings.Contains(err.Error(), "a relay runs on the target: node-2/7/cd") {
			t.Fatalf("err %v", err)
		}
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n)
		if n != 0 {
			t.Fatal("the target a relay runs on was written")
		}
	})
	t.Run("foreign target", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		addEvent(t, db, "e1", "pending", nil)
		other, odb := newSource(t)
		addEvent(t, odb, "other-1", "pending", nil)
		url := pgtest.Start(t)
		if _, err := migrate.Run(ctx, other, url, migrate.Options{}); err != nil {
			t.Fatal(err)
		}
		_, err := migrate.Run(ctx, path, url, migrate.Options{})
		if !errors.Is(err, migrate.ErrForeign) || !strings.Contains(err.Error(), "events id 1") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("in service", func(t *testing.T) {
		t.Parallel()
		path, db := newSource(t)
		addEvent(t, db, "e1", "pending", nil)
		url := pgtest.Start(t)
		if _, err := migrate.Run(ctx, path, url, migrate.Options{}); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		// The target takes an event of its own: its id comes after the source's.
		var id int64
		if err := conn.QueryRow(ctx, `INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, created_at)
			VALUES ('default', 'new', 'p', 't', '{}', '{}', 'x', 0, 0) RETURNING id`).Scan(&id); err != nil || id != 2 {
			t.Fatalf("the target's own event got id %d (%v), want 2", id, err)
		}
		_, err = migrate.Run(ctx, path, url, migrate.Options{})
		if !errors.Is(err, migrate.ErrInService) {
			t.Fatalf("err %v", err)
		}
	})
}

// Ids the source gave to rows it pruned since are not given again: the
// target's sequences start past SQLite's sqlite_sequence, not past the
// largest id left. A lapsed lease is neither refused nor moved, and a
// notification it left sending is moved as it is.
func TestSequencesPastPrunedIDs(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	addEvent(t, db, "e1", "sent", nil)
	addEvent(t, db, "e2", "sent", nil)
	addEvent(t, db, "e3", "sending", time.Now().Add(-time.Minute).UnixMilli())
	addEvent(t, db, "e4", "sent", nil)
	exec(t, db, "INSERT INTO leases (name, holder, until) VALUES ('schedules', 'box/42/ab', ?)", time.Now().Add(-time.Minute).UnixMilli())
	// A notification's own message (rendered from a template at accept)
	// moves with it, byte for byte; one without stays without.
	exec(t, db, "UPDATE notifications SET message = ? WHERE key = 'k-e2'", []byte(`{"subject":"Ihre Quittung","template":{"name":"receipt","version":"ab12","locale":"de"}}`))
	exec(t, db, "DELETE FROM notifications WHERE event = 4") // pruned: the largest ids are gone
	exec(t, db, "DELETE FROM events WHERE id = 4")
	sum := fileSum(t, path)
	url := pgtest.Start(t)
	var progress []migrate.Progress
	res, err := migrate.Run(t.Context(), path, url, migrate.Options{Batch: 2, Progress: func(p migrate.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("the source file changed")
	}
	if res.NextID["events"] != 5 || res.NextID["notifications"] != 5 {
		t.Fatalf("next ids %v, want events and notifications from 5", res.NextID)
	}
	var events migrate.Count
	for _, c := range res.Tables {
		if c.Table == "events" {
			events = c
		}
		if c.Table == "leases" && c.Skipped == "" {
			t.Error("leases were moved")
		}
	}
	if events.Source != 3 || events.Copied != 3 {
		t.Fatalf("events %+v", events)
	}
	// Two batches of events (2 + 1), then its end.
	var ev []migrate.Progress
	for _, p := range progress {
		if p.Table == "events" {
			ev = append(ev, p)
		}
	}
	if len(ev) != 3 || ev[0].Read != 2 || !ev[2].Done || ev[2].Copied != 3 {
		t.Fatalf("progress of events %+v", ev)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var id int64
	var status string
	var pinned bool
	if err := conn.QueryRow(t.Context(), "SELECT id, status, pinned FROM notifications WHERE key = 'k-e3'").Scan(&id, &status, &pinned); err != nil || status != "sending" || !pinned {
		t.Fatalf("the lapsed claim moved as %d %s pinned=%v (%v)", id, status, pinned, err)
	}
	if err := conn.QueryRow(t.Context(), `INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, created_at)
		VALUES ('default', 'new', 'p', 't', '{}', '{}', 'x', 0, 0) RETURNING id`).Scan(&id); err != nil || id != 5 {
		t.Fatalf("a new event got id %d (%v), want 5 (4 was the pruned event's)", id, err)
	}
	var own, none []byte
	if err := conn.QueryRow(t.Context(), "SELECT (SELECT message FROM notifications WHERE key = 'k-e2'), (SELECT message FROM notifications WHERE key = 'k-e1')").Scan(&own, &none); err != nil ||
		string(own) != `{"subject":"Ihre Quittung","template":{"name":"receipt","version":"ab12","locale":"de"}}` || none != nil {
		t.Fatalf("notification messages moved as %q and %q (%v)", own, none, err)
	}
	var leases int
	conn.QueryRow(t.Context(), "SELECT count(*) FROM leases").Scan(&leases)
	if leases != 0 {
		t.Fatal("a lease was moved")
	}
}

// A run that stops part-way (here: cancelled after the first batch of
// notifications) leaves whole batches, and running it again finishes the
// copy: every row once, the sequences past the source's.
func TestInterruptedRunIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	for i := range 5 {
		addEvent(t, db, "e"+string(rune('1'+i)), "pending", nil)
	}
	url := pgtest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	_, err := migrate.Run(ctx, path, url, migrate.Options{Batch: 2, Progress: func(p migrate.Progress) {
		if p.Table == "notifications" && p.Copied == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the cancellation", err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var events, notes int
	conn.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM notifications)").Scan(&events, &notes)
	if events != 5 || notes != 2 {
		t.Fatalf("after the interrupted run: %d events, %d notifications; want 5 and a whole batch of 2", events, notes)
	}
	res, err := migrate.Run(t.Context(), path, url, migrate.Options{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Tables {
		switch c.Table {
		case "events":
			if c.Copied != 0 || c.Present != 5 {
				t.Errorf("events on the second run: %+v", c)
			}
		case "notifications":
			if c.Copied != 3 || c.Present != 2 {
				t.Errorf("notifications on the second run: %+v", c)
			}
		}
	}
	conn.QueryRow(t.Context(), "SELECT count(*) FROM notifications").Scan(&notes)
	if notes != 5 || res.NextID["notifications"] != 6 {
		t.Fatalf("%d notifications, next id %d; want 5 and 6", notes, res.NextID["notifications"])
	}
}

// On a second run a watermark keeps the larger of the source's and the
// target's: a read mark, a feed counter or a source position the source
// raised since is raised, one the target holds higher is not moved back.
func TestWatermarksNeverMoveBack(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	exec(t, db, "INSERT INTO feed_marks VALUES ('acme', 'ada', 'read', 5), ('acme', 'ben', 'read', 5)")
	exec(t, db, "INSERT INTO feed_counters (tenant, seq) VALUES ('acme', 10), ('beta', 10)")
	exec(t, db, "INSERT INTO source_positions VALUES ('outbox', 100, 0), ('other', 100, 0)")
	url := pgtest.Start(t)
	if _, err := migrate.Run(t.Context(), path, url, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The source moves ada, acme and outbox on; the target bob, beta, other.
	exec(t, db, "UPDATE feed_marks SET mark = 7 WHERE user = 'ada'")
	exec(t, db, "UPDATE feed_counters SET seq = 12 WHERE tenant = 'acme'")
	exec(t, db, "UPDATE source_positions SET position = 120 WHERE source = 'outbox'")
	for _, q := range []string{`UPDATE feed_marks SET mark = 9 WHERE "user" = 'ben'`, "UPDATE feed_counters SET seq = 15 WHERE tenant = 'beta'",
		"UPDATE source_positions SET position = 150 WHERE source = 'other'"} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := migrate.Run(t.Context(), path, url, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	var got string
	conn.QueryRow(t.Context(), `SELECT (SELECT string_agg("user" || '=' || mark, ' ' ORDER BY "user") FROM feed_marks) || ' ' ||
		(SELECT string_agg(tenant || '=' || seq, ' ' ORDER BY tenant) FROM feed_counters) || ' ' ||
		(SELECT string_agg(source || '=' || position, ' ' ORDER BY source) FROM source_positions)`).Scan(&got)
	if want := "ada=7 ben=9 acme=12 beta=15 other=150 outbox=120"; got != want {
		t.Fatalf("watermarks %q, want %q", got, want)
	}
}

// The copy works in pgx's simple protocol too (the URL parameter PgBouncer
// in transaction pooling needs): booleans, bytes and text arrive as they
// were.
func TestSimpleProtocol(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	addEvent(t, db, "e1", "pending", nil)
	exec(t, db, `INSERT INTO request_keys (tenant, key, fingerprint, state, locked_until, status, content_type, body, created_at, expires_at) VALUES ('acme', 'req-1', 'fp', 'done', 0, 202, 'application/json', x'00ff7b7d', 0, ?)`, time.Now().Add(time.Hour).UnixMilli())
	url := pgtest.Start(t) + "&default_query_exec_mode=simple_protocol"
	if _, err := migrate.Run(t.Context(), path, url, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var pinned bool
	var payload, body []byte
	err = conn.QueryRow(t.Context(), `SELECT n.pinned, e.payload, (SELECT body FROM request_keys) FROM notifications n JOIN events e ON e.id = n.event`).Scan(&pinned, &payload, &body)
	if err != nil || !pinned || string(payload) != "{}" || string(body) != "\x00\xff{}" {
		t.Fatalf("pinned %v, payload %q, body %q (%v)", pinned, payload, body, err)
	}
}

// bounced is dbURL through pgtest's PgBouncer (transaction pooling, with
// ignore as its ignore_startup_parameters), with the URL parameter the
// README tells PgBouncer users to add.
func bounced(t *testing.T, dbURL string, ignore ...string) string {
	t.Helper()
	u, err := url.Parse(pgtest.Bouncer(t, dbURL, ignore...))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	return u.String()
}

// --to through PgBouncer in transaction pooling, with the schema in the
// URL's search_path: PgBouncer refuses search_path as a startup parameter
// (or, told to ignore it, drops it). The copy lands in the URL's schema
// either way. While one run holds the target, a second through the bouncer
// is refused naming it, and the first then finishes.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ignore []string
	}{{"refusing search_path", nil}, {"ignoring search_path", []string{"extra_float_digits", "search_path"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, db := newSource(t)
			for i := range 3 {
				addEvent(t, db, "e"+string(rune('1'+i)), "pending", nil)
			}
			direct := pgtest.Start(t)
			to := bounced(t, direct, tc.ignore...)
			held, release := make(chan struct{}), make(chan struct{})
			type outcome struct {
				res *migrate.Result
				err error
			}
			first := make(chan outcome, 1)
			go func() {
				res, err := migrate.Run(t.Context(), path, to, migrate.Options{Batch: 1, Label: "the first run", Hooks: migrate.Hooks{At: func(p migrate.Point) {
					if p == migrate.Locked {
						close(held)
						<-release
					}
				}}})
				first <- outcome{res, err}
			}()
			select {
			case <-held:
			case o := <-first:
				t.Fatalf("the first run ended before its hold: %v\npgbouncer log:\n%s", o.err, pgtest.BouncerLog())
			}
			_, err := migrate.Run(t.Context(), path, to, migrate.Options{})
			if !errors.Is(err, postgres.ErrCopying) || !strings.Contains(err.Error(), "the first run") {
				t.Errorf("a second run while the first holds the target: %v", err)
			}
			close(release)
			o := <-first
			if o.err != nil {
				t.Fatalf("%v\npgbouncer log:\n%s", o.err, pgtest.BouncerLog())
			}
			conn, err := pgx.Connect(t.Context(), direct)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var events, notes int
			if err := conn.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM notifications)").Scan(&events, &notes); err != nil {
				t.Fatal(err)
			}
			if events != 3 || notes != 3 || o.res.NextID["events"] != 4 {
				t.Fatalf("the URL's schema holds %d events, %d notifications, next event id %d; want 3, 3, 4", events, notes, o.res.NextID["events"])
			}
		})
	}
}

// A run writes nothing to the source, not even a checkpoint: its write
// lock's connection is closed while its read-only one is open, and a
// read-only connection closing last leaves the WAL as it is. Here the
// source's rows are only in its WAL (its writer closed while a reader
// held the file): after the run the file and its WAL are as they were.
func TestSourceFileUntouched(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	for i := range 3 {
		addEvent(t, db, "e"+string(rune('1'+i)), "pending", nil)
	}
	reader, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Ping(); err != nil {
		t.Fatal(err)
	}
	db.Close() // not the last connection: no checkpoint
	reader.Close()
	wal := func() (int64, [32]byte) {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size(), fileSum(t, path+"-wal")
	}
	size, walSum := wal()
	if size == 0 {
		t.Fatal("the source's WAL is empty: the test needs rows only there")
	}
	sum := fileSum(t, path)
	if _, err := migrate.Run(t.Context(), path, pgtest.Start(t), migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, path) != sum {
		t.Error("the run changed the source's file")
	}
	if s, w := wal(); s != size || w != walSum {
		t.Errorf("the run changed the source's WAL: %d bytes, were %d", s, size)
	}
}

// What the source did after a run (served again as a rollback) is carried
// over by the next: the notification it sent (with its attempt, a new id),
// the event it released from quarantine, the digest run it finished, the
// address it suppressed again, the opt-out a recipient chose, the
// template version it retired, the token it revoked. Rows it did not change are left as they
// are; a third run writes nothing.
func TestRerunCarriesTheSourcesChanges(t *testing.T) {
	t.Parallel()
	path, db := newSource(t)
	addEvent(t, db, "e1", "pending", nil)
	addEvent(t, db, "e2", "pending", nil)
	exec(t, db, "UPDATE events SET quarantined_at = 5, quarantine_reason = 'burst' WHERE event_id = 'e2'")
	exec(t, db, "INSERT INTO job_runs (job, scheduled_at, started_at) VALUES ('nightly', 100, 100)")
	exec(t, db, "INSERT INTO suppressions (tenant, channel, address, reason, source, created_at) VALUES ('default', 'email', 'x@example.com', 'soft_bounce', 'receipt', 10)")
	exec(t, db, "INSERT INTO pref_switches (tenant, recipient, category, channel, enabled, set_at, set_by) VALUES ('default', 'ada', 'news', 'email', 1, 10, 'api')")
	exec(t, db, "INSERT INTO tokens (tenant, name, hash, created_at) VALUES ('default', 'kept', 'h1', 1), ('default', 'revoked', 'h2', 1)")
	exec(t, db, "INSERT INTO templates (tenant, name, channel, locale, version, parts, created_at) VALUES ('default', 'receipt', 'email', 'en', 1, '{}', 10)")
	url := pgtest.Start(t)
	if _, err := migrate.Run(t.Context(), path, url, migrate.Options{}); err != nil {
		t.Fatal(err)
	}

	// The source, served again: it sends e1's notification, releases e2.
	exec(t, db, "UPDATE notifications SET status = 'sent', attempts = 1, cycle_attempts = 1, claims = 1, provider = 'email-http', updated_at = updated_at + 1 WHERE key = 'k-e1'")
	exec(t, db, "INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome) SELECT id, 1, 'email-http', 1, 2, 'sent' FROM notifications WHERE key = 'k-e1'")
	exec(t, db, "UPDATE events SET quarantined_at = NULL, quarantine_reason = NULL WHERE event_id = 'e2'")
	exec(t, db, "UPDATE job_runs SET status = 'done', finished_at = 200")
	exec(t, db, "UPDATE suppressions SET reason = 'hard_bounce', created_at = 20")
	exec(t, db, "UPDATE pref_switches SET enabled = 0, set_at = 20, set_by = 'unsubscribe'")
	exec(t, db, "UPDATE templates SET retired_at = 20")
	exec(t, db, "DELETE FROM tokens WHERE name = 'revoked'")
	res, err := migrate.Run(t.Context(), path, url, migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	row := func(q string) string {
		t.Helper()
		var s *string
		if err := conn.QueryRow(t.Context(), q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if s == nil {
			return "NULL"
		}
		return *s
	}
	for q, want := range map[string]string{
		"SELECT string_agg(key || '=' || status || '/' || claims, ' ' ORDER BY key) FROM notifications":                    "k-e1=sent/1 k-e2=pending/0",
		"SELECT string_agg(notification || ':' || n || ':' || outcome, ' ') FROM attempts":                                 "1:1:sent",
		"SELECT string_agg(event_id || '=' || coalesce(quarantine_reason, 'released'), ' ' ORDER BY event_id) FROM events": "e1=released e2=released",
		"SELECT status || ' ' || finished_at FROM job_runs":                                                                "done 200",
		"SELECT reason || ' ' || created_at FROM suppressions":                                                             "hard_bounce 20",
		"SELECT enabled::text || ' ' || set_by FROM pref_switches":                                                         "false unsubscribe",
		"SELECT string_agg(name, ' ') FROM tokens":                                                                         "kept",
		"SELECT retired_at::text FROM templates":                                                                           "20",
	} {
		if got := row(q); got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
	want := map[string][3]int64{ // copied, updated, present
		"notifications": {0, 1, 1}, "attempts": {1, 0, 0}, "events": {0, 1, 1},
		"job_runs": {0, 1, 0}, "tokens": {0, 0, 1}, "suppressions": {0, 1, 0}, "pref_switches": {0, 1, 0}, "templates": {0, 1, 0},
	}
	for _, c := range res.Tables {
		if c.Table == "tokens" && c.Deleted != 1 {
			t.Errorf("tokens on the second run: %+v, want the revoked one deleted", c)
		}
		if w, ok := want[c.Table]; ok && (c.Copied != w[0] || c.Updated != w[1] || c.Present != w[2]) {
			t.Errorf("%s on the second run: %+v, want copied, updated, present %v", c.Table, c, w)
		}
	}
	res, err = migrate.Run(t.Context(), path, url, migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Tables {
		if c.Copied != 0 || c.Updated != 0 || c.Deleted != 0 {
			t.Errorf("%s on a third run: %+v, want nothing written", c.Table, c)
		}
	}
}

// A target that worked since the last run is refused, though its ids stay
// below the source's (the source gave more since, as after a rollback): it
// drew an id of its own (here an attempt: every send writes one), refused
// before anything is written; or it holds a notification in a later state
// than the source's, refused at that batch, the notification as the
// target has it.
func TestWorkedOnTargetIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	setup := func(t *testing.T) (string, *sql.DB, *pgx.Conn) {
		path, db := newSource(t)
		addEvent(t, db, "e1", "pending", nil)
		url := pgtest.Start(t)
		if _, err := migrate.Run(ctx, path, url, migrate.Options{}); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		// The source sends its notification meanwhile, in two attempts.
		exec(t, db, "UPDATE notifications SET status = 'sent', attempts = 2, claims = 2, updated_at = updated_at + 2")
		exec(t, db, "INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome) VALUES (1, 1, 'p', 1, 2, 'refused'), (1, 2, 'p', 3, 4, 'sent')")
		return path, db, conn
	}
	fingerprint := func(t *testing.T, conn *pgx.Conn) string {
		var s string
		if err := conn.QueryRow(ctx, "SELECT coalesce((SELECT string_agg(n::text || outcome, ',' ORDER BY id) FROM attempts), '') || (SELECT string_agg(status || claims, ',') FROM notifications)").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("it gave an id", func(t *testing.T) {
		t.Parallel()
		path, _, conn := setup(t)
		// A relay on the target sent it too: attempt id 1 (its sequence), as the source's first.
		if _, err := conn.Exec(ctx, "UPDATE notifications SET status = 'sent', attempts = 1, claims = 1, updated_at = updated_at + 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome) VALUES (1, 1, 'p', 5, 6, 'sent')"); err != nil {
			t.Fatal(err)
		}
		before := fingerprint(t, conn)
		_, err := migrate.Run(ctx, path, conn.Config().ConnString(), migrate.Options{})
		if !errors.Is(err, migrate.ErrInService) || !strings.Contains(err.Error(), "given attempts ids of its own") {
			t.Fatalf("err %v", err)
		}
		if fingerprint(t, conn) != before {
			t.Fatal("the refused run wrote the target")
		}
	})
	t.Run("a later state", func(t *testing.T) {
		t.Parallel()
		path, _, conn := setup(t)
		// Claimed three times on the target (no id drawn: a command, not a send).
		if _, err := conn.Exec(ctx, "UPDATE notifications SET status = 'failed', claims = 3"); err != nil {
			t.Fatal(err)
		}
		before := fingerprint(t, conn)
		_, err := migrate.Run(ctx, path, conn.Config().ConnString(), migrate.Options{})
		if !errors.Is(err, migrate.ErrInService) || !strings.Contains(err.Error(), "notifications row (id) 1 is later than the source's") {
			t.Fatalf("err %v", err)
		}
		if fingerprint(t, conn) != before {
			t.Fatal("the refused run wrote the target")
		}
	})
}

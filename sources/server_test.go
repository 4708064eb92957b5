package sources_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for the application's side

	"github.com/edgerelay/edgerelay/internal/mysqltest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/internal/testpar"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

func TestMain(m *testing.M) {
	testpar.Raise()
	code := m.Run()
	pgtest.Stop()
	mysqltest.Stop()
	os.Exit(code)
}

// legacyApp is an application's own server database (PostgreSQL or
// MariaDB) with the outbox table from ../outbox_*.sql, and the connections
// the application writes with.
type legacyApp struct {
	kind string
	url  string // the database's URL, no table
	db   *sql.DB
}

// servers runs f as one parallel subtest per database server.
func servers(t *testing.T, f func(t *testing.T, app *legacyApp)) {
	for _, kind := range []string{"postgres", "mariadb"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, setupLegacy(t, kind))
		})
	}
}

func setupLegacy(t testing.TB, kind string) *legacyApp {
	t.Helper()
	app := &legacyApp{kind: kind}
	var ddl string
	switch kind {
	case "postgres":
		// A database of its own: the tailer's horizon is its database's
		// oldest open transaction, and other tests hold theirs open.
		app.url, ddl = pgtest.Database(t), "../outbox_postgres.sql"
		db, err := sql.Open("pgx", app.url)
		if err != nil {
			t.Fatal(err)
		}
		app.db = db
	case "mariadb":
		app.url, ddl = mysqltest.Start(t), "../outbox_mysql.sql"
		app.db = openMySQL(t, app.url)
	case "sqlite": // for BenchmarkTailServer's row beside the servers
		path := filepath.Join(t.TempDir(), "app.db")
		app.url, ddl = "sqlite://"+path, "../outbox.sql"
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		app.db = db
	}
	t.Cleanup(func() { app.db.Close() })
	b, err := os.ReadFile(ddl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.db.Exec(string(b)); err != nil {
		t.Fatalf("%s: %v", ddl, err)
	}
	return app
}

func openMySQL(t testing.TB, rawURL string) *sql.DB {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.Trim(u.Path, "/")
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sql.OpenDB(c)
}

// sourceURL is the outbox's source URL with more parameters.
func (a *legacyApp) sourceURL(params string) string {
	sep := "?"
	if strings.Contains(a.url, "?") {
		sep = "&"
	}
	if !strings.Contains(params, "table=") {
		params = "&table=edgerelay_outbox" + params
	}
	return a.url + sep + strings.TrimPrefix(params, "&")
}

func (a *legacyApp) source(t *testing.T, params string) sources.Source {
	t.Helper()
	src, err := sources.Open(a.sourceURL(params))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// insert begins a transaction of the application and inserts the event's
// outbox row in it, returning the row's id; the caller commits or rolls
// back.
func (a *legacyApp) insert(t *testing.T, ev relay.Event) (*sql.Tx, int64) {
	t.Helper()
	tx, err := a.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	switch a.kind {
	case "postgres":
		err = tx.QueryRow(`INSERT INTO edgerelay_outbox (event) VALUES ($1) RETURNING id`, string(mustJSON(ev))).Scan(&id)
	default:
		var res sql.Result
		if res, err = tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, string(mustJSON(ev))); err == nil {
			id, err = res.LastInsertId()
		}
	}
	if err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	return tx, id
}

func commit(t *testing.T, tx *sql.Tx) {
	t.Helper()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// running is a tailer running in the background until stop.
type running struct {
	tl   *sources.Tailer
	stop func() sources.TailStats
}

func startTailer(t *testing.T, r *relay.Relay, src sources.Source, opts sources.TailOptions) *running {
	t.Helper()
	tl := sources.NewTailer(r, r.Store(), src, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	var once sync.Once
	stop := func() sources.TailStats {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v, want nil when ctx ends", err)
				}
			case <-time.After(bound):
				t.Error("Run did not return after ctx ended")
			}
		})
		return tl.Stats()
	}
	t.Cleanup(func() { stop() })
	return &running{tl: tl, stop: stop}
}

// waitStats polls the tailer's counters until ok says so.
func (rn *running) waitStats(t *testing.T, what string, ok func(sources.TailStats) bool) sources.TailStats {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st := rn.tl.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: tailer at %+v after %s", what, st, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The application's transactions commit out of id order: concurrent
// writers, one transaction holding an id open while later ids commit and
// are relayed, one rolling back. Every committed row is relayed exactly
// once: the held row arrives late from its gap, the rolled-back id's gap
// closes as soon as its transaction has ended (the horizon), nothing is
// given up or read twice. Reading the whole outbox again under another
// name then accepts nothing: the event's identity dedupes.
func TestServerSourceOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, app *legacyApp) {
		r := setupRelay(t, relay.Options{})
		rn := startTailer(t, r, app.source(t, ""), sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 16})

		want := map[string]int{}
		add := func(i int) relay.Event {
			ev := orderEvent(i)
			want[ev.ID] = 1 + map[bool]int{true: 1}[i%5 == 0]
			return ev
		}
		held, heldID := app.insert(t, add(0))
		rolled, rolledID := app.insert(t, relay.Event{ID: "rolled_back", Type: "order.created",
			Recipients: []relay.Recipient{{ID: "x", Email: "x@example.com"}}, Body: "never"})

		const writers, each = 4, 25
		var mu sync.Mutex
		var last int64
		var wg sync.WaitGroup
		evs := make([][]relay.Event, writers)
		for w := range writers {
			for i := range each {
				evs[w] = append(evs[w], add(1+w*each+i))
			}
		}
		for w := range writers {
			wg.Go(func() {
				for _, ev := range evs[w] {
					tx, id := app.insert(t, ev)
					commit(t, tx)
					mu.Lock()
					last = max(last, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// The tailer has read past both open transactions' ids, and waits
		// for them.
		st := rn.waitStats(t, "the rows after the open transactions", func(s sources.TailStats) bool {
			return s.Position >= last && s.GapIDs >= 2
		})
		if st.Accepted != writers*each || st.Position <= max(heldID, rolledID) {
			t.Fatalf("before the late commit: %+v, want %d accepted past rows %d and %d", st, writers*each, heldID, rolledID)
		}
		// The rollback ends one gap's transaction, but the held one began
		// earlier and is still open: the horizon is before both gaps, so
		// neither closes, however many rounds go by (a row committed after
		// the rollback is read, and the gaps are still there).
		if err := rolled.Rollback(); err != nil {
			t.Fatal(err)
		}
		tx, after := app.insert(t, add(writers*each+1))
		commit(t, tx)
		st = rn.waitStats(t, "the row after the rollback", func(s sources.TailStats) bool { return s.Position >= after })
		if st.GapIDs < 2 || st.GapsEnded != 0 {
			t.Fatalf("with an older transaction open: %+v; want both gaps kept", st)
		}
		commit(t, held)
		st = rn.waitStats(t, "the late row and the rolled-back id's gap", func(s sources.TailStats) bool {
			return s.Accepted == writers*each+2 && s.Gaps == 0
		})
		st = rn.stop()
		// Late: the held row, and any the concurrent writers committed out
		// of order.
		if st.Late < 1 || st.Duplicates != 0 || st.GaveUp != 0 || st.GapsEnded < 1 || st.Rejected != 0 {
			t.Errorf("stats %+v: want late rows, the rolled-back id's gap ended, none given up, no duplicates", st)
		}
		got, _ := relayCounts(t, r)
		for id, w := range want {
			if got[id] != w {
				t.Errorf("event %s: %d notifications, want %d", id, got[id], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d events stored, want %d (none for the rolled-back row: %v)", len(got), len(want), got["rolled_back"])
		}
		saved, err := r.Store().SourceState(context.Background(), rn.tl.Stats().Source)
		if err != nil || saved.Position != st.Position || len(saved.Gaps) != 0 {
			t.Errorf("saved state %+v, %v; want position %d, no gaps", saved, err, st.Position)
		}
		t.Logf("ledger: %d rows relayed (%d late), %d gap ids ended, position %d", st.Accepted, st.Late, st.GapsEnded, st.Position)

		// The identity dedupes: all of it read again under another name.
		again := startTailer(t, r, app.source(t, "&name=again"), sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 16})
		st2 := again.waitStats(t, "the re-read", func(s sources.TailStats) bool { return s.Position >= st.Position && s.Gaps == 0 })
		if st2.Accepted != 0 || st2.Duplicates != int64(len(want)) {
			t.Errorf("re-read: %+v, want %d duplicates, nothing new", st2, len(want))
		}
		if after, _ := relayCounts(t, r); fmt.Sprint(after) != fmt.Sprint(got) {
			t.Errorf("notifications changed on a re-read:\n%v\n%v", got, after)
		}
	})
}

// A tailer stopped while a transaction holds an id below its position
// saved that id as a gap: a new tailer (as after a restart) reads it when
// it commits, and reads nothing else again.
func TestServerSourceResumesGapsAfterRestart(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, app *legacyApp) {
		r := setupRelay(t, relay.Options{})
		held, heldID := app.insert(t, orderEvent(1))
		var last int64
		for i := 2; i <= 11; i++ {
			tx, id := app.insert(t, orderEvent(i))
			commit(t, tx)
			last = id
		}
		first := startTailer(t, r, app.source(t, ""), sources.TailOptions{Poll: 5 * time.Millisecond})
		first.waitStats(t, "the committed rows", func(s sources.TailStats) bool { return s.Position >= last && s.GapIDs >= 1 })
		st := first.stop()
		saved, err := r.Store().SourceState(context.Background(), st.Source)
		if err != nil {
			t.Fatal(err)
		}
		if saved.Position != last || len(saved.Gaps) != 1 || saved.Gaps[0].First > heldID || saved.Gaps[0].Last < heldID {
			t.Fatalf("saved %+v: want position %d and a gap holding %d", saved, last, heldID)
		}
		commit(t, held)
		second := startTailer(t, r, app.source(t, ""), sources.TailOptions{Poll: 5 * time.Millisecond})
		st = second.waitStats(t, "the late row", func(s sources.TailStats) bool { return s.Accepted == 1 && s.Gaps == 0 })
		st = second.stop()
		if st.Read != 1 || st.Late != 1 || st.Duplicates != 0 || st.Position != last {
			t.Fatalf("after the restart: %+v; want only the late row read", st)
		}
		got, _ := relayCounts(t, r)
		if len(got) != 11 || got["ord_1"] != 1 {
			t.Fatalf("events %v: want ord_1..ord_11, once each", got)
		}
	})
}

// Bad URLs and a missing table are refused at open, saying what is wrong,
// never with the password.
func TestServerSourceOpenErrors(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, app *legacyApp) {
		u, err := url.Parse(app.url)
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := u.User.Password()
		wrongPW := *u
		wrongPW.User = url.UserPassword(u.User.Username(), "wrong-"+pw)
		for _, tc := range []struct {
			name, url, want string
			badURL          bool
		}{
			{"missing table", app.sourceURL("&table=nope"), `no table "nope"`, false},
			{"missing column", app.sourceURL("&column=body"), `has no column "body" (it has: created_at, event, id)`, false},
			{"unknown parameter", app.sourceURL("&mark_processed=true"), `unknown parameter "mark_processed"`, true},
			{"bad gap_timeout", app.sourceURL("&gap_timeout=soon"), `gap_timeout="soon"`, true},
			{"bad table name", app.sourceURL("&table=a%3Bdrop"), `table="a;drop": want a plain SQL name`, true},
			{"wrong password", wrongPW.String(), "", false},
		} {
			src, err := sources.Open(tc.url)
			if err == nil {
				src.Close()
				t.Errorf("%s: opened", tc.name)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || errors.Is(err, sources.ErrBadURL) != tc.badURL ||
				strings.Contains(msg, pw) {
				t.Errorf("%s: error %q (ErrBadURL %v); want it to contain %q, ErrBadURL %v, and not the password",
					tc.name, msg, errors.Is(err, sources.ErrBadURL), tc.want, tc.badURL)
			}
		}
		if app.kind == "mariadb" {
			_, err := sources.Open("mysql://u:" + pw + "@127.0.0.1:1")
			if !errors.Is(err, sources.ErrBadURL) || !strings.Contains(err.Error(), "want the database as the path") || strings.Contains(err.Error(), pw) {
				t.Errorf("no database: %v", err)
			}
		}
	})
}

// Without the privilege to see the others' transactions, the source says
// so (ErrNoHorizon) and a rolled-back id's gap closes only after
// gap_timeout, counted as given up; the rows around it are relayed.
func TestServerSourceWithoutHorizonGivesUpAfterTimeout(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, app *legacyApp) {
		var limited string
		switch app.kind {
		case "mariadb":
			db := strings.Trim(mustParse(t, app.url).Path, "/")
			limited = mysqltest.User(t, app.url, "GRANT SELECT ON "+db+".* TO %s")
		case "postgres":
			limited = pgUser(t, app)
		}
		la := *app
		la.url = limited
		src := la.source(t, "&gap_timeout=300ms")
		if _, err := src.(sources.GapSource).Horizon(context.Background()); !errors.Is(err, sources.ErrNoHorizon) {
			t.Fatalf("Horizon without the privilege: %v, want ErrNoHorizon", err)
		}
		r := setupRelay(t, relay.Options{})
		rolled, _ := app.insert(t, orderEvent(1))
		if err := rolled.Rollback(); err != nil {
			t.Fatal(err)
		}
		tx, last := app.insert(t, orderEvent(2))
		commit(t, tx)
		rn := startTailer(t, r, src, sources.TailOptions{Poll: 5 * time.Millisecond})
		st := rn.waitStats(t, "the gap given up", func(s sources.TailStats) bool { return s.Position >= last && s.GaveUp == 1 && s.Gaps == 0 })
		if st.Accepted != 1 || st.GapsEnded != 0 {
			t.Fatalf("stats %+v: want row 2 relayed and row 1's id given up", st)
		}
	})
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// pgUser creates a PostgreSQL role that can read the app's schema but is
// neither a superuser nor in pg_read_all_stats, and returns the app's URL
// as that role.
func pgUser(t *testing.T, app *legacyApp) string {
	t.Helper()
	u := mustParse(t, app.url)
	schema := u.Query().Get("search_path")
	role := "r_" + schema
	if schema == "" { // a database of its own (pgtest.Database)
		schema, role = "public", "r_"+strings.Trim(u.Path, "/")
	}
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN PASSWORD 'pw_" + role + "'",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := app.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		app.db.Exec("DROP OWNED BY " + role)
		app.db.Exec("DROP ROLE " + role)
	})
	u.User = url.UserPassword(role, "pw_"+role)
	return u.String()
}

// syncBuffer is a log sink safe for the tailer's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// The application's database restarts under the tailer: it logs the
// failed reads and retries with backoff, the driver reconnects, and the
// rows written after the restart are relayed; each row once, and the
// password in no log line.
func TestServerSourceSurvivesDatabaseRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mariadb"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testSourceSurvivesDatabaseRestart(t, kind)
		})
	}
}

// restartable is a database server of the test's own: mysqltest's or
// pgtest's Own.
type restartable interface {
	Start(testing.TB) string
	Stop(testing.TB)
	Resume(testing.TB)
}

func testSourceSurvivesDatabaseRestart(t *testing.T, kind string) {
	var sv restartable
	app := &legacyApp{kind: kind}
	ddlFile := "../outbox_mysql.sql"
	if kind == "postgres" {
		sv, ddlFile = pgtest.Own(t), "../outbox_postgres.sql"
		app.url = sv.Start(t)
		db, err := sql.Open("pgx", app.url)
		if err != nil {
			t.Fatal(err)
		}
		app.db = db
	} else {
		sv = mysqltest.Own(t)
		app.url = sv.Start(t)
		app.db = openMySQL(t, app.url)
	}
	t.Cleanup(func() { app.db.Close() })
	ddl, err := os.ReadFile(ddlFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	pw, _ := mustParse(t, app.url).User.Password()

	var logs syncBuffer
	r, err := relaytest.Open(context.Background(), t.TempDir()+"/relay.db", relay.Options{
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rn := startTailer(t, r, app.source(t, ""), sources.TailOptions{Poll: 5 * time.Millisecond})
	write := func(from, to int) {
		for i := from; i <= to; i++ {
			tx, _ := app.insert(t, orderEvent(i))
			commit(t, tx)
		}
	}
	write(1, 10)
	rn.waitStats(t, "the first rows", func(s sources.TailStats) bool { return s.Accepted == 10 })
	sv.Stop(t)
	rn.waitStats(t, "a failed read", func(s sources.TailStats) bool { return s.Errors >= 1 })
	sv.Resume(t)
	// The application's own pool still holds connections the restart
	// ended (pgx reports the first use of one as an error, not as a bad
	// connection to retry): the app would reconnect; drop them here.
	app.db.SetMaxIdleConns(0)
	app.db.SetMaxIdleConns(2)
	write(11, 20)
	st := rn.waitStats(t, "the rows after the restart", func(s sources.TailStats) bool { return s.Accepted == 20 && s.Gaps == 0 })
	if st.Duplicates != 0 || st.Rejected != 0 {
		t.Errorf("stats %+v: want 20 accepted, nothing else", st)
	}
	got, _ := relayCounts(t, r)
	if len(got) != 20 {
		t.Errorf("%d events, want 20: %v", len(got), got)
	}
	out := logs.String()
	if !strings.Contains(out, "tail: reading the source failed; retrying") {
		t.Errorf("no log line for the outage:\n%s", out)
	}
	if strings.Contains(out, pw) {
		t.Errorf("the log holds the password:\n%s", out)
	}
}

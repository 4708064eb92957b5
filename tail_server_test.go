package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for the application's side

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/mysqltest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// mariadbApp creates the outbox from outbox_mysql.sql in a new MariaDB
// database and returns its URL and the application's connection.
func mariadbApp(t *testing.T) (string, *sql.DB) {
	t.Helper()
	raw := mysqltest.Start(t)
	u, err := url.Parse(raw)
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
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	ddl, err := os.ReadFile("outbox_mysql.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	return raw, db
}

// postgresApp creates the outbox from outbox_postgres.sql in a new
// PostgreSQL schema and returns its URL and the application's connection.
func postgresApp(t *testing.T) (string, *sql.DB) {
	t.Helper()
	raw := pgtest.Start(t)
	db, err := sql.Open("pgx", raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ddl, err := os.ReadFile("outbox_postgres.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	return raw, db
}

// appOrder inserts order i's outbox row in a new transaction of the
// application (ph: the database's placeholder), left open for the caller
// to commit.
func appOrder(t *testing.T, db *sql.DB, ph string, i int) *sql.Tx {
	t.Helper()
	ev, _ := json.Marshal(relay.Event{ID: fmt.Sprintf("ord_%d", i), Type: "order.created", Purpose: "receipt",
		Recipients: []relay.Recipient{{ID: fmt.Sprintf("cus_%d", i), Email: fmt.Sprintf("c%d@example.com", i)}},
		Subject:    "Your order", Body: fmt.Sprintf("Order %d received.", i)})
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (`+ph+`)`, string(ev)); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	return tx
}

// Through the binary, on PostgreSQL and MariaDB: a tailer is SIGKILLed while an
// application transaction holds an id below its position, and again while
// four writers commit out of id order; the held transaction commits while
// no tailer runs. The runs after each kill resume from the saved position
// and gaps: every order's event is accepted once, none lost, and the
// password is in no output.
func TestTailServerSIGKILLKeepsGaps(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	t.Parallel()
	for _, kind := range []string{"postgres", "mariadb"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srcURL, app := mariadbApp, func(t *testing.T, db *sql.DB, i int) *sql.Tx { return appOrder(t, db, "?", i) }
			if kind == "postgres" {
				srcURL, app = postgresApp, func(t *testing.T, db *sql.DB, i int) *sql.Tx { return appOrder(t, db, "$1", i) }
			}
			testTailSIGKILLKeepsGaps(t, srcURL, app)
		})
	}
}

func testTailSIGKILLKeepsGaps(t *testing.T, open func(*testing.T) (string, *sql.DB), order func(*testing.T, *sql.DB, int) *sql.Tx) {
	bin := binary(t)
	srcURL, app := open(t)
	pw, _ := mustURL(t, srcURL).User.Password()
	relayPath := filepath.Join(t.TempDir(), "relay.db")
	rr := &relayReader{path: relayPath}
	gaps := func() int64 {
		var n int64 = -1
		if rr.open(t) {
			rr.db.QueryRow(`SELECT count(*) FROM source_gaps`).Scan(&n)
		}
		return n
	}
	sep := "?"
	if strings.Contains(srcURL, "?") {
		sep = "&"
	}
	args := []string{"tail", "--db", relayPath, "--source", srcURL + sep + "table=edgerelay_outbox",
		"--poll", "10ms", "--batch", "8", "--log-level", "info", "--json"}
	var outputs []string
	deadline := time.Now().Add(time.Minute)
	var waitFor func(what string, ok func() bool, stderr *syncBuffer)
	// start runs tail and waits until it has read its saved position: its
	// signal handler is in place by then, so a SIGTERM is a clean stop
	// (a run that finds every row already relayed could otherwise be
	// signalled before it can catch one).
	start := func() (*exec.Cmd, *bytes.Buffer, *syncBuffer) {
		cmd := exec.Command(bin, args...)
		var stdout bytes.Buffer
		stderr := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor("tail to start", func() bool { return strings.Contains(stderr.String(), "reading rows after the saved position") }, stderr)
		return cmd, &stdout, stderr
	}
	waitFor = func(what string, ok func() bool, stderr *syncBuffer) {
		t.Helper()
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s; stderr:\n%s", what, stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	kill := func(cmd *exec.Cmd, stderr *syncBuffer) {
		t.Helper()
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		outputs = append(outputs, stderr.String())
	}

	// Order 1 takes the first id and stays open; orders 2..21 commit.
	held := order(t, app, 1)
	for i := 2; i <= 21; i++ {
		if err := order(t, app, i).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	cmd, _, stderr := start()
	waitFor("orders 2..21 and the gap saved", func() bool {
		ev, _ := rr.state(t)
		return ev == 20 && gaps() == 1
	}, stderr)
	kill(cmd, stderr)
	if err := held.Commit(); err != nil { // while no tailer runs
		t.Fatal(err)
	}

	// Four writers commit orders 22..101 while a second run is killed
	// midway.
	const n = 101
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 22 + w; i <= n; i += 4 {
				if err := order(t, app, i).Commit(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	cmd, _, stderr = start()
	waitFor("a few of the writers' orders", func() bool { ev, _ := rr.state(t); return ev >= 40 }, stderr)
	kill(cmd, stderr)
	wg.Wait()

	cmd, stdout, stderr := start()
	waitFor("every order", func() bool { ev, _ := rr.state(t); return ev == n && gaps() == 0 }, stderr)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail after SIGTERM: %v\n%s", err, stderr)
	}
	outputs = append(outputs, stderr.String(), stdout.String())
	var final sources.TailStats
	if err := json.Unmarshal(stdout.Bytes(), &final); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}

	perEvent := map[string]int{}
	rows, err := rr.db.Query(`SELECT e.event_id, count(n.id) FROM events e LEFT JOIN notifications n ON n.event = e.id GROUP BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var c int
		rows.Scan(&id, &c)
		perEvent[id] += c
	}
	rows.Close()
	for i := 1; i <= n; i++ {
		if c := perEvent[fmt.Sprintf("ord_%d", i)]; c != 1 {
			t.Errorf("ord_%d: %d notifications, want 1", i, c)
		}
	}
	if len(perEvent) != n {
		t.Errorf("%d events, want %d", len(perEvent), n)
	}
	// The second run started from the first's saved gap.
	if !strings.Contains(outputs[1], "reading rows after the saved position") || !strings.Contains(outputs[1], "gaps=1") {
		t.Errorf("the run after the first kill did not resume with its gap:\n%s", outputs[1])
	}
	for i, out := range outputs {
		if strings.Contains(out, pw) {
			t.Errorf("output %d holds the password:\n%s", i, out)
		}
	}
	t.Logf("last run: %+v", final)
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A MariaDB source with a missing table, or a wrong password, fails at
// start naming what is wrong, with no password in the message, and
// creates no edgerelay database.
func TestTailServerSourceErrors(t *testing.T) {
	t.Parallel()
	srcURL, _ := mariadbApp(t)
	u := mustURL(t, srcURL)
	pw, _ := u.User.Password()
	wrong := *u
	wrong.User = url.UserPassword(u.User.Username(), "wrong-"+pw)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, source, want string
		code               int
	}{
		{"missing table", srcURL + "?table=orders", `no table "orders"`, exitError},
		{"wrong password", wrong.String() + "?table=edgerelay_outbox", "Access denied", exitError},
		{"no database", "mysql://u:" + pw + "@127.0.0.1:1?table=edgerelay_outbox", "want the database as the path", exitUsage},
	} {
		relayPath := filepath.Join(dir, tc.name+".db")
		cmd := runCLI(t, "", "tail", "--db", relayPath, "--source", tc.source)
		if cmd.code != tc.code || !strings.Contains(cmd.stderr, tc.want) || strings.Contains(cmd.stderr, pw) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q, no password", tc.name, cmd.code, cmd.stderr, tc.code, tc.want)
		}
		if _, err := os.Stat(relayPath); err == nil {
			t.Errorf("%s: created %s", tc.name, relayPath)
		}
	}
}

package sources

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// appDB creates an application database in t.TempDir() with the outbox
// table from ../outbox.sql (so the shipped DDL is what is tested) and
// returns its path and a connection playing the application.
func appDB(t *testing.T, extraDDL ...string) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append([]string{string(ddl)}, extraDDL...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	return path, db
}

// insertEvents adds n outbox rows in one transaction.
func insertEvents(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var first int
	tx.QueryRow(`SELECT count(*) FROM edgerelay_outbox`).Scan(&first)
	for i := range n {
		if _, err := tx.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, fmt.Sprintf(`{"id":"e%d"}`, first+i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, rawURL string) Source {
	t.Helper()
	s, err := Open(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ids(rows []Row) []int64 {
	var out []int64
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func TestSQLiteReadsInIDOrderWithLimit(t *testing.T) {
	t.Parallel()
	path, db := appDB(t)
	insertEvents(t, db, 5)
	s := open(t, "sqlite://"+path)
	ctx := context.Background()

	rows, err := s.Read(ctx, 0, 2)
	if err != nil || fmt.Sprint(ids(rows)) != "[1 2]" || string(rows[1].Event) != `{"id":"e2"}` {
		t.Fatalf("first page: %v, %v", ids(rows), err)
	}
	rows, err = s.Read(ctx, 2, 10)
	if err != nil || fmt.Sprint(ids(rows)) != "[3 4 5]" {
		t.Fatalf("after 2: %v, %v", ids(rows), err)
	}
	if rows, err = s.Read(ctx, 5, 10); err != nil || len(rows) != 0 {
		t.Fatalf("after the last: %v, %v", ids(rows), err)
	}
	// Rows committed after the reader opened are seen by the next read.
	insertEvents(t, db, 1)
	if rows, err = s.Read(ctx, 5, 10); err != nil || fmt.Sprint(ids(rows)) != "[6]" {
		t.Fatalf("new row: %v, %v", ids(rows), err)
	}
	// A gap (a deleted row) is skipped, not waited for.
	db.Exec(`DELETE FROM edgerelay_outbox WHERE id = 3`)
	if rows, err = s.Read(ctx, 2, 2); err != nil || fmt.Sprint(ids(rows)) != "[4 5]" {
		t.Fatalf("with a gap: %v, %v", ids(rows), err)
	}
}

func TestSQLiteCustomTableAndColumn(t *testing.T) {
	t.Parallel()
	path, db := appDB(t, `CREATE TABLE app_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, payload BLOB)`)
	db.Exec(`INSERT INTO app_outbox (payload) VALUES (CAST('{"id":"x"}' AS BLOB)), (NULL)`)
	s := open(t, "sqlite:"+path+"?table=app_outbox&column=payload")
	rows, err := s.Read(context.Background(), 0, 10)
	if err != nil || len(rows) != 2 || string(rows[0].Event) != `{"id":"x"}` || rows[1].Event != nil {
		t.Fatalf("rows %v, %v", rows, err)
	}
	if want := "sqlite://" + path + "?table=app_outbox"; s.Name() != want {
		t.Fatalf("name %q, want %q", s.Name(), want)
	}
	if s := open(t, "sqlite://"+path+"?table=app_outbox&column=payload&name=billing"); s.Name() != "billing" {
		t.Fatalf("name %q, want the name parameter", s.Name())
	}
}

func TestSQLiteOpenErrors(t *testing.T) {
	t.Parallel()
	path, db := appDB(t,
		`CREATE TABLE plain (id INTEGER PRIMARY KEY, event TEXT)`,
		`CREATE TABLE no_processed (id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT)`,
		`CREATE TABLE text_id (id TEXT PRIMARY KEY, event TEXT)`)
	missing := filepath.Join(t.TempDir(), "nope.db")
	for _, tc := range []struct {
		name, url, want string
		badURL          bool
	}{
		{"missing file", "sqlite://" + missing, "no such file", false},
		{"missing table", "sqlite://" + path + "?table=outbox", `no table "outbox"`, false},
		{"missing column", "sqlite://" + path + "?column=payload", `no column "payload" (it has: id, event, created_at, processed_at)`, false},
		{"missing processed_at", "sqlite://" + path + "?table=no_processed&mark_processed=true", `no column "processed_at"`, false},
		{"no autoincrement", "sqlite://" + path + "?table=plain", "INTEGER PRIMARY KEY AUTOINCREMENT: without it SQLite gives a deleted newest row's id to the next insert", false},
		{"no autoincrement: the fix", "sqlite://" + path + "?table=plain", "create the table anew as outbox.sql does, copy the rows with their ids", false},
		{"text id", "sqlite://" + path + "?table=text_id", "INTEGER PRIMARY KEY AUTOINCREMENT", false},
		{"injection", "sqlite://" + path + "?table=" + `edgerelay_outbox%3BDROP%20TABLE%20plain`, "plain SQL name", true},
		{"quoted", "sqlite://" + path + "?column=" + `event"`, "plain SQL name", true},
		{"unknown parameter", "sqlite://" + path + "?mark_procesed=true", `unknown parameter "mark_procesed"`, true},
		{"repeated parameter", "sqlite://" + path + "?table=a&table=b", `"table" given 2 times`, true},
		{"bad bool", "sqlite://" + path + "?mark_processed=yes please", "want true or false", true},
		{"bad busy", "sqlite://" + path + "?busy_timeout=5", "want a duration", true},
		{"host", "sqlite://relative/app.db", "three slashes", true},
		{"no path", "sqlite://", "no database path", true},
		{"scheme", "oracle://u:secret@db/app", `unknown scheme "oracle" (supported: mariadb, mysql, postgres, postgresql, sqlite)`, true},
	} {
		s, err := Open(tc.url)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrBadURL) != tc.badURL {
			t.Errorf("%s: error %q; want it to contain %q (ErrBadURL %v)", tc.name, err, tc.want, tc.badURL)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error shows the password: %q", tc.name, err)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("opening a missing file created it")
	}
	var tables int
	db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'plain'`).Scan(&tables)
	if tables != 1 {
		t.Fatal("the injection attempt dropped a table")
	}
}

func TestSQLiteReadOnlyUnlessMarking(t *testing.T) {
	t.Parallel()
	path, db := appDB(t)
	insertEvents(t, db, 3)
	ctx := context.Background()
	s := open(t, "sqlite://"+path).(*SQLite)
	if err := s.MarkProcessed(ctx, []int64{1, 2}); err != nil {
		t.Fatalf("mark without mark_processed: %v, want a no-op", err)
	}
	var marked int
	db.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NOT NULL`).Scan(&marked)
	if marked != 0 {
		t.Fatalf("%d rows marked without mark_processed", marked)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE edgerelay_outbox SET processed_at = 'x'`); err == nil {
		t.Fatal("the read-only connection could write")
	}
}

func TestSQLiteMarkProcessed(t *testing.T) {
	t.Parallel()
	path, db := appDB(t)
	insertEvents(t, db, 1200)
	ctx := context.Background()
	s := open(t, "sqlite://"+path+"?mark_processed=true")
	var many []int64
	for id := int64(2); id <= 1100; id++ {
		many = append(many, id) // more than one UPDATE's worth
	}
	if err := s.MarkProcessed(ctx, many); err != nil {
		t.Fatal(err)
	}
	var n int
	var first string
	db.QueryRow(`SELECT count(*), min(processed_at) FROM edgerelay_outbox WHERE processed_at IS NOT NULL`).Scan(&n, &first)
	if n != len(many) || !strings.HasSuffix(first, "Z") {
		t.Fatalf("%d rows marked (first at %q), want %d", n, first, len(many))
	}
	var unmarked int
	db.QueryRow(`SELECT count(*) FROM edgerelay_outbox WHERE processed_at IS NULL AND id IN (1, 1101, 1200)`).Scan(&unmarked)
	if unmarked != 3 {
		t.Fatalf("rows outside the ids were marked")
	}
	// Marking again keeps the first time.
	db.Exec(`UPDATE edgerelay_outbox SET processed_at = 'then' WHERE id = 2`)
	if err := s.MarkProcessed(ctx, []int64{2}); err != nil {
		t.Fatal(err)
	}
	var at string
	db.QueryRow(`SELECT processed_at FROM edgerelay_outbox WHERE id = 2`).Scan(&at)
	if at != "then" {
		t.Fatalf("processed_at rewritten to %q", at)
	}
}

// The application holds its write lock (a long transaction): marking waits
// for it (busy_timeout) instead of failing, and reading is not blocked in WAL.
func TestSQLiteMarkWaitsForTheApplicationsWriter(t *testing.T) {
	t.Parallel()
	path, db := appDB(t)
	insertEvents(t, db, 2)
	ctx := context.Background()
	s := open(t, "sqlite://"+path+"?mark_processed=true&busy_timeout=10s")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	conn.ExecContext(ctx, `INSERT INTO edgerelay_outbox (event) VALUES ('{}')`)
	if rows, err := s.Read(ctx, 0, 10); err != nil || len(rows) != 2 {
		t.Fatalf("read during the application's transaction: %d rows, %v", len(rows), err)
	}
	done := make(chan error, 1)
	go func() { done <- s.MarkProcessed(ctx, []int64{1, 2}) }()
	select {
	case err := <-done:
		t.Fatalf("marked while the application held the write lock: %v", err)
	case <-time.After(100 * time.Millisecond): // the lock is held this long
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("marking still waiting after the application committed")
	}
}

// A WAL database whose -wal and -shm files are gone (every connection
// closed) still opens read-only.
func TestSQLiteReadOnlyOpensClosedWALDatabase(t *testing.T) {
	t.Parallel()
	path, db := appDB(t)
	insertEvents(t, db, 1)
	db.Close()
	s := open(t, "sqlite://"+path)
	if rows, err := s.Read(context.Background(), 0, 10); err != nil || len(rows) != 1 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
}

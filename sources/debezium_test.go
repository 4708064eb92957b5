package sources_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// debeziumDDL is the commented Debezium section of an outbox*.sql file:
// its statements, from the first CREATE TABLE to the blank comment line,
// so the shipped DDL is what is tested.
func debeziumDDL(t testing.TB, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "-- [debezium]")
	if !ok {
		t.Fatalf("%s: no [debezium] section", file)
	}
	var sql strings.Builder
	in := false
	for _, line := range strings.Split(section, "\n") {
		if strings.Contains(line, "CREATE TABLE") {
			in = true
		}
		if !in {
			continue
		}
		if strings.TrimSpace(line) == "--" {
			break
		}
		sql.WriteString(strings.TrimPrefix(line, "--   ") + "\n")
	}
	var out []string
	for _, q := range strings.Split(sql.String(), ";\n") {
		if q = strings.TrimSpace(q); q != "" {
			out = append(out, q)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no statements in the [debezium] section", file)
	}
	return out
}

// setupDebezium is a legacy app whose outbox is Debezium's, with the
// ordering column the section adds: table outbox.
func setupDebezium(t testing.TB, kind string) *legacyApp {
	t.Helper()
	app := setupLegacy(t, kind)
	file := map[string]string{"postgres": "../outbox_postgres.sql", "mariadb": "../outbox_mysql.sql", "sqlite": "../outbox.sql"}[kind]
	for _, q := range debeziumDDL(t, file) {
		if _, err := app.db.Exec(q); err != nil {
			t.Fatalf("%s: %v\n%s", file, err, q)
		}
	}
	return app
}

func newUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// insertDebezium begins a transaction of the application and inserts an
// outbox row as a Debezium application does (naming its columns; seq is
// the database's), returning the row's seq; the caller commits or rolls
// back.
func (a *legacyApp) insertDebezium(id, aggID, typ, payload string) (*sql.Tx, int64, error) {
	tx, err := a.db.Begin()
	if err != nil {
		return nil, 0, err
	}
	var seq int64
	if a.kind == "postgres" {
		err = tx.QueryRow(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1, 'Order', $2, $3, $4::jsonb) RETURNING seq`, id, aggID, typ, payload).Scan(&seq)
	} else {
		var res sql.Result
		res, err = tx.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'Order', ?, ?, ?)`, id, aggID, typ, payload)
		if err == nil {
			seq, err = res.LastInsertId()
		}
	}
	if err != nil {
		tx.Rollback()
		return nil, 0, err
	}
	return tx, seq, nil
}

func orderPayload(i int) string {
	return fmt.Sprintf(`{"recipients":[{"id":"cus_%d","email":"c%d@example.com"}],"subject":"Your order","body":"Order %d received."}`, i, i, i)
}

// A Debezium outbox (UUID ids, a seq column added) tailed as the app
// writes it: concurrent writers, and on the servers one transaction held
// open while later rows commit and one rolled back. Every committed row is
// relayed exactly once, under its Debezium id (the event id), the held
// one late from its gap; a payload that makes no event is rejected, saying
// why; reading it all again is all duplicates.
func TestDebeziumOutbox(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			app := setupDebezium(t, kind)
			r := setupRelay(t, relay.Options{})
			rn := startTailer(t, r, app.source(t, "&table=outbox&shape=debezium"), sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 16})

			want := map[string]bool{}
			var mu sync.Mutex
			insert := func(i int, payload string) (*sql.Tx, int64, error) {
				id := newUUID()
				tx, seq, err := app.insertDebezium(id, fmt.Sprintf("ord_%d", i), "order.created", payload)
				if err == nil && strings.HasPrefix(payload, `{"recipients"`) {
					mu.Lock()
					want[id] = true
					mu.Unlock()
				}
				return tx, seq, err
			}
			servers := kind != "sqlite" // SQLite's one writer cannot hold a transaction open beside others
			var held, rolled *sql.Tx
			var heldSeq, rolledSeq int64
			if servers {
				var err error
				if held, heldSeq, err = insert(0, orderPayload(0)); err != nil {
					t.Fatal(err)
				}
				if rolled, rolledSeq, err = app.insertDebezium(newUUID(), "ord_x", "order.created", orderPayload(-1)); err != nil {
					t.Fatal(err)
				}
			}
			const writers, each = 4, 10
			var last int64
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						tx, seq, err := insert(1+w*each+i, orderPayload(1+w*each+i))
						if err == nil {
							err = tx.Commit()
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						last = max(last, seq)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			// Two rows whose payload makes no event.
			for _, p := range []string{`[1, 2]`, `{"id": "mine", "recipients": [{"id": "c", "email": "c@example.com"}]}`} {
				tx, seq, err := insert(99, p)
				if err != nil {
					t.Fatal(err)
				}
				commit(t, tx)
				last = seq
			}
			st := rn.waitStats(t, "the committed rows", func(s sources.TailStats) bool {
				return s.Position >= last && s.Rejected == 2 && (!servers || s.GapIDs >= 2)
			})
			if servers {
				if st.Accepted != writers*each || st.Position <= max(heldSeq, rolledSeq) {
					t.Fatalf("before the late commit: %+v, want %d accepted past seq %d and %d", st, writers*each, heldSeq, rolledSeq)
				}
				if err := rolled.Rollback(); err != nil {
					t.Fatal(err)
				}
				commit(t, held)
			}
			st = rn.waitStats(t, "every row", func(s sources.TailStats) bool { return s.Accepted == int64(len(want)) && s.Gaps == 0 })
			st = rn.stop()
			if st.Duplicates != 0 || st.GaveUp != 0 || st.Rejected != 2 || (servers && (st.Late < 1 || st.GapsEnded < 1)) {
				t.Errorf("stats %+v: want the held row late, the rolled-back seq's gap ended, 2 rejected, no duplicates", st)
			}
			reasons := fmt.Sprint(st.Rejections)
			for _, w := range []string{`column "payload": a JSON array; want an object`, `id: key "id" given twice`} {
				if !strings.Contains(reasons, w) {
					t.Errorf("rejections %s: want one saying %q", reasons, w)
				}
			}
			got, _ := relayCounts(t, r)
			for id := range want {
				if got[id] != 1 {
					t.Errorf("event %s: %d notifications, want 1", id, got[id])
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d events stored, want %d (the Debezium ids): %v", len(got), len(want), got)
			}

			// The event id is the Debezium id: all of it read again is
			// duplicates.
			again := startTailer(t, r, app.source(t, "&table=outbox&shape=debezium&name=again"), sources.TailOptions{Poll: 5 * time.Millisecond, Batch: 16})
			st2 := again.waitStats(t, "the re-read", func(s sources.TailStats) bool { return s.Position >= st.Position && s.Gaps == 0 })
			if st2.Accepted != 0 || st2.Duplicates != int64(len(want)) {
				t.Errorf("re-read: %+v, want %d duplicates, nothing new", st2, len(want))
			}
		})
	}
}

// A Debezium table the tailer cannot read safely or as mapped is refused
// at open, saying what to do: no ordering column (its id is a UUID), an
// ordering column that is no integer, a mapped column that is missing.
func TestDebeziumOutboxOpenChecks(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			app := setupDebezium(t, kind)
			// The table as Debezium's docs have it, without seq.
			ddl := map[string]string{
				"postgres": `CREATE TABLE plain_dbz (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`,
				"mariadb":  `CREATE TABLE plain_dbz (id CHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload JSON)`,
				"sqlite":   `CREATE TABLE plain_dbz (id TEXT PRIMARY KEY, aggregatetype TEXT NOT NULL, aggregateid TEXT NOT NULL, type TEXT NOT NULL, payload TEXT)`,
			}[kind]
			if _, err := app.db.Exec(ddl); err != nil {
				t.Fatal(err)
			}
			notInt := map[string]string{"postgres": "is uuid; want an integer", "mariadb": "is char; want an integer", "sqlite": "must be INTEGER PRIMARY KEY AUTOINCREMENT"}[kind]
			for _, tc := range []struct{ name, params, want string }{
				{"no seq", "&table=plain_dbz&shape=debezium", `has no column "seq" (it has: `},
				{"no seq: why", "&table=plain_dbz&shape=debezium", "its id is a UUID, which has no order"},
				{"uuid order", "&table=plain_dbz&shape=debezium&order=id", `column id (order=) ` + notInt},
				{"mapped column missing", "&table=outbox&shape=debezium&map=id:id,type:kind", `has no column "kind"`},
				{"mapped column missing: which field", "&table=outbox&shape=debezium&map=id:id,type:kind", "the map fills type from it"},
				{"payload column missing", "&table=outbox&shape=debezium&column=body", `has no column "body"`},
			} {
				src, err := sources.Open(app.sourceURL(tc.params))
				if err == nil {
					src.Close()
					t.Errorf("%s: opened", tc.name)
					continue
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v; want it to contain %q", tc.name, err, tc.want)
				}
			}
			// The shipped table opens, and so does an explicit map of it.
			for _, p := range []string{"&table=outbox&shape=debezium", "&table=outbox&column=payload&order=seq&map=id:id,type:type,purpose:aggregatetype"} {
				src, err := sources.Open(app.sourceURL(p))
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				if _, err := src.Read(context.Background(), 0, 10); err != nil {
					t.Errorf("%s: read: %v", p, err)
				}
				src.Close()
			}
		})
	}
}

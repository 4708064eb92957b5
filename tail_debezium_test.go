package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Debezium-shaped outbox tailed through the binary (tail --once
// --dispatch, mark_processed): each row is delivered under its Debezium
// id, marked by its seq; a payload that makes no event exits 5 with the
// row named and left unmarked; a bad map is a usage error naming it.
func TestTailDebeziumOutboxThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	appPath, db, out := filepath.Join(dir, "app.db"), filepath.Join(dir, "relay.db"), filepath.Join(dir, "sent.jsonl")
	app, err := sql.Open("sqlite", "file:"+appPath+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ddl, err := os.ReadFile("outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(ddl), "-- [debezium]")
	create := section[strings.Index(section, "CREATE TABLE"):]
	create = strings.ReplaceAll(create[:strings.Index(create, ");")+2], "\n--   ", "\n")
	for _, q := range []string{create, `ALTER TABLE outbox ADD COLUMN processed_at TEXT`} {
		if _, err := app.Exec(q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	ids := []string{"5b0e7e3c-1f1a-4c59-9d53-000000000001", "5b0e7e3c-1f1a-4c59-9d53-000000000002", "5b0e7e3c-1f1a-4c59-9d53-000000000003"}
	for i, id := range ids {
		payload := fmt.Sprintf(`{"recipients":[{"id":"cus_%d","email":"c%d@example.com"}],"subject":"Your order","body":"Order %d."}`, i, i, i)
		if i == 1 {
			payload = `"not an object"`
		}
		if _, err := app.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'Order', ?, 'order.created', ?)`,
			id, fmt.Sprintf("ord_%d", i), payload); err != nil {
			t.Fatal(err)
		}
	}
	src := "sqlite:" + appPath + "?table=outbox&shape=debezium&mark_processed=true"
	cmd := exec.Command(bin, "tail", "--once", "--db", db, "--json", "--log-level", "warn", "--source", src,
		"--dispatch", "--route", "*=log://"+out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	var sum onceSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout %q: %v\n%s", &stdout, err, &stderr)
	}
	if code := cmd.ProcessState.ExitCode(); code != exitRejected || sum.Accepted != 2 || sum.Rejected != 1 || sum.Position != 3 ||
		!strings.Contains(stderr.String(), `row=2`) || !strings.Contains(stderr.String(), `column \"payload\": a JSON string`) {
		t.Fatalf("exit %d, %+v; want 5, 2 accepted, row 2 rejected naming the payload\n%s", code, sum.TailStats, &stderr)
	}
	b, _ := os.ReadFile(out)
	for i, id := range ids {
		if got, want := bytes.Count(b, []byte(`"event_id":"`+id+`"`)), map[bool]int{true: 1}[i != 1]; got != want {
			t.Errorf("event %s: %d deliveries, want %d:\n%s", id, got, want, b)
		}
	}
	var unmarked, seq int64
	app.QueryRow(`SELECT count(*), max(seq) FROM outbox WHERE processed_at IS NULL`).Scan(&unmarked, &seq)
	if unmarked != 1 || seq != 2 {
		t.Errorf("%d rows unmarked, the last seq %d; want seq 2 (the rejected one) alone", unmarked, seq)
	}

	r := runCLI(t, "", "tail", "--db", db, "--source", src+"&map=id:id,recipients:aggregateid")
	if r.code != exitUsage || !strings.Contains(r.stderr, `map="id:id,recipients:aggregateid": entry "recipients:aggregateid": unknown field "recipients"`) {
		t.Errorf("bad map: exit %d, %q; want a usage error naming the entry", r.code, r.stderr)
	}
}

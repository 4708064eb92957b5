package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
)

// The PostgreSQL table runs, small, against a real server: every row is
// measured, and the run leaves no schema of its own behind.
func TestPostgresSuiteRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and the simulator process")
	}
	longtest.Require(t) // the whole table: 20-40 s
	ctx := context.Background()
	admin := pgtest.Admin(t)
	rows, err := PostgresSuite(ctx, Config{Exe: edgerelay(t), Dir: t.TempDir(), Events: 100, FanOut: 1000, Progress: tlog{t}}, admin)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Measure)
		if r.Figure == "" {
			t.Errorf("row %q has no figure", r.Measure)
		}
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"PostgreSQL", "raw PostgreSQL", "through the Go API, 256 callers", "over HTTP, 256 callers",
		"1,000 recipients", "on 1 node(s)", "on 2 node(s)", "on 3 node(s)"} {
		if !strings.Contains(all, want) {
			t.Errorf("no row for %q in:\n%s", want, all)
		}
	}
	if !strings.Contains(rows[0].Figure, "synchronous_commit on") {
		t.Errorf("the server's settings: %q", rows[0].Figure)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'edgerelay\_bench\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d bench schemas left behind", left)
	}
}

// tlog writes progress lines to the test's log, with their times.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

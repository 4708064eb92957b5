package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Each Start is its own schema, reachable with the URL's credentials.
func TestStartGivesEachTestItsOwnSchema(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a == b {
		t.Fatalf("two Starts gave one URL %s", a)
	}
	for _, u := range []string{a, b} {
		c, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		var schema, fsync, sync string
		if err := c.QueryRow(context.Background(), "SELECT current_schema(), current_setting('fsync'), current_setting('synchronous_commit')").Scan(&schema, &fsync, &sync); err != nil {
			t.Fatal(err)
		}
		c.Close(context.Background())
		if schema == "" || schema == "public" || fsync != "on" || sync != "on" {
			t.Fatalf("schema %q, fsync %s, synchronous_commit %s", schema, fsync, sync)
		}
	}
}

package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
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

// Bouncer's URL reaches the same schema through a PgBouncer that pools
// transactions, and that refuses a startup parameter it does not track
// (the strictest setting, which the store's PgBouncer tests rely on).
func TestBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	direct := Start(t)
	bounced := Bouncer(t, direct)
	if bounced == direct {
		t.Fatalf("Bouncer gave the server's own URL")
	}
	ctx := context.Background()
	// Its console answers only the simple protocol.
	admin, err := url.Parse(bounced)
	if err != nil {
		t.Fatal(err)
	}
	admin.Path, admin.RawQuery = "/pgbouncer", "sslmode=disable&default_query_exec_mode=simple_protocol"
	c, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, BouncerLog())
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	config := map[string]string{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		config[fmt.Sprint(vals[0])] = fmt.Sprint(vals[1])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if config["pool_mode"] != "transaction" || config["ignore_startup_parameters"] != "" {
		t.Fatalf("pool_mode %q, ignore_startup_parameters %q", config["pool_mode"], config["ignore_startup_parameters"])
	}
	// The schema's search_path is a startup parameter: refused.
	if c, err := pgx.Connect(ctx, bounced); err == nil {
		c.Close(ctx)
		t.Fatalf("the bouncer took a connection with search_path")
	} else if !strings.Contains(err.Error(), "search_path") {
		t.Fatalf("refused for another reason: %v", err)
	}
	// Without it, the same database, in the simple protocol.
	u, _ := url.Parse(bounced)
	q := u.Query()
	q.Del("search_path")
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	b, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, BouncerLog())
	}
	defer b.Close(ctx)
	var db string
	if err := b.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || "/"+db != mustParse(t, Admin(t)).Path {
		t.Fatalf("through the bouncer: database %q, %v", db, err)
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

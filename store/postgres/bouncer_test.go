package postgres_test

import (
	"context"
	"net/url"
	"path"
	"testing"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/postgres"
	"github.com/edgerelay/edgerelay/store/storetest"

	"github.com/jackc/pgx/v5"
)

// throughBouncer is dbURL through pgtest's PgBouncer (transaction
// pooling), with the one URL parameter the README tells PgBouncer users
// to add.
func throughBouncer(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(pgtest.Bouncer(t, dbURL))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	return u.String()
}

// slow are the suite's tests skipped through the bouncer, to keep its run
// short: a model check of feeds (several seconds here) and a race of
// posts against mark-all-read (two); the feed tests that run cover the
// same statements, and ListPagesWhileWriting the advisory locks.
var slow = map[string]bool{"UnreadCountMatchesModel": true, "MarkAllWhilePosting": true}

// The conformance suite through a PgBouncer in transaction pooling mode,
// each test in its own schema named by the URL's search_path: the store
// keeps no session state that a transaction relies on (a startup
// parameter, a SET, a prepared statement, a session advisory lock), since
// its next transaction may run on another server connection.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	throughBouncer(t, pgtest.Admin(t)) // one skip line when PgBouncer is missing
	storetest.Run(t, func(t *testing.T) store.Store {
		if slow[path.Base(t.Name())] {
			t.Skip("the slowest of the suite: its statements are those of faster tests, which run here")
		}
		s, err := postgres.Open(t.Context(), throughBouncer(t, migrated.Get(t)), postgres.Options{})
		if err != nil {
			t.Fatalf("%v\npgbouncer log:\n%s", err, pgtest.BouncerLog())
		}
		return s
	})
}

// A PgBouncer told to ignore search_path (ignore_startup_parameters =
// extra_float_digits,search_path, a common setting) drops it unseen: the
// store must still migrate, write and read the URL's schema, not the
// role's default one.
func TestSearchPathThroughIgnoringPgBouncer(t *testing.T) {
	t.Parallel()
	direct := pgtest.Start(t)
	u, err := url.Parse(pgtest.Bouncer(t, direct, "extra_float_digits", "search_path"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	s, err := postgres.Open(t.Context(), u.String(), postgres.Options{})
	if err != nil {
		t.Fatalf("%v\npgbouncer log:\n%s", err, pgtest.BouncerLog())
	}
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(t.Context(), direct)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var version int
	var pinged *int64
	if err := c.QueryRow(t.Context(), `SELECT version, pinged_at FROM schema_version`).Scan(&version, &pinged); err != nil || version != postgres.SchemaVersion() || pinged == nil {
		t.Fatalf("the URL's schema: version %d, pinged_at %v, %v (want version %d, pinged)", version, pinged, err, postgres.SchemaVersion())
	}
}

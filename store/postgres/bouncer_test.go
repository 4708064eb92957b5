package postgres_test

import (
	"net/url"
	"testing"

	"edgerelay/internal/pgtest"
	"edgerelay/store"
	"edgerelay/store/postgres"
	"edgerelay/store/storetest"
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

// The conformance suite through a PgBouncer in transaction pooling mode,
// each test in its own schema named by the URL's search_path: the store
// keeps no session state that a transaction relies on (a startup
// parameter, a SET, a prepared statement, a session advisory lock), since
// its next transaction may run on another server connection.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	throughBouncer(t, pgtest.Admin(t)) // one skip line when PgBouncer is missing
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := postgres.Open(t.Context(), throughBouncer(t, migrated.Get(t)), postgres.Options{})
		if err != nil {
			t.Fatalf("%v\npgbouncer log:\n%s", err, pgtest.BouncerLog())
		}
		return s
	})
}

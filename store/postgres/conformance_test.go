package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/testpar"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/postgres"
	"github.com/edgerelay/edgerelay/store/storetest"
)

func TestMain(m *testing.M) {
	testpar.Raise()
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// migrated is the pool of migrated, empty schemas the suite's stores open:
// migrating a new schema for each of its tests would cost most of the
// suite's time. The migrations have their own tests, on new schemas.
var migrated = pgtest.NewPool(func(url string) error {
	s, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		return err
	}
	return s.Close()
}, "schema_version")

// opener opens a store on an empty schema for each test of the suite (the
// suite closes it).
func opener(opts postgres.Options) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		s, err := postgres.Open(t.Context(), migrated.Get(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// The PostgreSQL store passes the conformance suite every store passes, in
// pgx's default mode (statements prepared and cached) and, with the long
// drills (longtest.Env, which .ci/run sets), in the simple protocol that
// PgBouncer's transaction pooling needs (pgbouncer_test.go runs the relay
// through a real PgBouncer in that mode either way).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts postgres.Options
		long bool
	}{{"prepared", postgres.Options{}, false}, {"simple", postgres.Options{SimpleProtocol: true}, true}} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.long {
				longtest.Require(t)
			}
			t.Parallel()
			storetest.Run(t, opener(mode.opts))
		})
	}
}

package sqlite_test

import (
	"path/filepath"
	"testing"

	"edgerelay/store"
	"edgerelay/store/sqlite"
	"edgerelay/store/storetest"
)

// The SQLite store passes the conformance suite every store passes, each
// subtest on a new file.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "relay.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

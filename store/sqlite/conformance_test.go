package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/sqlite"
	"github.com/edgerelay/edgerelay/store/storetest"
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

package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"edgerelay/store"
	"edgerelay/store/storetest"
)

func openForSuite(t *testing.T) store.Store {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "suite.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceDispatch(t *testing.T) {
	t.Parallel()
	storetest.Dispatch(t, openForSuite)
	storetest.Quarantine(t, openForSuite)
}

package open

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestStore(t *testing.T) {
	t.Parallel()
	st, err := Store(t.Context(), filepath.Join(t.TempDir(), "relay.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for db, want := range map[string]string{
		"":                            "no database given",
		"mysql://app:s3cret@db/relay": "no store for mysql:// URLs",
	} {
		st, err := Store(t.Context(), db, Options{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") || st != nil {
			t.Errorf("%q: %v, %v; want nil and an error saying %q", db, st, err, want)
		}
	}
}

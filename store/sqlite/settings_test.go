package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A secret outlives the process that made it (every restart gives the
// API the same ids), and a file this process cannot write still gives the
// one kept before (show and status open it read-only).
func TestSecretKeptAcrossOpensAndReadOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Secret(t.Context(), "id-key", []byte("first")); err != nil || string(v) != "first" {
		t.Fatalf("first Secret: %q, %v", v, err)
	}
	s.Close()
	s, err = Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Secret(t.Context(), "id-key", []byte("second")); err != nil || string(v) != "first" {
		t.Fatalf("after reopening: %q, %v; want %q", v, err, "first")
	}
	s.Close()
	makeReadOnly(t, path)
	s, err = Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.Secret(t.Context(), "id-key", []byte("third")); err != nil || string(v) != "first" {
		t.Fatalf("read-only: %q, %v; want %q", v, err, "first")
	}
	if _, err := s.Secret(t.Context(), "never-kept", []byte("x")); err == nil {
		t.Fatal("read-only: a new secret was kept")
	}
}

// Processes that start together on a new file (several serve, a cron line)
// race to make a secret: of 4 stores on one file, 4 callers each, every
// caller gets the one value kept.
func TestSecretOneValueAcrossOpens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.db")
	var ss []*Store
	for range 4 {
		s, err := Open(context.Background(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss = append(ss, s)
	}
	got := make([]string, 16)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range got {
		wg.Go(func() {
			<-start
			v, err := ss[i%len(ss)].Secret(t.Context(), "id-key", fmt.Appendf(nil, "fresh-%d", i))
			if err != nil {
				t.Error(err)
			}
			got[i] = string(v)
		})
	}
	close(start)
	wg.Wait()
	for i, v := range got {
		if v != got[0] || !strings.HasPrefix(v, "fresh-") {
			t.Fatalf("caller %d got %q, caller 0 %q: want one of the fresh values, the same for all", i, v, got[0])
		}
	}
}

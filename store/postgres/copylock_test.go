package postgres_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// While migrate-store holds a schema's copy lock, Open refuses the schema
// and a second LockCopy is refused, both naming the holder; another schema
// on the same server is not held; once released both succeed. Through
// PgBouncer in transaction pooling too: the lock is a transaction's, which
// keeps its server connection (a session lock would stay on whichever
// server connection took it).
func TestCopyLock(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"direct", "pgbouncer"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url, other := pgtest.Start(t), pgtest.Start(t)
			if via == "pgbouncer" {
				url, other = throughBouncer(t, url), throughBouncer(t, other)
			}
			s, err := postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			lock, err := postgres.LockCopy(ctx, url, "the first copy")
			if err != nil {
				t.Fatal(err)
			}
			_, err = postgres.Open(ctx, url, postgres.Options{})
			if !errors.Is(err, postgres.ErrCopying) || !strings.Contains(err.Error(), "the first copy") {
				t.Fatalf("Open while a copy holds the schema: %v", err)
			}
			_, err = postgres.LockCopy(ctx, url, "the second copy")
			if !errors.Is(err, postgres.ErrCopying) || !strings.Contains(err.Error(), "the first copy") {
				t.Fatalf("a second LockCopy: %v", err)
			}
			if s, err := postgres.Open(ctx, other, postgres.Options{}); err != nil {
				t.Fatalf("another schema while the first is held: %v", err)
			} else {
				s.Close()
			}
			if err := lock.Check(ctx); err != nil {
				t.Fatal(err)
			}
			lock.Release()
			s, err = postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				t.Fatalf("Open after the copy: %v", err)
			}
			s.Close()
			again, err := postgres.LockCopy(ctx, url, "the third copy")
			if err != nil {
				t.Fatalf("LockCopy after the first's release: %v", err)
			}
			again.Release()
		})
	}
}

package sqlite

import (
	"context"
	"edgerelay/store"
	"errors"
	"fmt"
	"testing"
	"time"
)

func members(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"id":"%s%05d","email":"%s%05d@example.com"}`, prefix, i, prefix, i)
	}
	return out
}

func checkAudience(t *testing.T, s *Store, tenant, name string, want [][]byte) {
	t.Helper()
	got, err := s.Audience(context.Background(), tenant, name)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != len(want) {
		t.Fatalf("audience %s/%s has %d members (nil %v), want %d", tenant, name, len(got), got == nil, len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("audience %s/%s member %d = %s, want %s", tenant, name, i, got[i], want[i])
		}
	}
	if n := count(t, s, `SELECT members FROM audiences WHERE tenant = ? AND name = ?`, tenant, name); n != len(want) {
		t.Fatalf("audience %s/%s counts %d members, want %d", tenant, name, n, len(want))
	}
}

func TestAudienceReplace(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	if _, err := s.Audience(ctx, "default", "staff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing audience: %v, want ErrNotFound", err)
	}
	first := [][]byte{[]byte(`{"id":"c"}`), []byte(`{"id":"a"}`), []byte(`{"id":"b"}`)}
	if err := s.PutAudience(ctx, "default", "staff", first, t0); err != nil {
		t.Fatal(err)
	}
	checkAudience(t, s, "default", "staff", first) // in the order given, not sorted
	// The same name in another tenant is another audience.
	theirs := [][]byte{[]byte(`{"id":"x"}`)}
	if err := s.PutAudience(ctx, "acme", "staff", theirs, t0); err != nil {
		t.Fatal(err)
	}
	// Replacing leaves only the new members, none of the old beyond them.
	second := members("m", 450) // two full multi-row inserts and 50 single ones
	if err := s.PutAudience(ctx, "default", "staff", second, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	checkAudience(t, s, "default", "staff", second)
	third := [][]byte{[]byte(`{"id":"only"}`)}
	if err := s.PutAudience(ctx, "default", "staff", third, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	checkAudience(t, s, "default", "staff", third)
	if n := count(t, s, `SELECT count(*) FROM audience_members WHERE tenant = 'default'`); n != 1 {
		t.Fatalf("%d member rows after replacing with one, want 1", n)
	}
	if n := count(t, s, `SELECT updated_at FROM audiences WHERE tenant = 'default' AND name = 'staff'`); int64(n) != ms(t0.Add(2*time.Minute)) {
		t.Fatalf("updated_at %d", n)
	}
	// No members is an audience, empty, not a missing one.
	if err := s.PutAudience(ctx, "default", "staff", nil, t0); err != nil {
		t.Fatal(err)
	}
	checkAudience(t, s, "default", "staff", [][]byte{})
	checkAudience(t, s, "acme", "staff", theirs)

	if err := s.DeleteAudience(ctx, "acme", "staff"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Audience(ctx, "acme", "staff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted audience: %v, want ErrNotFound", err)
	}
	if n := count(t, s, `SELECT count(*) FROM audience_members WHERE tenant = 'acme'`); n != 0 {
		t.Fatalf("%d members left after delete, want 0 (cascade)", n)
	}
	if err := s.DeleteAudience(ctx, "acme", "staff"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	checkAudience(t, s, "default", "staff", [][]byte{})
}

// Ten thousand members go in (and are replaced) in one writer op.
func TestAudienceTenThousand(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	big := members("u", 10_000)
	start := time.Now()
	if err := s.PutAudience(ctx, "default", "everyone", big, t0); err != nil {
		t.Fatal(err)
	}
	put := time.Since(start)
	start = time.Now()
	got, err := s.Audience(ctx, "default", "everyone")
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	if len(got) != len(big) {
		t.Fatalf("%d members read back, want %d", len(got), len(big))
	}
	checkAudience(t, s, "default", "everyone", big)
	// Replace with 9,999 others: every old row goes, none is left past the end.
	other := members("v", 9_999)
	start = time.Now()
	if err := s.PutAudience(ctx, "default", "everyone", other, t0); err != nil {
		t.Fatal(err)
	}
	replace := time.Since(start)
	checkAudience(t, s, "default", "everyone", other)
	if n := count(t, s, `SELECT count(*) FROM audience_members`); n != 9_999 {
		t.Fatalf("%d member rows, want 9999", n)
	}
	t.Logf("10,000 members: put %s, read %s; replace with 9,999: %s", put, read, replace)
}

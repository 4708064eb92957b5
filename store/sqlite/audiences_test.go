package sqlite

import (
	"context"
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

// The rows behind an audience (its behaviour is in store/storetest):
// replacing leaves no member row of the old list, the audience row keeps
// the count and the time of the last put, and a delete cascades to the
// members.
func TestAudienceRows(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	rows := func(tenant string) int {
		t.Helper()
		return count(t, s, `SELECT count(*) FROM audience_members WHERE tenant = ?`, tenant)
	}
	// 450: two full multi-row inserts and 50 single ones.
	if err := s.PutAudience(ctx, "default", "staff", members("m", 450), t0); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAudience(ctx, "acme", "staff", members("x", 3), t0); err != nil {
		t.Fatal(err)
	}
	if n := rows("default"); n != 450 {
		t.Fatalf("%d member rows, want 450", n)
	}
	if err := s.PutAudience(ctx, "default", "staff", members("o", 1), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := rows("default"); n != 1 {
		t.Fatalf("%d member rows after replacing with one, want 1", n)
	}
	if n := count(t, s, `SELECT members FROM audiences WHERE tenant = 'default' AND name = 'staff'`); n != 1 {
		t.Fatalf("the audience row counts %d members, want 1", n)
	}
	if n := count(t, s, `SELECT updated_at FROM audiences WHERE tenant = 'default' AND name = 'staff'`); int64(n) != ms(t0.Add(time.Minute)) {
		t.Fatalf("updated_at %d, want the last put's", n)
	}
	if err := s.DeleteAudience(ctx, "acme", "staff"); err != nil {
		t.Fatal(err)
	}
	if n := rows("acme"); n != 0 {
		t.Fatalf("%d member rows left after delete, want 0 (cascade)", n)
	}
	if n := rows("default"); n != 1 {
		t.Fatalf("deleting acme's audience left default with %d member rows, want 1", n)
	}
}

package sqlite

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"strings"
	"testing"
	"time"
)

func members(prefix string, n int) []model.Member {
	out := make([]model.Member, n)
	for i := range out {
		id := fmt.Sprintf("%s%05d", prefix, i)
		out[i] = model.Member{ID: id, Doc: fmt.Appendf(nil, `{"id":"%s","email":"%s@example.com"}`, id, id)}
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

// A member is looked up through audience_members_recipient, in seq order
// (the first of members sharing an id), never by reading the audience.
func TestAudienceMemberUsesTheIndex(t *testing.T) {
	t.Parallel()
	s := setup(t)
	if err := s.PutAudience(context.Background(), "default", "everyone", members("m", 3000), t0); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(queryPlan(t, s, audienceMemberSQL, "default", "everyone", "m02999"), "\n")
	if !strings.Contains(text, "INDEX audience_members_recipient (tenant=? AND audience=? AND recipient_id=?)") {
		t.Errorf("the member lookup does not read audience_members_recipient by recipient id:\n%s", text)
	}
	if strings.Contains(text, "TEMP B-TREE") {
		t.Errorf("the member lookup sorts instead of reading the index in seq order:\n%s", text)
	}
	t.Logf("member lookup:\n%s", text)
}

// A database from before the recipient-id migration, with an audience,
// is brought forward with its members: each gets the id its JSON holds,
// a lookup finds it (the first in order of two sharing an id), and the
// members read back whole and in order.
func TestMigrationGivesAudienceMembersTheirIDs(t *testing.T) {
	t.Parallel()
	path, db, before := schemaBefore(t, "_audience_member_ids.sql")
	if before < 2 {
		t.Fatalf("the audience member ids migration is number %d", before+1)
	}
	if _, err := db.Exec(`
		INSERT INTO audiences (tenant, name, members, updated_at) VALUES ('acme', 'team', 4, 1000), ('beta', 'team', 1, 1000);
		INSERT INTO audience_members (tenant, audience, seq, recipient) VALUES
			('acme', 'team', 0, '{"id":"ada","email":"ada@example.com"}'), ('acme', 'team', 1, '{"email":"noid@example.com"}'),
			('acme', 'team', 2, '{"id":"bob","phone":"+15550100"}'), ('acme', 'team', 3, '{"id":"ada","email":"second@example.com"}'),
			('beta', 'team', 0, '{"id":"bob"}')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct{ tenant, id, want string }{
		{"acme", "ada", `{"id":"ada","email":"ada@example.com"}`},
		{"acme", "bob", `{"id":"bob","phone":"+15550100"}`},
		{"acme", "carl", ""},
		{"beta", "bob", `{"id":"bob"}`},
		{"beta", "ada", ""},
	} {
		got, err := s.AudienceMember(context.Background(), c.tenant, "team", c.id)
		if err != nil || string(got) != c.want {
			t.Errorf("member %s of %s/team: %s, %v; want %q", c.id, c.tenant, got, err, c.want)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM audience_members WHERE tenant = 'acme' AND recipient_id = ''`); n != 1 {
		t.Errorf("%d members with no id, want 1 (the one whose JSON has none)", n)
	}
	got, err := s.Audience(context.Background(), "acme", "team")
	if err != nil || len(got) != 4 || string(got[1]) != `{"email":"noid@example.com"}` || string(got[3]) != `{"id":"ada","email":"second@example.com"}` {
		t.Errorf("acme/team after migrating: %q, %v; want the four members in order", got, err)
	}
}

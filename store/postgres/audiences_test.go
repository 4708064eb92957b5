package postgres_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/internal/pgtest"
)

// A schema from before the recipient-id migration, with an audience, is
// brought forward with its members, as SQLite's is: each gets the id its
// JSON holds, a lookup finds it (the first in order of two sharing an
// id), and the members read back whole and in order.
func TestMigrationGivesAudienceMembersTheirIDs(t *testing.T) {
	t.Parallel()
	u := pgtest.Start(t)
	c := conn(t, u)
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	before := -1 // how many migrations come before the recipient ids'
	for i, f := range files {
		if strings.HasSuffix(f, "_audience_member_ids.sql") {
			before = i
		}
	}
	if before < 2 {
		t.Fatalf("no audience member ids migration in %v", files)
	}
	if _, err := c.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE schema_version (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL, pinged_at bigint);
		INSERT INTO schema_version (version) VALUES (%d)`, before)); err != nil {
		t.Fatal(err)
	}
	for _, f := range files[:before] {
		b, _ := os.ReadFile(f)
		if _, err := c.Exec(t.Context(), string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if _, err := c.Exec(t.Context(), `INSERT INTO audiences (tenant, name, members, updated_at) VALUES ('acme', 'team', 4, 1000), ('beta', 'team', 1, 1000);
		INSERT INTO audience_members (tenant, audience, seq, recipient) VALUES
			('acme', 'team', 0, '{"id":"ada","email":"ada@example.com"}'), ('acme', 'team', 1, '{"email":"noid@example.com"}'),
			('acme', 'team', 2, '{"id":"bob","phone":"+15550100"}'), ('acme', 'team', 3, '{"id":"ada","email":"second@example.com"}'),
			('beta', 'team', 0, '{"id":"bob"}')`); err != nil {
		t.Fatal(err)
	}
	s := open(t, u)
	for _, c := range []struct{ tenant, id, want string }{
		{"acme", "ada", `{"id":"ada","email":"ada@example.com"}`},
		{"acme", "bob", `{"id":"bob","phone":"+15550100"}`},
		{"acme", "carl", ""},
		{"beta", "bob", `{"id":"bob"}`},
		{"beta", "ada", ""},
	} {
		got, err := s.AudienceMember(t.Context(), c.tenant, "team", c.id)
		if err != nil || string(got) != c.want {
			t.Errorf("member %s of %s/team: %s, %v; want %q", c.id, c.tenant, got, err, c.want)
		}
	}
	var noID int
	if err := c.QueryRow(t.Context(), `SELECT count(*) FROM audience_members WHERE tenant = 'acme' AND recipient_id = ''`).Scan(&noID); err != nil || noID != 1 {
		t.Errorf("%d members with no id (%v), want 1 (the one whose JSON has none)", noID, err)
	}
	got, err := s.Audience(t.Context(), "acme", "team")
	if err != nil || len(got) != 4 || string(got[1]) != `{"email":"noid@example.com"}` || string(got[3]) != `{"id":"ada","email":"second@example.com"}` {
		t.Errorf("acme/team after migrating: %q, %v; want the four members in order", got, err)
	}
}

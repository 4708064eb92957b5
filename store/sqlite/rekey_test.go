package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"github.com/edgerelay/edgerelay/model"
	"testing"
)

// A database at 0023 with suppression entries and notifications keyed the
// old way (ASCII letters lower-cased, nothing else) is brought to the
// normal form by 0024: three spellings of jörg merge into the entry that
// never expires, an A-label domain becomes its U-label, and the
// notifications' keys are rewritten so the entry stops them.
func TestMigrationRekeysSuppressions(t *testing.T) {
	t.Parallel()
	path, db, before := schemaBefore(t, "_address_normal_form.sql")
	if before != 23 {
		t.Fatalf("the normal form migration is number %d, want 24", before+1)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO events (id, tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
		VALUES (7, 'acme', 'e', 'p', 't', '{}', '{}', 'fp', 4, 1, 1000)`)
	for _, n := range []struct {
		id            int
		address, akey any
	}{
		{11, "Jo\u0308rg@Example.com", "jo\u0308rg@example.com"},
		{12, "JÖRG@example.com", "jÖrg@example.com"},
		{13, "jörg@example.com", nil},
		{14, "ada@example.com", nil},
	} {
		exec(`INSERT INTO notifications (id, key, event, seq, tenant, type, recipient, channel, address, address_key, status, next_attempt_at, cycle_started_at, created_at, updated_at)
			VALUES (?, ?, 7, ?, 'acme', 't', 'r', 'email', ?, ?, 'failed', 1000, 1000, 1000, 1000)`, n.id, n.id, n.id, n.address, n.akey)
	}
	for _, e := range []struct {
		tenant, address, reason string
		created                 int64
		expires                 any
	}{
		{"acme", "jörg@example.com", "hard_bounce", 1000, 2000},
		{"acme", "jo\u0308rg@example.com", "complaint", 900, nil}, // never expires: kept
		{"acme", "jÖrg@example.com", "soft_bounce", 1100, 5000},
		{"acme", "ada@xn--jrg-sna.example", "manual", 1000, nil},
		{"acme", "bob@example.com", "manual", 1000, nil},
		{"other", "jörg@example.com", "manual", 1000, 3000},
	} {
		exec(`INSERT INTO suppressions (tenant, channel, address, reason, source, created_at, expires_at) VALUES (?, 'email', ?, ?, 'api', ?, ?)`,
			e.tenant, e.address, e.reason, e.created, e.expires)
	}
	db.Close()

	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]string{}
	for _, tenant := range []string{"acme", "other"} {
		es, err := s.Suppressions(context.Background(), model.SuppressionFilter{Tenant: tenant}, fromMS(0))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			exp := "never"
			if e.ExpiresAt != nil {
				exp = e.ExpiresAt.Format("15:04:05.000")
			}
			got[tenant+" "+e.Address] = e.Reason + " " + exp
		}
	}
	want := map[string]string{
		"acme jörg@example.com":  "complaint never",
		"acme ada@jörg.example":  "manual never",
		"acme bob@example.com":   "manual never",
		"other jörg@example.com": "manual 00:00:03.000",
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("entry %q = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	for id, want := range map[int]any{11: "jörg@example.com", 12: "jörg@example.com", 13: nil, 14: nil} {
		var k sql.NullString
		if err := s.rdb.QueryRow(`SELECT address_key FROM notifications WHERE id = ?`, id).Scan(&k); err != nil {
			t.Fatal(err)
		}
		if w, _ := want.(string); k.String != w || k.Valid != (want != nil) {
			t.Errorf("notification %d address_key = %v, want %v", id, k, want)
		}
	}
	for _, id := range []int64{11, 12, 13} {
		var se *model.SuppressedError
		if err := s.Retry(context.Background(), "acme", id, false, t0); !errors.As(err, &se) {
			t.Errorf("retry of notification %d: %v, want a SuppressedError", id, err)
		}
	}
}

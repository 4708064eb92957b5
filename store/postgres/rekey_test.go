package postgres_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/model"
)

// A schema at 0023 with suppression entries and notifications keyed the
// old way (ASCII letters lower-cased, nothing else) is brought to the
// normal form by 0024 (store/sqlite's TestMigrationRekeysSuppressions,
// here).
func TestMigrationRekeysSuppressions(t *testing.T) {
	t.Parallel()
	u := pgtest.Start(t)
	c := conn(t, u)
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) < 24 {
		t.Fatalf("migrations %v, %v", files, err)
	}
	sort.Strings(files)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := c.Exec(t.Context(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE schema_version (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL, pinged_at bigint);
		INSERT INTO schema_version (version) VALUES (23)`)
	for _, f := range files[:23] {
		b, _ := os.ReadFile(f)
		exec(string(b))
	}
	exec(`INSERT INTO events (id, tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
		VALUES (7, 'acme', 'e', 'p', 't', '\x7b7d', '\x7b7d', 'fp', 4, 1, 1000)`)
	for _, n := range []struct {
		id            int64
		address, akey any
	}{
		{11, "Jo\u0308rg@Example.com", "jo\u0308rg@example.com"},
		{12, "JÖRG@example.com", "jÖrg@example.com"},
		{13, "jörg@example.com", nil},
		{14, "ada@example.com", nil},
	} {
		exec(`INSERT INTO notifications (id, key, event, seq, tenant, type, recipient, channel, address, address_key, status, next_attempt_at, cycle_started_at, created_at, updated_at)
			VALUES ($1, $4, 7, $5, 'acme', 't', 'r', 'email', $2, $3, 'failed', 1000, 1000, 1000, 1000)`, n.id, n.address, n.akey, fmt.Sprint(n.id), int32(n.id))
	}
	for _, e := range []struct {
		tenant, address, reason string
		created                 int64
		expires                 any
	}{
		{"acme", "jörg@example.com", "hard_bounce", 1000, int64(2000)},
		{"acme", "jo\u0308rg@example.com", "complaint", 900, nil}, // never expires: kept
		{"acme", "jÖrg@example.com", "soft_bounce", 1100, int64(5000)},
		{"acme", "ada@xn--jrg-sna.example", "manual", 1000, nil},
		{"acme", "bob@example.com", "manual", 1000, nil},
		{"other", "jörg@example.com", "manual", 1000, int64(3000)},
	} {
		exec(`INSERT INTO suppressions (tenant, channel, address, reason, source, created_at, expires_at) VALUES ($1, 'email', $2, $3, 'api', $4, $5)`,
			e.tenant, e.address, e.reason, e.created, e.expires)
	}

	s := open(t, u)
	got := map[string]string{}
	for _, tenant := range []string{"acme", "other"} {
		es, err := s.Suppressions(t.Context(), model.SuppressionFilter{Tenant: tenant}, time.UnixMilli(0))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			exp := "never"
			if e.ExpiresAt != nil {
				exp = e.ExpiresAt.UTC().Format("15:04:05.000")
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
	for id, want := range map[int64]*string{11: ptr("jörg@example.com"), 12: ptr("jörg@example.com"), 13: nil, 14: nil} {
		var k *string
		if err := c.QueryRow(t.Context(), `SELECT address_key FROM notifications WHERE id = $1`, id).Scan(&k); err != nil {
			t.Fatal(err)
		}
		if (k == nil) != (want == nil) || (k != nil && *k != *want) {
			t.Errorf("notification %d address_key = %v, want %v", id, k, want)
		}
	}
	for _, id := range []int64{11, 12, 13} {
		var se *model.SuppressedError
		if err := s.Retry(t.Context(), "acme", id, false, time.UnixMilli(10000)); !errors.As(err, &se) {
			t.Errorf("retry of notification %d: %v, want a SuppressedError", id, err)
		}
	}
}

func ptr(s string) *string { return &s }

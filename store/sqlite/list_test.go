package sqlite

import (
	"context"
	"database/sql"
	"github.com/edgerelay/edgerelay/model"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// acceptFor accepts event id for tenant with n recipients r0…r(n-1); keys
// are prefixed with the tenant so tenants can share event ids.
func acceptFor(t *testing.T, s *Store, tenant, id string, n int) int64 {
	t.Helper()
	ev, ts := testEvent(id, n)
	ev.Tenant = tenant
	for i := range ts {
		ts[i].Key = tenant + "/" + ts[i].Key
	}
	a, err := s.AcceptEvent(context.Background(), ev, ts, t0)
	if err != nil {
		t.Fatal(err)
	}
	return a.EventRow
}

// The pages the API serves must stay range reads on an index. A change to
// the schema or the query that turns one into a table scan, or a sort of
// everything the filter matches, fails here.
func TestListUsesIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	row := acceptFor(t, s, "a", "e", 5)
	type listCase struct {
		f      model.ListFilter
		index  string // the index that must serve it
		sorted bool   // it gives id order: no temp b-tree
	}
	cases := []listCase{
		{model.ListFilter{Tenant: "a"}, "notifications_tenant", true},
		{model.ListFilter{Tenant: "a", Status: model.StatusPending}, "notifications_tenant_status", true},
		{model.ListFilter{Tenant: "a", Recipient: "r1"}, "notifications_recipient", true},
		{model.ListFilter{Tenant: "a", Status: model.StatusPending, Recipient: "r1"}, "notifications_recipient", true},
		{model.ListFilter{Tenant: "a", EventRow: row}, "notifications_event", true},
		{model.ListFilter{Status: model.StatusPending}, "notifications_status", true},
		{model.ListFilter{EventRow: row}, "notifications_event", true},
		// Across tenants the recipient index is read for that recipient and
		// sorted: a recipient's rows, still no scan.
		{model.ListFilter{Recipient: "r1"}, "notifications_recipient", false},
		{model.ListFilter{Status: model.StatusPending, Recipient: "r1"}, "notifications_recipient", false},
		// The console's filters: an address has its index, a tenant's type
		// too; an event id is read through its event rows (any purpose),
		// sorted across them; a creation range bounds the ids (below).
		{model.ListFilter{Tenant: "a", Address: "r1@example.com"}, "notifications_address", true},
		{model.ListFilter{Tenant: "a", Status: model.StatusDead, Address: "r1@example.com"}, "notifications_address", true},
		{model.ListFilter{Tenant: "a", Recipient: "r1", Address: "r1@example.com"}, "notifications_address", true},
		{model.ListFilter{Address: "r1@example.com"}, "notifications_address", false},
		{model.ListFilter{Tenant: "a", EventID: "e"}, "notifications_event", false},
		{model.ListFilter{Tenant: "a", EventID: "e", Status: model.StatusDead}, "notifications_event", false},
		{model.ListFilter{Tenant: "a", Type: "payment"}, "notifications_type", true},
		{model.ListFilter{Tenant: "a", Type: "payment", Status: model.StatusDead}, "notifications_type", true},
		{model.ListFilter{Tenant: "a", CreatedBefore: time.UnixMilli(1)}, "notifications_tenant", true},
	}
	// A time filter is checked on the rows the others select: each keeps
	// its index and order. Alone, it reads the table in id order from the
	// cursor (a range on the primary key, not a sort).
	since := time.UnixMilli(1)
	for _, c := range cases {
		for _, f := range []model.ListFilter{{UpdatedSince: since}, {CreatedSince: since}, {UpdatedSince: since, CreatedSince: since}} {
			f.Tenant, f.Status, f.Recipient, f.EventRow = c.f.Tenant, c.f.Status, c.f.Recipient, c.f.EventRow
			f.Address, f.EventID, f.Type, f.CreatedBefore = c.f.Address, c.f.EventID, c.f.Type, c.f.CreatedBefore
			cases = append(cases, listCase{f, c.index, c.sorted}) // range read cases once: these are not ranged over here
		}
	}
	// A tenant's creation range, without a filter of few rows, bounds the
	// ids the walk reads by the least and greatest id created in it, each
	// found on the (tenant, created_at) index alone.
	for _, f := range []model.ListFilter{
		{Tenant: "a", CreatedSince: since}, {Tenant: "a", CreatedBefore: since}, {Tenant: "a", CreatedSince: since, CreatedBefore: since},
		{Tenant: "a", Type: "payment", CreatedSince: since, CreatedBefore: since},
		{Tenant: "a", Status: model.StatusDead, CreatedSince: since, CreatedBefore: since},
	} {
		q, args := listQuery(f)
		text := strings.Join(queryPlan(t, s, q, args...), "\n")
		// (With a status SQLite may read notifications_status, (status,
		// id), within the bounds: still a range of ids.)
		bounds := regexp.MustCompile(`SEARCH n USING INDEX \w+ \(.*id>\?\)`)
		if !f.CreatedBefore.IsZero() {
			bounds = regexp.MustCompile(`SEARCH n USING INDEX \w+ \(.*id>\? AND (row)?id<\?\)`)
		}
		if !bounds.MatchString(text) || !strings.Contains(text, "USING COVERING INDEX notifications_created (tenant=?") ||
			strings.Contains(text, "TEMP B-TREE") || strings.Contains(text, "SCAN ") {
			t.Errorf("%+v does not bound its ids by the creation index:\n%s", f, text)
		}
	}
	for _, f := range []model.ListFilter{{UpdatedSince: since}, {CreatedSince: since}} {
		q, args := listQuery(f)
		text := strings.Join(queryPlan(t, s, q, args...), "\n")
		if !strings.HasPrefix(text, "SEARCH n USING INTEGER PRIMARY KEY (rowid>?)") || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%+v does not read the table in id order from the cursor:\n%s", f, text)
		}
	}
	bothEnds := regexp.MustCompile(`SEARCH n USING INDEX \w+ \(.*id>\? AND (row)?id<\?\)`)
	for _, c := range cases {
		for _, after := range []int64{0, 3} {
			for _, newest := range []bool{false, true} { // the console's search reads newest first
				c.f.After, c.f.Newest = after, newest
				q, args := listQuery(c.f)
				plan := queryPlan(t, s, q, args...)
				text := strings.Join(plan, "\n")
				for _, line := range plan {
					if strings.HasPrefix(line, "SCAN ") {
						t.Errorf("%+v scans:\n%s", c.f, text)
					}
				}
				if newest && c.f.Tenant != "" && !c.f.CreatedSince.IsZero() && !fewRows(c.f) {
					// Newest first in a tenant's creation range, the ids are
					// bounded at both ends (the cursor or the range's
					// greatest, the range's least): SQLite reads an index of
					// the tenant's or the status's between them, in id order.
					if !bothEnds.MatchString(text) {
						t.Errorf("%+v does not read a range of ids bounded at both ends:\n%s", c.f, text)
					}
				} else if !strings.Contains(text, "SEARCH n USING INDEX "+c.index+" (") {
					t.Errorf("%+v does not search %s:\n%s", c.f, c.index, text)
				}
				if c.sorted && strings.Contains(text, "TEMP B-TREE") {
					t.Errorf("%+v sorts instead of reading an index in id order:\n%s", c.f, text)
				}
			}
		}
	}
}

// A database written by the first release (schema version 1), built by hand
// from 0001 alone, opens at the current version with its rows intact and
// the new tables in use.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	v1, err := os.ReadFile("migrations/0001_core.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		string(v1),
		`PRAGMA user_version = 1`,
		`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
			VALUES ('default', 'evt_old', 'receipt', 'payment', '{}', '{"subject":"old"}', 'fp', 1, 1, 1000)`,
		`INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, status,
				attempts, cycle_attempts, cycle_started_at, next_attempt_at, provider, provider_message_id, created_at, updated_at)
			VALUES ('old-key', 1, 0, 'default', 'payment', 'r0', 'email', 'r0@example.com', 'sent',
				1, 1, 1000, 1000, 'smtp', 'msg-1', 1000, 2000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := count(t, s, `PRAGMA user_version`); v != SchemaVersion() || v < 2 {
		t.Fatalf("user_version %d after open, want %d (at least 2)", v, SchemaVersion())
	}
	n, err := s.Notification(ctx, "default", 0, "old-key")
	if err != nil {
		t.Fatal(err)
	}
	if n.EventID != "evt_old" || n.Status != model.StatusSent || n.ProviderMessageID != "msg-1" || n.UpdatedAt != fromMS(2000) {
		t.Fatalf("old notification after migration: %+v", n)
	}
	// The new indexes cover the old rows.
	row, err := s.EventRow(ctx, "default", "evt_old", "receipt")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []model.ListFilter{{Tenant: "default", Status: model.StatusSent}, {Tenant: "default", Recipient: "r0"}, {EventRow: row}} {
		f.Limit = 10
		got, err := s.ListNotifications(ctx, f)
		if err != nil || len(got) != 1 || got[0].Key != "old-key" {
			t.Fatalf("%+v after migration: %+v, %v", f, got, err)
		}
	}
	// And the new tables work.
	if _, err := s.CreateToken(ctx, "default", "ci", "h", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAudience(ctx, "default", "all", []model.Member{{ID: "r0", Doc: []byte(`{"id":"r0"}`)}}, t0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Audience(ctx, "default", "all"); err != nil || len(got) != 1 {
		t.Fatalf("audience after migration: %q, %v", got, err)
	}
	k := model.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	if err := s.SaveResponse(ctx, k, model.StoredResponse{Status: 200}, t0, time.Hour); err != nil {
		t.Fatalf("save a response after migration: %v", err)
	}
	// New events keep numbering after the old ones.
	if a := acceptFor(t, s, "default", "evt_new", 1); a <= row {
		t.Fatalf("new event row %d, old %d", a, row)
	}
}

// A type and a status read the status's index when the status holds few
// rows (ListNotifications counts them first), else the type's: a page of
// dead digests must not walk every digest, nor one of sent digests every
// sent notification.
func TestListTypeAndStatusIndex(t *testing.T) {
	s := setup(t)
	f := model.ListFilter{Tenant: "a", Type: "digest", Status: model.StatusDead, Limit: 50}
	for _, c := range []struct {
		statusFew bool
		index     string
	}{{true, "notifications_tenant_status"}, {false, "notifications_type"}} {
		q, args := listQueryWith(f, c.statusFew)
		text := strings.Join(queryPlan(t, s, q, args...), "\n")
		if !strings.Contains(text, "SEARCH n USING INDEX "+c.index+" (") || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("statusFew=%v: want a range on %s:\n%s", c.statusFew, c.index, text)
		}
	}
}

// The overview counts a tenant's notifications on the (tenant, status)
// index alone, and finds its oldest due one among its pending rows on the
// same index: neither reads the other tenants' rows.
func TestOverviewQueriesUseIndexes(t *testing.T) {
	s := setup(t)
	count, due, args := overviewCounts("acme")
	for q, want := range map[string]string{count: "USING COVERING INDEX notifications_tenant_status (tenant=?)", due: "USING INDEX notifications_tenant_status (tenant=? AND status=?)"} {
		text := strings.Join(queryPlan(t, s, q, args...), "\n")
		if !strings.Contains(text, want) || strings.Contains(text, "SCAN notifications\n") || strings.HasSuffix(text, "SCAN notifications") {
			t.Errorf("%s\nwant %s:\n%s", q, want, text)
		}
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"edgerelay/store"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

func setStatus(t *testing.T, s *Store, status string, ids ...int64) {
	t.Helper()
	err := s.w.do(context.Background(), func(tx *Tx) error {
		for _, id := range ids {
			if _, err := tx.exec(`UPDATE notifications SET status = ? WHERE id = ?`, status, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func ids(ns []store.Notification) []int64 {
	out := make([]int64, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// pages lists everything f matches, limit rows at a time, calling between
// after each page.
func pages(t *testing.T, s *Store, f store.ListFilter, between func(page int)) []store.Notification {
	t.Helper()
	var all []store.Notification
	for page := 0; ; page++ {
		ns, err := s.ListNotifications(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) > f.Limit {
			t.Fatalf("page of %d, limit %d", len(ns), f.Limit)
		}
		if len(ns) == 0 {
			return all
		}
		all = append(all, ns...)
		f.After = ns[len(ns)-1].ID
		if between != nil {
			between(page)
		}
	}
}

// New notifications written between pages land after the cursor: paging
// to the end returns every row exactly once, in id order.
func TestListPagesNeitherSkipNorRepeat(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for i := range 3 {
		acceptFor(t, s, "a", fmt.Sprintf("e%d", i), 4)
	}
	acceptFor(t, s, "b", "e0", 4)
	written := 0
	for _, f := range []store.ListFilter{{Limit: 3}, {Tenant: "a", Limit: 3}, {Tenant: "a", Recipient: "r1", Limit: 1}} {
		got := pages(t, s, f, func(page int) {
			if page < 4 { // writes for both tenants while paging
				written++
				acceptFor(t, s, "a", fmt.Sprintf("new%d", written), 2)
				acceptFor(t, s, "b", fmt.Sprintf("new%d", written), 2)
			}
		})
		q := `SELECT count(*) FROM notifications WHERE (?1 = '' OR tenant = ?1) AND (?2 = '' OR recipient = ?2)`
		want := count(t, s, q, f.Tenant, f.Recipient)
		if len(got) != want {
			t.Fatalf("%+v: paged %d rows, want %d", f, len(got), want)
		}
		gotIDs := ids(got)
		if !slices.IsSorted(gotIDs) || len(slices.Compact(slices.Clone(gotIDs))) != len(gotIDs) {
			t.Fatalf("%+v: ids out of order or repeated: %v", f, gotIDs)
		}
		for _, n := range got {
			if n.AttemptLog != nil {
				t.Fatalf("%+v: attempt log filled in a listing", f)
			}
			if f.Tenant != "" && n.Tenant != f.Tenant || f.Recipient != "" && n.Recipient != f.Recipient {
				t.Fatalf("%+v: returned %+v", f, n)
			}
		}
	}
}

// Every filter, alone and combined, returns exactly what it names, and a
// Tenant never lets another tenant's row through.
func TestListFilters(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	// Two tenants with the same event ids and recipient ids.
	rows := map[string]int64{}
	for _, tenant := range []string{"a", "b"} {
		for _, id := range []string{"e1", "e2"} {
			rows[tenant+"/"+id] = acceptFor(t, s, tenant, id, 3)
		}
	}
	all, err := s.ListNotifications(ctx, store.ListFilter{Limit: store.MaxListLimit})
	if err != nil || len(all) != 12 {
		t.Fatalf("listed %d, %v; want 12", len(all), err)
	}
	// Some sent, one failed, in each tenant.
	setStatus(t, s, store.StatusSent, all[0].ID, all[1].ID, all[6].ID)
	setStatus(t, s, store.StatusFailed, all[4].ID, all[9].ID)
	all, _ = s.ListNotifications(ctx, store.ListFilter{Limit: store.MaxListLimit})
	if all[0].EventID != "e1" || all[0].Purpose != "receipt" || all[0].Tenant != "a" || all[0].Status != store.StatusSent {
		t.Fatalf("first notification %+v", all[0])
	}

	match := func(f store.ListFilter, n store.Notification) bool {
		return (f.Tenant == "" || n.Tenant == f.Tenant) && (f.Status == "" || n.Status == f.Status) &&
			(f.Recipient == "" || n.Recipient == f.Recipient) &&
			(f.EventRow == 0 || rows[n.Tenant+"/"+n.EventID] == f.EventRow)
	}
	var filters []store.ListFilter
	for _, tenant := range []string{"", "a", "b", "c"} {
		for _, status := range []string{"", store.StatusPending, store.StatusSent, store.StatusFailed} {
			for _, rcpt := range []string{"", "r0", "nobody"} {
				for _, ev := range []int64{0, rows["a/e1"], rows["b/e2"]} {
					filters = append(filters, store.ListFilter{Tenant: tenant, Status: status, Recipient: rcpt, EventRow: ev})
				}
			}
		}
	}
	nonEmpty := 0
	for _, f := range filters {
		var want []int64
		for _, n := range all {
			if match(f, n) {
				want = append(want, n.ID)
			}
		}
		for _, limit := range []int{1, store.MaxListLimit} { // one page, and a page per row
			f.Limit = limit
			got := ids(pages(t, s, f, nil))
			if !slices.Equal(got, want) {
				t.Fatalf("%+v: got %v, want %v", f, got, want)
			}
		}
		if len(want) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty < 30 {
		t.Fatalf("only %d of %d filters matched anything: the fixture is too thin", nonEmpty, len(filters))
	}
	// Spot checks that do not go through the model.
	got, _ := s.ListNotifications(ctx, store.ListFilter{Tenant: "a", Recipient: "r0", Limit: 10})
	if len(got) != 2 || got[0].Tenant != "a" || got[1].Tenant != "a" || got[0].Recipient != "r0" {
		t.Fatalf("tenant a, r0: %+v", got)
	}
	got, _ = s.ListNotifications(ctx, store.ListFilter{Tenant: "a", EventRow: rows["b/e1"], Limit: 10})
	if len(got) != 0 {
		t.Fatalf("tenant a asked for tenant b's event and got %d rows", len(got))
	}
}

func TestListLimit(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	acceptFor(t, s, "a", "big", store.MaxListLimit+100)
	for _, c := range []struct{ limit, want int }{{0, defaultListLimit}, {-1, defaultListLimit}, {7, 7}, {5000, store.MaxListLimit}} {
		got, err := s.ListNotifications(ctx, store.ListFilter{Limit: c.limit})
		if err != nil || len(got) != c.want {
			t.Fatalf("limit %d: %d rows, %v; want %d", c.limit, len(got), err, c.want)
		}
	}
	got, err := s.ListNotifications(ctx, store.ListFilter{Tenant: "nobody"})
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty page = %#v, %v; want an empty list", got, err)
	}
}

// The pages the API serves must stay range reads on an index. A change to
// the schema or the query that turns one into a table scan, or a sort of
// everything the filter matches, fails here.
func TestListUsesIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	row := acceptFor(t, s, "a", "e", 5)
	cases := []struct {
		f      store.ListFilter
		index  string // the index that must serve it
		sorted bool   // it gives id order: no temp b-tree
	}{
		{store.ListFilter{Tenant: "a"}, "notifications_tenant", true},
		{store.ListFilter{Tenant: "a", Status: store.StatusPending}, "notifications_tenant_status", true},
		{store.ListFilter{Tenant: "a", Recipient: "r1"}, "notifications_recipient", true},
		{store.ListFilter{Tenant: "a", Status: store.StatusPending, Recipient: "r1"}, "notifications_recipient", true},
		{store.ListFilter{Tenant: "a", EventRow: row}, "notifications_event", true},
		{store.ListFilter{Status: store.StatusPending}, "notifications_status", true},
		{store.ListFilter{EventRow: row}, "notifications_event", true},
		// Across tenants the recipient index is read for that recipient and
		// sorted: a recipient's rows, still no scan.
		{store.ListFilter{Recipient: "r1"}, "notifications_recipient", false},
		{store.ListFilter{Status: store.StatusPending, Recipient: "r1"}, "notifications_recipient", false},
	}
	for _, c := range cases {
		for _, after := range []int64{0, 3} {
			c.f.After = after
			q, args := listQuery(c.f)
			plan := queryPlan(t, s, q, args...)
			text := strings.Join(plan, "\n")
			for _, line := range plan {
				if strings.HasPrefix(line, "SCAN ") {
					t.Errorf("%+v scans:\n%s", c.f, text)
				}
			}
			if !strings.Contains(text, "SEARCH n USING INDEX "+c.index+" (") {
				t.Errorf("%+v does not search %s:\n%s", c.f, c.index, text)
			}
			if c.sorted && strings.Contains(text, "TEMP B-TREE") {
				t.Errorf("%+v sorts instead of reading an index in id order:\n%s", c.f, text)
			}
		}
	}
}

func TestEventRow(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	a := acceptFor(t, s, "a", "evt", 1)
	b := acceptFor(t, s, "b", "evt", 1)
	if got, err := s.EventRow(ctx, "a", "evt", "receipt"); err != nil || got != a {
		t.Fatalf("EventRow(a) = %d, %v; want %d", got, err, a)
	}
	if got, err := s.EventRow(ctx, "b", "evt", "receipt"); err != nil || got != b {
		t.Fatalf("EventRow(b) = %d, %v; want %d", got, err, b)
	}
	for _, c := range [][3]string{{"c", "evt", "receipt"}, {"a", "other", "receipt"}, {"a", "evt", "reminder"}, {"", "evt", "receipt"}} {
		if _, err := s.EventRow(ctx, c[0], c[1], c[2]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("EventRow%v: %v, want ErrNotFound", c, err)
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
	if n.EventID != "evt_old" || n.Status != store.StatusSent || n.ProviderMessageID != "msg-1" || n.UpdatedAt != fromMS(2000) {
		t.Fatalf("old notification after migration: %+v", n)
	}
	// The new indexes cover the old rows.
	row, err := s.EventRow(ctx, "default", "evt_old", "receipt")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []store.ListFilter{{Tenant: "default", Status: store.StatusSent}, {Tenant: "default", Recipient: "r0"}, {EventRow: row}} {
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
	if err := s.PutAudience(ctx, "default", "all", [][]byte{[]byte(`{"id":"r0"}`)}, t0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Audience(ctx, "default", "all"); err != nil || len(got) != 1 {
		t.Fatalf("audience after migration: %q, %v", got, err)
	}
	k := store.RequestKey{Tenant: "default", Key: "k", Fingerprint: "fp"}
	if err := s.SaveResponse(ctx, k, store.StoredResponse{Status: 200}, t0, time.Hour); err != nil {
		t.Fatalf("save a response after migration: %v", err)
	}
	// New events keep numbering after the old ones.
	if a := acceptFor(t, s, "default", "evt_new", 1); a <= row {
		t.Fatalf("new event row %d, old %d", a, row)
	}
}

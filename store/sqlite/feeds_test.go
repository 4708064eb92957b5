package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The feed behaviours every store has are the conformance suite's
// (store/storetest/feeds.go, jobs.go); what stays here is SQLite's own:
// its query plans and the migration to per-tenant sequences.

// feedPost posts event id to feeds in tenant and returns each feed's item
// seq, read from the table.
func feedPost(ctx context.Context, s *Store, tenant, id string, feeds ...string) (map[string]int64, error) {
	acc, err := s.AcceptEvent(ctx, model.NewEvent{Tenant: tenant, EventID: id, Purpose: "feed", Type: "note",
		Payload: []byte(`{}`), Message: []byte(`{"subject":"` + id + `"}`), Fingerprint: "fp-" + id,
		Feeds: feeds, Targets: 0}, nil, t0)
	if err != nil {
		return nil, fmt.Errorf("post %s: %w", id, err)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT feed, seq FROM feed_items WHERE event = ?`, acc.EventRow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var f string
		var seq int64
		if err := rows.Scan(&f, &seq); err != nil {
			return nil, err
		}
		out[f] = seq
	}
	return out, rows.Err()
}

// post1 posts event id to one feed and returns the item's seq.
func post1(t *testing.T, s *Store, tenant, id, feed string) int64 {
	t.Helper()
	got, err := feedPost(context.Background(), s, tenant, id, feed)
	if err != nil {
		t.Fatal(err)
	}
	seq, ok := got[feed]
	if !ok || len(got) != 1 {
		t.Fatalf("post %s to %q: items %v", id, feed, got)
	}
	return seq
}

func feedView(t *testing.T, s *Store, tenant, user string) ([]model.FeedItem, int64) {
	t.Helper()
	items, mark, err := s.FeedPage(context.Background(), tenant, user, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return items, mark
}

func setMembers(t *testing.T, s *Store, tenant, feed string, history bool, users ...string) {
	t.Helper()
	if err := s.SetFeedMembers(context.Background(), tenant, feed, users, history); err != nil {
		t.Fatal(err)
	}
}

func markItem(t *testing.T, s *Store, tenant, user, kind string, seq int64) {
	t.Helper()
	if err := s.MarkItem(context.Background(), tenant, user, kind, seq); err != nil {
		t.Fatalf("MarkItem(%s, %s, %s, %d): %v", tenant, user, kind, seq, err)
	}
}

// wantUnread checks a user's unread count.
func wantUnread(t *testing.T, s *Store, tenant, user string, want int64) {
	t.Helper()
	n, err := s.UnreadCount(context.Background(), tenant, user)
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("%s/%s unread count %d, want %d", tenant, user, n, want)
	}
}

// The feed queries stay index lookups: a schema or query change that turns
// one into a scan of feed_items, or a sort of a whole feed, or a walk of a
// tenant's whole sequence for one feed's item, fails here. The SQL is the
// store's own (sqlstore's constants, the dialect in feeds.go, jobs.go).
func TestFeedQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	setMembers(t, s, "acme", "team:ops", false, "ada")
	for i := range 20 {
		if _, err := feedPost(context.Background(), s, "acme", fmt.Sprintf("e%d", i), model.TenantFeed, "team:ops"); err != nil {
			t.Fatal(err)
		}
		post1(t, s, "beta", fmt.Sprintf("b%d", i), model.TenantFeed)
	}
	markItem(t, s, "acme", "ada", model.MarkRead, 5)
	pageItemsSQL, pageItemsArgs := pageItems("acme", []int64{3, 2, 1})
	cases := []struct {
		name, query string
		args        []any
		want        string // the index (or primary key) it must search
		noOrder     bool   // must read the index in order: no temp b-tree for ORDER BY
	}{
		{"newest seq", sqlstore.NewestSeqSQL, []any{"acme"}, "PRIMARY KEY (tenant=?)", false},
		{"page", sqlstore.PageSQL, []any{"acme", "team:ops", 0, 1 << 62, 50}, "COVERING INDEX feed_items_page (tenant=? AND feed=? AND seq>? AND seq<?)", true},
		// Not covering since 0018: an item's own message (a folded
		// notification's) is in the row, one primary-key step per item.
		{"page items", pageItemsSQL, pageItemsArgs, "INDEX feed_items_event (event=?)", false},
		{"oldest item", dialect.OldestItem, []any{"acme", "team:ops"}, "INDEX feed_items_page (tenant=? AND feed=?)", true},
		{"last pos", sqlstore.LastPosSQL, []any{"acme", "team:ops"}, "COVERING INDEX feed_items_pos (tenant=? AND feed=?)", false},
		{"pos at seq", dialect.PosAt, []any{"acme", "team:ops", 10}, "INDEX feed_items_page (tenant=? AND feed=? AND seq<?)", true},
		{"shared items", dialect.SharedItems, []any{"acme", "team:ops", 3}, "COVERING INDEX feed_items_shared (tenant=? AND feed=? AND seq>?)", false},
		{"item marks count", sqlstore.ItemMarksCountSQL, []any{"acme", "ada", 0, "team:ops"}, "PRIMARY KEY (tenant=? AND user=? AND kind=? AND seq>?)", false},
		{"item marks", sqlstore.ItemMarksSQL, []any{"acme", "ada", 0}, "PRIMARY KEY (tenant=? AND user=? AND kind=? AND seq>?)", false},
		{"memberships", sqlstore.MembershipsSQL, []any{"acme", "ada"}, "PRIMARY KEY (tenant=? AND user=?)", false},
		{"watermarks", sqlstore.WatermarksSQL, []any{"acme", "ada"}, "PRIMARY KEY (tenant=? AND user=?)", false},
		{"item by seq", sqlstore.ItemSQL, []any{"acme", 5}, "PRIMARY KEY (tenant=? AND seq=?)", false},
		{"an event's items", sqlstore.EventItemsSQL, []any{5}, "COVERING INDEX feed_items_event (event=?)", false},
		{"prune cuts", sqlstore.PruneFeedCutsSQL, []any{ms(t0)}, "PRIMARY KEY (tenant=?)", false},
		{"prune items", sqlstore.PruneFeedItemsSQL, []any{"acme", 10, 500}, "PRIMARY KEY (tenant=? AND seq<?)", true},
		{"prune item marks", pruneItemMarksSQL, []any{500}, "PRIMARY KEY (tenant=? AND seq=?)", false},
	}
	for _, c := range cases {
		plan := queryPlan(t, s, c.query, c.args...)
		text := strings.Join(plan, "\n")
		for _, line := range plan {
			// The prune's sweep of item marks reads them all, by design
			// (it runs once a prune, in batches).
			if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "USING") && line != "SCAN CONSTANT ROW" &&
				line != "SCAN m" && line != "SCAN c" {
				t.Errorf("%s scans a table:\n%s", c.name, text)
			}
		}
		if !strings.Contains(text, "USING "+c.want) {
			t.Errorf("%s does not search %s:\n%s", c.name, c.want, text)
		}
		if c.noOrder && strings.Contains(text, "TEMP B-TREE FOR ORDER BY") {
			t.Errorf("%s sorts instead of reading the index in seq order:\n%s", c.name, text)
		}
		t.Logf("%s:\n%s", c.name, text)
	}
}

// Migration 0007 on a version-6 database built by hand: items of two
// tenants numbered by the old global sequence, memberships, watermarks,
// item marks and digest runs. Every view and count is as before, and each
// tenant's next item numbers above everything it held.
func TestMigrateFeedsToTenantSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v6.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 6; v++ {
		files, err := filepath.Glob(fmt.Sprintf("migrations/%04d_*.sql", v))
		if err != nil || len(files) != 1 {
			t.Fatalf("migration %d: %v %v", v, files, err)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", files[0], err)
		}
	}
	// Global seqs: acme 1, 3-4 (one event in two feeds), 6; beta 2, 5, 7…10.
	items := []struct {
		seq          int64
		tenant, feed string
		pos          int
		event        string
	}{
		{1, "acme", "*", 1, "a1"}, {2, "beta", "*", 1, "b1"},
		{3, "acme", "team:ops", 1, "a2"}, {4, "acme", "@ben", 1, "a2"},
		{5, "beta", "*", 2, "b2"}, {6, "acme", "@ada", 1, "a3"},
		{7, "beta", "*", 3, "b3"}, {8, "beta", "*", 4, "b4"}, {9, "beta", "*", 5, "b5"}, {10, "beta", "*", 6, "b6"},
	}
	rows := map[string]int64{}
	for _, it := range items {
		key := it.tenant + "/" + it.event
		if rows[key] == 0 {
			res, err := db.Exec(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
				VALUES (?, ?, 'feed', 'note', '{}', ?, 'fp', 0, 0, ?)`, it.tenant, it.event, `{"subject":"`+it.event+`"}`, ms(t0))
			if err != nil {
				t.Fatal(err)
			}
			rows[key], _ = res.LastInsertId()
		}
		if _, err := db.Exec(`INSERT INTO feed_items (seq, tenant, feed, pos, event, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			it.seq, it.tenant, it.feed, it.pos, rows[key], ms(t0)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		// ada joined acme's team:ops when the global newest was 2, dee when
		// it was 10 (above acme's newest, 6).
		`INSERT INTO feed_members (tenant, feed, user, joined_seq) VALUES ('acme', 'team:ops', 'ada', 2), ('acme', 'team:ops', 'dee', 10),
			('beta', 'team:ops', 'ada', 0)`,
		// ada read up to 3; ben read all when the global newest was 9;
		// cy dismissed item 1 one by one; beta's ada read 5, then 8.
		`INSERT INTO feed_marks (tenant, user, kind, mark) VALUES ('acme', 'ada', 'read', 3), ('acme', 'ben', 'read', 9), ('beta', 'ada', 'read', 5)`,
		`INSERT INTO feed_item_marks (tenant, user, kind, seq, feed) VALUES ('acme', 'cy', 'dismissed', 1, '*'), ('beta', 'ada', 'read', 8, '*')`,
		// Digest runs fixed global seqs: acme's weekly at 5, its big one at
		// 10 (past acme's newest), beta's at 8.
		`INSERT INTO job_runs (job, scheduled_at, upper_seq, started_at, status) VALUES ('weekly', 1000, 5, 1000, 'done'),
			('big', 1000, 10, 1000, 'done'), ('beta-weekly', 1000, 8, 1000, 'done')`,
		`PRAGMA user_version = 6`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := count(t, s, `PRAGMA user_version`); v != SchemaVersion() || v < 7 {
		t.Fatalf("user_version %d after open, want %d", v, SchemaVersion())
	}
	type seen struct {
		seq  int64
		feed string
		read bool
	}
	views := []struct {
		tenant, user string
		want         []seen
		unread       int64
	}{
		{"acme", "ada", []seen{{6, "@ada", false}, {3, "team:ops", true}, {1, "*", true}}, 1},
		{"acme", "ben", []seen{{4, "@ben", true}, {1, "*", true}}, 0},
		{"acme", "cy", nil, 0},
		{"acme", "dee", []seen{{1, "*", false}}, 1},
		{"beta", "ada", []seen{{10, "*", false}, {9, "*", false}, {8, "*", true}, {7, "*", false}, {5, "*", true}, {2, "*", true}}, 3},
	}
	check := func(when string) {
		t.Helper()
		for _, v := range views {
			items, _ := feedView(t, s, v.tenant, v.user)
			var got []seen
			for _, it := range items {
				got = append(got, seen{it.Seq, it.Feed, it.Read})
			}
			if !slices.Equal(got, v.want) {
				t.Errorf("%s: %s/%s sees %v, want %v", when, v.tenant, v.user, got, v.want)
			}
			wantUnread(t, s, v.tenant, v.user, v.unread)
		}
	}
	check("after migration")
	if n := count(t, s, `SELECT copies FROM feed_items WHERE tenant = 'acme' AND seq = 3`); n != 2 {
		t.Errorf("copies of a2's item %d, want 2", n)
	}
	if err := s.MarkItem(ctx, "acme", "ada", model.MarkRead, 4); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("ada marks ben's copy of a2: %v, want ErrNotFound", err)
	}

	// Each tenant's counter starts at the highest number it held (acme:
	// ben's watermark 9, above its newest item 6), so new items number
	// above every old watermark; dee joined team:ops at the global 10,
	// which becomes acme's 9: she sees acme's next team item, numbered 10.
	acmeNext := post1(t, s, "acme", "a4", "team:ops")
	betaNext := post1(t, s, "beta", "b7", model.TenantFeed)
	if acmeNext != 10 || betaNext != 11 {
		t.Fatalf("next items: acme %d, beta %d; want 10 and 11", acmeNext, betaNext)
	}
	for i, v := range views {
		switch {
		case v.tenant == "beta":
			views[i].want = append([]seen{{betaNext, "*", false}}, v.want...)
		case v.user == "ada" || v.user == "dee":
			views[i].want = append([]seen{{acmeNext, "team:ops", false}}, v.want...)
		default:
			continue
		}
		views[i].unread++
	}
	check("after a new item each")
	post1(t, s, "acme", "a5", model.TenantFeed) // 11

	// A digest's next run starts where its old run ended within the
	// tenant's items, never past them: acme's weekly covers (5, 11], its
	// big one (9, 11] (not (10, …], which would skip item 10), beta's (8, 11].
	for _, c := range []struct {
		job, tenant string
		prev, upper int64
	}{{"weekly", "acme", 5, 11}, {"big", "acme", 9, 11}, {"beta-weekly", "beta", 8, 11}} {
		run, err := s.BeginJobRun(ctx, c.job, c.tenant, fromMS(2000), t0)
		if err != nil || run.PrevUpperSeq != c.prev || run.UpperSeq != c.upper {
			t.Errorf("%s after migration: %+v, %v; want (%d, %d]", c.job, run, err, c.prev, c.upper)
		}
	}
}

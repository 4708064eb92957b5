package sqlite

import (
	"context"
	"database/sql"
	"edgerelay/store"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// feedPost posts event id to feeds in tenant and returns each feed's item
// seq. It does not touch t, so goroutines may call it.
func feedPost(ctx context.Context, s *Store, tenant, id string, feeds ...string) (map[string]int64, error) {
	return feedPostAt(ctx, s, t0, tenant, id, feeds...)
}

// feedPostAt is feedPost at a given time.
func feedPostAt(ctx context.Context, s *Store, at time.Time, tenant, id string, feeds ...string) (map[string]int64, error) {
	acc, err := s.AcceptEvent(ctx, store.NewEvent{Tenant: tenant, EventID: id, Purpose: "feed", Type: "note",
		Payload: []byte(`{}`), Message: []byte(`{"subject":"` + id + `"}`), Fingerprint: "fp-" + id,
		Feeds: feeds, Targets: 0}, nil, at)
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

func feedView(t *testing.T, s *Store, tenant, user string) ([]store.FeedItem, int64) {
	t.Helper()
	items, mark, err := s.FeedPage(context.Background(), tenant, user, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return items, mark
}

func feedSeqs(items []store.FeedItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// unreadSeqs is the seqs of the items FeedPage reports unread.
func unreadSeqs(items []store.FeedItem) []int64 {
	var out []int64
	for _, it := range items {
		if !it.Read {
			out = append(out, it.Seq)
		}
	}
	return out
}

func unread(t *testing.T, s *Store, tenant, user string) int64 {
	t.Helper()
	n, err := s.UnreadCount(context.Background(), tenant, user)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func setMembers(t *testing.T, s *Store, tenant, feed string, history bool, users ...string) {
	t.Helper()
	if err := s.SetFeedMembers(context.Background(), tenant, feed, users, history); err != nil {
		t.Fatal(err)
	}
}

func markAll(t *testing.T, s *Store, tenant, user, kind string, upTo int64) int64 {
	t.Helper()
	m, err := s.MarkAll(context.Background(), tenant, user, kind, upTo)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func markItem(t *testing.T, s *Store, tenant, user, kind string, seq int64) {
	t.Helper()
	if err := s.MarkItem(context.Background(), tenant, user, kind, seq); err != nil {
		t.Fatalf("MarkItem(%s, %s, %s, %d): %v", tenant, user, kind, seq, err)
	}
}

func wantView(t *testing.T, s *Store, tenant, user string, want ...int64) {
	t.Helper()
	items, _ := feedView(t, s, tenant, user)
	if got := feedSeqs(items); !slices.Equal(got, want) {
		t.Errorf("%s/%s sees %v, want %v", tenant, user, got, want)
	}
}

func wantUnread(t *testing.T, s *Store, tenant, user string, want int64) {
	t.Helper()
	if got := unread(t, s, tenant, user); got != want {
		t.Errorf("%s/%s unread count %d, want %d", tenant, user, got, want)
	}
}

// feedTruth is what a user should see, worked out from the tables in one
// read transaction (a snapshot) without the store's query logic: the items
// of every feed they read with seq above when they joined, and the marks.
type feedTruth struct {
	items           []feedTruthItem // newest first
	read, dismissed int64
	itemMarks       map[string]map[int64]bool
}

type feedTruthItem struct {
	seq  int64
	feed string
}

func readFeedTruth(ctx context.Context, s *Store, tenant, user string) (feedTruth, error) {
	return readFeedTruthRange(ctx, s, tenant, user, 0, 1<<62)
}

// readFeedTruthRange is readFeedTruth for the items with lo <= seq <= hi.
func readFeedTruthRange(ctx context.Context, s *Store, tenant, user string, lo, hi int64) (feedTruth, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return feedTruth{}, err
	}
	defer tx.Rollback()
	from := map[string]int64{store.TenantFeed: 0, store.PersonalFeed(user): 0}
	rows, err := tx.QueryContext(ctx, `SELECT feed, joined_seq FROM feed_members WHERE tenant = ? AND user = ?`, tenant, user)
	if err != nil {
		return feedTruth{}, err
	}
	for rows.Next() {
		var f string
		var j int64
		if err := rows.Scan(&f, &j); err != nil {
			rows.Close()
			return feedTruth{}, err
		}
		from[f] = j
	}
	rows.Close()
	tr := feedTruth{itemMarks: map[string]map[int64]bool{store.MarkRead: {}, store.MarkDismissed: {}}}
	rows, err = tx.QueryContext(ctx, `SELECT seq, feed FROM feed_items WHERE tenant = ? AND seq BETWEEN ? AND ? ORDER BY seq DESC`, tenant, lo, hi)
	if err != nil {
		return feedTruth{}, err
	}
	for rows.Next() {
		var it feedTruthItem
		if err := rows.Scan(&it.seq, &it.feed); err != nil {
			rows.Close()
			return feedTruth{}, err
		}
		if j, ok := from[it.feed]; ok && it.seq > j {
			tr.items = append(tr.items, it)
		}
	}
	rows.Close()
	rows, err = tx.QueryContext(ctx, `SELECT kind, mark FROM feed_marks WHERE tenant = ? AND user = ?`, tenant, user)
	if err != nil {
		return feedTruth{}, err
	}
	for rows.Next() {
		var k string
		var m int64
		if err := rows.Scan(&k, &m); err != nil {
			rows.Close()
			return feedTruth{}, err
		}
		if k == store.MarkRead {
			tr.read = m
		} else {
			tr.dismissed = m
		}
	}
	rows.Close()
	rows, err = tx.QueryContext(ctx, `SELECT kind, seq FROM feed_item_marks WHERE tenant = ? AND user = ?`, tenant, user)
	if err != nil {
		return feedTruth{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var seq int64
		if err := rows.Scan(&k, &seq); err != nil {
			return feedTruth{}, err
		}
		tr.itemMarks[k][seq] = true
	}
	return tr, rows.Err()
}

// visible is the items a page shows (dismissed ones left out), newest first.
func (tr feedTruth) visible() []feedTruthItem {
	var out []feedTruthItem
	for _, it := range tr.items {
		if it.seq > tr.dismissed && !tr.itemMarks[store.MarkDismissed][it.seq] {
			out = append(out, it)
		}
	}
	return out
}

func (tr feedTruth) unread() int64 {
	var n int64
	for _, it := range tr.visible() {
		if it.seq > tr.read && !tr.itemMarks[store.MarkRead][it.seq] {
			n++
		}
	}
	return n
}

// One event posted to "*" is one row, whatever the number of readers; "@ada"
// is ada's alone, a topic feed its members'.
func TestFeedFanOutOnRead(t *testing.T) {
	t.Parallel()
	s := setup(t)
	users := []string{"ada", "ben", "cy"}
	all := post1(t, s, "acme", "e1", store.TenantFeed)
	if n := count(t, s, `SELECT count(*) FROM feed_items`); n != 1 {
		t.Fatalf("%d feed items for one event to %q, want 1", n, store.TenantFeed)
	}
	for _, u := range users {
		items, _ := feedView(t, s, "acme", u)
		if len(items) != 1 || items[0].Seq != all || items[0].Feed != store.TenantFeed || items[0].EventID != "e1" ||
			items[0].Type != "note" || string(items[0].Message) != `{"subject":"e1"}` || items[0].Read || !items[0].CreatedAt.Equal(t0) {
			t.Errorf("%s sees %+v, want e1 unread", u, items)
		}
		wantUnread(t, s, "acme", u, 1)
	}
	ada := post1(t, s, "acme", "e2", store.PersonalFeed("ada"))
	wantView(t, s, "acme", "ada", ada, all)
	wantView(t, s, "acme", "ben", all)
	wantUnread(t, s, "acme", "ada", 2)
	wantUnread(t, s, "acme", "ben", 1)

	setMembers(t, s, "acme", "team:ops", false, "ada", "ben")
	ops := post1(t, s, "acme", "e3", "team:ops")
	wantView(t, s, "acme", "ada", ops, ada, all)
	wantView(t, s, "acme", "ben", ops, all)
	wantView(t, s, "acme", "cy", all)
	wantUnread(t, s, "acme", "ada", 3)
	wantUnread(t, s, "acme", "ben", 2)
	wantUnread(t, s, "acme", "cy", 1)
	if n := count(t, s, `SELECT count(*) FROM feed_items`); n != 3 {
		t.Errorf("%d feed items for three single-feed events, want 3", n)
	}

	// An event posted to two feeds is an item in each (consecutive seqs),
	// and one item for a user who reads both: at its newer item, counted
	// once.
	both, err := feedPost(context.Background(), s, "acme", "e4", store.TenantFeed, "team:ops")
	if err != nil {
		t.Fatal(err)
	}
	if len(both) != 2 || both["team:ops"] != both[store.TenantFeed]+1 {
		t.Fatalf("e4 items %v, want one in each feed, numbered in a row", both)
	}
	if n := count(t, s, `SELECT count(*) FROM feed_items`); n != 5 {
		t.Errorf("%d feed items, want 5 (e4 once per feed)", n)
	}
	wantView(t, s, "acme", "ada", both["team:ops"], ops, ada, all)
	wantView(t, s, "acme", "cy", both[store.TenantFeed], all)
	wantUnread(t, s, "acme", "ada", 4)
	wantUnread(t, s, "acme", "cy", 2)
}

// A member sees a topic feed's items from when they joined, or its whole
// past with history; leaving removes the feed.
func TestFeedMembershipFromJoin(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	i1 := post1(t, s, "acme", "i1", "team:ops")
	setMembers(t, s, "acme", "team:ops", false, "ada")
	wantView(t, s, "acme", "ada")
	wantUnread(t, s, "acme", "ada", 0)
	i2 := post1(t, s, "acme", "i2", "team:ops")
	wantView(t, s, "acme", "ada", i2)
	wantUnread(t, s, "acme", "ada", 1)
	if err := s.MarkItem(ctx, "acme", "ada", store.MarkRead, i1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkItem on an item from before ada joined: %v, want ErrNotFound", err)
	}

	// ada stays (and keeps when she joined); ben joins with history.
	setMembers(t, s, "acme", "team:ops", true, "ada", "ben")
	wantView(t, s, "acme", "ada", i2)
	wantView(t, s, "acme", "ben", i2, i1)
	wantUnread(t, s, "acme", "ada", 1)
	wantUnread(t, s, "acme", "ben", 2)

	// ada leaves.
	setMembers(t, s, "acme", "team:ops", false, "ben")
	wantView(t, s, "acme", "ada")
	wantUnread(t, s, "acme", "ada", 0)
	if err := s.MarkItem(ctx, "acme", "ada", store.MarkRead, i2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkItem after leaving: %v, want ErrNotFound", err)
	}
	wantView(t, s, "acme", "ben", i2, i1)

	// She comes back without history: from now on only.
	setMembers(t, s, "acme", "team:ops", false, "ben", "ada")
	i3 := post1(t, s, "acme", "i3", "team:ops")
	wantView(t, s, "acme", "ada", i3)
	wantUnread(t, s, "acme", "ada", 1)
	wantView(t, s, "acme", "ben", i3, i2, i1)
	wantUnread(t, s, "acme", "ben", 3)
}

// A watermark never moves back, whatever order the requests arrive in.
func TestFeedMarkAllMonotonic(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	// A watermark never passes the newest item: post 64 first (at once,
	// so they share commits).
	var posts sync.WaitGroup
	for i := range 64 {
		posts.Go(func() {
			if _, err := feedPost(ctx, s, "acme", fmt.Sprintf("e%d", i), store.TenantFeed); err != nil {
				t.Error(err)
			}
		})
	}
	posts.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if m := markAll(t, s, "acme", "ada", store.MarkRead, 10); m != 10 {
		t.Fatalf("MarkAll(10) = %d", m)
	}
	if m := markAll(t, s, "acme", "ada", store.MarkRead, 5); m != 10 {
		t.Fatalf("MarkAll(5) after 10 = %d, want 10", m)
	}
	if _, mark := feedView(t, s, "acme", "ada"); mark != 10 {
		t.Fatalf("read mark %d, want 10", mark)
	}
	// The kinds are separate watermarks.
	if m := markAll(t, s, "acme", "ada", store.MarkDismissed, 3); m != 3 {
		t.Fatalf("MarkAll(dismissed, 3) = %d", m)
	}

	for _, kind := range []string{store.MarkRead, store.MarkDismissed} {
		ups := make([]int64, 64)
		for i := range ups {
			ups[i] = int64(i + 1)
		}
		rand.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
		var wg sync.WaitGroup
		for _, up := range ups {
			wg.Go(func() {
				m, err := s.MarkAll(ctx, "acme", "ben", kind, up)
				if err != nil {
					t.Error(err)
				} else if m < up {
					t.Errorf("MarkAll(%s, %d) = %d: below what it was asked", kind, up, m)
				}
			})
		}
		wg.Wait()
		if m := markAll(t, s, "acme", "ben", kind, 0); m != 64 {
			t.Errorf("%s mark after concurrent MarkAll = %d, want the max 64", kind, m)
		}
	}

	// Without up_to: the newest item now.
	a := post1(t, s, "acme", "a", store.TenantFeed)
	b := post1(t, s, "acme", "b", store.TenantFeed)
	if m := markAll(t, s, "acme", "cy", store.MarkRead, -1); m != max(a, b) {
		t.Errorf("MarkAll(-1) = %d, want the newest seq %d", m, max(a, b))
	}
	wantUnread(t, s, "acme", "cy", 0)
	wantUnread(t, s, "acme", "ada", int64(max(a, b)-10))
}

// MarkAll with an up_to beyond every item stops at the newest: it must not
// read items that do not exist yet (up_to is "the newest item the client
// showed").
func TestFeedMarkAllBeyondNewest(t *testing.T) {
	t.Parallel()
	s := setup(t)
	a := post1(t, s, "acme", "a", store.TenantFeed)
	if m := markAll(t, s, "acme", "ada", store.MarkRead, a+1000); m != a {
		t.Errorf("MarkAll(%d) with the newest item %d = %d, want %d", a+1000, a, m, a)
	}
	b := post1(t, s, "acme", "b", store.TenantFeed)
	items, mark := feedView(t, s, "acme", "ada")
	if got := unreadSeqs(items); !slices.Equal(got, []int64{b}) {
		t.Errorf("after MarkAll(%d) with the newest item %d, then item %d posted: unread %v (read mark %d), want [%d]",
			a+1000, a, b, got, mark, b)
	}
	wantUnread(t, s, "acme", "ada", 1)
}

// The race "mark all read" exists for: items keep arriving while a user
// reads a page and marks read up to the newest item that page showed. No
// item the user was not shown may end up read: nothing newer than up_to,
// and nothing between the page's oldest and newest items that the page
// left out.
func TestFeedMarkAllWhilePosting(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	users := []string{"u0", "u1", "u2", "u3"}
	setMembers(t, s, "acme", "team:ops", false, users...)
	const iterations = 50 // per user: 200 in all
	const limit = 20

	stop := make(chan struct{})
	var posters sync.WaitGroup
	var posted atomic.Int64
	feeds := []string{store.TenantFeed, "team:ops", "team:dev", "@u0", "@u1", "@u2", "@u3"}
	for p := range 2 {
		posters.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i >= 200 { // bounded under -race: 400 items in all
					return
				}
				id := fmt.Sprintf("p%d-%d", p, i)
				if _, err := feedPost(ctx, s, "acme", id, feeds[(i+p)%len(feeds)]); err != nil {
					t.Error(err)
					return
				}
				posted.Add(1)
			}
		})
	}

	var markers sync.WaitGroup
	for _, u := range users {
		markers.Go(func() {
			for range iterations {
				if t.Failed() {
					return
				}
				page, _, err := s.FeedPage(ctx, "acme", u, 0, limit)
				if err != nil {
					t.Error(err)
					return
				}
				if len(page) == 0 {
					continue
				}
				upTo, oldest := page[0].Seq, page[len(page)-1].Seq
				// Every item older than up_to is committed or never will be
				// (one writer commits in seq order): the truth read now is
				// what the page should have shown between oldest and up_to.
				tr, err := readFeedTruthRange(ctx, s, "acme", u, oldest, upTo)
				if err != nil {
					t.Error(err)
					return
				}
				var want []int64
				for _, it := range tr.visible() {
					want = append(want, it.seq)
				}
				if got := feedSeqs(page); !slices.Equal(got, want) {
					t.Errorf("%s: page %v is not a snapshot: between %d and %d the feed holds %v; read-all up to %d reads the missing ones unseen",
						u, got, oldest, upTo, want, upTo)
				}
				if _, err := s.MarkAll(ctx, "acme", u, store.MarkRead, upTo); err != nil {
					t.Error(err)
					return
				}
				after, mark, err := s.FeedPage(ctx, "acme", u, 0, 50)
				if err != nil {
					t.Error(err)
					return
				}
				if mark < upTo {
					t.Errorf("%s: read mark %d after MarkAll(%d)", u, mark, upTo)
				}
				var newer int64
				for _, it := range after {
					switch {
					case it.Seq > upTo && it.Read:
						t.Errorf("%s: item %d reported read after MarkAll(%d)", u, it.Seq, upTo)
					case it.Seq <= upTo && !it.Read:
						t.Errorf("%s: item %d unread after MarkAll(%d)", u, it.Seq, upTo)
					}
					if it.Seq > upTo {
						newer++
					}
				}
				n, err := s.UnreadCount(ctx, "acme", u)
				if err != nil {
					t.Error(err)
					return
				}
				// Items only arrive: the count read later is at least the
				// unread items the page saw.
				if n < newer {
					t.Errorf("%s: unread count %d, but %d items above up_to %d were on the page", u, n, newer, upTo)
				}
			}
		})
	}
	markers.Wait()
	close(stop)
	posters.Wait()
	t.Logf("%d items posted while marking", posted.Load())

	// Quiet now: the views are exact.
	for _, u := range users {
		tr, err := readFeedTruth(ctx, s, "acme", u)
		if err != nil {
			t.Fatal(err)
		}
		items, mark := feedView(t, s, "acme", u)
		var want []int64
		for _, it := range tr.visible() {
			if it.seq > tr.read {
				want = append(want, it.seq)
			}
		}
		if got := unreadSeqs(items); !slices.Equal(got, want) || mark != tr.read {
			t.Errorf("%s: unread %v with mark %d, want %v with mark %d", u, got, mark, want, tr.read)
		}
		wantUnread(t, s, "acme", u, int64(len(want)))
	}
}

// Items read or dismissed one by one, above and below the watermarks.
func TestFeedMarkItem(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	var seq [6]int64
	for i := 1; i <= 5; i++ {
		seq[i] = post1(t, s, "acme", fmt.Sprintf("i%d", i), store.TenantFeed)
	}
	markAll(t, s, "acme", "ada", store.MarkRead, seq[2])
	wantUnread(t, s, "acme", "ada", 3)
	readFlags := func() map[int64]bool {
		items, _ := feedView(t, s, "acme", "ada")
		out := map[int64]bool{}
		for _, it := range items {
			out[it.Seq] = it.Read
		}
		return out
	}
	itemMarks := func() int { return count(t, s, `SELECT count(*) FROM feed_item_marks`) }

	// Read above the watermark.
	markItem(t, s, "acme", "ada", store.MarkRead, seq[4])
	if f := readFlags(); !f[seq[4]] || f[seq[3]] || f[seq[5]] || !f[seq[1]] {
		t.Errorf("read flags %v after reading item %d", f, seq[4])
	}
	wantUnread(t, s, "acme", "ada", 2)
	markItem(t, s, "acme", "ada", store.MarkRead, seq[4]) // again: nothing changes
	wantUnread(t, s, "acme", "ada", 2)

	// Dismiss hides it from the page and from the count.
	markItem(t, s, "acme", "ada", store.MarkDismissed, seq[5])
	wantView(t, s, "acme", "ada", seq[4], seq[3], seq[2], seq[1])
	wantUnread(t, s, "acme", "ada", 1)

	// Read and dismissed: counted once (it was already not unread).
	markItem(t, s, "acme", "ada", store.MarkDismissed, seq[4])
	wantView(t, s, "acme", "ada", seq[3], seq[2], seq[1])
	wantUnread(t, s, "acme", "ada", 1)
	// Dismissed first, then read: still once.
	markItem(t, s, "acme", "ada", store.MarkDismissed, seq[3])
	markItem(t, s, "acme", "ada", store.MarkRead, seq[3])
	wantView(t, s, "acme", "ada", seq[2], seq[1])
	wantUnread(t, s, "acme", "ada", 0)

	// Below the read watermark, reading is a no-op.
	before := itemMarks()
	markItem(t, s, "acme", "ada", store.MarkRead, seq[1])
	if n := itemMarks(); n != before {
		t.Errorf("reading item %d below the read mark %d wrote a row (%d → %d)", seq[1], seq[2], before, n)
	}
	// Dismissing below the read watermark still hides it.
	markItem(t, s, "acme", "ada", store.MarkDismissed, seq[1])
	wantView(t, s, "acme", "ada", seq[2])
	wantUnread(t, s, "acme", "ada", 0)
	// Below the dismiss watermark, dismissing is a no-op.
	markAll(t, s, "acme", "ada", store.MarkDismissed, seq[2])
	wantView(t, s, "acme", "ada")
	before = itemMarks()
	markItem(t, s, "acme", "ada", store.MarkDismissed, seq[2])
	if n := itemMarks(); n != before {
		t.Errorf("dismissing item %d below the dismiss mark wrote a row (%d → %d)", seq[2], before, n)
	}

	// What ada cannot see does not exist for her.
	var other int64 // a number beta has and acme does not
	for i := range 10 {
		other = post1(t, s, "beta", fmt.Sprintf("o%d", i), store.TenantFeed)
	}
	bens := post1(t, s, "acme", "b1", store.PersonalFeed("ben"))
	team := post1(t, s, "acme", "t1", "team:dev")
	for _, kind := range []string{store.MarkRead, store.MarkDismissed} {
		for _, q := range []struct {
			what string
			seq  int64
		}{{"another tenant's item", other}, {"another user's personal item", bens},
			{"an item of a feed ada does not read", team}, {"no item", 1 << 40}} {
			if err := s.MarkItem(ctx, "acme", "ada", kind, q.seq); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("MarkItem(%s) on %s: %v, want ErrNotFound", kind, q.what, err)
			}
		}
	}
	wantUnread(t, s, "beta", "ada", 10)
	wantUnread(t, s, "acme", "ben", 6) // i1…i5 and b1: ben is not in team:dev
}

// Paging back with before=cursor while items keep arriving (one between
// every two pages, and a poster running throughout): every item from the
// first page's newest down to the last page's oldest is listed once,
// newest first.
func TestFeedPagination(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	setMembers(t, s, "acme", "team:ops", false, "ada")
	feeds := []string{store.TenantFeed, "@ada", "team:ops", "@ben", "team:dev"}
	for i := range 60 {
		post1(t, s, "acme", fmt.Sprintf("pre%d", i), feeds[i%len(feeds)])
	}
	// ada dismisses and reads a few, so the page has marks to skip.
	items, _ := feedView(t, s, "acme", "ada")
	markItem(t, s, "acme", "ada", store.MarkDismissed, items[3].Seq)
	markItem(t, s, "acme", "ada", store.MarkDismissed, items[10].Seq)
	markItem(t, s, "acme", "ada", store.MarkRead, items[5].Seq)

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for i := range 300 { // bounded under -race
			select {
			case <-stop:
				return
			default:
			}
			if _, err := feedPost(ctx, s, "acme", fmt.Sprintf("bg%d", i), feeds[i%3]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer func() {
		close(stop)
		bg.Wait()
	}()

	const rounds = 20
	for round := range rounds {
		limit, maxPages := 7, 4
		if round == rounds-1 {
			limit, maxPages = 30, 1<<30 // the last round goes to the end
		}
		var got []int64
		before := int64(0)
		for page := 0; page < maxPages; page++ {
			items, _, err := s.FeedPage(ctx, "acme", "ada", before, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) > limit {
				t.Fatalf("page of %d, limit %d", len(items), limit)
			}
			got = append(got, feedSeqs(items)...)
			if len(items) < limit {
				break
			}
			before = items[len(items)-1].Seq
			if _, err := feedPost(ctx, s, "acme", fmt.Sprintf("r%d-p%d", round, page), feeds[page%3]); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == 0 {
			t.Fatalf("round %d: nothing paged", round)
		}
		top, bottom := got[0], got[len(got)-1]
		if round == rounds-1 {
			bottom = 0
		}
		tr, err := readFeedTruthRange(ctx, s, "acme", "ada", bottom, top)
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for _, it := range tr.visible() {
			want = append(want, it.seq)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: paged %v\nwant (%d down to %d) %v\nmissing %v", round, got, top, bottom, want, missing(want, got))
		}
	}
}

func missing(want, got []int64) []int64 {
	var out []int64
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// Tenants share user ids, feed names and item numbers, and nothing else.
func TestFeedTenantIsolation(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "beta"} {
		setMembers(t, s, tenant, "team:ops", false, "ada")
	}
	var acme, beta []int64
	for i, f := range []string{store.TenantFeed, "@ada", "team:ops"} {
		acme = append(acme, post1(t, s, "acme", fmt.Sprintf("e%d", i), f))
		beta = append(beta, post1(t, s, "beta", fmt.Sprintf("e%d", i), f)) // same event ids
	}
	acme = append(acme, post1(t, s, "acme", "e9", store.TenantFeed))
	slices.Reverse(acme)
	slices.Reverse(beta)
	// Each tenant numbers its own items: interleaved posts leave no gaps.
	if !slices.Equal(acme, []int64{4, 3, 2, 1}) || !slices.Equal(beta, []int64{3, 2, 1}) {
		t.Fatalf("seqs: acme %v, beta %v; want 4…1 and 3…1", acme, beta)
	}
	wantView(t, s, "acme", "ada", acme...)
	wantView(t, s, "beta", "ada", beta...)
	wantUnread(t, s, "acme", "ada", 4)
	wantUnread(t, s, "beta", "ada", 3)
	if items, _ := feedView(t, s, "gamma", "ada"); len(items) != 0 {
		t.Errorf("a tenant with no items shows %v", feedSeqs(items))
	}

	// A number names an item of the caller's tenant only: 4 is acme's
	// alone, and beta's ada reading 1…3 reads beta's items, not acme's.
	if err := s.MarkItem(ctx, "beta", "ada", store.MarkRead, 4); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta's ada marks item 4, which only acme has: %v, want ErrNotFound", err)
	}
	for _, seq := range beta {
		markItem(t, s, "beta", "ada", store.MarkRead, seq)
	}
	wantUnread(t, s, "beta", "ada", 0)
	wantUnread(t, s, "acme", "ada", 4)
	if items, _ := feedView(t, s, "acme", "ada"); len(unreadSeqs(items)) != 4 {
		t.Errorf("acme's ada after beta's ada read 1…3: unread %v, want all 4", unreadSeqs(items))
	}

	// Watermarks are per tenant, and bounded by the tenant's own newest.
	if m := markAll(t, s, "beta", "ada", store.MarkRead, 4); m != 3 {
		t.Errorf("beta's read-all up to 4: watermark %d, want beta's newest 3", m)
	}
	wantUnread(t, s, "acme", "ada", 4)
	if m := markAll(t, s, "acme", "ada", store.MarkRead, -1); m != 4 {
		t.Errorf("acme's read-all: watermark %d, want acme's newest 4", m)
	}
	wantUnread(t, s, "acme", "ada", 0)
	markAll(t, s, "beta", "ada", store.MarkDismissed, beta[1])
	wantView(t, s, "beta", "ada", beta[0])
	wantView(t, s, "acme", "ada", acme...)
	markItem(t, s, "beta", "ada", store.MarkDismissed, beta[0])
	wantView(t, s, "beta", "ada")
	wantView(t, s, "acme", "ada", acme...)
	// Membership is per tenant.
	setMembers(t, s, "beta", "team:ops", false)
	post1(t, s, "acme", "e10", "team:ops")
	post1(t, s, "beta", "e10", "team:ops")
	wantUnread(t, s, "acme", "ada", 1)
	wantUnread(t, s, "beta", "ada", 0)
}

// feedModel is the feeds as the product describes them, kept in memory: a
// randomized run checks UnreadCount, FeedPage and paging against it.
type feedModel struct {
	maxSeq  map[string]int64               // per tenant
	items   map[feedModelKey]feedModelItem // tenant, seq
	joined  map[[3]string]int64            // tenant, feed, user
	marks   map[[3]string]int64            // tenant, user, kind
	itemMks map[[3]string]map[int64]bool   // tenant, user, kind
	events  map[[2]string][]int64          // tenant, event: its items' seqs
}

type feedModelKey struct {
	tenant string
	seq    int64
}

type feedModelItem struct{ feed, event string }

func (m *feedModel) from(tenant, user, feed string) (int64, bool) {
	if feed == store.TenantFeed || feed == store.PersonalFeed(user) {
		return 0, true
	}
	j, ok := m.joined[[3]string{tenant, feed, user}]
	return j, ok
}

// reads says whether the user reads the item (its feed, since they joined).
func (m *feedModel) reads(tenant, user string, seq int64) bool {
	it, ok := m.items[feedModelKey{tenant, seq}]
	if !ok {
		return false
	}
	j, ok := m.from(tenant, user, it.feed)
	return ok && seq > j
}

// view is what FeedPage should return, newest first, and the unread count:
// each event once, at its newest item the user sees (not dismissed), read
// when every such item is.
func (m *feedModel) view(tenant, user string) ([]store.FeedItem, int64) {
	read := m.marks[[3]string{tenant, user, store.MarkRead}]
	dismissed := m.marks[[3]string{tenant, user, store.MarkDismissed}]
	readItems := m.itemMks[[3]string{tenant, user, store.MarkRead}]
	dismissedItems := m.itemMks[[3]string{tenant, user, store.MarkDismissed}]
	var out []store.FeedItem
	at := map[string]int{} // event → index in out
	for seq := m.maxSeq[tenant]; seq > 0; seq-- {
		it, ok := m.items[feedModelKey{tenant, seq}]
		if !ok || !m.reads(tenant, user, seq) || seq <= dismissed || dismissedItems[seq] {
			continue
		}
		r := seq <= read || readItems[seq]
		if i, ok := at[it.event]; ok {
			out[i].Read = out[i].Read && r
			continue
		}
		at[it.event] = len(out)
		out = append(out, store.FeedItem{Seq: seq, Feed: it.feed, EventID: it.event, Read: r})
	}
	var n int64
	for _, it := range out {
		if !it.Read {
			n++
		}
	}
	return out, n
}

func TestFeedUnreadCountMatchesModel(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	tenants := []string{"acme", "beta"}
	users := []string{"ada", "ben", "cy", "dee"}
	topics := []string{"team:a", "team:b", "team:c"}
	m := &feedModel{maxSeq: map[string]int64{}, items: map[feedModelKey]feedModelItem{}, joined: map[[3]string]int64{},
		marks: map[[3]string]int64{}, itemMks: map[[3]string]map[int64]bool{}, events: map[[2]string][]int64{}}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	anyFeed := func() string {
		switch rng.IntN(4) {
		case 0:
			return store.TenantFeed
		case 1:
			return store.PersonalFeed(pick(users))
		default:
			return pick(topics)
		}
	}
	same := func(got, want []store.FeedItem) bool {
		return slices.EqualFunc(got, want, func(a, b store.FeedItem) bool {
			return a.Seq == b.Seq && a.Feed == b.Feed && a.EventID == b.EventID && a.Read == b.Read
		})
	}
	check := func(step int, tenant, user string, byCursor bool) {
		t.Helper()
		want, wantN := m.view(tenant, user)
		got, _, err := s.FeedPage(ctx, tenant, user, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if !same(got, want) {
			t.Fatalf("step %d (seed %d): %s/%s page\n got %v\nwant %v", step, seed, tenant, user, got, want)
		}
		if n := unread(t, s, tenant, user); n != wantN {
			t.Fatalf("step %d (seed %d): %s/%s unread count %d, want %d", step, seed, tenant, user, n, wantN)
		}
		if !byCursor {
			return
		}
		// Paged by the cursor, small pages: the same items, each once.
		limit := 1 + rng.IntN(3)
		var paged []store.FeedItem
		for before := int64(0); ; {
			page, _, err := s.FeedPage(ctx, tenant, user, before, limit)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, page...)
			if len(page) < limit || len(paged) > len(want) {
				break
			}
			before = page[len(page)-1].Seq
		}
		if !same(paged, want) {
			t.Fatalf("step %d (seed %d): %s/%s paged by %d\n got %v\nwant %v", step, seed, tenant, user, limit, paged, want)
		}
	}
	const steps = 120
	for step := range steps {
		tenant, user := pick(tenants), pick(users)
		switch r := rng.IntN(100); {
		case r < 50: // post to one, two or three feeds
			var feeds []string
			for k := 1 + rng.IntN(3); len(feeds) < k; {
				if f := anyFeed(); !slices.Contains(feeds, f) {
					feeds = append(feeds, f)
				}
			}
			id := fmt.Sprintf("e%d", step)
			got, err := feedPost(ctx, s, tenant, id, feeds...)
			if err != nil {
				t.Fatal(err)
			}
			// The tenant's next numbers, one per feed, in the order given.
			for i, f := range feeds {
				seq, want := got[f], m.maxSeq[tenant]+int64(i)+1
				if seq != want {
					t.Fatalf("step %d: %s's item of %q seq %d, want %d (its newest was %d)", step, tenant, f, seq, want, m.maxSeq[tenant])
				}
				m.items[feedModelKey{tenant, seq}] = feedModelItem{feed: f, event: id}
				m.events[[2]string{tenant, id}] = append(m.events[[2]string{tenant, id}], seq)
			}
			m.maxSeq[tenant] += int64(len(feeds))
		case r < 60: // set a topic's members
			topic := pick(topics)
			var ms []string
			for _, u := range users {
				if rng.IntN(2) == 0 {
					ms = append(ms, u)
				}
			}
			history := rng.IntN(4) == 0
			setMembers(t, s, tenant, topic, history, ms...)
			for _, u := range users {
				k := [3]string{tenant, topic, u}
				_, was := m.joined[k]
				switch {
				case !slices.Contains(ms, u):
					delete(m.joined, k)
				case !was && history:
					m.joined[k] = 0
				case !was:
					m.joined[k] = m.maxSeq[tenant]
				}
			}
		case r < 75: // mark all
			kind := pick([]string{store.MarkRead, store.MarkRead, store.MarkDismissed})
			up := rng.Int64N(m.maxSeq[tenant] + 3)
			if rng.IntN(5) == 0 {
				up = -1
			}
			got := markAll(t, s, tenant, user, kind, up)
			if up < 0 || up > m.maxSeq[tenant] {
				up = m.maxSeq[tenant]
			}
			k := [3]string{tenant, user, kind}
			m.marks[k] = max(m.marks[k], up)
			if got != m.marks[k] {
				t.Fatalf("step %d: MarkAll(%s, %d) = %d, want %d", step, kind, up, got, m.marks[k])
			}
		default: // mark one item (and so its event's other items), maybe one the user cannot see
			kind := pick([]string{store.MarkRead, store.MarkDismissed})
			seq := rng.Int64N(m.maxSeq[tenant]+2) + 1
			err := s.MarkItem(ctx, tenant, user, kind, seq)
			if !m.reads(tenant, user, seq) {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("step %d: MarkItem(%s/%s, %s, %d) on an item they cannot see: %v, want ErrNotFound", step, tenant, user, kind, seq, err)
				}
				break
			}
			if err != nil {
				t.Fatalf("step %d: MarkItem(%s/%s, %s, %d): %v", step, tenant, user, kind, seq, err)
			}
			k := [3]string{tenant, user, kind}
			for _, c := range m.events[[2]string{tenant, m.items[feedModelKey{tenant, seq}].event}] {
				if m.reads(tenant, user, c) && c > m.marks[k] {
					if m.itemMks[k] == nil {
						m.itemMks[k] = map[int64]bool{}
					}
					m.itemMks[k][c] = true
				}
			}
		}
		check(step, tenant, user, step%10 == 9)
		if step%40 == 39 || step == steps-1 {
			for _, tn := range tenants {
				for _, u := range users {
					check(step, tn, u, true)
				}
			}
		}
	}
}

// Prune deletes old feed items, read or not. The unread count must count
// what is left, as the page shows it: positions of pruned items are not
// unread items.
func TestFeedUnreadCountAfterPrune(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	setMembers(t, s, "acme", "team:ops", true, "ada", "ben", "cy")
	var old []int64
	for i := range 4 {
		got, err := feedPostAt(ctx, s, t0, "acme", fmt.Sprintf("old%d", i), "team:ops")
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, got["team:ops"])
	}
	later := t0.Add(48 * time.Hour)
	for i := range 2 {
		if _, err := feedPostAt(ctx, s, later, "acme", fmt.Sprintf("new%d", i), "team:ops"); err != nil {
			t.Fatal(err)
		}
	}
	markAll(t, s, "acme", "ben", store.MarkRead, old[0]) // below what prune removes
	markItem(t, s, "acme", "cy", store.MarkRead, old[2]) // an item prune removes
	res, err := s.Prune(ctx, t0.Add(24*time.Hour), later, 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeedItems != 4 {
		t.Fatalf("pruned %d feed items, want 4", res.FeedItems)
	}
	for _, u := range []string{"ada", "ben", "cy"} {
		items, _ := feedView(t, s, "acme", u)
		want := int64(len(unreadSeqs(items)))
		if want != 2 {
			t.Errorf("%s: page after prune %v, want the 2 new items unread", u, feedSeqs(items))
		}
		if n := unread(t, s, "acme", u); n != want {
			t.Errorf("%s: unread count %d after prune, but the page shows %d unread items (UnreadCount subtracts positions from 0 when no item at or below the watermark survives)", u, n, want)
		}
	}
}

// The feed queries stay index lookups: a schema or query change that turns
// one into a scan of feed_items, or a sort of a whole feed, or a walk of a
// tenant's whole sequence for one feed's item, fails here. The SQL is the
// store's own (the constants in feeds.go and jobs.go).
func TestFeedQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	setMembers(t, s, "acme", "team:ops", false, "ada")
	for i := range 20 {
		if _, err := feedPost(context.Background(), s, "acme", fmt.Sprintf("e%d", i), store.TenantFeed, "team:ops"); err != nil {
			t.Fatal(err)
		}
		post1(t, s, "beta", fmt.Sprintf("b%d", i), store.TenantFeed)
	}
	markItem(t, s, "acme", "ada", store.MarkRead, 5)
	cases := []struct {
		name, query string
		args        []any
		want        string // the index (or primary key) it must search
		noOrder     bool   // must read the index in order: no temp b-tree for ORDER BY
	}{
		{"newest seq", newestSeqSQL, []any{"acme"}, "PRIMARY KEY (tenant=?)", false},
		{"page", pageSQL, []any{"acme", "team:ops", 0, 1 << 62, 50}, "COVERING INDEX feed_items_page (tenant=? AND feed=? AND seq>? AND seq<?)", true},
		{"page items", pageItemsSQL(3), []any{"acme", 3, 2, 1}, "COVERING INDEX feed_items_event (event=?)", false},
		{"oldest item", oldestItemSQL, []any{"acme", "team:ops"}, "INDEX feed_items_page (tenant=? AND feed=?)", true},
		{"last pos", lastPosSQL, []any{"acme", "team:ops"}, "COVERING INDEX feed_items_pos (tenant=? AND feed=?)", false},
		{"pos at seq", posAtSQL, []any{"acme", "team:ops", 10}, "INDEX feed_items_page (tenant=? AND feed=? AND seq<?)", true},
		{"shared items", sharedItemsSQL, []any{"acme", "team:ops", 3}, "COVERING INDEX feed_items_shared (tenant=? AND feed=? AND seq>?)", false},
		{"item marks count", itemMarksCountSQL, []any{"acme", "ada", 0, "team:ops"}, "PRIMARY KEY (tenant=? AND user=? AND kind=? AND seq>?)", false},
		{"item marks", itemMarksSQL, []any{"acme", "ada", 0}, "PRIMARY KEY (tenant=? AND user=? AND kind=? AND seq>?)", false},
		{"memberships", membershipsSQL, []any{"acme", "ada"}, "PRIMARY KEY (tenant=? AND user=?)", false},
		{"watermarks", watermarksSQL, []any{"acme", "ada"}, "PRIMARY KEY (tenant=? AND user=?)", false},
		{"item by seq", itemSQL, []any{"acme", 5}, "PRIMARY KEY (tenant=? AND seq=?)", false},
		{"an event's items", eventItemsSQL, []any{5}, "COVERING INDEX feed_items_event (event=?)", false},
		{"prune cuts", pruneFeedCutsSQL, []any{ms(t0)}, "PRIMARY KEY (tenant=?)", false},
		{"prune items", pruneFeedItemsSQL, []any{"acme", 10, 500}, "PRIMARY KEY (tenant=? AND seq<?)", true},
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

// Each tenant numbers its own items, so another tenant's volume shows
// nowhere in what a tenant reads: its seqs, read-all's answer, when a
// member joined. A number is never given twice, even after prune deleted
// the tenant's newest items: a watermark never covers an item posted after
// it.
func TestFeedSeqPerTenant(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	bursts := 0
	burst := func(n int) { // beta's volume, between acme's posts
		for range n {
			bursts++
			post1(t, s, "beta", fmt.Sprintf("b%d", bursts), store.TenantFeed)
		}
	}
	var acme []int64
	for i := range 5 {
		burst(7)
		acme = append(acme, post1(t, s, "acme", fmt.Sprintf("a%d", i), store.TenantFeed))
	}
	if !slices.Equal(acme, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("acme's seqs %v between beta's bursts, want 1…5", acme)
	}
	burst(50)
	if m := markAll(t, s, "acme", "ada", store.MarkRead, -1); m != 5 {
		t.Errorf("acme's read-all without up_to: %d, want acme's newest 5 (beta has %d)", m, bursts)
	}
	if m := markAll(t, s, "acme", "ben", store.MarkRead, 40); m != 5 {
		t.Errorf("acme's read-all up to 40: %d, want acme's newest 5", m)
	}
	if m := markAll(t, s, "beta", "ada", store.MarkRead, -1); m != int64(bursts) {
		t.Errorf("beta's read-all: %d, want beta's newest %d", m, bursts)
	}
	// A member joins at the tenant's newest item, not the global one.
	setMembers(t, s, "acme", "team:ops", false, "ada")
	if j := count(t, s, `SELECT joined_seq FROM feed_members WHERE tenant = 'acme' AND feed = 'team:ops' AND user = 'ada'`); j != 5 {
		t.Errorf("ada joined acme's team:ops at %d, want acme's newest 5", j)
	}
	burst(3)
	ops := post1(t, s, "acme", "o1", "team:ops")
	if ops != 6 {
		t.Errorf("acme's next item %d, want 6", ops)
	}
	wantView(t, s, "acme", "ada", 6, 5, 4, 3, 2, 1)
	wantUnread(t, s, "acme", "ada", 1)

	// Prune everything acme has (beta keeps a newer item), then post: the
	// numbers go on from the counter, above every watermark and cursor.
	later := t0.Add(48 * time.Hour)
	if _, err := feedPostAt(ctx, s, later, "beta", "b-later", store.TenantFeed); err != nil {
		t.Fatal(err)
	}
	res, err := s.Prune(ctx, t0.Add(time.Hour), later, 7) // small writes: several per tenant
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(6 + bursts); res.FeedItems != want {
		t.Fatalf("pruned %d feed items, want %d", res.FeedItems, want)
	}
	wantView(t, s, "acme", "ada")
	if m := markAll(t, s, "acme", "cy", store.MarkRead, -1); m != 6 {
		t.Errorf("read-all after prune: %d, want the last number given, 6", m)
	}
	next := post1(t, s, "acme", "after", store.TenantFeed)
	if next != 7 {
		t.Fatalf("first item after prune %d, want 7 (numbers are never reused)", next)
	}
	for _, u := range []string{"ada", "ben", "cy"} {
		if items, _ := feedView(t, s, "acme", u); !slices.Equal(unreadSeqs(items), []int64{7}) {
			t.Errorf("%s after prune and post: unread %v, want [7]", u, unreadSeqs(items))
		}
		wantUnread(t, s, "acme", u, 1)
	}
	if n := post1(t, s, "beta", "b-next", store.TenantFeed); n != int64(bursts)+2 {
		t.Errorf("beta's next %d, want %d", n, bursts+2)
	}
}

// Issue 12: an event posted to several feeds that one user reads (the
// README's ["*", "team:ops", "@ada"]) is one item in that user's view and
// counts once; reading or dismissing it by any of its numbers, or a
// watermark at the number shown, does it for every copy.
func TestFeedEventInSeveralFeeds(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	setMembers(t, s, "acme", "team:ops", false, "ada", "ben")
	first := post1(t, s, "acme", "e0", store.TenantFeed)
	deploy, err := feedPost(ctx, s, "acme", "deploy", store.TenantFeed, "team:ops", "@ada")
	if err != nil {
		t.Fatal(err)
	}
	all, ops, own := deploy[store.TenantFeed], deploy["team:ops"], deploy["@ada"]
	if ops != all+1 || own != all+2 {
		t.Fatalf("deploy's items %v, want consecutive numbers in the order given", deploy)
	}
	last := post1(t, s, "acme", "e2", "@ben")

	items, _ := feedView(t, s, "acme", "ada")
	if len(items) != 2 || items[0].Seq != own || items[0].Feed != "@ada" || items[0].EventID != "deploy" || items[1].Seq != first {
		t.Fatalf("ada's view %+v, want deploy once (at its newest item, %d in @ada), then e0", items, own)
	}
	wantUnread(t, s, "acme", "ada", 2)
	wantView(t, s, "acme", "ben", last, ops, first)
	wantUnread(t, s, "acme", "ben", 3)
	wantView(t, s, "acme", "cy", all, first)
	wantUnread(t, s, "acme", "cy", 2)
	// Paged one at a time: each event once.
	var paged []int64
	for before := int64(0); ; {
		page, _, err := s.FeedPage(ctx, "acme", "ada", before, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Seq)
		before = page[0].Seq
	}
	if !slices.Equal(paged, []int64{own, first}) {
		t.Errorf("ada paged by one: %v, want [%d %d]", paged, own, first)
	}

	// ada reads it by a number she was not shown (the "*" copy): all of
	// her copies are read.
	markItem(t, s, "acme", "ada", store.MarkRead, all)
	if items, _ := feedView(t, s, "acme", "ada"); !slices.Equal(unreadSeqs(items), []int64{first}) {
		t.Errorf("ada after reading deploy by %d: unread %v, want [%d]", all, unreadSeqs(items), first)
	}
	wantUnread(t, s, "acme", "ada", 1)
	wantUnread(t, s, "acme", "cy", 2) // her copy is hers
	// A watermark below some of ben's copies leaves the event unread; at
	// the number he was shown it covers them all.
	markAll(t, s, "acme", "ben", store.MarkRead, all)
	wantUnread(t, s, "acme", "ben", 2)
	markAll(t, s, "acme", "ben", store.MarkRead, ops)
	if items, _ := feedView(t, s, "acme", "ben"); !slices.Equal(unreadSeqs(items), []int64{last}) {
		t.Errorf("ben after read-all up to %d: unread %v, want [%d]", ops, unreadSeqs(items), last)
	}
	wantUnread(t, s, "acme", "ben", 1)
	// Dismissing by the team copy hides the event, "*" copy too, for ben only.
	markItem(t, s, "acme", "ben", store.MarkDismissed, ops)
	wantView(t, s, "acme", "ben", last, first)
	wantView(t, s, "acme", "cy", all, first)
	wantUnread(t, s, "acme", "ben", 1)
}

// A digest run fixes the newest item of its own tenant's sequence:
// another tenant's volume neither widens nor shifts its range.
func TestJobRunFixesTenantSequence(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	for i := range 3 {
		post1(t, s, "acme", fmt.Sprintf("a%d", i), store.TenantFeed)
	}
	for i := range 10 {
		post1(t, s, "beta", fmt.Sprintf("b%d", i), store.TenantFeed)
	}
	at := t0.Truncate(time.Hour)
	run, err := s.BeginJobRun(ctx, "digest", "acme", at, t0)
	if err != nil || run.UpperSeq != 3 || run.PrevUpperSeq != 0 || run.Repeat {
		t.Fatalf("first run: %+v, %v; want up to acme's newest 3", run, err)
	}
	post1(t, s, "acme", "a3", store.TenantFeed)
	if run, err = s.BeginJobRun(ctx, "digest", "acme", at, t0); err != nil || run.UpperSeq != 3 || !run.Repeat {
		t.Fatalf("repeat: %+v, %v; want the same range", run, err)
	}
	if _, err := s.BeginJobRun(ctx, "digest", "beta", at, t0); err == nil || !strings.Contains(err.Error(), `began for tenant "acme"`) {
		t.Errorf("the same run for another tenant: %v, want an error naming acme", err)
	}
	if err := s.FinishJobRun(ctx, "digest", at, nil, t0); err != nil {
		t.Fatal(err)
	}
	if run, err = s.BeginJobRun(ctx, "digest", "acme", at.Add(time.Hour), t0); err != nil || run.UpperSeq != 4 || run.PrevUpperSeq != 3 {
		t.Fatalf("next run: %+v, %v; want (3, 4]", run, err)
	}
	// The job now digests beta: its first range in beta's sequence.
	if run, err = s.BeginJobRun(ctx, "digest", "beta", at.Add(2*time.Hour), t0); err != nil || run.UpperSeq != 10 || run.PrevUpperSeq != 0 {
		t.Fatalf("a run for beta: %+v, %v; want (0, 10]", run, err)
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
	if err := s.MarkItem(ctx, "acme", "ada", store.MarkRead, 4); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ada marks ben's copy of a2: %v, want ErrNotFound", err)
	}

	// Each tenant's counter starts at the highest number it held (acme:
	// ben's watermark 9, above its newest item 6), so new items number
	// above every old watermark; dee joined team:ops at the global 10,
	// which becomes acme's 9: she sees acme's next team item, numbered 10.
	acmeNext := post1(t, s, "acme", "a4", "team:ops")
	betaNext := post1(t, s, "beta", "b7", store.TenantFeed)
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
	post1(t, s, "acme", "a5", store.TenantFeed) // 11

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

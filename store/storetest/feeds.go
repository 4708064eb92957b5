package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// feedViews are the feed behaviours the README's "In-app feeds" states:
// fan-out on read, per-tenant numbering, an event once in a user's view,
// membership from when one joined, watermarks and per-item marks, paging
// by cursor while items arrive, and prune.
func feedViews(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "FanOutOnRead", run: testFeedFanOutOnRead},
		{name: "ResentEventAddsNoItem", run: testFeedResentEvent},
		{name: "SeqPerTenant", run: testFeedSeqPerTenant},
		{name: "ConcurrentPostsNumberWithoutGaps", run: testFeedConcurrentPosts},
		{name: "EventInSeveralFeedsIsOneItem", run: testFeedEventInSeveralFeeds},
		{name: "TenantIsolation", run: testFeedTenantIsolation},
		{name: "MembershipFromJoinOrWithHistory", run: testFeedMembership},
		{name: "WatermarksOnlyMoveForward", run: testFeedMarkAllForward},
		{name: "WatermarkNeverPastTheNewestItem", run: testFeedMarkAllBeyondNewest},
		{name: "MarkAllWhilePosting", run: testFeedMarkAllWhilePosting},
		{name: "MarkItem", run: testFeedMarkItem},
		{name: "Dismiss", run: testFeedDismiss},
		{name: "PagesByCursorWhileItemsArrive", run: testFeedPagesWhileItemsArrive},
		{name: "UnreadCountMatchesModel", run: testFeedMatchesModel},
		{name: "PruneItemsAndTheirMarks", run: testFeedPrune},
		{name: "PruneTakesEachTenantsOldestItems", run: testFeedPrunePrefix},
	})
}

// work is n, or a third of it under the race detector (race.go).
func work(n int) int {
	if raceEnabled {
		return max(1, n/3)
	}
	return n
}

// feedEvent is event id of tenant, posted to feeds, with no recipients.
func feedEvent(tenant, id string, feeds ...string) model.AcceptInput {
	return model.AcceptInput{Event: model.NewEvent{Tenant: tenant, EventID: id, Purpose: "feed", Type: "note",
		Payload: fmt.Appendf(nil, `{"id":%q}`, id), Message: fmt.Appendf(nil, `{"subject":%q}`, id),
		Fingerprint: "fp:" + tenant + "/" + id, Feeds: feeds}}
}

// post accepts a new event posted to feeds, at at. Items are numbered per
// tenant (1, 2, 3 …, an event's items consecutive in the order of its
// feeds): the tests name the numbers they expect.
func post(t *testing.T, s store.Store, at time.Time, tenant, id string, feeds ...string) {
	t.Helper()
	if a := accept(t, s, at, feedEvent(tenant, id, feeds...))[0]; a.Duplicate {
		t.Fatalf("post %s/%s: a duplicate", tenant, id)
	}
}

// postErr is post for goroutines: it does not touch t.
func postErr(t *testing.T, s store.Store, tenant, id string, feeds ...string) error {
	return postAll(t, s, feedEvent(tenant, id, feeds...))
}

// postAll accepts events in one call (one commit), for goroutines.
func postAll(t *testing.T, s store.Store, in ...model.AcceptInput) error {
	_, errs, err := s.AcceptEvents(t.Context(), in, t0)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return fmt.Errorf("post %s/%s…: %w", in[0].Event.Tenant, in[0].Event.EventID, err)
	}
	return nil
}

// feedView is a user's whole view, newest first, and their read watermark.
func feedView(t *testing.T, s store.Store, tenant, user string) ([]model.FeedItem, int64) {
	t.Helper()
	items, mark, err := s.FeedPage(t.Context(), tenant, user, 0, 10000)
	if err != nil {
		t.Fatalf("feed of %s/%s: %v", tenant, user, err)
	}
	return items, mark
}

func seqsOf(items []model.FeedItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// unreadOf is the seqs of the items a page shows unread.
func unreadOf(items []model.FeedItem) []int64 {
	out := []int64{}
	for _, it := range items {
		if !it.Read {
			out = append(out, it.Seq)
		}
	}
	return out
}

// down is n, n-1, … 1.
func down(n int64) []int64 {
	out := make([]int64, 0, n)
	for i := n; i > 0; i-- {
		out = append(out, i)
	}
	return out
}

func unreadCount(t *testing.T, s store.Store, tenant, user string) int64 {
	t.Helper()
	n, err := s.UnreadCount(t.Context(), tenant, user)
	if err != nil {
		t.Fatalf("unread count of %s/%s: %v", tenant, user, err)
	}
	return n
}

func setMembers(t *testing.T, s store.Store, tenant, feed string, history bool, users ...string) {
	t.Helper()
	if err := s.SetFeedMembers(t.Context(), tenant, feed, users, history); err != nil {
		t.Fatalf("members of %s/%s: %v", tenant, feed, err)
	}
}

func markAll(t *testing.T, s store.Store, tenant, user, kind string, upTo int64) int64 {
	t.Helper()
	m, err := s.MarkAll(t.Context(), tenant, user, kind, upTo)
	if err != nil {
		t.Fatalf("MarkAll(%s/%s, %s, %d): %v", tenant, user, kind, upTo, err)
	}
	return m
}

func markItem(t *testing.T, s store.Store, tenant, user, kind string, seq int64) {
	t.Helper()
	if err := s.MarkItem(t.Context(), tenant, user, kind, seq); err != nil {
		t.Fatalf("MarkItem(%s/%s, %s, %d): %v", tenant, user, kind, seq, err)
	}
}

// wantView checks the seqs a user sees, newest first.
func wantView(t *testing.T, s store.Store, tenant, user string, want ...int64) {
	t.Helper()
	items, _ := feedView(t, s, tenant, user)
	if got := seqsOf(items); !slices.Equal(got, want) {
		t.Errorf("%s/%s sees %v, want %v", tenant, user, got, want)
	}
}

// wantUnread checks the seqs a user's view shows unread, and that the
// unread count counts exactly those.
func wantUnread(t *testing.T, s store.Store, tenant, user string, want ...int64) {
	t.Helper()
	if want == nil {
		want = []int64{}
	}
	items, mark := feedView(t, s, tenant, user)
	if got := unreadOf(items); !slices.Equal(got, want) {
		t.Errorf("%s/%s: unread %v (read mark %d), want %v", tenant, user, got, mark, want)
	}
	if n := unreadCount(t, s, tenant, user); n != int64(len(want)) {
		t.Errorf("%s/%s: unread count %d, want %d (%v)", tenant, user, n, len(want), want)
	}
}

// An event posted to "*" is one item, whatever the number of readers, and
// every user of the tenant reads it; "@ada" is ada's alone, a topic feed
// its members'. An event with recipients posts in the same accept. An
// event posted to two feeds is an item in each (consecutive numbers) and
// one item for a user who reads both, at its newer item. Prune counts the
// items: one per feed an event was posted to, not one per reader.
func testFeedFanOutOnRead(t *testing.T, s store.Store) {
	users := []string{"ada", "ben", "cy"}
	post(t, s, t0, "acme", "e1", model.TenantFeed) // 1
	for _, u := range users {
		items, mark := feedView(t, s, "acme", u)
		if len(items) != 1 || mark != 0 {
			t.Fatalf("%s sees %+v (read mark %d), want e1 alone", u, items, mark)
		}
		it := items[0]
		if it.Seq != 1 || it.Feed != model.TenantFeed || it.EventID != "e1" || it.Type != "note" ||
			string(it.Message) != `{"subject":"e1"}` || it.Read || !it.CreatedAt.Equal(t0) {
			t.Errorf("%s sees %+v, want e1 as item 1 of %q, unread, posted at %s", u, it, model.TenantFeed, t0)
		}
		wantUnread(t, s, "acme", u, 1)
	}
	post(t, s, t0, "acme", "e2", model.PersonalFeed("ada")) // 2
	wantView(t, s, "acme", "ada", 2, 1)
	wantView(t, s, "acme", "ben", 1)

	setMembers(t, s, "acme", "team:ops", false, "ada", "ben")
	post(t, s, t0, "acme", "e3", "team:ops") // 3
	wantUnread(t, s, "acme", "ada", 3, 2, 1)
	wantUnread(t, s, "acme", "ben", 3, 1)
	wantUnread(t, s, "acme", "cy", 1)

	// An event with recipients, posted to "*" and team:ops in its accept.
	in := newEvent("acme", "e4", 2)
	in.Event.Feeds = []string{model.TenantFeed, "team:ops"}
	if a := accept(t, s, t0, in)[0]; len(a.Notifications) != 2 {
		t.Fatalf("e4 wrote %d notifications, want its 2", len(a.Notifications))
	}
	items, _ := feedView(t, s, "acme", "ada")
	if len(items) != 4 || items[0].Seq != 5 || items[0].Feed != "team:ops" || items[0].EventID != "e4" || items[0].Type != "payment" {
		t.Fatalf("ada sees %+v, want e4 once, at its team:ops item 5 (4 is its %q item)", items, model.TenantFeed)
	}
	wantUnread(t, s, "acme", "ada", 5, 3, 2, 1)
	wantUnread(t, s, "acme", "ben", 5, 3, 1)
	wantUnread(t, s, "acme", "cy", 4, 1)

	res, err := s.Prune(t.Context(), t0.Add(time.Hour), t0.Add(2*time.Hour), 500)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeedItems != 5 {
		t.Errorf("pruned %d feed items, want 5: one per feed each event was posted to, for 3 readers", res.FeedItems)
	}
	for _, u := range users {
		wantView(t, s, "acme", u)
		wantUnread(t, s, "acme", u)
	}
}

// A resent event (a duplicate, or a conflict) adds no item and takes no
// number: the next event's item is the next number, also when it is
// accepted in the same call as the conflict.
func testFeedResentEvent(t *testing.T, s store.Store) {
	post(t, s, t0, "acme", "e1", model.TenantFeed, "@ada") // 1, 2
	if a := accept(t, s, t0.Add(time.Minute), feedEvent("acme", "e1", model.TenantFeed, "@ada"))[0]; !a.Duplicate {
		t.Fatalf("a resent event: %+v, want a duplicate", a)
	}
	changed := feedEvent("acme", "e1", model.TenantFeed)
	changed.Event.Fingerprint = "other content"
	_, errs, err := s.AcceptEvents(t.Context(), []model.AcceptInput{changed, feedEvent("acme", "e2", model.TenantFeed)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "the event resent with other content", errs[0], model.ErrEventConflict)
	if errs[1] != nil {
		t.Fatalf("a new event accepted beside a conflict: %v", errs[1])
	}
	post(t, s, t0, "acme", "e3", "@ben")
	wantUnread(t, s, "acme", "ada", 3, 2)
	wantUnread(t, s, "acme", "ben", 4, 3, 1)
}

// Each tenant numbers its own items, so another tenant's volume shows
// nowhere in what a tenant reads: its seqs, read-all's answer, when a
// member joined. A number is never given twice, even after prune deleted
// all the tenant's items: a watermark never covers an item posted after
// it. Events accepted in one call take numbers in their order.
func testFeedSeqPerTenant(t *testing.T, s store.Store) {
	var beta int64
	burst := func(n int) { // beta's volume, between acme's posts
		for range n {
			beta++
			post(t, s, t0, "beta", fmt.Sprintf("b%d", beta), model.TenantFeed)
		}
	}
	for i := range 5 {
		burst(7)
		post(t, s, t0, "acme", fmt.Sprintf("a%d", i), model.TenantFeed)
	}
	wantView(t, s, "acme", "ada", 5, 4, 3, 2, 1)
	wantView(t, s, "beta", "ada", down(beta)...)
	burst(50)
	if m := markAll(t, s, "acme", "ada", model.MarkRead, -1); m != 5 {
		t.Errorf("acme's read-all without up_to: %d, want acme's newest 5 (beta has %d)", m, beta)
	}
	if m := markAll(t, s, "acme", "ben", model.MarkRead, 40); m != 5 {
		t.Errorf("acme's read-all up to 40: %d, want acme's newest 5", m)
	}
	if m := markAll(t, s, "beta", "ada", model.MarkRead, -1); m != beta {
		t.Errorf("beta's read-all: %d, want beta's newest %d", m, beta)
	}
	// A member joins at the tenant's newest item, not at the store's: ada
	// sees acme's next item, whatever beta posted.
	setMembers(t, s, "acme", "team:ops", false, "ada")
	burst(3)
	post(t, s, t0, "acme", "o1", "team:ops") // 6
	wantView(t, s, "acme", "ada", 6, 5, 4, 3, 2, 1)
	wantUnread(t, s, "acme", "ada", 6)

	// Two events in one accept: consecutive numbers, in order.
	accept(t, s, t0, feedEvent("beta", "pair-1", model.TenantFeed), feedEvent("beta", "pair-2", model.TenantFeed))
	beta += 2
	if items, _ := feedView(t, s, "beta", "cy"); len(items) < 2 || items[0].EventID != "pair-2" || items[0].Seq != beta ||
		items[1].EventID != "pair-1" || items[1].Seq != beta-1 {
		t.Errorf("beta's view after two events in one accept starts %+v, want pair-2 at %d, pair-1 at %d", items[:min(2, len(items))], beta, beta-1)
	}

	// Prune all acme has (beta keeps a newer item), in small writes: the
	// numbers go on from the last one given, above every watermark.
	later := t0.Add(48 * time.Hour)
	post(t, s, later, "beta", "b-later", model.TenantFeed)
	beta++
	res, err := s.Prune(t.Context(), t0.Add(time.Hour), later, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 + beta - 1; res.FeedItems != want {
		t.Fatalf("pruned %d feed items, want %d (all acme's, all beta's but its newest)", res.FeedItems, want)
	}
	wantView(t, s, "acme", "ada")
	if m := markAll(t, s, "acme", "cy", model.MarkRead, -1); m != 6 {
		t.Errorf("read-all after prune: %d, want the last number given, 6", m)
	}
	post(t, s, t0.Add(49*time.Hour), "acme", "after", model.TenantFeed) // 7, not 1
	for _, u := range []string{"ada", "ben", "cy"} {
		wantUnread(t, s, "acme", u, 7)
	}
	post(t, s, t0.Add(49*time.Hour), "beta", "b-next", model.TenantFeed)
	wantView(t, s, "beta", "ada", beta+1, beta)
}

// Events posted at once (their accepts sharing commits) take the numbers
// 1 … n, each once, with none skipped.
func testFeedConcurrentPosts(t *testing.T, s store.Store) {
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := postErr(t, s, "acme", evtID(i), model.TenantFeed); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	wantView(t, s, "acme", "ada", down(n)...)
}

// An event posted to several feeds that one user reads (the
// README's ["*", "team:ops", "@ada"]) is one item in that user's view, at
// its newest item, and counts once; paged one item at a time it comes
// once. Reading or dismissing it by any of its numbers, or a watermark at
// the number shown, does it for every copy; a watermark below some copies
// leaves it unread.
func testFeedEventInSeveralFeeds(t *testing.T, s store.Store) {
	setMembers(t, s, "acme", "team:ops", false, "ada", "ben")
	post(t, s, t0, "acme", "e0", model.TenantFeed)                         // 1
	post(t, s, t0, "acme", "deploy", model.TenantFeed, "team:ops", "@ada") // 2, 3, 4
	post(t, s, t0, "acme", "e2", "@ben")                                   // 5

	items, _ := feedView(t, s, "acme", "ada")
	if len(items) != 2 || items[0].Seq != 4 || items[0].Feed != "@ada" || items[0].EventID != "deploy" || items[1].Seq != 1 {
		t.Fatalf("ada's view %+v, want deploy once (at its newest item, 4 in @ada), then e0", items)
	}
	wantUnread(t, s, "acme", "ada", 4, 1)
	wantUnread(t, s, "acme", "ben", 5, 3, 1)
	wantUnread(t, s, "acme", "cy", 2, 1)
	var paged []int64
	for before := int64(0); ; {
		page, _, err := s.FeedPage(t.Context(), "acme", "ada", before, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if paged = append(paged, page[0].Seq); len(paged) > 5 {
			break
		}
		before = page[0].Seq
	}
	if !slices.Equal(paged, []int64{4, 1}) {
		t.Errorf("ada paged by one: %v, want [4 1]", paged)
	}

	// ada reads it by a number she was not shown (the "*" copy): all her
	// copies are read; cy's copy is cy's.
	markItem(t, s, "acme", "ada", model.MarkRead, 2)
	wantUnread(t, s, "acme", "ada", 1)
	wantUnread(t, s, "acme", "cy", 2, 1)
	markAll(t, s, "acme", "ben", model.MarkRead, 2)
	wantUnread(t, s, "acme", "ben", 5, 3)
	markAll(t, s, "acme", "ben", model.MarkRead, 3)
	wantUnread(t, s, "acme", "ben", 5)
	// Dismissing by the team copy hides the event, "*" copy too, for ben
	// only.
	markItem(t, s, "acme", "ben", model.MarkDismissed, 3)
	wantView(t, s, "acme", "ben", 5, 1)
	wantView(t, s, "acme", "ada", 4, 1)
	wantView(t, s, "acme", "cy", 2, 1)
	wantUnread(t, s, "acme", "ben", 5)
}

// Tenants share user ids, feed names, event ids and item numbers, and
// nothing else: a number names an item of the caller's tenant only, and
// watermarks, marks and memberships are per tenant.
func testFeedTenantIsolation(t *testing.T, s store.Store) {
	for _, tenant := range []string{"acme", "beta"} {
		setMembers(t, s, tenant, "team:ops", false, "ada")
	}
	for i, f := range []string{model.TenantFeed, "@ada", "team:ops"} {
		post(t, s, t0, "acme", evtID(i), f)
		post(t, s, t0, "beta", evtID(i), f)
	}
	post(t, s, t0, "acme", "e9", model.TenantFeed)
	wantUnread(t, s, "acme", "ada", 4, 3, 2, 1)
	wantUnread(t, s, "beta", "ada", 3, 2, 1)
	if items, _ := feedView(t, s, "beta", "ada"); items[0].EventID != evtID(2) || items[0].Feed != "team:ops" {
		t.Errorf("beta's ada sees %+v first, want beta's %s in team:ops", items[0], evtID(2))
	}
	wantView(t, s, "gamma", "ada")
	wantUnread(t, s, "gamma", "ada")

	err := s.MarkItem(t.Context(), "beta", "ada", model.MarkRead, 4)
	wantErr(t, "beta's ada marks item 4, which only acme has", err, model.ErrNotFound)
	for _, seq := range []int64{1, 2, 3} {
		markItem(t, s, "beta", "ada", model.MarkRead, seq)
	}
	wantUnread(t, s, "beta", "ada")
	wantUnread(t, s, "acme", "ada", 4, 3, 2, 1)

	if m := markAll(t, s, "beta", "ada", model.MarkRead, 4); m != 3 {
		t.Errorf("beta's read-all up to 4: watermark %d, want beta's newest 3", m)
	}
	wantUnread(t, s, "acme", "ada", 4, 3, 2, 1)
	if m := markAll(t, s, "acme", "ada", model.MarkRead, -1); m != 4 {
		t.Errorf("acme's read-all: watermark %d, want acme's newest 4", m)
	}
	wantUnread(t, s, "acme", "ada")
	markAll(t, s, "beta", "ada", model.MarkDismissed, 2)
	wantView(t, s, "beta", "ada", 3)
	markItem(t, s, "beta", "ada", model.MarkDismissed, 3)
	wantView(t, s, "beta", "ada")
	wantView(t, s, "acme", "ada", 4, 3, 2, 1)

	setMembers(t, s, "beta", "team:ops", false) // ada leaves beta's team:ops only
	post(t, s, t0, "acme", "e10", "team:ops")   // acme's 5
	post(t, s, t0, "beta", "e10", "team:ops")   // beta's 4
	wantUnread(t, s, "acme", "ada", 5)
	wantUnread(t, s, "beta", "ada")
}

// A member sees a topic feed's items from when they joined, or its whole
// past when they join with history; a member who stays keeps when they
// joined; leaving removes the feed, and coming back without history starts
// again from then. An item from before one joined is not theirs to mark.
// A user listed twice is one member.
func testFeedMembership(t *testing.T, s store.Store) {
	post(t, s, t0, "acme", "i1", "team:ops") // 1
	setMembers(t, s, "acme", "team:ops", false, "ada", "ada")
	wantUnread(t, s, "acme", "ada")
	post(t, s, t0, "acme", "i2", "team:ops") // 2
	wantUnread(t, s, "acme", "ada", 2)
	err := s.MarkItem(t.Context(), "acme", "ada", model.MarkRead, 1)
	wantErr(t, "ada marks an item from before she joined", err, model.ErrNotFound)

	setMembers(t, s, "acme", "team:ops", true, "ada", "ben")
	wantUnread(t, s, "acme", "ada", 2)
	wantUnread(t, s, "acme", "ben", 2, 1)

	setMembers(t, s, "acme", "team:ops", false, "ben")
	wantUnread(t, s, "acme", "ada")
	err = s.MarkItem(t.Context(), "acme", "ada", model.MarkRead, 2)
	wantErr(t, "ada marks an item of a feed she left", err, model.ErrNotFound)
	wantUnread(t, s, "acme", "ben", 2, 1)

	setMembers(t, s, "acme", "team:ops", false, "ben", "ada")
	wantUnread(t, s, "acme", "ada")
	post(t, s, t0, "acme", "i3", "team:ops") // 3
	wantUnread(t, s, "acme", "ada", 3)
	wantUnread(t, s, "acme", "ben", 3, 2, 1)

	setMembers(t, s, "acme", "team:ops", false)
	wantUnread(t, s, "acme", "ada")
	wantUnread(t, s, "acme", "ben")
}

// A watermark never moves back, whatever order the requests arrive in:
// MarkAll answers max(old, up_to), and 64 requests at once in a random
// order leave the largest. Read and dismiss are separate watermarks;
// without up_to the watermark is the tenant's newest item now.
func testFeedMarkAllForward(t *testing.T, s store.Store) {
	for i := range 64 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed)
	}
	if m := markAll(t, s, "acme", "ada", model.MarkRead, 10); m != 10 {
		t.Fatalf("MarkAll(10) = %d", m)
	}
	if m := markAll(t, s, "acme", "ada", model.MarkRead, 5); m != 10 {
		t.Fatalf("MarkAll(5) after 10 = %d, want 10", m)
	}
	if _, mark := feedView(t, s, "acme", "ada"); mark != 10 {
		t.Fatalf("read mark %d, want 10", mark)
	}
	if m := markAll(t, s, "acme", "ada", model.MarkDismissed, 3); m != 3 {
		t.Fatalf("MarkAll(dismissed, 3) after read 10 = %d, want 3", m)
	}
	if m := markAll(t, s, "acme", "ada", model.MarkRead, 0); m != 10 {
		t.Fatalf("the read mark after dismissing up to 3: %d, want 10", m)
	}

	for _, kind := range []string{model.MarkRead, model.MarkDismissed} {
		ups := make([]int64, 64)
		for i := range ups {
			ups[i] = int64(i + 1)
		}
		rand.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
		var wg sync.WaitGroup
		for _, up := range ups {
			wg.Go(func() {
				m, err := s.MarkAll(t.Context(), "acme", "ben", kind, up)
				if err != nil {
					t.Error(err)
				} else if m < up {
					t.Errorf("MarkAll(%s, %d) = %d: below what it was asked", kind, up, m)
				}
			})
		}
		wg.Wait()
		if m := markAll(t, s, "acme", "ben", kind, 0); m != 64 {
			t.Errorf("%s mark after 64 MarkAll at once = %d, want the largest, 64", kind, m)
		}
	}

	post(t, s, t0, "acme", "a", model.TenantFeed) // 65
	post(t, s, t0, "acme", "b", model.TenantFeed) // 66
	if m := markAll(t, s, "acme", "cy", model.MarkRead, -1); m != 66 {
		t.Errorf("MarkAll(-1) = %d, want the newest item, 66", m)
	}
	wantUnread(t, s, "acme", "cy")
	if n := unreadCount(t, s, "acme", "ada"); n != 66-10 {
		t.Errorf("ada's unread count %d, want %d (read up to 10)", n, 66-10)
	}
}

// MarkAll with an up_to beyond every item stops at the newest, for either
// kind: up_to is "the newest item the client showed", and an item posted
// after stays unread and in view. Before the tenant's first item it is 0.
func testFeedMarkAllBeyondNewest(t *testing.T, s store.Store) {
	if m := markAll(t, s, "acme", "dee", model.MarkRead, 5); m != 0 {
		t.Errorf("MarkAll(read, 5) before any item = %d, want 0", m)
	}
	if m := markAll(t, s, "acme", "dee", model.MarkDismissed, -1); m != 0 {
		t.Errorf("MarkAll(dismissed, -1) before any item = %d, want 0", m)
	}
	post(t, s, t0, "acme", "a", model.TenantFeed) // 1
	wantUnread(t, s, "acme", "dee", 1)
	if m := markAll(t, s, "acme", "ada", model.MarkRead, 1000); m != 1 {
		t.Errorf("MarkAll(read, 1000) with the newest item 1 = %d, want 1", m)
	}
	if m := markAll(t, s, "acme", "ben", model.MarkDismissed, 1000); m != 1 {
		t.Errorf("MarkAll(dismissed, 1000) with the newest item 1 = %d, want 1", m)
	}
	if m := markAll(t, s, "acme", "cy", model.MarkRead, 1000); m != 1 {
		t.Errorf("MarkAll(read, 1000) again = %d, want 1", m)
	}
	post(t, s, t0, "acme", "b", model.TenantFeed) // 2
	wantUnread(t, s, "acme", "ada", 2)
	wantView(t, s, "acme", "ben", 2)
	wantUnread(t, s, "acme", "ben", 2)
	if _, mark := feedView(t, s, "acme", "ada"); mark != 1 {
		t.Errorf("ada's read mark %d, want 1", mark)
	}
}

// The race "mark all read" exists for: items keep arriving while users
// read a page and mark read up to the newest item it showed. No item the
// user was not shown may end up read: nothing newer than up_to, and
// nothing between the page's oldest and newest items that the page left
// out (each page is one snapshot, and an item committed later has a
// higher number than every item committed before it).
func testFeedMarkAllWhilePosting(t *testing.T, s store.Store) {
	users := []string{"u0", "u1", "u2", "u3"}
	setMembers(t, s, "acme", "team:ops", false, users...)
	feeds := []string{model.TenantFeed, "team:ops", "team:dev", "@u0", "@u1", "@u2", "@u3"}
	rounds, limit := work(25), 20 // per user
	for i := range limit {
		post(t, s, t0, "acme", fmt.Sprintf("pre%d", i), feeds[i%len(feeds)])
	}

	stop := make(chan struct{})
	var posters sync.WaitGroup
	for p := range 2 {
		posters.Go(func() {
			for i := range work(50) {
				select {
				case <-stop:
					return
				default:
				}
				// Three events to three feeds in one commit: a page that
				// read its feeds at different moments would miss some.
				var in []model.AcceptInput
				for k := range 3 {
					in = append(in, feedEvent("acme", fmt.Sprintf("p%d-%d-%d", p, i, k), feeds[(i+p+k)%len(feeds)]))
				}
				if err := postAll(t, s, in...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	type shown struct {
		user         string
		seqs         []int64
		oldest, upTo int64
	}
	pages := make([][]shown, len(users))
	var markers sync.WaitGroup
	for ui, u := range users {
		markers.Go(func() {
			for range rounds {
				page, _, err := s.FeedPage(t.Context(), "acme", u, 0, limit)
				if err != nil {
					t.Error(err)
					return
				}
				if len(page) == 0 {
					continue
				}
				upTo := page[0].Seq
				pages[ui] = append(pages[ui], shown{u, seqsOf(page), page[len(page)-1].Seq, upTo})
				if _, err := s.MarkAll(t.Context(), "acme", u, model.MarkRead, upTo); err != nil {
					t.Error(err)
					return
				}
				after, mark, err := s.FeedPage(t.Context(), "acme", u, 0, 50)
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
						t.Errorf("%s: item %d read after MarkAll(%d)", u, it.Seq, upTo)
					case it.Seq <= upTo && !it.Read:
						t.Errorf("%s: item %d unread after MarkAll(%d)", u, it.Seq, upTo)
					}
					if it.Seq > upTo {
						newer++
					}
				}
				n, err := s.UnreadCount(t.Context(), "acme", u)
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
	if t.Failed() {
		return
	}

	// Quiet now. Nobody dismissed or left: each page shows what the whole
	// view holds between its oldest and newest item.
	for ui, u := range users {
		items, mark := feedView(t, s, "acme", u)
		all := seqsOf(items)
		for _, p := range pages[ui] {
			var want []int64
			for _, seq := range all {
				if seq >= p.oldest && seq <= p.upTo {
					want = append(want, seq)
				}
			}
			if !slices.Equal(p.seqs, want) {
				t.Errorf("%s: a page showed %v, but between %d and %d the feed holds %v: read-all up to %d read the others unseen",
					u, p.seqs, p.oldest, p.upTo, want, p.upTo)
			}
		}
		var unread []int64
		for _, seq := range all {
			if seq > mark {
				unread = append(unread, seq)
			}
		}
		wantUnread(t, s, "acme", u, unread...)
	}
}

// Items read or dismissed one by one, above and below the watermarks: each
// counts once; below the read watermark reading changes nothing, and
// dismissing still hides. An item the user cannot see (another tenant's
// number, another user's personal item, a feed they do not read, no item)
// is not found.
func testFeedMarkItem(t *testing.T, s store.Store) {
	for i := range 5 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed) // 1 … 5
	}
	markAll(t, s, "acme", "ada", model.MarkRead, 2)
	wantUnread(t, s, "acme", "ada", 5, 4, 3)

	markItem(t, s, "acme", "ada", model.MarkRead, 4)
	wantUnread(t, s, "acme", "ada", 5, 3)
	markItem(t, s, "acme", "ada", model.MarkRead, 4) // again: nothing changes
	wantUnread(t, s, "acme", "ada", 5, 3)

	markItem(t, s, "acme", "ada", model.MarkDismissed, 5)
	wantView(t, s, "acme", "ada", 4, 3, 2, 1)
	wantUnread(t, s, "acme", "ada", 3)
	// Read, then dismissed; dismissed, then read: gone, and never counted
	// twice.
	markItem(t, s, "acme", "ada", model.MarkDismissed, 4)
	markItem(t, s, "acme", "ada", model.MarkDismissed, 3)
	markItem(t, s, "acme", "ada", model.MarkRead, 3)
	wantView(t, s, "acme", "ada", 2, 1)
	wantUnread(t, s, "acme", "ada")

	markItem(t, s, "acme", "ada", model.MarkRead, 1) // below the read mark
	wantUnread(t, s, "acme", "ada")
	markItem(t, s, "acme", "ada", model.MarkDismissed, 1)
	wantView(t, s, "acme", "ada", 2)
	markAll(t, s, "acme", "ada", model.MarkDismissed, 2)
	wantView(t, s, "acme", "ada")
	markItem(t, s, "acme", "ada", model.MarkDismissed, 2) // below the dismiss mark
	wantView(t, s, "acme", "ada")
	// ben's view is his own.
	wantUnread(t, s, "acme", "ben", 5, 4, 3, 2, 1)

	for i := range 10 {
		post(t, s, t0, "beta", evtID(i), model.TenantFeed) // beta's 1 … 10
	}
	post(t, s, t0, "acme", "b1", model.PersonalFeed("ben")) // 6
	post(t, s, t0, "acme", "t1", "team:dev")                // 7
	for _, kind := range []string{model.MarkRead, model.MarkDismissed} {
		for _, q := range []struct {
			what string
			seq  int64
		}{{"a number only beta has", 10}, {"ben's personal item", 6}, {"an item of a feed ada does not read", 7},
			{"no item", 1 << 40}, {"item 0", 0}} {
			err := s.MarkItem(t.Context(), "acme", "ada", kind, q.seq)
			wantErr(t, fmt.Sprintf("MarkItem(%s) on %s", kind, q.what), err, model.ErrNotFound)
		}
	}
	wantUnread(t, s, "beta", "ada", down(10)...)
	wantUnread(t, s, "acme", "ben", 6, 5, 4, 3, 2, 1)
}

// Dismiss-all hides the items up to its watermark, read or not, and
// nothing after; it does not read them (the read watermark is apart). An
// event in several feeds leaves the view when every copy the user sees
// is dismissed: a watermark at the copy shown does it, one below it does
// not.
func testFeedDismiss(t *testing.T, s store.Store) {
	setMembers(t, s, "acme", "team:ops", false, "ada")
	post(t, s, t0, "acme", "e1", model.TenantFeed)               // 1
	post(t, s, t0, "acme", "e2", model.TenantFeed)               // 2
	post(t, s, t0, "acme", "both", model.TenantFeed, "team:ops") // 3, 4
	post(t, s, t0, "acme", "e5", model.TenantFeed)               // 5
	markItem(t, s, "acme", "ada", model.MarkRead, 2)
	if m := markAll(t, s, "acme", "ada", model.MarkDismissed, 2); m != 2 {
		t.Fatalf("dismiss-all up to 2: %d", m)
	}
	wantView(t, s, "acme", "ada", 5, 4)
	wantUnread(t, s, "acme", "ada", 5, 4)
	if _, mark := feedView(t, s, "acme", "ada"); mark != 0 {
		t.Errorf("read mark %d after dismiss-all, want 0: dismissing is not reading", mark)
	}
	markAll(t, s, "acme", "ada", model.MarkDismissed, 3) // below the copy shown (4)
	wantView(t, s, "acme", "ada", 5, 4)
	wantUnread(t, s, "acme", "ada", 5, 4)
	markAll(t, s, "acme", "ada", model.MarkDismissed, 4)
	wantView(t, s, "acme", "ada", 5)
	wantUnread(t, s, "acme", "ada", 5)
	// ben reads only "*": his view is his.
	wantView(t, s, "acme", "ben", 5, 3, 2, 1)
	// Dismissing one item: gone from the view and the count.
	markItem(t, s, "acme", "ben", model.MarkDismissed, 3)
	wantUnread(t, s, "acme", "ben", 5, 2, 1)
	post(t, s, t0, "acme", "e6", model.TenantFeed) // 6
	wantUnread(t, s, "acme", "ada", 6, 5)
	wantUnread(t, s, "acme", "ben", 6, 5, 2, 1)
}

// Paging back with before=cursor while items keep arriving (one between
// every two pages, and a poster running throughout): every item from the
// first page's newest down to the last page's oldest is listed once,
// newest first, with the items ada dismissed left out and an event in two
// of her feeds once. The cursor is a number, and an item committed later
// has a higher number than every item committed before it, so no page can
// skip one.
func testFeedPagesWhileItemsArrive(t *testing.T, s store.Store) {
	setMembers(t, s, "acme", "team:ops", false, "ada")
	feeds := []string{model.TenantFeed, "@ada", "team:ops", "@ben", "team:dev"}
	for i := range 60 {
		f := []string{feeds[i%len(feeds)]}
		if i%7 == 0 {
			f = []string{model.TenantFeed, "team:ops"}
		}
		post(t, s, t0, "acme", fmt.Sprintf("pre%d", i), f...)
	}
	items, _ := feedView(t, s, "acme", "ada")
	markItem(t, s, "acme", "ada", model.MarkDismissed, items[3].Seq)
	markItem(t, s, "acme", "ada", model.MarkDismissed, items[10].Seq)
	markItem(t, s, "acme", "ada", model.MarkRead, items[5].Seq)

	stop := make(chan struct{})
	var bg sync.WaitGroup
	quiet := sync.OnceFunc(func() { close(stop); bg.Wait() })
	defer quiet() // the poster stops before the store closes, whatever fails
	bg.Go(func() {
		for i := range work(70) {
			select {
			case <-stop:
				return
			default:
			}
			// To ada's three feeds in one commit.
			if err := postAll(t, s, feedEvent("acme", fmt.Sprintf("bg%d-0", i), feeds[0]),
				feedEvent("acme", fmt.Sprintf("bg%d-1", i), feeds[1]), feedEvent("acme", fmt.Sprintf("bg%d-2", i), feeds[2])); err != nil {
				t.Error(err)
				return
			}
		}
	})
	rounds := work(12)
	paged := make([][]int64, rounds)
	for round := range rounds {
		limit, maxPages := 7, 4
		if round == rounds-1 {
			limit, maxPages = 30, 1<<30 // the last round goes to the end
		}
		before := int64(0)
		for page := 0; page < maxPages; page++ {
			items, _, err := s.FeedPage(t.Context(), "acme", "ada", before, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) > limit {
				t.Fatalf("a page of %d, limit %d", len(items), limit)
			}
			paged[round] = append(paged[round], seqsOf(items)...)
			if len(items) < limit {
				break
			}
			before = items[len(items)-1].Seq
			if err := postErr(t, s, "acme", fmt.Sprintf("r%d-p%d", round, page), feeds[page%3]); err != nil {
				t.Fatal(err)
			}
		}
		if len(paged[round]) == 0 {
			t.Fatalf("round %d: nothing paged", round)
		}
	}
	quiet()
	if t.Failed() {
		return
	}
	// Quiet now: the whole view holds every item once.
	items, _ = feedView(t, s, "acme", "ada")
	all := seqsOf(items)
	for round, got := range paged {
		top, bottom := got[0], got[len(got)-1]
		if round == rounds-1 {
			bottom = 0
		}
		var want []int64
		for _, seq := range all {
			if seq >= bottom && seq <= top {
				want = append(want, seq)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("round %d: paged %v\nwant (%d down to %d) %v", round, got, top, bottom, want)
		}
	}
}

// Prune deletes old feed items, read or not, and the marks on them. What
// is left is counted as the page shows it: a watermark below what prune
// removed, or an item read one by one that prune removed, neither hides
// nor adds an unread item; marks on items that stay still hold.
func testFeedPrune(t *testing.T, s store.Store) {
	setMembers(t, s, "acme", "team:ops", true, "ada", "ben", "cy", "dee")
	for i := range 4 {
		post(t, s, t0, "acme", fmt.Sprintf("old%d", i), "team:ops") // 1 … 4
	}
	later := t0.Add(48 * time.Hour)
	post(t, s, later, "acme", "new0", "team:ops")        // 5
	post(t, s, later, "acme", "new1", "team:ops")        // 6
	markAll(t, s, "acme", "ben", model.MarkRead, 1)      // below what prune removes
	markItem(t, s, "acme", "cy", model.MarkRead, 3)      // an item prune removes
	markItem(t, s, "acme", "cy", model.MarkDismissed, 2) // another
	markItem(t, s, "acme", "dee", model.MarkRead, 5)     // one that stays
	res, err := s.Prune(t.Context(), t0.Add(24*time.Hour), later, 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeedItems != 4 {
		t.Fatalf("pruned %d feed items, want the 4 old ones", res.FeedItems)
	}
	for _, u := range []string{"ada", "ben", "cy"} {
		wantView(t, s, "acme", u, 6, 5)
		wantUnread(t, s, "acme", u, 6, 5)
	}
	wantUnread(t, s, "acme", "dee", 6)
	err = s.MarkItem(t.Context(), "acme", "ada", model.MarkRead, 2)
	wantErr(t, "marking a pruned item", err, model.ErrNotFound)
	post(t, s, later, "acme", "new2", "team:ops") // 7
	wantUnread(t, s, "acme", "cy", 7, 6, 5)
	wantUnread(t, s, "acme", "dee", 7, 6)
}

// Prune takes each tenant's oldest items, up to its first item younger
// than the cutoff (the README's rule): an old item posted after a younger
// one (a clock that stepped back) stays until the younger one goes. What
// stays is counted right.
func testFeedPrunePrefix(t *testing.T, s store.Store) {
	old, young := t0, t0.Add(48*time.Hour)
	post(t, s, old, "acme", "a1", model.TenantFeed)   // 1
	post(t, s, young, "acme", "a2", model.TenantFeed) // 2
	post(t, s, old, "acme", "a3", model.TenantFeed)   // 3: the clock stepped back
	post(t, s, young, "acme", "a4", model.TenantFeed) // 4
	post(t, s, old, "beta", "b1", model.TenantFeed)   // beta's 1
	res, err := s.Prune(t.Context(), t0.Add(24*time.Hour), young, 500)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeedItems != 2 {
		t.Errorf("pruned %d feed items, want 2 (acme's 1, beta's 1)", res.FeedItems)
	}
	wantUnread(t, s, "acme", "ada", 4, 3, 2)
	wantUnread(t, s, "beta", "ada")
	if res, err = s.Prune(t.Context(), young.Add(time.Hour), young.Add(2*time.Hour), 500); err != nil || res.FeedItems != 3 {
		t.Fatalf("a prune after the young ones: %+v, %v; want acme's 3 items", res, err)
	}
	wantUnread(t, s, "acme", "ada")
}

// feedModel is the feeds as the README describes them, kept in memory: a
// randomized run checks FeedPage, UnreadCount, paging and MarkItem's
// answers against it.
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

type feedModelItem struct {
	feed, event string
	at          time.Time
}

func (m *feedModel) from(tenant, user, feed string) (int64, bool) {
	if feed == model.TenantFeed || feed == model.PersonalFeed(user) {
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
func (m *feedModel) view(tenant, user string) ([]model.FeedItem, int64) {
	read := m.marks[[3]string{tenant, user, model.MarkRead}]
	dismissed := m.marks[[3]string{tenant, user, model.MarkDismissed}]
	readItems := m.itemMks[[3]string{tenant, user, model.MarkRead}]
	dismissedItems := m.itemMks[[3]string{tenant, user, model.MarkDismissed}]
	var out []model.FeedItem
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
		out = append(out, model.FeedItem{Seq: seq, Feed: it.feed, EventID: it.event, Read: r, CreatedAt: it.at})
	}
	var n int64
	for _, it := range out {
		if !it.Read {
			n++
		}
	}
	return out, n
}

// prune deletes each tenant's items created before cutoff (times only
// move forward in the run, so they are its oldest).
func (m *feedModel) prune(cutoff time.Time) int64 {
	var n int64
	for k, it := range m.items {
		if it.at.Before(cutoff) {
			delete(m.items, k)
			n++
		}
	}
	return n
}

// A randomized run of posts to one, two or three feeds, membership changes
// (with and without history), watermarks, per-item marks (some on items
// the user cannot see) and prunes, in two tenants, checked after every
// step against feedModel: the view, the unread count and, every tenth
// step, paging by the cursor. EDGERELAY_FEED_MODEL_STEPS runs more steps,
// EDGERELAY_FEED_MODEL_SEED replays a seed (the log names it).
func testFeedMatchesModel(t *testing.T, s store.Store) {
	seed, steps := feedModelRun(t)
	t.Logf("seed %d, %d steps", seed, steps)
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
			return model.TenantFeed
		case 1:
			return model.PersonalFeed(pick(users))
		default:
			return pick(topics)
		}
	}
	check := func(step int, tenant, user string, byCursor bool) {
		t.Helper()
		checkFeedModel(t, s, m, rng, seed, step, tenant, user, byCursor)
	}
	now, pruned := t0, int64(0)
	defer func() { t.Logf("%d items posted, %d pruned", m.maxSeq["acme"]+m.maxSeq["beta"], pruned) }()
	for step := range steps {
		now = now.Add(time.Minute)
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
			post(t, s, now, tenant, id, feeds...)
			for _, f := range feeds {
				m.maxSeq[tenant]++
				m.items[feedModelKey{tenant, m.maxSeq[tenant]}] = feedModelItem{feed: f, event: id, at: now}
				m.events[[2]string{tenant, id}] = append(m.events[[2]string{tenant, id}], m.maxSeq[tenant])
			}
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
		case r < 74: // mark all, maybe past the newest or without up_to
			kind := pick([]string{model.MarkRead, model.MarkRead, model.MarkDismissed})
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
				t.Fatalf("step %d (seed %d): MarkAll(%s, %d) = %d, want %d", step, seed, kind, up, got, m.marks[k])
			}
		case r < 97: // mark one item (and so its event's other items), maybe one the user cannot see
			kind := pick([]string{model.MarkRead, model.MarkDismissed})
			seq := rng.Int64N(m.maxSeq[tenant]+2) + 1
			err := s.MarkItem(t.Context(), tenant, user, kind, seq)
			if !m.reads(tenant, user, seq) {
				if !errors.Is(err, model.ErrNotFound) {
					t.Fatalf("step %d (seed %d): MarkItem(%s/%s, %s, %d) on an item they cannot see: %v, want ErrNotFound",
						step, seed, tenant, user, kind, seq, err)
				}
				break
			}
			if err != nil {
				t.Fatalf("step %d (seed %d): MarkItem(%s/%s, %s, %d): %v", step, seed, tenant, user, kind, seq, err)
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
		default: // prune what is older than 30 to 90 steps
			cutoff := now.Add(-time.Duration(30+rng.IntN(60)) * time.Minute)
			res, err := s.Prune(t.Context(), cutoff, now, 1+rng.IntN(8))
			if err != nil {
				t.Fatal(err)
			}
			want := m.prune(cutoff)
			if res.FeedItems != want {
				t.Fatalf("step %d (seed %d): prune before %s deleted %d feed items, want %d", step, seed, cutoff, res.FeedItems, want)
			}
			pruned += want
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

// sameFeedItems compares pages by what a reader sees of each item.
func sameFeedItems(got, want []model.FeedItem) bool {
	return slices.EqualFunc(got, want, func(a, b model.FeedItem) bool {
		return a.Seq == b.Seq && a.Feed == b.Feed && a.EventID == b.EventID && a.Read == b.Read && a.CreatedAt.Equal(b.CreatedAt)
	})
}

// checkFeedModel compares a user's view and unread count with the
// model's and, byCursor, the view read a page at a time.
func checkFeedModel(t *testing.T, s store.Store, m *feedModel, rng *rand.Rand, seed uint64, step int, tenant, user string, byCursor bool) {
	t.Helper()
	want, wantN := m.view(tenant, user)
	got, _ := feedView(t, s, tenant, user)
	if !sameFeedItems(got, want) {
		t.Fatalf("step %d (seed %d): %s/%s page\n got %v\nwant %v", step, seed, tenant, user, got, want)
	}
	if n := unreadCount(t, s, tenant, user); n != wantN {
		t.Fatalf("step %d (seed %d): %s/%s unread count %d, want %d", step, seed, tenant, user, n, wantN)
	}
	if !byCursor {
		return
	}
	limit := 1 + rng.IntN(3)
	var paged []model.FeedItem
	for before := int64(0); ; {
		page, _, err := s.FeedPage(t.Context(), tenant, user, before, limit)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if len(page) < limit || len(paged) > len(want) {
			break
		}
		before = page[len(page)-1].Seq
	}
	if !sameFeedItems(paged, want) {
		t.Fatalf("step %d (seed %d): %s/%s paged by %d\n got %v\nwant %v", step, seed, tenant, user, limit, paged, want)
	}
}

// feedModelRun is the model run's seed and number of steps: from
// EDGERELAY_FEED_MODEL_SEED and EDGERELAY_FEED_MODEL_STEPS, or a new seed
// and 120 steps (under a second; 40 under -race).
func feedModelRun(t *testing.T) (seed uint64, steps int) {
	seed, steps = rand.Uint64(), work(120)
	if v := os.Getenv("EDGERELAY_FEED_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("EDGERELAY_FEED_MODEL_SEED=%q: want the seed a run logged (a number)", v)
		}
		seed = n
	}
	if v := os.Getenv("EDGERELAY_FEED_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("EDGERELAY_FEED_MODEL_STEPS=%q: want a number of steps, at least 1", v)
		}
		steps = n
	}
	return seed, steps
}

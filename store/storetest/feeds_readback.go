package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// feedReadback: what accepts and membership reads give back.
func feedReadback(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "AcceptReturnsFeedItems", run: testAcceptReturnsFeedItems},
		{name: "DuplicateReturnsFirstFeedItems", run: testDuplicateFeedItems},
		{name: "MembersReadBack", run: testFeedMembersReadBack},
		{name: "MembersPage", run: testFeedMembersPage},
	})
}

func wantPosts(t *testing.T, what string, got []model.FeedPost, want ...model.FeedPost) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("%s: feed items %+v, want %+v", what, got, want)
	}
}

// An accept returns the items it posted, one per feed (a feed named twice
// is one item), in seq order: the tenant's next numbers, in the order the
// feeds were given. Seqs are per tenant; an event posted to no feed has
// none. A feed page shows the items by the seqs the accept returned.
func testAcceptReturnsFeedItems(t *testing.T, s store.Store) {
	ops, ada := "team:ops", model.PersonalFeed("ada")
	out := accept(t, s, t0,
		feedEvent("acme", "e1", model.TenantFeed, ops, ada, model.TenantFeed),
		newEvent("acme", "e2", 1), // no feeds
		feedEvent("acme", "e3", ada),
		feedEvent("beta", "e1", ops),
	)
	wantPosts(t, "e1", out[0].FeedItems, model.FeedPost{Feed: "*", Seq: 1}, model.FeedPost{Feed: ops, Seq: 2}, model.FeedPost{Feed: ada, Seq: 3})
	wantPosts(t, "e2 (no feeds)", out[1].FeedItems)
	wantPosts(t, "e3", out[2].FeedItems, model.FeedPost{Feed: ada, Seq: 4})
	wantPosts(t, "beta's e1", out[3].FeedItems, model.FeedPost{Feed: ops, Seq: 1})
	more := accept(t, s, t0, feedEvent("acme", "e4", ops))
	wantPosts(t, "e4, in a later accept", more[0].FeedItems, model.FeedPost{Feed: ops, Seq: 5})

	items, _, err := s.FeedPage(t.Context(), "acme", "ada", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, fmt.Sprintf("%s@%d/%s", it.EventID, it.Seq, it.Feed))
	}
	// ada reads "*" and "@ada" (not team:ops): e1 shows at its newest
	// item she sees.
	if want := []string{"e3@4/@ada", "e1@3/@ada"}; !slices.Equal(got, want) {
		t.Fatalf("ada's feed %v, want %v", got, want)
	}
}

// A resent event (a duplicate) is answered with the items the first accept
// posted, whether it comes in a later accept or in the same one.
func testDuplicateFeedItems(t *testing.T, s store.Store) {
	first := accept(t, s, t0, feedEvent("acme", "e1", "team:ops", model.TenantFeed))[0]
	want := []model.FeedPost{{Feed: "team:ops", Seq: 1}, {Feed: "*", Seq: 2}}
	wantPosts(t, "first accept", first.FeedItems, want...)
	out := accept(t, s, t0, feedEvent("acme", "e2", "*"), feedEvent("acme", "e1", "team:ops", model.TenantFeed), feedEvent("acme", "e2", "*"))
	if !out[1].Duplicate || !out[2].Duplicate || out[0].Duplicate {
		t.Fatalf("duplicates %v %v %v, want false true true", out[0].Duplicate, out[1].Duplicate, out[2].Duplicate)
	}
	wantPosts(t, "e1 resent", out[1].FeedItems, want...)
	wantPosts(t, "e2", out[0].FeedItems, model.FeedPost{Feed: "*", Seq: 3})
	wantPosts(t, "e2 resent in the same accept", out[2].FeedItems, model.FeedPost{Feed: "*", Seq: 3})
	// Nothing was posted again: the next item is 4.
	next := accept(t, s, t0, feedEvent("acme", "e3", "*"))[0]
	wantPosts(t, "e3", next.FeedItems, model.FeedPost{Feed: "*", Seq: 4})
}

func feedMembers(t *testing.T, s store.Store, tenant, feed string) []model.FeedMember {
	t.Helper()
	ms, err := s.FeedMembers(t.Context(), tenant, feed, "", 1000)
	if err != nil {
		t.Fatalf("members of %s/%s: %v", tenant, feed, err)
	}
	return ms
}

func wantMembers(t *testing.T, what string, got []model.FeedMember, want ...model.FeedMember) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("%s: members %+v, want %+v", what, got, want)
	}
}

// The members set are read back in user order, each with where it joined:
// the tenant's newest item when it joined, or 0 with history. A member who
// stays keeps where it joined; one not listed leaves; an empty list
// empties the feed. Members are per tenant and per feed.
func testFeedMembersReadBack(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantMembers(t, "a feed nobody joined", feedMembers(t, s, "acme", "team:ops"))
	accept(t, s, t0, feedEvent("acme", "e1", "*"), feedEvent("acme", "e2", "team:ops"))
	if err := s.SetFeedMembers(ctx, "acme", "team:ops", []string{"cy", "ada", "ben"}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFeedMembers(ctx, "beta", "team:ops", []string{"zed"}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFeedMembers(ctx, "acme", "team:dev", []string{"dee"}, true); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, "acme's team:ops", feedMembers(t, s, "acme", "team:ops"),
		model.FeedMember{User: "ada", JoinedSeq: 2}, model.FeedMember{User: "ben", JoinedSeq: 2}, model.FeedMember{User: "cy", JoinedSeq: 2})
	wantMembers(t, "beta's team:ops (beta has no items)", feedMembers(t, s, "beta", "team:ops"), model.FeedMember{User: "zed", JoinedSeq: 0})
	wantMembers(t, "team:dev, with history", feedMembers(t, s, "acme", "team:dev"), model.FeedMember{User: "dee", JoinedSeq: 0})

	accept(t, s, t0, feedEvent("acme", "e3", "team:ops"))
	if err := s.SetFeedMembers(ctx, "acme", "team:ops", []string{"eve", "ada"}, false); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, "after a second set", feedMembers(t, s, "acme", "team:ops"),
		model.FeedMember{User: "ada", JoinedSeq: 2}, model.FeedMember{User: "eve", JoinedSeq: 3})
	if err := s.SetFeedMembers(ctx, "acme", "team:ops", nil, false); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, "emptied", feedMembers(t, s, "acme", "team:ops"))
	wantMembers(t, "beta's, untouched", feedMembers(t, s, "beta", "team:ops"), model.FeedMember{User: "zed", JoinedSeq: 0})
}

// Members page in user order (bytewise: "B" before "a"), after a cursor,
// neither skipping nor repeating.
func testFeedMembersPage(t *testing.T, s store.Store) {
	users := []string{"a", "B", "b", "a1", "z", "Z", "m", "é", "_"}
	if err := s.SetFeedMembers(t.Context(), "acme", "team:ops", users, true); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(users)
	slices.Sort(want) // Go compares strings bytewise
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		ms, err := s.FeedMembers(t.Context(), "acme", "team:ops", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) > 2 || pages > len(users) {
			t.Fatalf("page %d after %q: %d members, limit 2", pages, after, len(ms))
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			got = append(got, m.User)
		}
		after = ms[len(ms)-1].User
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged members %q, want %q", got, want)
	}
}

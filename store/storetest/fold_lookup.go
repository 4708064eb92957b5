package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// testFoldBatchNumbering: one settlement of several folds, of two tenants
// interleaved, numbers the folded items as if they were posted one by
// one in the settlements' order: each tenant's next seqs in that order,
// each feed's next positions, a second fold of the same event into the
// same feed (in the same batch) takes no number and leaves the first's
// message, and an event's items count one another (copies), so a user's
// unread count holds the event once. Both stores must agree on every
// number: the feed's seqs are what read marks, cursors and digest ranges
// name.
func testFoldBatchNumbering(t *testing.T, s store.Store) {
	ctx := t.Context()
	target := func(ev, rcpt, ch string) model.Target {
		return model.Target{Key: ev + "/" + rcpt + "/" + ch, Recipient: rcpt, Channel: ch, Address: rcpt + "@" + ch,
			Message: fmt.Appendf(nil, `{"subject":"%s for %s by %s"}`, ev, rcpt, ch)}
	}
	event := func(tenant, id string, feeds []string, ts ...model.Target) model.AcceptInput {
		return model.AcceptInput{Event: model.NewEvent{Tenant: tenant, EventID: id, Purpose: "newsletter", Type: "newsletter",
			Payload: fmt.Appendf(nil, `{"id":%q}`, id), Message: []byte(`{"subject":"the event's"}`),
			Fingerprint: "fp:" + tenant + "/" + id, Targets: len(ts), Feeds: feeds}, First: ts}
	}
	// b's seq 1 and 2 are its accepts' ("pre" and e2 in the tenant feed);
	// a has no item before the folds.
	accept(t, s, t0, event("b", "pre", []string{model.TenantFeed}))
	accept(t, s, t0, event("b", "e1", nil, target("e1", "ada", "sms"), target("e1", "ada", "email"), target("e1", "bob", "email")))
	accept(t, s, t0, event("b", "e2", []string{model.TenantFeed}, target("e2", "ada", "email"), target("e2", "bob", "email")))
	accept(t, s, t0, event("a", "f1", nil, target("f1", "ada", "email"), target("f1", "bob", "email")))
	cs := claim(t, s, model.ClaimRequest{Limit: 20, Now: t0, Lease: time.Minute})
	byKey := map[string]model.Claimed{}
	for _, c := range cs {
		byKey[c.Key] = c
	}
	if len(byKey) != 7 {
		t.Fatalf("claimed %d, want 7", len(byKey))
	}
	var ss []model.Settlement
	for i, k := range []string{"e2/ada/email", "f1/ada/email", "e1/ada/sms", "e1/ada/email", "e2/bob/email", "f1/bob/email", "e1/bob/email"} {
		c, ok := byKey[k]
		if !ok {
			t.Fatalf("no claim of %s", k)
		}
		ss = append(ss, model.Settlement{ID: c.ID, Token: c.Token, At: t0.Add(time.Duration(i) * time.Second), Decision: model.Decision{
			Status: model.StatusSkipped, Reason: "skipped (throttled), folded into digest weekly", NextAttemptAt: t0,
			Fold: &model.Fold{Feed: model.PersonalFeed(c.Recipient)}}})
	}
	applied, err := s.Settle(ctx, ss)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("settlement %d did not apply", i)
		}
	}
	type item struct {
		Seq           int64
		Feed, EventID string
		Subject       string
	}
	page := func(tenant, user string) []item {
		t.Helper()
		got, _, err := s.FeedPage(ctx, tenant, user, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]item, len(got))
		for i, it := range got {
			var m struct{ Subject string }
			if err := json.Unmarshal(it.Message, &m); err != nil {
				t.Fatalf("item %d's message %q: %v", it.Seq, it.Message, err)
			}
			out[i] = item{it.Seq, it.Feed, it.EventID, m.Subject}
		}
		return out
	}
	for _, c := range []struct {
		tenant, user string
		want         []item
	}{
		// e2 is in * (seq 2) and @ada (seq 3): the newest copy shows.
		{"b", "ada", []item{{4, "@ada", "e1", "e1 for ada by sms"}, {3, "@ada", "e2", "e2 for ada by email"}, {1, "*", "pre", "the event's"}}},
		{"b", "bob", []item{{6, "@bob", "e1", "e1 for bob by email"}, {5, "@bob", "e2", "e2 for bob by email"}, {1, "*", "pre", "the event's"}}},
		{"a", "ada", []item{{1, "@ada", "f1", "f1 for ada by email"}}},
		{"a", "bob", []item{{2, "@bob", "f1", "f1 for bob by email"}}},
	} {
		if got := page(c.tenant, c.user); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s's feed in %s:\n got %v\nwant %v", c.user, c.tenant, got, c.want)
		}
	}
	// copies: e2's three items (*, @ada, @bob) count one another, so each
	// user counts e2 once; pos: each personal feed is numbered 1, 2 … (an
	// unread count is a difference of positions).
	for _, c := range []struct {
		tenant, user string
		want         int64
	}{{"b", "ada", 3}, {"b", "bob", 3}, {"a", "ada", 1}, {"a", "bob", 1}} {
		if n, err := s.UnreadCount(ctx, c.tenant, c.user); err != nil || n != c.want {
			t.Errorf("%s's unread count in %s: %d (%v), want %d", c.user, c.tenant, n, err, c.want)
		}
	}
	if _, err := s.MarkAll(ctx, "b", "ada", model.MarkRead, 3); err != nil {
		t.Fatal(err)
	}
	if n, err := s.UnreadCount(ctx, "b", "ada"); err != nil || n != 1 {
		t.Errorf("ada's unread count in b after reading up to 3: %d (%v), want 1 (e1)", n, err)
	}
	// Each tenant's next item follows its folds: no number twice, none
	// skipped.
	for _, c := range []struct {
		tenant string
		want   int64
	}{{"b", 7}, {"a", 3}} {
		a := accept(t, s, t0, event(c.tenant, "next", []string{model.TenantFeed}))[0]
		if len(a.FeedItems) != 1 || a.FeedItems[0].Seq != c.want {
			t.Errorf("%s's next item %+v, want seq %d", c.tenant, a.FeedItems, c.want)
		}
	}
}

// withIDs are docs as PutAudience takes them: each with the recipient id
// its JSON holds, as the relay gives it.
func withIDs(docs [][]byte) []model.Member {
	out := make([]model.Member, len(docs))
	for i, d := range docs {
		var r struct{ ID string }
		_ = json.Unmarshal(d, &r) // a document with no id has id ""
		out[i] = model.Member{ID: r.ID, Doc: d}
	}
	return out
}

// testAudienceMember: one member is found by its recipient id, in its
// tenant's audience only; not a member is no document and no error, no
// audience is ErrNotFound (an empty audience is an audience); a replace
// or delete is seen at once; of members sharing an id (the relay refuses
// that, the store does not), the first in order is the one found, however
// they were put.
func testAudienceMember(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := func(tenant, name, id string, doc string) {
		t.Helper()
		got, err := s.AudienceMember(ctx, tenant, name, id)
		switch {
		case err != nil:
			t.Errorf("member %q of %s/%s: %v", id, tenant, name, err)
		case doc == "" && got != nil:
			t.Errorf("member %q of %s/%s: %s, want none (nil)", id, tenant, name, got)
		case doc != "" && got == nil:
			t.Errorf("member %q of %s/%s: none, want %s", id, tenant, name, doc)
		case doc != "":
			if err := sameMembers([][]byte{got}, [][]byte{[]byte(doc)}); err != nil {
				t.Errorf("member %q of %s/%s: %v", id, tenant, name, err)
			}
		}
	}
	noAudience := func(tenant, name string) {
		t.Helper()
		got, err := s.AudienceMember(ctx, tenant, name, "a")
		wantErr(t, fmt.Sprintf("a member of missing audience %s/%s (got %s)", tenant, name, got), err, model.ErrNotFound)
	}
	noAudience("default", "staff")
	put := func(tenant, name string, ms []model.Member) {
		t.Helper()
		if err := s.PutAudience(ctx, tenant, name, ms, t0); err != nil {
			t.Fatal(err)
		}
	}
	put("default", "staff", withIDs([][]byte{[]byte(`{"id":"c"}`), []byte(`{"id":"a","email":"a@example.com"}`), []byte(`{"id":"b"}`)}))
	put("acme", "staff", withIDs([][]byte{[]byte(`{"id":"x"}`)}))
	want("default", "staff", "a", `{"id":"a","email":"a@example.com"}`)
	want("default", "staff", "c", `{"id":"c"}`)
	want("default", "staff", "zz", "")
	want("default", "staff", "x", "") // acme's member
	want("acme", "staff", "a", "")
	want("acme", "staff", "x", `{"id":"x"}`)
	// The id is the one given, not read from the document.
	put("acme", "given", []model.Member{{ID: "given-id", Doc: []byte(`{"id":"doc-id"}`)}})
	want("acme", "given", "given-id", `{"id":"doc-id"}`)
	want("acme", "given", "doc-id", "")
	// Shared ids: the first in order, whatever the other members.
	put("default", "dups", []model.Member{
		{ID: "o", Doc: []byte(`{"id":"o"}`)}, {ID: "d", Doc: []byte(`{"id":"d","n":1}`)},
		{ID: "p", Doc: []byte(`{"id":"p"}`)}, {ID: "d", Doc: []byte(`{"id":"d","n":2}`)}})
	want("default", "dups", "d", `{"id":"d","n":1}`)
	put("default", "dups", []model.Member{{ID: "d", Doc: []byte(`{"id":"d","n":3}`)}, {ID: "d", Doc: []byte(`{"id":"d","n":4}`)}})
	want("default", "dups", "d", `{"id":"d","n":3}`)
	// A large audience: its last member, past every multi-row insert.
	big := members("u", 2_500)
	put("default", "everyone", withIDs(big))
	want("default", "everyone", "u02499", string(big[2499]))
	want("default", "everyone", "u02500", "")
	// Replaced: the old members are gone, the new found; emptied: an
	// audience with no members; deleted: no audience.
	put("default", "staff", withIDs([][]byte{[]byte(`{"id":"b","email":"b@example.com"}`)}))
	want("default", "staff", "a", "")
	want("default", "staff", "b", `{"id":"b","email":"b@example.com"}`)
	put("default", "staff", nil)
	want("default", "staff", "b", "")
	if err := s.DeleteAudience(ctx, "default", "staff"); err != nil {
		t.Fatal(err)
	}
	noAudience("default", "staff")
	want("acme", "staff", "x", `{"id":"x"}`)
}

// testFoldConcurrent: folds of one event into one feed settled at the
// same time (two channels of a recipient, two settlements), beside
// accepts posting to the tenant's feed, leave the feed holding the event
// once, and every number given once and none skipped: the tenant's items
// are numbered 1 … n, and the next accept takes n+1. On PostgreSQL the
// settlements are separate transactions, each locking the tenant's
// counter before it reads what the feed holds.
func testFoldConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const rounds = 20
	var wg sync.WaitGroup
	for i := range rounds {
		id := fmt.Sprintf("e%02d", i)
		accept(t, s, t0, model.AcceptInput{Event: model.NewEvent{Tenant: "acme", EventID: id, Purpose: "newsletter", Type: "newsletter",
			Payload: fmt.Appendf(nil, `{"id":%q}`, id), Message: []byte(`{"subject":"s"}`), Fingerprint: "fp:" + id, Targets: 2},
			First: []model.Target{{Key: id + "/ada/email", Recipient: "ada", Channel: "email", Address: "ada@example.com"},
				{Key: id + "/ada/sms", Recipient: "ada", Channel: "sms", Address: "+15550100"}}})
		cs := claim(t, s, model.ClaimRequest{Limit: 2, Now: t0, Lease: time.Minute})
		if len(cs) != 2 {
			t.Fatalf("round %d: claimed %d, want 2", i, len(cs))
		}
		for _, c := range cs {
			wg.Go(func() {
				_, err := s.Settle(ctx, []model.Settlement{{ID: c.ID, Token: c.Token, At: t0, Decision: model.Decision{
					Status: model.StatusSkipped, Reason: "skipped (throttled), folded", NextAttemptAt: t0,
					Fold: &model.Fold{Feed: model.PersonalFeed("ada")}}}})
				if err != nil {
					t.Errorf("settle %s: %v", c.Key, err)
				}
			})
		}
		wg.Go(func() {
			in := newEvent("acme", "post-"+id, 0)
			in.Event.Feeds = []string{model.TenantFeed}
			if _, errs, err := s.AcceptEvents(ctx, []model.AcceptInput{in}, t0); err != nil || errs[0] != nil {
				t.Errorf("accept post-%s: %v %v", id, err, errs)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	items, _, err := s.FeedPage(ctx, "acme", "ada", 0, 3*rounds)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	folded := 0
	for _, it := range items {
		seen[it.Seq] = true
		if it.Feed == "@ada" {
			folded++
		}
	}
	if len(items) != 2*rounds || folded != rounds || len(seen) != 2*rounds {
		t.Fatalf("ada's feed: %d items, %d folded, %d seqs; want %d, %d folded (one per event), each its own seq", len(items), folded, len(seen), 2*rounds, rounds)
	}
	for seq := int64(1); seq <= 2*rounds; seq++ {
		if !seen[seq] {
			t.Fatalf("no item numbered %d: a number was skipped or given twice", seq)
		}
	}
	if n, err := s.UnreadCount(ctx, "acme", "ada"); err != nil || n != 2*rounds {
		t.Fatalf("ada's unread count %d (%v), want %d", n, err, 2*rounds)
	}
	a := accept(t, s, t0, func() model.AcceptInput {
		in := newEvent("acme", "last", 0)
		in.Event.Feeds = []string{model.TenantFeed}
		return in
	}())[0]
	if len(a.FeedItems) != 1 || a.FeedItems[0].Seq != 2*rounds+1 {
		t.Fatalf("the next item %+v, want seq %d", a.FeedItems, 2*rounds+1)
	}
}

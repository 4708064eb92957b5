package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// What the console reads and writes: the search filters it adds to
// ListFilter, the overview, a retry that records who asked, every feed
// membership listed.
func console(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "ListByAddressTypeEventAndTimeRange", run: testListConsoleFilters},
		{name: "ListByTimeRangeWhenIdsDoNotFollowTime", run: testListRangeOutOfOrder},
		{name: "RetryAsRecordsWhoAsked", run: testRetryAs},
		{name: "PruneTakesTheAuditWithIt", run: testPruneAudit},
		{name: "OverviewOfOneTenant", run: testOverview},
		{name: "FeedMembershipsListed", run: testFeedMemberships},
	})
}

// Address, Type, EventID (any purpose) and CreatedBefore keep exactly what
// they name, alone and with the other filters, in id order across pages,
// and never another tenant's rows.
func testListConsoleFilters(t *testing.T, s store.Store) {
	var stored []model.Notification
	for i, c := range []struct{ tenant, id, purpose, typ string }{
		{"a", "e1", "receipt", "payment"}, {"a", "e1", "reminder", "payment"}, {"b", "e1", "receipt", "payment"},
		{"a", "e2", "otp", "login"}, {"b", "e3", "otp", "login"},
	} {
		in := newEvent(c.tenant, c.id, 3)
		in.Event.Purpose, in.Event.Type = c.purpose, c.typ
		in.First = targets(c.tenant, c.id, c.purpose, 0, 3)
		accept(t, s, t0.Add(time.Duration(i)*time.Minute), in)
	}
	stored = everything(t, s, model.ListFilter{})
	if len(stored) != 15 {
		t.Fatalf("listed %d, want 15", len(stored))
	}
	nonEmpty := 0
	for _, tenant := range []string{"", "a", "b"} {
		for _, addr := range []string{"", "r1@example.com"} {
			for _, typ := range []string{"", "login", "payment"} {
				for _, ev := range []string{"", "e1", "e3"} {
					for _, before := range []time.Time{{}, t0.Add(3 * time.Minute)} {
						for _, rcpt := range []string{"", "r1"} {
							f := model.ListFilter{Tenant: tenant, Address: addr, Type: typ, EventID: ev, CreatedBefore: before, Recipient: rcpt,
								CreatedSince: t0.Add(time.Minute)}
							if before.IsZero() {
								f.CreatedSince = time.Time{}
							}
							var want []int64
							for _, n := range stored {
								if (tenant == "" || n.Tenant == tenant) && (addr == "" || n.Address == addr) && (typ == "" || n.Type == typ) &&
									(ev == "" || n.EventID == ev) && (before.IsZero() || n.CreatedAt.Before(before)) &&
									(rcpt == "" || n.Recipient == rcpt) && !n.CreatedAt.Before(f.CreatedSince) {
									want = append(want, n.ID)
								}
							}
							pagesBothWays(t, s, f, 2, want)
							if len(want) > 0 {
								nonEmpty++
							}
						}
					}
				}
			}
		}
	}
	if nonEmpty < 40 {
		t.Fatalf("only %d filters matched anything: the fixture is too thin", nonEmpty)
	}
	// Spot checks that do not go through the model: tenant a's event e1 has
	// two purposes, three recipients each.
	got := everything(t, s, model.ListFilter{Tenant: "a", EventID: "e1"})
	if len(got) != 6 || got[0].Purpose != "receipt" || got[5].Purpose != "reminder" {
		t.Fatalf("tenant a, event e1: %d rows (%+v), want 6 of two purposes", len(got), got)
	}
	if got := everything(t, s, model.ListFilter{Address: "nobody@example.com"}); len(got) != 0 {
		t.Fatalf("an address no one has: %+v", got)
	}
	got = everything(t, s, model.ListFilter{Tenant: "b", Address: "r1@example.com", Type: "login"})
	if len(got) != 1 || got[0].EventID != "e3" || got[0].Tenant != "b" {
		t.Fatalf("tenant b, r1, login: %+v, want e3's", got)
	}
}

// A tenant's creation range keeps exactly the rows created in it, paged in
// id order, when ids do not follow creation times (an accept carries the
// time its caller read, and ids are drawn at commit): the stores bound the
// ids they read by the range, and that bound must not cut a row off.
func testListRangeOutOfOrder(t *testing.T, s store.Store) {
	// Accepted in this order, created at these minutes after t0.
	minutes := []int{5, 1, 9, 3, 7, 2, 8}
	for i, m := range minutes {
		accept(t, s, t0.Add(time.Duration(m)*time.Minute), newEvent("acme", fmt.Sprint("e", i), 2))
	}
	accept(t, s, t0.Add(4*time.Minute), newEvent("other", "o", 3))
	all := everything(t, s, model.ListFilter{Tenant: "acme"})
	for _, r := range []struct{ since, before int }{{0, 0}, {2, 0}, {0, 6}, {2, 6}, {3, 4}, {6, 9}, {4, 5}, {10, 0}, {0, 1}, {9, 10}} {
		f := model.ListFilter{Tenant: "acme"}
		if r.since > 0 {
			f.CreatedSince = t0.Add(time.Duration(r.since) * time.Minute)
		}
		if r.before > 0 {
			f.CreatedBefore = t0.Add(time.Duration(r.before) * time.Minute)
		}
		var want []int64
		for _, n := range all {
			if !n.CreatedAt.Before(f.CreatedSince) && (f.CreatedBefore.IsZero() || n.CreatedAt.Before(f.CreatedBefore)) {
				want = append(want, n.ID)
			}
		}
		for _, limit := range []int{1, 3, 100} {
			pagesBothWays(t, s, f, limit, want)
		}
	}
}

// RetryAs retries as Retry does and keeps who asked with the notification,
// oldest first; a retry refused (another status, another tenant's) records
// nothing. A notification read alone carries its event's message.
func testRetryAs(t *testing.T, s store.Store) {
	a := ids(accept(t, s, t0, newEvent("acme", "e", 3))[0])
	o := ids(accept(t, s, t0, newEvent("other", "e", 1))[0])
	settleAll(t, s, t0, map[int64]outcome{a[0]: {status: model.StatusDead}, a[1]: {status: model.StatusSent}, a[2]: {status: model.StatusUnknown},
		o[0]: {status: model.StatusSent}})
	n := notification(t, s, a[0])
	if n.Audit == nil || len(n.Audit) != 0 || string(n.Message) != `{"subject":"hi"}` {
		t.Fatalf("before any retry: audit %#v, message %q; want an empty log and the event's message", n.Audit, n.Message)
	}
	at := t0.Add(time.Minute)
	if err := s.RetryAs(t.Context(), "acme", a[0], at, "console: ada"); err != nil {
		t.Fatal(err)
	}
	var se *model.StateError
	if err := s.RetryAs(t.Context(), "acme", a[1], at, "console: ada"); !asStateError(err, &se) || se.Status != model.StatusSent {
		t.Fatalf("RetryAs of a sent notification: %v, want a StateError naming sent", err)
	}
	wantErr(t, "RetryAs of another tenant's", s.RetryAs(t.Context(), "other", a[2], at, "console: mallory"), model.ErrNotFound)
	n = notification(t, s, a[0])
	if n.Status != model.StatusPending || n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(at) {
		t.Fatalf("after RetryAs: %s next %v, want pending at %s", n.Status, n.NextAttemptAt, at)
	}
	want := []model.AuditEntry{{At: at, Actor: "console: ada", Action: model.AuditRetry, Detail: "was dead"}}
	if !slices.EqualFunc(n.Audit, want, sameEntry) {
		t.Fatalf("audit %+v, want %+v", n.Audit, want)
	}
	for _, id := range a[1:] {
		if n := notification(t, s, id); len(n.Audit) != 0 {
			t.Fatalf("notification %d has audit %+v after refused retries", id, n.Audit)
		}
	}
	// Sent again, dead again, retried by someone else: both kept, in order.
	settleAll(t, s, at, map[int64]outcome{a[0]: {status: model.StatusDead}})
	at2 := at.Add(time.Minute)
	if err := s.RetryAs(t.Context(), "", a[0], at2, "cli"); err != nil {
		t.Fatal(err)
	}
	want = append(want, model.AuditEntry{At: at2, Actor: "cli", Action: model.AuditRetry, Detail: "was dead"})
	if n := notification(t, s, a[0]); !slices.EqualFunc(n.Audit, want, sameEntry) {
		t.Fatalf("audit %+v, want %+v", n.Audit, want)
	}
}

func asStateError(err error, se **model.StateError) bool {
	e, ok := err.(*model.StateError)
	if !ok {
		return false
	}
	*se = e
	return true
}

func sameEntry(a, b model.AuditEntry) bool {
	return a.At.Equal(b.At) && a.Actor == b.Actor && a.Action == b.Action && a.Detail == b.Detail
}

// A notification with an audit log is pruned like any other, and its log
// with it.
func testPruneAudit(t *testing.T, s store.Store) {
	a := ids(accept(t, s, t0, newEvent("acme", "e", 2))[0])
	settleAll(t, s, t0, map[int64]outcome{a[0]: {status: model.StatusDead}, a[1]: {status: model.StatusDead}})
	if err := s.RetryAs(t.Context(), "acme", a[0], t0, "console"); err != nil {
		t.Fatal(err)
	}
	settleAll(t, s, t0, map[int64]outcome{a[0]: {status: model.StatusSent}})
	res, err := s.Prune(t.Context(), t0.Add(time.Hour), t0.Add(2*time.Hour), 500)
	if err != nil {
		t.Fatalf("prune of a retried notification: %v", err)
	}
	if res.Notifications != 2 {
		t.Fatalf("pruned %+v, want both notifications", res)
	}
	gone(t, s, a...)
}

// An overview counts one tenant's notifications by status (every status
// present), the age of its oldest due one, lists its newest unknown, dead
// and failed ids, and counts its accepts and attempts per bucket of the
// window and attempts per provider; another tenant's rows count for
// nothing.
func testOverview(t *testing.T, s store.Store) {
	a := ids(accept(t, s, t0, newEvent("acme", "old", 4))[0]) // before the window
	b := ids(accept(t, s, t0.Add(2*time.Hour), newEvent("acme", "new", 3))[0])
	other := ids(accept(t, s, t0.Add(2*time.Hour), newEvent("other", "new", 5))[0])
	since, bucket := t0.Add(2*time.Hour), 10*time.Minute
	in := func(m int) time.Time { return since.Add(time.Duration(m) * time.Minute) }
	settleAll(t, s, in(5), map[int64]outcome{
		a[0]: {status: model.StatusDead, provider: "p1"}, a[1]: {status: model.StatusUnknown, provider: "p1"},
		a[2]: {status: model.StatusSent, provider: "p2"}, a[3]: {status: model.StatusFailed, provider: "p2"},
		b[0]: {status: model.StatusSent, provider: "p1"}, b[1]: {status: model.StatusPending, provider: "p1", retryAt: in(15)},
		b[2]:     {status: model.StatusSending},
		other[0]: {status: model.StatusDead, provider: "p1"}, other[1]: {status: model.StatusSent, provider: "p3"},
		other[2]: {status: model.StatusPending, retryAt: in(100)}, other[3]: {status: model.StatusPending, retryAt: in(100)},
		other[4]: {status: model.StatusPending, retryAt: in(100)},
	})
	settleAll(t, s, in(25), map[int64]outcome{b[1]: {status: model.StatusSent, provider: "p1"}})
	now := in(30)
	o, err := s.Overview(t.Context(), "acme", now, since, bucket)
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := map[string]int64{}
	for _, st := range model.Statuses { // every status present, 0 if none
		wantCounts[st] = 0
	}
	maps.Copy(wantCounts, map[string]int64{model.StatusSending: 1, model.StatusSent: 3, model.StatusFailed: 1,
		model.StatusDead: 1, model.StatusUnknown: 1})
	if !maps.Equal(o.Counts, wantCounts) {
		t.Fatalf("counts %v, want %v", o.Counts, wantCounts)
	}
	if !slices.Equal(o.Unknown, []int64{a[1]}) || !slices.Equal(o.Dead, []int64{a[0]}) || !slices.Equal(o.Failed, []int64{a[3]}) {
		t.Fatalf("unknown %v, dead %v, failed %v", o.Unknown, o.Dead, o.Failed)
	}
	if o.OldestDue != 0 || o.Capped {
		t.Fatalf("oldest due %s, capped %v; want none due, not capped", o.OldestDue, o.Capped)
	}
	// Three accepted in the first bucket; six attempts in it (a's four,
	// b[0]'s and b[1]'s first, at in(5)), b[1]'s second in the third.
	if !slices.Equal(o.Accepted, []int64{3, 0, 0}) {
		t.Fatalf("accepted per bucket %v, want [3 0 0]", o.Accepted)
	}
	wantAtt := map[string][]int64{"sent": {2, 0, 1}, "refused": {3, 0, 0}, "unknown": {1, 0, 0}}
	for oc, w := range wantAtt {
		if !slices.Equal(o.Attempted[oc], w) {
			t.Fatalf("attempts %s per bucket %v, want %v (all %v)", oc, o.Attempted[oc], w, o.Attempted)
		}
	}
	wantProv := map[string]map[string]int64{"p1": {"sent": 2, "refused": 2, "unknown": 1}, "p2": {"sent": 1, "refused": 1, "unknown": 0}}
	if len(o.Providers) != 2 || !maps.Equal(o.Providers["p1"], wantProv["p1"]) || !maps.Equal(o.Providers["p2"], wantProv["p2"]) {
		t.Fatalf("providers %v, want %v", o.Providers, wantProv)
	}
	// The other tenant: due since in(100) is not yet; at in(110) ten minutes.
	o, err = s.Overview(t.Context(), "other", in(110), since, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if o.OldestDue != 10*time.Minute || o.Counts[model.StatusPending] != 3 || len(o.Accepted) != 11 || o.Accepted[0] != 5 {
		t.Fatalf("other: oldest due %s, counts %v, accepted %v", o.OldestDue, o.Counts, o.Accepted)
	}
	if _, err := s.Overview(t.Context(), "acme", since, since, bucket); err == nil {
		t.Fatal("an empty window: no error")
	}
}

// Feed memberships are listed by feed and user (bytewise: "Bo" before
// "ada"), each within its tenant, paged by the last one shown; "" lists
// every tenant's.
func testFeedMemberships(t *testing.T, s store.Store) {
	for _, c := range []struct {
		tenant, feed string
		users        []string
	}{{"acme", "team:ops", []string{"cy", "ada", "Bo"}}, {"acme", "news", []string{"ben"}}, {"other", "team:ops", []string{"mallory"}}} {
		if err := s.SetFeedMembers(t.Context(), c.tenant, c.feed, c.users, c.feed == "news"); err != nil {
			t.Fatal(err)
		}
	}
	got := func(ms []model.FeedMembership) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s/%s/%s", m.Tenant, m.Feed, m.User))
		}
		return out
	}
	ms, err := s.FeedMemberships(t.Context(), "acme", model.FeedMembership{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got(ms), []string{"acme/news/ben", "acme/team:ops/Bo"}) {
		t.Fatalf("acme's first page %v", got(ms))
	}
	if ms[0].JoinedSeq != 0 {
		t.Fatalf("ben joined news with its history: joined seq %d, want 0", ms[0].JoinedSeq)
	}
	if ms, err = s.FeedMemberships(t.Context(), "acme", ms[1], 2); err != nil || !slices.Equal(got(ms), []string{"acme/team:ops/ada", "acme/team:ops/cy"}) {
		t.Fatalf("acme's second page %v, %v", got(ms), err)
	}
	if ms, err = s.FeedMemberships(t.Context(), "acme", ms[1], 2); err != nil || len(ms) != 0 {
		t.Fatalf("acme's third page %v, %v; want none", got(ms), err)
	}
	if ms, err = s.FeedMemberships(t.Context(), "", model.FeedMembership{}, 10); err != nil || len(ms) != 5 || ms[4].Tenant != "other" {
		t.Fatalf("every tenant's: %v, %v", got(ms), err)
	}
}

// pagesBothWays pages through f by pages of limit, oldest first and then
// newest first (Newest, the console's search), and fails unless the first
// gives want and the second want reversed: no row skipped or repeated
// either way, a creation range's bounds included.
func pagesBothWays(t *testing.T, s store.Store, f model.ListFilter, limit int, want []int64) {
	t.Helper()
	for _, newest := range []bool{false, true} {
		var got []int64
		for page := f; ; {
			page.Limit, page.Newest = limit, newest
			ns, err := s.ListNotifications(t.Context(), page)
			if err != nil {
				t.Fatal(err)
			}
			if len(ns) == 0 {
				break
			}
			for _, n := range ns {
				got = append(got, n.ID)
			}
			page.After = ns[len(ns)-1].ID
		}
		w := want
		if newest {
			w = slices.Clone(want)
			slices.Reverse(w)
		}
		if !slices.Equal(got, w) {
			t.Fatalf("%+v by pages of %d, newest first %v: got %v, want %v", f, limit, newest, got, w)
		}
	}
}

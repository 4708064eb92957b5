package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func events(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "AcceptIsReadableWhenItReturns", run: testAcceptReadable},
		{name: "ResendIsDuplicateAndWritesNothing", run: testResendDuplicate},
		{name: "IdentityIsTenantIDAndPurpose", run: testIdentity},
		{name: "ConcurrentResendsMakeOneEvent", run: testConcurrentResends},
		{name: "ConflictWritesNothing", run: testConflict},
		{name: "ManyInOneCall", run: testManyInOneCall},
		{name: "FailedAcceptWroteNothing", run: testFailedAcceptWroteNothing},
		{name: "ExpandReachesTargets", run: testExpandReachesTargets},
		{name: "StaleExpandWritesNothing", run: testStaleExpand},
		{name: "RacingExpandersWriteOnce", run: testRacingExpanders},
		{name: "UnexpandedOldestFirst", run: testUnexpanded},
		{name: "EventNotificationsPage", run: testEventNotificationsPage},
		{name: "EventRowByIdentity", run: testEventRow},
		{name: "EventRowsOfAnID", run: testEventRows},
		{name: "KeysAreUnique", run: testKeysUnique},
		{name: "OwnMessageIsClaimedAndReadAsStored", run: testOwnMessage},
	})
}

// What an accept returns is there for every read at once: the relay
// answers the client from it and the dispatcher claims it. (That it
// survives a crash is each store's own test: the suite cannot reopen a
// store; store/sqlite has TestReopenKeepsData and the crash drills.)
func testAcceptReadable(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_1", 3)
	a := accept(t, s, t0, in)[0]
	if a.EventRow == 0 || a.Duplicate || a.Expanded != 3 || a.Targets != 3 || len(a.Notifications) != 3 {
		t.Fatalf("accepted %+v", a)
	}
	for i, n := range a.Notifications {
		tg := in.First[i]
		if n.ID == 0 || n.Key != tg.Key || n.Recipient != tg.Recipient || n.Channel != tg.Channel || n.Status != model.StatusPending {
			t.Fatalf("notification %d = %+v, want target %+v, pending", i, n, tg)
		}
	}
	if got := eventNotifications(t, s, a.EventRow); !slices.Equal(got, a.Notifications) {
		t.Fatalf("event's notifications read back %+v, accept said %+v", got, a.Notifications)
	}
	if row, err := s.EventRow(t.Context(), "acme", "evt_1", "receipt"); err != nil || row != a.EventRow {
		t.Fatalf("EventRow = %d, %v; want %d", row, err, a.EventRow)
	}
	for i, id := range ids(a) {
		n := notification(t, s, id)
		if n.Key != in.First[i].Key || n.Address != in.First[i].Address || n.EventID != "evt_1" || n.Tenant != "acme" ||
			n.Status != model.StatusPending || !n.CreatedAt.Equal(t0) {
			t.Fatalf("notification %d read back as %+v", id, n)
		}
	}
	if c := counts(t, s, t0); c[model.StatusPending] != 3 {
		t.Fatalf("status counts %v, want 3 pending", c)
	}
}

// A resend (a retry, a redelivery, a cron re-run) is a duplicate: the same
// event row and notifications, and nothing new, whatever chunk it brings.
func testResendDuplicate(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_1", 3)
	first := accept(t, s, t0, in)[0]
	again := in
	again.First = in.First[:1] // a resend may bring any chunk: none of it is written
	for _, resend := range []model.AcceptInput{in, again} {
		d := accept(t, s, t0.Add(time.Second), resend)[0]
		if !d.Duplicate || d.EventRow != first.EventRow || d.Expanded != 3 || d.Targets != 3 {
			t.Fatalf("resend accepted as %+v, want a duplicate of %+v", d, first)
		}
		if got := eventNotifications(t, s, first.EventRow); !slices.Equal(got, first.Notifications) {
			t.Fatalf("after a resend the event's notifications are %+v, want %+v", got, first.Notifications)
		}
		if all := everything(t, s, model.ListFilter{}); len(all) != 3 {
			t.Fatalf("%d notifications after a resend, want 3", len(all))
		}
	}
}

// An event's identity is its tenant, id and purpose: the same id in another
// tenant or for another purpose is another event.
func testIdentity(t *testing.T, s store.Store) {
	a := newEvent("acme", "evt_1", 1)
	b := newEvent("other", "evt_1", 1)
	c := newEvent("acme", "evt_1", 1)
	c.Event.Purpose = "reminder"
	c.First = targets("acme", "evt_1", "reminder", 0, 1)
	got := accept(t, s, t0, a, b, c)
	if got[0].Duplicate || got[1].Duplicate || got[2].Duplicate {
		t.Fatalf("three identities accepted as %+v", got)
	}
	if got[0].EventRow == got[1].EventRow || got[0].EventRow == got[2].EventRow || got[1].EventRow == got[2].EventRow {
		t.Fatalf("three identities share rows: %+v", got)
	}
	if all := everything(t, s, model.ListFilter{}); len(all) != 3 {
		t.Fatalf("%d notifications, want 3", len(all))
	}
}

// Many callers sending one event at once make one event: the unique
// constraint decides, not a lookup before the insert.
func testConcurrentResends(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_501", 2)
	const callers = 50
	res := make([]model.Accepted, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			out, errs, err := s.AcceptEvents(t.Context(), []model.AcceptInput{in}, t0)
			if err != nil || errs[0] != nil {
				t.Errorf("caller %d: %v, %v", i, err, errs)
				return
			}
			res[i] = out[0]
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	news := 0
	for _, a := range res {
		if !a.Duplicate {
			news++
		}
		if a.EventRow != res[0].EventRow {
			t.Fatalf("event rows %d and %d for one event", a.EventRow, res[0].EventRow)
		}
	}
	if news != 1 {
		t.Fatalf("%d of %d callers created the event, want 1", news, callers)
	}
	if all := everything(t, s, model.ListFilter{}); len(all) != 2 {
		t.Fatalf("%d notifications, want 2", len(all))
	}
}

// Other content under an accepted identity is refused and writes nothing:
// neither its targets nor anything else.
func testConflict(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_1", 2)
	first := accept(t, s, t0, in)[0]
	other := in
	other.Event.Fingerprint = "another payload"
	other.Event.Targets = 3
	other.First = targets("acme", "evt_1", "other", 0, 3) // keys of its own
	out, errs, err := s.AcceptEvents(t.Context(), []model.AcceptInput{other}, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "conflicting accept", errs[0], model.ErrEventConflict)
	if out[0].Duplicate || len(out[0].Notifications) != 0 {
		t.Fatalf("a conflict reported %+v", out[0])
	}
	if got := eventNotifications(t, s, first.EventRow); !slices.Equal(got, first.Notifications) {
		t.Fatalf("after a conflict the event's notifications are %+v", got)
	}
	if all := everything(t, s, model.ListFilter{}); len(all) != 2 {
		t.Fatalf("%d notifications after a conflict, want 2", len(all))
	}
	for _, tg := range other.First {
		_, err := s.Notification(t.Context(), "", 0, tg.Key)
		wantErr(t, "a conflicting event's target", err, model.ErrNotFound)
	}
}

// Events of one call are written in the order given, in one commit; an
// event that conflicts is rolled back alone; an event repeated in the same
// call is a duplicate of its first.
func testManyInOneCall(t *testing.T, s store.Store) {
	old := accept(t, s, t0, newEvent("acme", "old", 1))[0]
	conflicting := newEvent("acme", "old", 2)
	conflicting.Event.Fingerprint = "changed"
	conflicting.First = targets("acme", "old", "changed", 0, 2)
	e1, e2 := newEvent("acme", "e1", 2), newEvent("acme", "e2", 3)
	e3 := newEvent("other", "e3", 4)
	e3.First = e3.First[:1] // and a fan-out that continues later
	in := []model.AcceptInput{e1, conflicting, e2, e1, e3}

	before := s.Stats().Commits
	out, errs, err := s.AcceptEvents(t.Context(), in, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || len(errs) != len(in) {
		t.Fatalf("%d results and %d errors for %d events", len(out), len(errs), len(in))
	}
	if c := s.Stats().Commits - before; c != 1 {
		t.Fatalf("%d commits for one AcceptEvents, want 1", c)
	}
	wantErr(t, "the conflicting event", errs[1], model.ErrEventConflict)
	for _, i := range []int{0, 2, 3, 4} {
		if errs[i] != nil {
			t.Fatalf("event %d: %v", i, errs[i])
		}
	}
	if out[0].Duplicate || out[2].Duplicate || out[4].Duplicate {
		t.Fatalf("new events reported duplicate: %+v", out)
	}
	if !out[3].Duplicate || out[3].EventRow != out[0].EventRow {
		t.Fatalf("e1 repeated in the call: %+v, want a duplicate of row %d", out[3], out[0].EventRow)
	}
	// In the order given: rows and notification ids ascend from e1 to e3.
	if !(old.EventRow < out[0].EventRow && out[0].EventRow < out[2].EventRow && out[2].EventRow < out[4].EventRow) {
		t.Fatalf("event rows %d, %d, %d, %d not in the order given", old.EventRow, out[0].EventRow, out[2].EventRow, out[4].EventRow)
	}
	var written []int64
	for _, i := range []int{0, 2, 4} {
		written = append(written, ids(out[i])...)
	}
	if !slices.IsSorted(written) || len(written) != 2+3+1 {
		t.Fatalf("notification ids %v: want 6, in the order given", written)
	}
	if out[4].Expanded != 1 || out[4].Targets != 4 {
		t.Fatalf("partial event accepted as %+v", out[4])
	}
	var listed []int64
	for _, n := range everything(t, s, model.ListFilter{}) {
		listed = append(listed, n.ID)
	}
	if want := append(ids(old), written...); !slices.Equal(listed, want) {
		t.Fatalf("stored notifications %v, want %v (nothing of the conflicting event)", listed, want)
	}
}

// An accept that returns an error wrote nothing; one that returns none
// wrote everything. Callers cancelled at every moment see one or the
// other, never a write they were told failed.
func testFailedAcceptWroteNothing(t *testing.T, s store.Store) {
	const n = 30
	type result struct {
		err  error
		errs []error
	}
	res := make([]result, n)
	for i := range n {
		ctx, cancel := context.WithCancel(t.Context())
		if i%3 == 0 {
			cancel() // before the call
		} else {
			go cancel() // during it, somewhere
		}
		_, errs, err := s.AcceptEvents(ctx, []model.AcceptInput{newEvent("acme", evtID(i), 1)}, t0)
		cancel()
		res[i] = result{err, errs}
	}
	failed := 0
	for i, r := range res {
		row, err := s.EventRow(t.Context(), "acme", evtID(i), "receipt")
		switch {
		case r.err != nil:
			failed++
			wantErr(t, "event of a failed accept", err, model.ErrNotFound)
		case r.errs[0] != nil:
			t.Fatalf("accept %d: %v", i, r.errs[0])
		case err != nil:
			t.Fatalf("accept %d succeeded, its event: %v", i, err)
		default:
			if keys := eventKeys(t, s, row); len(keys) != 1 {
				t.Fatalf("accept %d succeeded with %d notifications, want 1", i, len(keys))
			}
		}
	}
	t.Logf("%d of %d cancelled accepts failed", failed, n)
}

func evtID(i int) string { return fmt.Sprintf("evt_%d", i) }

// A large event is its first chunk at accept, then chunks by ExpandEvent,
// each from where the last ended, until every target is a notification.
func testExpandReachesTargets(t *testing.T, s store.Store) {
	in := newEvent("acme", "big", 1000)
	all := in.First
	in.First = all[:300]
	a := accept(t, s, t0, in)[0]
	if a.Expanded != 300 || a.Targets != 1000 || len(a.Notifications) != 300 {
		t.Fatalf("accepted %+v", a)
	}
	un, err := s.UnexpandedEvents(t.Context(), 10)
	if err != nil || len(un) != 1 || un[0].EventRow != a.EventRow || un[0].Tenant != "acme" || un[0].EventID != "big" ||
		un[0].Expanded != 300 || un[0].Targets != 1000 || string(un[0].Payload) != string(in.Event.Payload) {
		t.Fatalf("unexpanded = %+v, %v", un, err)
	}
	for from := 300; from < 1000; from += 300 {
		chunk := all[from:min(from+300, 1000)]
		got, err := s.ExpandEvent(t.Context(), a.EventRow, from, chunk, t0.Add(time.Second))
		if err != nil || got != from+len(chunk) {
			t.Fatalf("expand from %d: %d, %v; want %d", from, got, err, from+len(chunk))
		}
	}
	if keys := eventKeys(t, s, a.EventRow); !slices.Equal(keys, keysOf(all)) {
		t.Fatalf("%d notifications after expanding, want the 1000 targets in fan-out order", len(keys))
	}
	if un, err := s.UnexpandedEvents(t.Context(), 10); err != nil || len(un) != 0 {
		t.Fatalf("still unexpanded: %+v, %v", un, err)
	}
	if c := counts(t, s, t0); c[model.StatusPending] != 1000 {
		t.Fatalf("status counts %v, want 1000 pending", c)
	}
	// A duplicate of the event now reports its whole fan-out.
	d := accept(t, s, t0, in)[0]
	if !d.Duplicate || d.Expanded != 1000 {
		t.Fatalf("resend after expanding: %+v", d)
	}
}

// An expander that is behind (or ahead of) the event's real position
// writes nothing and learns the real count; a chunk written twice adds no
// notification.
func testStaleExpand(t *testing.T, s store.Store) {
	in := newEvent("acme", "big", 9)
	all := in.First
	in.First = all[:3]
	a := accept(t, s, t0, in)[0]
	for _, from := range []int{0, 2, 4, 6} {
		got, err := s.ExpandEvent(t.Context(), a.EventRow, from, all[from:from+3], t0)
		if err != nil || got != 3 {
			t.Fatalf("expand from %d with 3 written: %d, %v; want 3 and nothing written", from, got, err)
		}
	}
	if keys := eventKeys(t, s, a.EventRow); !slices.Equal(keys, keysOf(all[:3])) {
		t.Fatalf("a stale expand wrote: %v", keys)
	}
	// The same chunk twice: once.
	for range 2 {
		if got, err := s.ExpandEvent(t.Context(), a.EventRow, 3, all[3:6], t0); err != nil || got != 6 {
			t.Fatalf("expand 3-6: %d, %v; want 6", got, err)
		}
	}
	if keys := eventKeys(t, s, a.EventRow); !slices.Equal(keys, keysOf(all[:6])) {
		t.Fatalf("a chunk written twice: %v", keys)
	}
	if all := everything(t, s, model.ListFilter{}); len(all) != 6 {
		t.Fatalf("%d notifications, want 6", len(all))
	}
}

// Two processes finishing one fan-out at once (two dispatchers after a
// crash) write each chunk once.
func testRacingExpanders(t *testing.T, s store.Store) {
	in := newEvent("acme", "big", 400)
	all := in.First
	in.First = all[:100]
	a := accept(t, s, t0, in)[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for from := 100; from < 400; {
				got, err := s.ExpandEvent(t.Context(), a.EventRow, from, all[from:min(from+100, 400)], t0)
				if err != nil {
					t.Error(err)
					return
				}
				from = got // the real position, whoever wrote it
			}
		})
	}
	wg.Wait()
	if keys := eventKeys(t, s, a.EventRow); !slices.Equal(keys, keysOf(all)) {
		t.Fatalf("%d notifications after racing expanders, want the 400 targets once each", len(keys))
	}
	if all := everything(t, s, model.ListFilter{}); len(all) != 400 {
		t.Fatalf("%d notifications, want 400", len(all))
	}
}

// UnexpandedEvents lists only fan-outs that stopped part way, oldest
// first, at most limit.
func testUnexpanded(t *testing.T, s store.Store) {
	var rows []int64
	var rests [][]model.Target
	for i, n := range []int{5, 2, 6, 4} { // the second is whole
		in := newEvent("acme", evtID(i), n)
		rest := in.First
		if i != 1 {
			in.First = rest[:1]
		}
		rows = append(rows, accept(t, s, t0.Add(time.Duration(i)*time.Second), in)[0].EventRow)
		rests = append(rests, rest)
	}
	list := func(limit int) []int64 {
		t.Helper()
		un, err := s.UnexpandedEvents(t.Context(), limit)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(un))
		for i, u := range un {
			out[i] = u.EventRow
			if u.Expanded != 1 || u.Targets != len(rests[slices.Index(rows, u.EventRow)]) {
				t.Fatalf("unexpanded %+v", u)
			}
		}
		return out
	}
	if got, want := list(10), []int64{rows[0], rows[2], rows[3]}; !slices.Equal(got, want) {
		t.Fatalf("unexpanded %v, want %v", got, want)
	}
	if got, want := list(2), []int64{rows[0], rows[2]}; !slices.Equal(got, want) {
		t.Fatalf("unexpanded, limit 2: %v, want %v", got, want)
	}
	if _, err := s.ExpandEvent(t.Context(), rows[0], 1, rests[0][1:], t0); err != nil {
		t.Fatal(err)
	}
	if got, want := list(10), []int64{rows[2], rows[3]}; !slices.Equal(got, want) {
		t.Fatalf("after finishing the oldest: %v, want %v", got, want)
	}
}

// EventNotifications pages through a fan-out by position.
func testEventNotificationsPage(t *testing.T, s store.Store) {
	in := newEvent("acme", "e", 7)
	all := in.First
	in.First = all[:4]
	a := accept(t, s, t0, in)[0]
	accept(t, s, t0, newEvent("acme", "another", 3)) // interleaved rows of another event
	if _, err := s.ExpandEvent(t.Context(), a.EventRow, 4, all[4:], t0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ after, limit, from, to int }{
		{-1, 3, 0, 3}, {2, 3, 3, 6}, {5, 3, 6, 7}, {6, 3, 7, 7}, {-1, 100, 0, 7}, {3, 1, 4, 5},
	} {
		ns, err := s.EventNotifications(t.Context(), a.EventRow, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, n := range ns {
			keys = append(keys, n.Key)
			if n.ID == 0 || n.Status != model.StatusPending || n.Channel != "email" {
				t.Fatalf("listed %+v", n)
			}
		}
		if want := keysOf(all[c.from:c.to]); !slices.Equal(keys, want) {
			t.Fatalf("after %d, limit %d: %v, want %v", c.after, c.limit, keys, want)
		}
	}
}

// EventRow finds an event by its whole identity, or ErrNotFound.
func testEventRow(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("a", "evt", 1))[0].EventRow
	b := accept(t, s, t0, newEvent("b", "evt", 1))[0].EventRow
	if got, err := s.EventRow(t.Context(), "a", "evt", "receipt"); err != nil || got != a {
		t.Fatalf("EventRow(a) = %d, %v; want %d", got, err, a)
	}
	if got, err := s.EventRow(t.Context(), "b", "evt", "receipt"); err != nil || got != b {
		t.Fatalf("EventRow(b) = %d, %v; want %d", got, err, b)
	}
	for _, c := range [][3]string{{"c", "evt", "receipt"}, {"a", "other", "receipt"}, {"a", "evt", "reminder"}, {"", "evt", "receipt"}} {
		_, err := s.EventRow(t.Context(), c[0], c[1], c[2])
		wantErr(t, "EventRow of "+c[0]+"/"+c[1]+"/"+c[2], err, model.ErrNotFound)
	}
}

// EventRows lists every purpose a tenant accepted an event id under, in
// row order, and nothing of another tenant's or another id's.
func testEventRows(t *testing.T, s store.Store) {
	withPurpose := func(tenant, id, purpose string) model.AcceptInput {
		in := newEvent(tenant, id, 1)
		in.Event.Purpose = purpose
		in.Event.Fingerprint += "/" + purpose
		in.First = targets(tenant, id, purpose, 0, 1)
		return in
	}
	out := accept(t, s, t0, withPurpose("a", "evt", "receipt"), withPurpose("b", "evt", "receipt"), withPurpose("a", "other", "receipt"))
	later := accept(t, s, t0, withPurpose("a", "evt", "reminder"))
	got, err := s.EventRows(t.Context(), "a", "evt")
	if err != nil {
		t.Fatal(err)
	}
	want := []model.EventRef{{Row: out[0].EventRow, Purpose: "receipt"}, {Row: later[0].EventRow, Purpose: "reminder"}}
	if !slices.Equal(got, want) {
		t.Fatalf("EventRows(a, evt) = %+v, want %+v", got, want)
	}
	if got, err := s.EventRows(t.Context(), "b", "evt"); err != nil || !slices.Equal(got, []model.EventRef{{Row: out[1].EventRow, Purpose: "receipt"}}) {
		t.Fatalf("EventRows(b, evt) = %+v, %v; want b's one", got, err)
	}
	for _, c := range [][2]string{{"c", "evt"}, {"a", "nope"}, {"", "evt"}} {
		if got, err := s.EventRows(t.Context(), c[0], c[1]); err != nil || len(got) != 0 {
			t.Fatalf("EventRows(%q, %q) = %+v, %v; want none and no error", c[0], c[1], got, err)
		}
	}
}

// Two notifications never share a key, in one chunk or across events: the
// first keeps it, untouched.
func testKeysUnique(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("acme", "a", 1))[0]
	key := a.Notifications[0].Key
	b := newEvent("acme", "b", 3)
	b.First[0].Key = key            // another event's key
	b.First[2].Key = b.First[1].Key // twice in one chunk
	accept(t, s, t0, b)
	var seen []string
	for _, n := range everything(t, s, model.ListFilter{}) {
		if slices.Contains(seen, n.Key) {
			t.Fatalf("two notifications with key %q", n.Key)
		}
		seen = append(seen, n.Key)
	}
	if len(seen) != 2 {
		t.Fatalf("keys stored %v, want %q and %q", seen, key, b.First[1].Key)
	}
	n, err := s.Notification(t.Context(), "", 0, key)
	if err != nil || n.ID != a.Notifications[0].ID || n.EventID != "a" || n.Recipient != "r0" {
		t.Fatalf("key %q is now %+v, %v; want event a's notification", key, n, err)
	}
}

package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func maintenance(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "PingHealthy", run: testPing},
		{name: "PruneOnlyWhatFinished", run: testPrune},
		{name: "PruneKeepsFeedItemsWithTheirEvents", run: testPruneFeedItems},
		{name: "PruneKeepsUnfinishedFanOut", run: testPruneUnfinishedFanOut},
		{name: "PruneOrphanReceipts", run: testPruneOrphanReceipts},
		{name: "StatsCountCommits", run: testStats},
		{name: "WhereNamesTheStore", run: testWhere},
		{name: "CloseRefusesLaterWrites", run: testClose, closes: true},
	})
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("ping a new store: %v", err)
	}
	accept(t, s, t0, newEvent("acme", "e", 1))
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("ping after a write: %v", err)
	}
}

func gone(t *testing.T, s store.Store, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		_, err := s.Notification(t.Context(), "", id, "")
		wantErr(t, "a pruned notification", err, model.ErrNotFound)
	}
}

// Prune deletes notifications final before the cutoff, with their attempts
// and receipts, events left without notifications, and expired request
// keys; never a pending or sending notification however old, nor the event
// it belongs to. It works in batches, to the end, and a second run finds
// nothing.
func testPrune(t *testing.T, s store.Store) {
	cutoff, now := t0.Add(time.Hour), t0.Add(2*time.Hour)
	a := ids(accept(t, s, t0, newEvent("acme", "a", 8))[0])
	b := ids(accept(t, s, t0, newEvent("acme", "b", 2))[0])
	settleAll(t, s, t0, map[int64]outcome{
		a[0]: {status: model.StatusSent, messageID: "a0"}, // delivered, below
		a[1]: {status: model.StatusSent, messageID: "a1"},
		a[2]: {status: model.StatusFailed},
		a[3]: {status: model.StatusDead},
		a[4]: {status: model.StatusUnknown},
		a[5]: {status: model.StatusSent, messageID: "a5"}, // bounced, below
		a[6]: {status: model.StatusPending, retryAt: t0.Add(24 * time.Hour)},
		a[7]: {status: model.StatusSending}, // its lease long over: still not final
		b[0]: {status: model.StatusSent, messageID: "b0"},
		b[1]: {status: model.StatusFailed},
	})
	addReceipts(t, s, t0.Add(time.Second), receipt("p", "a0", "delivered"), receipt("p", "a1", "sent"),
		receipt("p", "a5", "bounced"), receipt("p", "b0", "delivered"))
	// Finished after the cutoff: kept.
	c := ids(accept(t, s, t0.Add(time.Second), newEvent("acme", "c", 1))[0])
	settleAll(t, s, cutoff.Add(time.Minute), map[int64]outcome{c[0]: {status: model.StatusSent, messageID: "c0"}})
	expired := model.RequestKey{Tenant: "acme", Key: "expired", Fingerprint: "fp"}
	live := model.RequestKey{Tenant: "acme", Key: "live", Fingerprint: "fp"}
	for k, ttl := range map[model.RequestKey]time.Duration{expired: time.Minute, live: 48 * time.Hour} {
		if err := s.SaveResponse(t.Context(), k, model.StoredResponse{Status: 202, Body: []byte("ok")}, t0, ttl); err != nil {
			t.Fatal(err)
		}
	}

	res, err := s.Prune(t.Context(), cutoff, now, 2) // batches smaller than the work
	if err != nil {
		t.Fatal(err)
	}
	want := model.PruneResult{Notifications: 8, Attempts: 8, Receipts: 4, Events: 1, RequestKeys: 1}
	if res != want {
		t.Fatalf("pruned %+v, want %+v", res, want)
	}
	gone(t, s, a[0], a[1], a[2], a[3], a[4], a[5], b[0], b[1])
	if n := notification(t, s, a[6]); n.Status != model.StatusPending || len(n.AttemptLog) != 1 {
		t.Fatalf("a pending notification after prune: %s with %d attempts, want pending with 1", n.Status, len(n.AttemptLog))
	}
	if n := notification(t, s, a[7]); n.Status != model.StatusSending {
		t.Fatalf("a sending notification after prune: %s", n.Status)
	}
	if n := notification(t, s, c[0]); n.Status != model.StatusSent || len(n.AttemptLog) != 1 {
		t.Fatalf("a notification finished after the cutoff: %s with %d attempts", n.Status, len(n.AttemptLog))
	}
	for id, want := range map[string]error{"a": nil, "b": model.ErrNotFound, "c": nil} {
		if _, err := s.EventRow(t.Context(), "acme", id, "receipt"); !errors.Is(err, want) {
			t.Fatalf("event %s after prune: %v, want %v", id, err, want)
		}
	}
	st, err := s.Status(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[model.StatusPending] != 1 || st.Counts[model.StatusSending] != 1 || st.Counts[model.StatusSent] != 1 ||
		st.Providers["p"]["sent"] != 1 || st.Providers["p"]["refused"] != 1 || st.Providers["p"]["unknown"] != 0 {
		t.Fatalf("after prune: counts %v, attempts %v", st.Counts, st.Providers)
	}
	if resp := lookup(t, s, live, now); resp == nil {
		t.Fatal("prune deleted a live request key")
	}
	if res, err := s.Prune(t.Context(), cutoff, now, 2); err != nil || res != (model.PruneResult{}) {
		t.Fatalf("a second prune: %+v, %v; want nothing", res, err)
	}
}

// Prune never leaves a feed item whose event is gone: an item and its
// event go together or stay together.
func testPruneFeedItems(t *testing.T, s store.Store) {
	for i, at := range []time.Time{t0, t0.Add(3 * time.Hour)} { // before and after the cutoff
		in := newEvent("acme", evtID(i), 0)
		in.Event.Feeds = []string{model.PersonalFeed("u")}
		accept(t, s, at, in)
	}
	if _, err := s.Prune(t.Context(), t0.Add(time.Hour), t0.Add(4*time.Hour), 500); err != nil {
		t.Fatal(err)
	}
	items, _, err := s.FeedPage(t.Context(), "acme", "u", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	inFeed := map[string]bool{}
	for _, it := range items {
		inFeed[it.EventID] = true
	}
	if !inFeed[evtID(1)] {
		t.Fatalf("the feed item posted after the cutoff is gone: %+v", items)
	}
	for i := range 2 {
		_, err := s.EventRow(t.Context(), "acme", evtID(i), "receipt")
		if kept := err == nil; kept != inFeed[evtID(i)] {
			t.Fatalf("event %s kept %v (%v), its feed item kept %v", evtID(i), kept, err, inFeed[evtID(i)])
		}
	}
}

// An event whose fan-out is not finished is not pruned, quarantined or
// not, even when every notification it has so far is final and old: its
// other recipients would never get theirs, and an operator could no longer
// release it.
func testPruneUnfinishedFanOut(t *testing.T, s store.Store) {
	var rows []int64
	var rests [][]model.Target
	for i := range 2 {
		in := newEvent("acme", evtID(i), 3)
		rests = append(rests, in.First[1:])
		in.First = in.First[:1]
		a := accept(t, s, t0, in)[0]
		rows = append(rows, a.EventRow)
		settleAll(t, s, t0, map[int64]outcome{a.Notifications[0].ID: {status: model.StatusSent}})
	}
	if err := s.QuarantineEvent(t.Context(), rows[1], "payload no longer decodes", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(t.Context(), t0.Add(time.Hour), t0.Add(2*time.Hour), 500); err != nil {
		t.Fatal(err)
	}
	un, err := s.UnexpandedEvents(t.Context(), 10)
	if err != nil || len(un) != 1 || un[0].EventRow != rows[0] {
		t.Fatalf("unexpanded after prune: %+v, %v; want event %d", un, err, rows[0])
	}
	if got, err := s.ExpandEvent(t.Context(), rows[0], 1, rests[0], t0.Add(2*time.Hour)); err != nil || got != 3 {
		t.Fatalf("finishing the fan-out after prune: %d, %v", got, err)
	}
	if qs, err := s.QuarantinedEvents(t.Context(), "", 0, 10); err != nil || len(qs) != 1 || qs[0].EventRow != rows[1] {
		t.Fatalf("quarantined after prune: %+v, %v; want event %d", qs, err, rows[1])
	}
	if err := s.ReleaseEvent(t.Context(), "acme", rows[1]); err != nil {
		t.Fatalf("releasing the quarantined event after prune: %v", err)
	}
}

// A receipt about no notification (a message of another system on a shared
// provider account, a callback after its notification was pruned) is
// pruned once older than the cutoff: it cannot be applied any more.
func testPruneOrphanReceipts(t *testing.T, s store.Store) {
	addReceipts(t, s, t0, receipt("p", "nobody", "delivered"))
	res, err := s.Prune(t.Context(), t0.Add(time.Hour), t0.Add(2*time.Hour), 500)
	if err != nil || res.Receipts != 1 {
		t.Fatalf("pruned %+v, %v; want the orphan receipt", res, err)
	}
}

// Stats counts commits and the writes they made; OnCommit hears of each.
func testStats(t *testing.T, s store.Store) {
	heard := make(chan int, 100)
	s.OnCommit(func(writes int, took time.Duration) {
		select {
		case heard <- writes:
		default:
		}
	})
	before := s.Stats()
	accept(t, s, t0, newEvent("acme", "e", 2))
	after := s.Stats()
	if after.Commits < before.Commits+1 || after.Writes < before.Writes+1 {
		t.Fatalf("stats %+v after a write, %+v before", after, before)
	}
	select {
	case w := <-heard:
		if w < 1 {
			t.Fatalf("OnCommit heard a commit of %d writes", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnCommit heard of no commit within 10s of a write")
	}
}

// Where names the store for people: not empty, the same each time.
func testWhere(t *testing.T, s store.Store) {
	if w := s.Where(); w == "" || w != s.Where() {
		t.Fatalf("Where = %q", w)
	}
}

// Close answers the writes in flight (each done or ErrClosed, none lost in
// between) and refuses every later one with ErrClosed.
func testClose(t *testing.T, s store.Store) {
	accept(t, s, t0, newEvent("acme", "before", 1))
	const writers = 10
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, _, errs[i] = s.AcceptEvents(t.Context(), []model.AcceptInput{newEvent("acme", evtID(i), 1)}, t0)
		})
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, model.ErrClosed) {
			t.Fatalf("a write racing Close: %v, want success or ErrClosed", err)
		}
	}
	_, _, err := s.AcceptEvents(t.Context(), []model.AcceptInput{newEvent("acme", "after", 1)}, t0)
	wantErr(t, "accept after Close", err, model.ErrClosed)
	_, err = s.CreateToken(t.Context(), "acme", "t", "h", t0)
	wantErr(t, "a token after Close", err, model.ErrClosed)
}

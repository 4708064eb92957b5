package storetest

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func reads(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "NotificationByIDOrKey", run: testNotificationByIDOrKey},
		{name: "NotificationAuditTrail", run: testNotificationAuditTrail},
		{name: "ListPagesWhileWriting", run: testListPagesWhileWriting},
		{name: "ListFilters", run: testListFilters},
		{name: "ListLimits", run: testListLimits},
		{name: "ListSince", run: testListSince},
		{name: "StatusCountsEveryStatus", run: testStatusCounts},
		{name: "StatusDue", run: testStatusDue},
		{name: "StatusNextDueBesideABacklog", run: testStatusNextDueBesideBacklog},
		{name: "StatusNewestUnknownFailedDead", run: testStatusNewest},
	})
}

// A notification is found by id or by key, within its tenant ("" is any):
// another tenant's is not found, as if it did not exist.
func testNotificationByIDOrKey(t *testing.T, s store.Store) {
	in := newEvent("acme", "evt_1", 2)
	a := accept(t, s, t0, in)[0]
	accept(t, s, t0, newEvent("other", "evt_1", 1))
	id, key := a.Notifications[1].ID, a.Notifications[1].Key
	for _, c := range []struct {
		tenant string
		id     int64
		key    string
	}{{"", id, ""}, {"acme", id, ""}, {"", 0, key}, {"acme", 0, key}} {
		n, err := s.Notification(t.Context(), c.tenant, c.id, c.key)
		if err != nil {
			t.Fatalf("Notification(%q, %d, %q): %v", c.tenant, c.id, c.key, err)
		}
		want := model.Notification{ID: id, Key: key, Tenant: "acme", EventID: "evt_1", Purpose: "receipt", Type: "payment",
			Recipient: "r1", Channel: "email", Address: "r1@example.com", Status: model.StatusPending}
		if n.ID != want.ID || n.Key != want.Key || n.Tenant != want.Tenant || n.EventID != want.EventID || n.Purpose != want.Purpose ||
			n.Type != want.Type || n.Recipient != want.Recipient || n.Channel != want.Channel || n.Address != want.Address ||
			n.Status != want.Status || n.Attempts != 0 || n.LeaseUntil != nil || n.Provider != "" {
			t.Fatalf("Notification(%q, %d, %q) = %+v, want %+v", c.tenant, c.id, c.key, n, want)
		}
		if n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(t0) || !n.CreatedAt.Equal(t0) || !n.UpdatedAt.Equal(t0) {
			t.Fatalf("times: next %v, created %s, updated %s; want %s", n.NextAttemptAt, n.CreatedAt, n.UpdatedAt, t0)
		}
		if n.AttemptLog == nil || len(n.AttemptLog) != 0 || len(n.Receipts) != 0 {
			t.Fatalf("a new notification has attempts %#v and receipts %v; want an empty log (the API shows [])", n.AttemptLog, n.Receipts)
		}
	}
	for _, c := range []struct {
		tenant string
		id     int64
		key    string
	}{{"other", id, ""}, {"other", 0, key}, {"", id + 1000, ""}, {"", 0, "no-such-key"}, {"acme", 0, "no-such-key"}} {
		_, err := s.Notification(t.Context(), c.tenant, c.id, c.key)
		wantErr(t, fmt.Sprintf("Notification(%q, %d, %q)", c.tenant, c.id, c.key), err, model.ErrNotFound)
	}
}

// A notification's read shows its state as the dispatcher left it and every
// attempt, in order.
func testNotificationAuditTrail(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("acme", "evt_1", 2))[0]
	sent, leased := a.Notifications[0].ID, a.Notifications[1].ID
	at := t0.Add(time.Minute)
	settleAll(t, s, at, map[int64]outcome{
		sent:   {status: model.StatusPending, provider: "first", retryAt: at.Add(time.Minute)},
		leased: {status: model.StatusSending},
	})
	n := notification(t, s, leased)
	if n.Status != model.StatusSending || n.Attempts != 0 || n.NextAttemptAt != nil || n.LeaseUntil == nil || !n.LeaseUntil.Equal(at.Add(setupLease)) {
		t.Fatalf("a claimed notification reads %+v (lease %v), want sending until %s, no call made yet", n, n.LeaseUntil, at.Add(setupLease))
	}
	n = notification(t, s, sent)
	if n.Status != model.StatusPending || n.Attempts != 1 || n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(at.Add(time.Minute)) || n.LeaseUntil != nil {
		t.Fatalf("a notification to retry reads %+v, want pending at %s", n, at.Add(time.Minute))
	}
	at2 := at.Add(time.Minute)
	settleAll(t, s, at2, map[int64]outcome{sent: {status: model.StatusSent, provider: "second", messageID: "msg-1"}})
	n = notification(t, s, sent)
	if n.Status != model.StatusSent || n.Attempts != 2 || n.NextAttemptAt != nil || n.Provider != "second" ||
		n.ProviderMessageID != "msg-1" || n.LastResponse != "accepted" || !n.UpdatedAt.Equal(at2) || !n.CreatedAt.Equal(t0) {
		t.Fatalf("a sent notification reads %+v", n)
	}
	if len(n.AttemptLog) != 2 {
		t.Fatalf("attempt log %+v, want 2 attempts", n.AttemptLog)
	}
	first, second := n.AttemptLog[0], n.AttemptLog[1]
	if first.N != 1 || first.Provider != "first" || first.Outcome != "refused" || first.HTTPStatus != 503 || !first.StartedAt.Equal(at) ||
		!first.EndedAt.Equal(at) || first.Decision == "" {
		t.Fatalf("first attempt %+v", first)
	}
	if second.N != 2 || second.Provider != "second" || second.Outcome != "sent" || second.MessageID != "msg-1" || second.HTTPStatus != 202 ||
		second.Response != "accepted" || !second.StartedAt.Equal(at2) || second.Decision != model.StatusSent {
		t.Fatalf("second attempt %+v", second)
	}
}

// Paging by cursor neither skips nor repeats a row while other callers
// write: a row committed after a page was read lands after that page's
// cursor, even when several writers commit at once.
func testListPagesWhileWriting(t *testing.T, s store.Store) {
	for i := range 6 {
		accept(t, s, t0, newEvent("a", fmt.Sprintf("before%d", i), 4), newEvent("b", fmt.Sprintf("before%d", i), 1))
	}
	for _, f := range []model.ListFilter{{Limit: 3}, {Tenant: "a", Limit: 2}, {Tenant: "a", Recipient: "r1", Limit: 1}} {
		var (
			wg       sync.WaitGroup
			started  = make(chan struct{})    // a writer has committed (or given up)
			progress = make(chan struct{}, 1) // a commit since the pager last looked
			done     = make(chan struct{})    // every writer has stopped
			once     sync.Once
		)
		const writers, each = 4, 10
		for w := range writers {
			wg.Go(func() {
				defer once.Do(func() { close(started) })
				for i := range each {
					id := fmt.Sprintf("f%d-w%d-%d", f.Limit, w, i)
					if _, _, err := s.AcceptEvents(t.Context(), []model.AcceptInput{newEvent("a", id, 2), newEvent("b", id, 2)}, t0); err != nil {
						t.Error(err)
						return
					}
					once.Do(func() { close(started) })
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			})
		}
		go func() { wg.Wait(); close(done) }()
		<-started // pages are read while the writers write
		paged, concurrent, err := pageWhile(t, s, f, progress, done)
		<-done // the writers stop before the store is closed
		if err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
		var want []int64
		for _, n := range everything(t, s, f) {
			want = append(want, n.ID)
		}
		if !slices.Equal(paged, want) {
			t.Fatalf("%+v: paged %d rows while writing, %d are stored; a row was skipped or repeated:\npaged  %v\nstored %v",
				f, len(paged), len(want), paged, want)
		}
		t.Logf("%+v: %d rows, %d pages read while writers wrote", f, len(paged), concurrent)
	}
}

// pageWhile pages through f to the end: until a page comes back empty
// after done was closed (nothing more can come). An empty page before that
// waits for progress. concurrent counts the pages read while writers
// wrote.
func pageWhile(t *testing.T, s store.Store, f model.ListFilter, progress, done <-chan struct{}) (paged []int64, concurrent int, err error) {
	for page := f; ; {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		ns, err := s.ListNotifications(t.Context(), page)
		if err != nil {
			return nil, 0, err
		}
		if len(ns) > page.Limit {
			return nil, 0, fmt.Errorf("%+v: a page of %d", page, len(ns))
		}
		for _, n := range ns {
			if f.Tenant != "" && n.Tenant != f.Tenant || f.Recipient != "" && n.Recipient != f.Recipient {
				return nil, 0, fmt.Errorf("%+v returned %+v", f, n)
			}
			paged = append(paged, n.ID)
		}
		if !finished {
			concurrent++
		}
		switch {
		case len(ns) > 0:
			page.After = ns[len(ns)-1].ID
		case finished:
			return paged, concurrent, nil
		default:
			select { // caught up: look again after the next commit
			case <-progress:
			case <-done:
			}
		}
	}
}

// Every filter, alone and combined, returns exactly what it names, in id
// order, one page or many; a tenant never sees another tenant's row.
func testListFilters(t *testing.T, s store.Store) {
	rows := map[string]int64{}
	var all []int64
	for _, tenant := range []string{"a", "b"} {
		for _, id := range []string{"e1", "e2"} {
			acc := accept(t, s, t0, newEvent(tenant, id, 3))[0]
			rows[tenant+"/"+id] = acc.EventRow
			all = append(all, ids(acc)...)
		}
	}
	// Some sent, one failed in each tenant, the rest pending.
	want := map[int64]outcome{}
	for i, id := range all {
		o := outcome{status: model.StatusPending, retryAt: t0.Add(time.Hour)}
		switch i {
		case 0, 1, 6:
			o = outcome{status: model.StatusSent, messageID: fmt.Sprint("m", i)}
		case 4, 9:
			o = outcome{status: model.StatusFailed}
		}
		want[id] = o
	}
	settleAll(t, s, t0, want)
	stored := everything(t, s, model.ListFilter{})
	if len(stored) != 12 {
		t.Fatalf("listed %d, want 12", len(stored))
	}
	for _, n := range stored {
		if n.Status != want[n.ID].status {
			t.Fatalf("notification %d listed %s, want %s", n.ID, n.Status, want[n.ID].status)
		}
	}
	if n := stored[0]; n.EventID != "e1" || n.Purpose != "receipt" || n.Tenant != "a" || n.Key != "a/e1/receipt/r0/email" ||
		n.Provider != "p" || n.ProviderMessageID != "m0" || n.Attempts != 1 {
		t.Fatalf("first notification listed %+v", n)
	}

	match := func(f model.ListFilter, n model.Notification) bool {
		return (f.Tenant == "" || n.Tenant == f.Tenant) && (f.Status == "" || n.Status == f.Status) &&
			(f.Recipient == "" || n.Recipient == f.Recipient) &&
			(f.EventRow == 0 || rows[n.Tenant+"/"+n.EventID] == f.EventRow)
	}
	nonEmpty, filters := 0, 0
	for _, tenant := range []string{"", "a", "b", "c"} {
		for _, status := range []string{"", model.StatusPending, model.StatusSent, model.StatusFailed} {
			for _, rcpt := range []string{"", "r0", "nobody"} {
				for _, ev := range []int64{0, rows["a/e1"], rows["b/e2"]} {
					f := model.ListFilter{Tenant: tenant, Status: status, Recipient: rcpt, EventRow: ev}
					filters++
					var wantIDs []int64
					for _, n := range stored {
						if match(f, n) {
							wantIDs = append(wantIDs, n.ID)
						}
					}
					for _, limit := range []int{2, model.MaxListLimit} { // pages of two, and one page
						pagesBothWays(t, s, f, limit, wantIDs)
					}
					if len(wantIDs) > 0 {
						nonEmpty++
					}
				}
			}
		}
	}
	if nonEmpty < 30 {
		t.Fatalf("only %d of %d filters matched anything: the fixture is too thin", nonEmpty, filters)
	}
	// Spot checks that do not go through the model.
	got, _ := s.ListNotifications(t.Context(), model.ListFilter{Tenant: "a", Recipient: "r0", Limit: 10})
	if len(got) != 2 || got[0].Tenant != "a" || got[1].Tenant != "a" || got[0].Recipient != "r0" {
		t.Fatalf("tenant a, r0: %+v", got)
	}
	got, _ = s.ListNotifications(t.Context(), model.ListFilter{Tenant: "a", EventRow: rows["b/e1"], Limit: 10})
	if len(got) != 0 {
		t.Fatalf("tenant a asked for tenant b's event and got %d rows", len(got))
	}
}

// A page holds at most Limit rows: 100 when Limit is not above 0, never
// more than MaxListLimit. An empty page is an empty list (the API shows []).
func testListLimits(t *testing.T, s store.Store) {
	accept(t, s, t0, newEvent("a", "big", model.MaxListLimit+100))
	for _, c := range []struct{ limit, want int }{{0, 100}, {-1, 100}, {7, 7}, {model.MaxListLimit + 1, model.MaxListLimit}, {5000, model.MaxListLimit}} {
		got, err := s.ListNotifications(t.Context(), model.ListFilter{Limit: c.limit})
		if err != nil || len(got) != c.want {
			t.Fatalf("limit %d: %d rows, %v; want %d", c.limit, len(got), err, c.want)
		}
	}
	got, err := s.ListNotifications(t.Context(), model.ListFilter{Tenant: "nobody"})
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty page = %#v, %v; want an empty list", got, err)
	}
}

// Status counts notifications in every status (each present, zero
// included) and attempts by provider and outcome.
func testStatusCounts(t *testing.T, s store.Store) {
	st, err := s.Status(t.Context(), t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range model.Statuses {
		if n, ok := st.Counts[status]; !ok || n != 0 {
			t.Fatalf("an empty store counts %s: %d (present %v), want 0", status, n, ok)
		}
	}
	if len(st.Counts) != len(model.Statuses) || len(st.Providers) != 0 || len(st.Unknown) != 0 || len(st.Failed) != 0 || len(st.Dead) != 0 ||
		st.OldestDue != 0 || st.NextDue != nil ||
		st.Quarantined != 0 || len(st.QuarantinedIDs) != 0 || st.Suppressions != 0 {
		t.Fatalf("an empty store's status %+v", st)
	}

	a := accept(t, s, t0, newEvent("acme", "e", 9))[0]
	n := ids(a)
	settleAll(t, s, t0, map[int64]outcome{
		n[8]: {status: model.StatusSkipped},
		n[0]: {status: model.StatusSent, provider: "p1", messageID: "m0"},
		n[1]: {status: model.StatusSent, provider: "p1", messageID: "m1"},                 // delivered, below
		n[2]: {status: model.StatusSent, provider: "p2", messageID: "m2"},                 // bounced, below
		n[3]: {status: model.StatusPending, provider: "p1", retryAt: t0.Add(time.Second)}, // failed, below
		n[4]: {status: model.StatusDead, provider: "p2"},
		n[5]: {status: model.StatusUnknown, provider: "p2"},
		n[6]: {status: model.StatusPending, provider: "p1", retryAt: t0.Add(time.Hour)},
		n[7]: {status: model.StatusSending},
	})
	if _, err := s.AddReceipts(t.Context(), []model.Receipt{
		{Provider: "p1", Dedupe: "r1", MessageID: "m1", Status: "delivered"},
		{Provider: "p2", Dedupe: "r2", MessageID: "m2", Status: "bounced"},
	}, t0); err != nil {
		t.Fatal(err)
	}
	settleAll(t, s, t0.Add(time.Second), map[int64]outcome{n[3]: {status: model.StatusFailed, provider: "p1"}}) // a second attempt
	accept(t, s, t0.Add(time.Second), newEvent("acme", "new", 1))                                               // pending, due
	st, err = s.Status(t.Context(), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := map[string]int64{
		model.StatusPending: 2, model.StatusSending: 1, model.StatusSent: 1, model.StatusDelivered: 1, model.StatusBounced: 1,
		model.StatusFailed: 1, model.StatusDead: 1, model.StatusUnknown: 1, model.StatusSkipped: 1,
	}
	for _, status := range model.Statuses { // every status is counted, 0 included
		if _, ok := wantCounts[status]; !ok {
			wantCounts[status] = 0
		}
	}
	if !maps.Equal(st.Counts, wantCounts) {
		t.Fatalf("counts %v, want %v", st.Counts, wantCounts)
	}
	wantProviders := map[string]map[string]int64{
		"p1": {"sent": 2, "refused": 3},
		"p2": {"sent": 1, "refused": 1, "unknown": 1},
	}
	if len(st.Providers) != len(wantProviders) {
		t.Fatalf("providers %v, want %v", st.Providers, wantProviders)
	}
	for p, want := range wantProviders {
		for _, o := range []string{"sent", "refused", "unknown"} {
			if got := st.Providers[p][o]; got != want[o] {
				t.Fatalf("provider %s, %s: %d attempts, want %d (all: %v)", p, o, got, want[o], st.Providers)
			}
		}
	}
	if !slices.Equal(st.Unknown, []int64{n[5]}) || !slices.Equal(st.Failed, []int64{n[3]}) || !slices.Equal(st.Dead, []int64{n[4]}) {
		t.Fatalf("unknown ids %v, failed %v, dead %v; want [%d], [%d], [%d]", st.Unknown, st.Failed, st.Dead, n[5], n[3], n[4])
	}
}

// OldestDue is how long the oldest due notification has waited; NextDue is
// when a notification not yet due becomes due.
func testStatusDue(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("acme", "e", 1))[0]
	due := func(now time.Time, oldest time.Duration, next *time.Time) {
		t.Helper()
		st, err := s.Status(t.Context(), now)
		if err != nil {
			t.Fatal(err)
		}
		if st.OldestDue != oldest || (st.NextDue == nil) != (next == nil) || next != nil && !st.NextDue.Equal(*next) {
			t.Fatalf("at %s: oldest due %s, next due %v; want %s, %v", now, st.OldestDue, st.NextDue, oldest, next)
		}
	}
	due(t0, 0, nil)
	due(t0.Add(90*time.Second), 90*time.Second, nil)
	retry := t0.Add(time.Hour)
	settleAll(t, s, t0.Add(time.Minute), map[int64]outcome{a.Notifications[0].ID: {status: model.StatusPending, retryAt: retry}})
	due(t0.Add(2*time.Minute), 0, &retry)
	due(retry.Add(time.Second), time.Second, nil)
	settleAll(t, s, retry, map[int64]outcome{a.Notifications[0].ID: {status: model.StatusSent}})
	due(retry.Add(time.Hour), 0, nil)
}

// NextDue is when the next notification not yet due becomes due, even while
// others are due (types.go: "when the next pending notification not yet
// due becomes due").
func testStatusNextDueBesideBacklog(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("acme", "e", 1))[0]
	retry := t0.Add(time.Hour)
	settleAll(t, s, t0, map[int64]outcome{a.Notifications[0].ID: {status: model.StatusPending, retryAt: retry}})
	accept(t, s, t0.Add(time.Second), newEvent("acme", "due", 1))
	st, err := s.Status(t.Context(), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.OldestDue != time.Minute-time.Second || st.NextDue == nil || !st.NextDue.Equal(retry) {
		t.Fatalf("oldest due %s, next due %v; want %s and %s", st.OldestDue, st.NextDue, time.Minute-time.Second, retry)
	}
}

// Status lists the newest notifications whose outcome is unknown, the
// newest failed and the newest dead, at most 20 of each, newest first: each
// needs a person. An empty list is empty, not nil (JSON shows []).
func testStatusNewest(t *testing.T, s store.Store) {
	st, err := s.Status(t.Context(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unknown == nil || st.Failed == nil || st.Dead == nil {
		t.Fatalf("an empty store lists unknown %#v, failed %#v, dead %#v; want empty lists", st.Unknown, st.Failed, st.Dead)
	}
	// 22 of each status, interleaved, and one sent among them.
	statuses := []string{model.StatusUnknown, model.StatusFailed, model.StatusDead}
	a := accept(t, s, t0, newEvent("acme", "e", 67))[0]
	want := map[int64]outcome{}
	for i, id := range ids(a) {
		want[id] = outcome{status: statuses[i%3]}
		if i == 30 {
			want[id] = outcome{status: model.StatusSent}
		}
	}
	settleAll(t, s, t0, want)
	if st, err = s.Status(t.Context(), t0); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		status string
		got    []int64
	}{{model.StatusUnknown, st.Unknown}, {model.StatusFailed, st.Failed}, {model.StatusDead, st.Dead}} {
		var newest []int64
		count := 0
		for _, id := range slices.Backward(ids(a)) {
			if want[id].status == l.status {
				if count++; len(newest) < 20 {
					newest = append(newest, id)
				}
			}
		}
		if !slices.Equal(l.got, newest) || st.Counts[l.status] != int64(count) || count <= 20 {
			t.Fatalf("%s ids %v (count %d), want the 20 newest %v of %d", l.status, l.got, st.Counts[l.status], newest, count)
		}
	}
}

// CreatedSince and UpdatedSince keep the notifications created, or last
// changed, at or after a time, alone and with every other filter, in id
// order across pages. A notification accepted long ago that died lately
// is found by UpdatedSince and not by CreatedSince.
func testListSince(t *testing.T, s store.Store) {
	// Accepted a minute apart; some settled two minutes later still.
	var all []int64
	for i, tenant := range []string{"a", "b", "a"} {
		all = append(all, ids(accept(t, s, t0.Add(time.Duration(i)*time.Minute), newEvent(tenant, fmt.Sprint("e", i), 3))[0])...)
	}
	settled := t0.Add(5 * time.Minute)
	settleAll(t, s, settled, map[int64]outcome{
		all[0]: {status: model.StatusDead}, all[1]: {status: model.StatusSent}, all[2]: {status: model.StatusPending, retryAt: settled.Add(time.Hour)},
		all[3]: {status: model.StatusDead}, all[4]: {status: model.StatusPending, retryAt: settled.Add(time.Hour)},
		all[5]: {status: model.StatusPending, retryAt: settled.Add(time.Hour)},
		all[6]: {status: model.StatusDead}, all[7]: {status: model.StatusPending, retryAt: settled.Add(time.Hour)},
		all[8]: {status: model.StatusPending, retryAt: settled.Add(time.Hour)},
	})
	// One that died is retried a minute later: pending again, changed then.
	retried := settled.Add(time.Minute)
	if err := s.Retry(t.Context(), "", all[3], false, retried); err != nil {
		t.Fatal(err)
	}
	stored := everything(t, s, model.ListFilter{})
	if len(stored) != 9 {
		t.Fatalf("listed %d, want 9", len(stored))
	}
	byID := map[int64]model.Notification{}
	for _, n := range stored {
		byID[n.ID] = n
	}
	if n := byID[all[6]]; !n.CreatedAt.Equal(t0.Add(2*time.Minute)) || !n.UpdatedAt.Equal(settled) || n.Status != model.StatusDead {
		t.Fatalf("notification %d reads created %s, updated %s, %s; want created %s, dead at %s", n.ID, n.CreatedAt, n.UpdatedAt, n.Status,
			t0.Add(2*time.Minute), settled)
	}
	nonEmpty := 0
	for _, created := range []time.Time{{}, t0, t0.Add(time.Minute), t0.Add(90 * time.Second), t0.Add(time.Hour)} {
		for _, updated := range []time.Time{{}, t0, settled, settled.Add(time.Millisecond), retried, retried.Add(time.Millisecond)} {
			for _, tenant := range []string{"", "a"} {
				for _, status := range []string{"", model.StatusDead, model.StatusPending} {
					for _, rcpt := range []string{"", "r0"} {
						f := model.ListFilter{Tenant: tenant, Status: status, Recipient: rcpt, CreatedSince: created, UpdatedSince: updated}
						var want []int64
						for _, n := range stored {
							if (tenant == "" || n.Tenant == tenant) && (status == "" || n.Status == status) && (rcpt == "" || n.Recipient == rcpt) &&
								!n.CreatedAt.Before(created) && !n.UpdatedAt.Before(updated) {
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
	if nonEmpty < 40 {
		t.Fatalf("only %d filters matched anything: the fixture is too thin", nonEmpty)
	}
	// Spot checks that do not go through the model: the old notification
	// that died at settled, the one retried at retried.
	got := everything(t, s, model.ListFilter{Status: model.StatusDead, UpdatedSince: settled, CreatedSince: t0.Add(time.Minute)})
	if len(got) != 1 || got[0].ID != all[6] {
		t.Fatalf("dead since %s, created since %s: %+v; want only %d", settled, t0.Add(time.Minute), got, all[6])
	}
	got = everything(t, s, model.ListFilter{UpdatedSince: retried})
	if len(got) != 1 || got[0].ID != all[3] || got[0].Status != model.StatusPending {
		t.Fatalf("changed since the retry: %+v; want only %d, pending", got, all[3])
	}
}

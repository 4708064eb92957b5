package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// (A receipt that comes before its send is in Dispatch: it needs a send.)
func receipts(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "KeptOncePerProviderAndDedupe", run: testReceiptsKeptOnce},
		{name: "StatusFollowsTheSetInAnyOrder", run: testReceiptsAnyOrder},
		{name: "OnlyTheirProvidersNotification", run: testReceiptsOtherProvider},
		{name: "OnlyASentNotificationMoves", run: testReceiptsOnlySent},
		{name: "AboutOneNotification", run: testReceiptsAboutOne},
		{name: "ClicksCountedPerLink", run: testClicksCounted},
	})
}

// sendOne accepts a one-recipient event and records it sent by provider
// with message id msg, at t0; it must be the only notification due.
func sendOne(t *testing.T, s store.Store, provider, msg string) int64 {
	t.Helper()
	id := accept(t, s, t0, newEvent("acme", "evt_"+provider+"_"+msg, 1))[0].Notifications[0].ID
	settleAll(t, s, t0, map[int64]outcome{id: {status: model.StatusSent, provider: provider, messageID: msg}})
	return id
}

func receipt(provider, msg, status string) model.Receipt {
	return model.Receipt{Provider: provider, Dedupe: msg + "/" + status, MessageID: msg, Status: status}
}

func addReceipts(t *testing.T, s store.Store, now time.Time, rs ...model.Receipt) int {
	t.Helper()
	n, err := s.AddReceipts(t.Context(), rs, now)
	if err != nil {
		t.Fatalf("add receipts: %v", err)
	}
	return n
}

// Providers retry their callbacks: a receipt is kept once per provider and
// dedupe key, within one call or across calls, and AddReceipts counts the
// new ones. The audit trail shows each once.
func testReceiptsKeptOnce(t *testing.T, s store.Store) {
	id := sendOne(t, s, "twilio", "m")
	at := t0.Add(time.Second)
	sent, delivered := receipt("twilio", "m", "sent"), receipt("twilio", "m", "delivered")
	delivered.Detail, delivered.At = "handset", &at
	if n := addReceipts(t, s, at, sent, delivered, sent); n != 2 {
		t.Fatalf("added %d of sent, delivered, sent; want 2", n)
	}
	if n := addReceipts(t, s, at.Add(time.Second), delivered, sent); n != 0 {
		t.Fatalf("a replay added %d, want 0", n)
	}
	// The same dedupe key from another provider is another receipt.
	other := delivered
	other.Provider = "fcm"
	if n := addReceipts(t, s, at, other); n != 1 {
		t.Fatalf("another provider's receipt added %d, want 1", n)
	}
	n := notification(t, s, id)
	if n.Status != model.StatusDelivered || len(n.Receipts) != 2 {
		t.Fatalf("notification %s with receipts %+v; want delivered with 2", n.Status, n.Receipts)
	}
	for _, r := range n.Receipts {
		if r.Provider != "twilio" || r.MessageID != "m" || !r.ReceivedAt.Equal(at) {
			t.Fatalf("receipt %+v", r)
		}
		if r.Status == "delivered" && (r.Detail != "handset" || r.At == nil || !r.At.Equal(at)) {
			t.Fatalf("delivered receipt kept as %+v", r)
		}
	}
}

// The notification's status is a function of the set of its receipts,
// whatever order they come in: bounced (bounced, failed) over delivered
// (delivered, complained) over sent.
func testReceiptsAnyOrder(t *testing.T, s store.Store) {
	cases := []struct {
		set  []string
		want string
	}{
		{[]string{"sent"}, model.StatusSent},
		{[]string{"sent", "delivered"}, model.StatusDelivered},
		{[]string{"complained"}, model.StatusDelivered},
		{[]string{"failed"}, model.StatusBounced},
		{[]string{"sent", "bounced"}, model.StatusBounced},
		{[]string{"delivered", "bounced"}, model.StatusBounced},
		{[]string{"sent", "delivered", "bounced"}, model.StatusBounced},
		{[]string{"sent", "complained", "failed"}, model.StatusBounced},
		{[]string{"delivered", "complained", "sent"}, model.StatusDelivered},
	}
	type run struct {
		order []string
		want  string
		id    int64
	}
	var runs []run
	for _, c := range cases {
		for _, order := range permutations(c.set) {
			runs = append(runs, run{order: order, want: c.want})
		}
	}
	// One notification per order, all sent at once.
	a := accept(t, s, t0, newEvent("acme", "e", len(runs)))[0]
	sends := map[int64]outcome{}
	for i, id := range ids(a) {
		runs[i].id = id
		sends[id] = outcome{status: model.StatusSent, provider: "twilio", messageID: fmt.Sprint("m", i)}
	}
	settleAll(t, s, t0, sends)
	for i, r := range runs {
		for j, status := range r.order {
			addReceipts(t, s, t0.Add(time.Duration(j)*time.Second), receipt("twilio", fmt.Sprint("m", i), status))
		}
	}
	for _, r := range runs {
		if got := notification(t, s, r.id).Status; got != r.want {
			t.Errorf("receipts %v: %s, want %s", r.order, got, r.want)
		}
	}
}

func permutations(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{append([]string(nil), xs...)}
	}
	var out [][]string
	for i := range xs {
		rest := append(append([]string(nil), xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{xs[i]}, p...))
		}
	}
	return out
}

// A receipt moves only the notification its provider sent under that
// message id; one about a message nobody sent is kept and moves nothing.
func testReceiptsOtherProvider(t *testing.T, s store.Store) {
	fcm := sendOne(t, s, "fcm", "m2")
	if n := addReceipts(t, s, t0, receipt("twilio", "m2", "bounced"), receipt("twilio", "nobody", "delivered")); n != 2 {
		t.Fatalf("added %d, want 2", n)
	}
	n := notification(t, s, fcm)
	if n.Status != model.StatusSent || len(n.Receipts) != 0 {
		t.Fatalf("another provider's receipt left it %s with receipts %+v", n.Status, n.Receipts)
	}
}

// Receipts move a notification only once it is sent: one the dispatcher
// still owns (to retry, in flight, unknown) keeps its state even when an
// attempt left a message id, so the relay's decisions stay the relay's.
func testReceiptsOnlySent(t *testing.T, s store.Store) {
	a := ids(accept(t, s, t0, newEvent("acme", "e", 2))[0])
	retry := t0.Add(time.Minute)
	settleAll(t, s, t0, map[int64]outcome{
		a[0]: {status: model.StatusPending, messageID: "m0", retryAt: retry},
		a[1]: {status: model.StatusUnknown, messageID: "m1"},
	})
	addReceipts(t, s, t0, receipt("p", "m0", "delivered"), receipt("p", "m1", "bounced"))
	if n := notification(t, s, a[0]); n.Status != model.StatusPending || n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(retry) {
		t.Fatalf("a receipt moved a notification to retry: %s, next %v", n.Status, n.NextAttemptAt)
	}
	if n := notification(t, s, a[1]); n.Status != model.StatusUnknown {
		t.Fatalf("a receipt moved an unknown notification to %s", n.Status)
	}
	settleAll(t, s, retry, map[int64]outcome{a[0]: {status: model.StatusSending}})
	addReceipts(t, s, retry, receipt("p", "m0", "bounced"))
	if n := notification(t, s, a[0]); n.Status != model.StatusSending {
		t.Fatalf("a receipt moved a claimed notification to %s", n.Status)
	}
}

// A receipt is about one notification. Two that a provider's servers
// numbered alike (a per-recipient webhook's customers, both answering
// "1"), here of two tenants, are neither's when the receipt names only the
// message id; a receipt that names its notification moves, suppresses and
// is shown with that one alone.
func testReceiptsAboutOne(t *testing.T, s store.Store) {
	a := accept(t, s, t0, newEvent("acme", "e1", 1))[0].Notifications[0].ID
	b := accept(t, s, t0, newEvent("beta", "e1", 1))[0].Notifications[0].ID
	settleAll(t, s, t0, map[int64]outcome{a: {status: model.StatusSent, messageID: "1"}, b: {status: model.StatusSent, messageID: "1"}})
	hard := func(r model.Receipt, about int64) model.Receipt {
		r.Suppress, r.Notification = &model.Suppress{Reason: model.ReasonHardBounce}, about
		return r
	}
	if n := addReceipts(t, s, t0, hard(receipt("p", "1", "bounced"), 0)); n != 1 {
		t.Fatalf("added %d, want 1", n)
	}
	suppressed := func() []string {
		t.Helper()
		es, err := s.Suppressions(t.Context(), model.SuppressionFilter{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Tenant)
		}
		return out
	}
	for _, id := range []int64{a, b} {
		if n := notification(t, s, id); n.Status != model.StatusSent || len(n.Receipts) != 0 {
			t.Fatalf("a receipt naming a message id two notifications have left %d %s with receipts %+v; want sent with none", id, n.Status, n.Receipts)
		}
	}
	if got := suppressed(); len(got) != 0 {
		t.Fatalf("a receipt naming a message id two notifications have suppressed %v", got)
	}
	bound := hard(receipt("p", "1", "bounced"), b)
	bound.Dedupe = "beta's"
	addReceipts(t, s, t0, bound)
	if n := notification(t, s, b); n.Status != model.StatusBounced || len(n.Receipts) != 1 {
		t.Fatalf("the receipt naming it left %d %s with receipts %+v; want bounced with one", b, n.Status, n.Receipts)
	}
	if n := notification(t, s, a); n.Status != model.StatusSent || len(n.Receipts) != 0 {
		t.Fatalf("another's receipt left %d %s with receipts %+v; want sent with none", a, n.Status, n.Receipts)
	}
	if got := suppressed(); len(got) != 1 || got[0] != "beta" {
		t.Fatalf("suppressed %v, want beta's address alone", got)
	}
}

// A click on a tracked link is counted per notification and link, and
// listed with the notification, first clicked first; a key another tenant
// has, or none has, is ErrNotFound and records nothing; a pruned
// notification's clicks go with it.
func testClicksCounted(t *testing.T, s store.Store) {
	ctx := t.Context()
	ns := accept(t, s, t0, newEvent("acme", "e", 2))[0].Notifications
	n, err := s.Notification(ctx, "acme", ns[0].ID, "")
	if err != nil {
		t.Fatal(err)
	}
	click := func(tenant, key, link string, at time.Time) (int64, error) {
		return s.RecordClick(ctx, tenant, key, link, at)
	}
	for i, c := range []struct {
		link string
		at   time.Time
	}{{"https://a.example/pay", t0.Add(2 * time.Second)}, {"https://a.example/help", t0.Add(time.Second)}, {"https://a.example/pay", t0.Add(3 * time.Second)}} {
		if id, err := click("acme", n.Key, c.link, c.at); err != nil || id != n.ID {
			t.Fatalf("click %d = %d, %v; want notification %d", i, id, err, n.ID)
		}
	}
	for _, tenant := range []string{"bravo", ""} {
		if _, err := click(tenant, n.Key, "https://a.example/pay", t0); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("a click naming tenant %q = %v; want ErrNotFound", tenant, err)
		}
	}
	if _, err := click("acme", "no-such-key", "https://a.example/pay", t0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a click naming no notification = %v; want ErrNotFound", err)
	}
	got := notification(t, s, n.ID).Clicks
	want := []model.Click{{URL: "https://a.example/help", Count: 1, First: t0.Add(time.Second), Last: t0.Add(time.Second)},
		{URL: "https://a.example/pay", Count: 2, First: t0.Add(2 * time.Second), Last: t0.Add(3 * time.Second)}}
	if len(got) != len(want) {
		t.Fatalf("clicks %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i].URL != want[i].URL || got[i].Count != want[i].Count || !got[i].First.Equal(want[i].First) || !got[i].Last.Equal(want[i].Last) {
			t.Fatalf("clicks %+v; want %+v", got, want)
		}
	}
	if other := notification(t, s, ns[1].ID).Clicks; len(other) != 0 {
		t.Fatalf("the other notification's clicks %+v; want none", other)
	}
	settleAll(t, s, t0, map[int64]outcome{ns[0].ID: {status: model.StatusSent}, ns[1].ID: {status: model.StatusSent}})
	if res, err := s.Prune(ctx, t0.Add(time.Hour), t0.Add(2*time.Hour), 500); err != nil || res.Notifications != 2 {
		t.Fatalf("prune = %+v, %v; want both notifications", res, err)
	}
	if _, err := click("acme", n.Key, "https://a.example/pay", t0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a click on a pruned notification = %v; want ErrNotFound", err)
	}
}

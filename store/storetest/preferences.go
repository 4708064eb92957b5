package storetest

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Preferences: what recipients set, tenant keys, throttle slots and the
// skipped status.
func preferences(t *testing.T, open opener) {
	runAll(t, open, []test{
		{"PutPreferencesKeepsSetAtOfWhatDidNotChange", testPutPreferences, false},
		{"PreferencesArePerTenant", testPreferencesPerTenant, false},
		{"SetSwitchIsIdempotent", testSetSwitchIdempotent, false},
		{"TenantKeyIsMadeOnceAndNeverOnVerify", testTenantKey, false},
		{"ThrottleGrantsAtMostMaxPerWindowAndKeepsASlot", testThrottleSlots, false},
		{"ThrottleCountsExactlyUnderConcurrentTakes", testThrottleConcurrent, false},
		{"SkippedIsFinalAndCycleStartMoves", testSkippedAndCycleStart, false},
		{"FoldPostsOneItemWithTheSettlementThatApplies", testFoldPostsOnce, false},
		{"FoldBatchNumbersAsOneByOneInOrder", testFoldBatchNumbering, false},
		{"FoldsAtOnceNumberEachItemOnce", testFoldConcurrent, false},
	})
}

func testPutPreferences(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := model.RecipientPreferences{Tenant: "acme", Recipient: "u1", TimeZone: "Europe/Berlin",
		Switches: []model.Switch{{Category: "marketing", Channel: "", Enabled: false}, {Category: "billing", Channel: "sms", Enabled: true}},
		Quiet:    []model.QuietHours{{Category: "", Start: 21 * 60, End: 8 * 60}}}
	got, err := s.PutPreferences(ctx, p, model.SetByAPI, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.TimeZone != "Europe/Berlin" || len(got.Switches) != 2 || len(got.Quiet) != 1 ||
		got.Switches[0].Category != "billing" || !got.Switches[0].SetAt.Equal(t0) || got.Switches[0].SetBy != model.SetByAPI {
		t.Fatalf("put: %+v", got)
	}
	// Again an hour later, one switch flipped and the quiet hours gone:
	// only the flipped one is set anew; what is left out is removed.
	later := t0.Add(time.Hour)
	p.Switches[0].Enabled = true
	p.Quiet = nil
	got, err = s.PutPreferences(ctx, p, model.SetByPage, later)
	if err != nil {
		t.Fatal(err)
	}
	byCat := map[string]model.Switch{}
	for _, sw := range got.Switches {
		byCat[sw.Category] = sw
	}
	if m := byCat["marketing"]; !m.Enabled || !m.SetAt.Equal(later) || m.SetBy != model.SetByPage {
		t.Fatalf("flipped switch %+v, want on, set at %s by page", m, later)
	}
	if b := byCat["billing"]; !b.SetAt.Equal(t0) || b.SetBy != model.SetByAPI {
		t.Fatalf("unchanged switch %+v kept no set_at %s", b, t0)
	}
	if len(got.Quiet) != 0 || !got.ZoneSetAt.Equal(t0) {
		t.Fatalf("quiet %+v zone set %s", got.Quiet, got.ZoneSetAt)
	}
	read, err := s.RecipientPreferences(ctx, "acme", []string{"u1", "u2", "u1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := read["u2"]; ok || len(read) != 1 || len(read["u1"].Switches) != 2 {
		t.Fatalf("read %+v", read)
	}
	// Everything left out: back to the defaults, nothing stored.
	if _, err := s.PutPreferences(ctx, model.RecipientPreferences{Tenant: "acme", Recipient: "u1"}, model.SetByAPI, later); err != nil {
		t.Fatal(err)
	}
	if read, _ := s.RecipientPreferences(ctx, "acme", []string{"u1"}); len(read) != 0 {
		t.Fatalf("after clearing: %+v", read)
	}
}

func testPreferencesPerTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.PutPreferences(ctx, model.RecipientPreferences{Tenant: "acme", Recipient: "u1",
		Switches: []model.Switch{{Category: "marketing", Enabled: false}}}, model.SetByAPI, t0); err != nil {
		t.Fatal(err)
	}
	if read, err := s.RecipientPreferences(ctx, "globex", []string{"u1"}); err != nil || len(read) != 0 {
		t.Fatalf("globex's u1 read %+v, %v: acme's preferences leaked", read, err)
	}
}

func testSetSwitchIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	sw := model.Switch{Category: "marketing", Channel: "email", Enabled: false, SetBy: model.SetByUnsubscribe}
	got, changed, err := s.SetSwitch(ctx, "acme", "u1", sw, t0)
	if err != nil || !changed || got.Enabled || !got.SetAt.Equal(t0) {
		t.Fatalf("first: %+v changed %v, %v", got, changed, err)
	}
	got, changed, err = s.SetSwitch(ctx, "acme", "u1", sw, t0.Add(time.Hour))
	if err != nil || changed || !got.SetAt.Equal(t0) {
		t.Fatalf("repeat: %+v changed %v, %v; want unchanged, set at %s", got, changed, err, t0)
	}
}

func testTenantKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.TenantKey(ctx, "acme", nil, t0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("no key, nil fresh: %v, want ErrNotFound", err)
	}
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	got, err := s.TenantKey(ctx, "acme", k1, t0)
	if err != nil || !bytes.Equal(got, k1) {
		t.Fatalf("first key %x, %v", got, err)
	}
	if got, err := s.TenantKey(ctx, "acme", k2, t0); err != nil || !bytes.Equal(got, k1) {
		t.Fatalf("second fresh key replaced the first: %x, %v", got, err)
	}
	if got, err := s.TenantKey(ctx, "globex", k2, t0); err != nil || !bytes.Equal(got, k2) {
		t.Fatalf("globex's key %x, %v", got, err)
	}
}

func testThrottleSlots(t *testing.T, s store.Store) {
	ctx := t.Context()
	take := func(n int64, now time.Time) bool {
		t.Helper()
		g, err := s.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: n, Tenant: "acme", Recipient: "u1", Category: "marketing",
			Max: 2, Per: time.Hour}}, now)
		if err != nil {
			t.Fatal(err)
		}
		return g[0]
	}
	if !take(1, t0) || !take(2, t0) {
		t.Fatal("the first two of a window of 2 were not granted")
	}
	if take(3, t0) {
		t.Fatal("a third in the window was granted")
	}
	if !take(1, t0.Add(time.Minute)) {
		t.Fatal("a notification holding a slot was refused it again (a retry)")
	}
	// Another recipient, another window.
	g, err := s.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: 4, Tenant: "acme", Recipient: "u2", Category: "marketing",
		Max: 2, Per: time.Hour}}, t0)
	if err != nil || !g[0] {
		t.Fatalf("u2's first: %v, %v", g, err)
	}
	if !take(5, t0.Add(time.Hour+time.Second)) {
		t.Fatal("a take after the window moved on was refused")
	}
	// A slot is kept while its window counts it, whatever prune's age: a
	// weekly throttle's slot outlives a prune of everything a day old.
	week := func(n int64, now time.Time) bool {
		t.Helper()
		g, err := s.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: n, Tenant: "acme", Recipient: "u3", Category: "digest",
			Max: 1, Per: 7 * 24 * time.Hour}}, now)
		if err != nil {
			t.Fatal(err)
		}
		return g[0]
	}
	if !week(6, t0) {
		t.Fatal("u3's first weekly slot was refused")
	}
	day := t0.Add(25 * time.Hour)
	if _, err := s.Prune(ctx, day.Add(-24*time.Hour), day, 100); err != nil {
		t.Fatal(err)
	}
	if week(7, day) {
		t.Fatal("after a prune of a day's age, a second weekly slot was granted: the first was pruned while it still counted")
	}
	if _, err := s.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: 8, Tenant: "acme", Recipient: "u3", Category: "x", Max: 1}}, t0); err == nil {
		t.Error("a take with no window was granted or refused; want an error")
	}
}

func testThrottleConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for i := range 20 {
		wg.Go(func() {
			g, err := s.TakeThrottleSlots(ctx, []model.ThrottleTake{{Notification: int64(100 + i), Tenant: "acme", Recipient: "u1",
				Category: "marketing", Max: 3, Per: time.Hour}}, t0)
			if err != nil {
				t.Error(err)
				return
			}
			if g[0] {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 3 {
		t.Fatalf("%d of 20 concurrent takes granted, want exactly 3", granted)
	}
}

func testSkippedAndCycleStart(t *testing.T, s store.Store) {
	ctx := t.Context()
	n := ids(accept(t, s, t0, newEvent("acme", "e", 2))[0])
	cs := claim(t, s, model.ClaimRequest{Limit: 2, Now: t0, Lease: time.Minute})
	if len(cs) != 2 {
		t.Fatalf("claimed %d", len(cs))
	}
	open := t0.Add(9 * time.Hour)
	var ss []model.Settlement
	for _, c := range cs {
		d := model.Decision{Status: model.StatusSkipped, Reason: "recipient turned marketing off", NextAttemptAt: t0}
		if c.ID == n[1] {
			d = model.Decision{Status: model.StatusPending, Reason: "waiting, not an attempt: quiet hours", NextAttemptAt: open, CycleStartsAt: open}
		}
		ss = append(ss, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Decision: d})
	}
	if applied, err := s.Settle(ctx, ss); err != nil || !applied[0] || !applied[1] {
		t.Fatalf("settle %v, %v", applied, err)
	}
	st, err := s.Status(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[model.StatusSkipped] != 1 {
		t.Fatalf("status counts %v, want 1 skipped", st.Counts)
	}
	if got := claim(t, s, model.ClaimRequest{Limit: 2, Now: open.Add(-time.Second), Lease: time.Minute}); len(got) != 0 {
		t.Fatalf("claimed %d before the quiet hours end", len(got))
	}
	got := claim(t, s, model.ClaimRequest{Limit: 2, Now: open, Lease: time.Minute})
	if len(got) != 1 || got[0].ID != n[1] || !got[0].CycleStartedAt.Equal(open) || got[0].Attempt != 1 {
		t.Fatalf("claimed %+v at %s, want %d with its cycle started then, attempt 1", got, open, n[1])
	}
}

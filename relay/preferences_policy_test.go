package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// The preference part of the delivery policy, as a table: each
// row is a guarantee, the situation it speaks of, and what must follow.
// decide is the same function TestPolicy holds to the rest.
func TestPolicyPreferences(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 23:00 in Berlin (CET, UTC+1); the quiet hours end at 08:00 there.
	now := time.Date(2026, 3, 1, 22, 0, 0, 0, time.UTC)
	eight := time.Date(2026, 3, 2, 8, 0, 0, 0, berlin)
	set := now.Add(-24 * time.Hour)
	pol := Policy{MaxAttempts: 3, MaxAge: time.Hour, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	fresh := model.Claimed{ID: 1, Type: "newsletter", Recipient: "u1", Attempt: 1, CycleAttempts: 1, CycleStartedAt: now, Channel: "email"}
	marketing := prefInputs{category: "marketing", cat: Category{}, loc: time.UTC}
	base := situation{c: fresh, mode: AtLeastOnce, pol: pol, routeLen: 1, provider: "p", leaseLeft: time.Minute, now: now, pref: marketing}
	with := func(f func(*situation)) situation { s := base; f(&s); return s }
	off := func(channel string) model.Switch {
		return model.Switch{Category: "marketing", Channel: channel, Enabled: false, SetAt: set, SetBy: model.SetByPage}
	}
	on := func(channel string) model.Switch {
		return model.Switch{Category: "marketing", Channel: channel, Enabled: true, SetAt: set, SetBy: model.SetByAPI}
	}
	quiet := []model.QuietHours{{Category: "", Start: 21 * 60, End: 8 * 60, SetAt: set, SetBy: model.SetByPage}}

	type want struct {
		call   bool
		status string
		next   time.Time // when pending
		cycle  time.Time // the new cycle start, if any
		reason string
		fold   string // the feed its message is folded into, if any
	}
	rows := []struct {
		guarantee string
		s         situation
		want      want
	}{
		{"a type without a category is called: no preference applies",
			with(func(s *situation) { s.pref = prefInputs{} }), want{call: true}},
		{"an optional category the recipient left alone is on by default",
			base, want{call: true}},
		{"a category the recipient turned off on every channel is skipped, not called, naming the switch and when it was set",
			with(func(s *situation) { s.pref.stored.Switches = []model.Switch{off("")} }),
			want{status: model.StatusSkipped, reason: `turned category "marketing" off on every channel (set 2026-02-28T22:00:00Z by page)`}},
		{"a category turned off on this channel is skipped",
			with(func(s *situation) { s.pref.stored.Switches = []model.Switch{off("email")} }),
			want{status: model.StatusSkipped, reason: "off on channel email"}},
		{"a category turned off on another channel still goes out on this one",
			with(func(s *situation) { s.pref.stored.Switches = []model.Switch{off("sms")} }), want{call: true}},
		{"the channel's own switch wins over the category's on every channel",
			with(func(s *situation) { s.pref.stored.Switches = []model.Switch{off(""), on("email")} }), want{call: true}},
		{"a category off by default is skipped until the recipient turns it on",
			with(func(s *situation) { s.pref.cat.Off = true }),
			want{status: model.StatusSkipped, reason: "off unless the recipient turns it on"}},
		{"a category off by default that the recipient turned on goes out",
			with(func(s *situation) { s.pref.cat.Off = true; s.pref.stored.Switches = []model.Switch{on("")} }), want{call: true}},
		{"a required category is never skipped and ignores quiet hours and throttles",
			with(func(s *situation) {
				s.pref.cat = Category{Required: true, Throttle: Throttle{Max: 1, Per: time.Hour}}
				s.pref.stored.Switches, s.pref.stored.Quiet, s.pref.loc, s.pref.throttled = []model.Switch{off("")}, quiet, berlin, true
			}), want{call: true}},
		{"preferences that cannot be read make it wait, not an attempt: sending could reach someone who opted out",
			with(func(s *situation) { s.pref.err = "disk I/O error" }),
			want{status: model.StatusPending, next: now.Add(time.Second), reason: "not an attempt: the recipient's preferences cannot be applied: disk I/O error"}},
		{"a throttle slot the store could not take makes it wait too: a throttle never lets one through uncounted",
			with(func(s *situation) {
				s.pref.cat.Throttle = Throttle{Max: 3, Per: time.Hour}
				s.pref.err = "its throttle's slot could not be taken: database is locked"
			}),
			want{status: model.StatusPending, next: now.Add(time.Second), reason: "slot could not be taken"}},
		{"an opt-out made after an attempt stops the retry, and says an unknown one may have arrived",
			with(func(s *situation) {
				s.c.Attempt, s.c.Pinned = 2, true
				s.pref.stored.Switches = []model.Switch{off("")}
			}),
			want{status: model.StatusSkipped, reason: "after 1 earlier attempts; the last one's outcome was unknown"}},
		{"a skip needs no route: a recipient who opted out is not kept waiting for one",
			with(func(s *situation) { s.routeLen = 0; s.pref.stored.Switches = []model.Switch{off("")} }),
			want{status: model.StatusSkipped}},
		{"in the recipient's quiet hours (23:00 in Europe/Berlin) it waits until they end at 08:00 there, its budget counted from then",
			with(func(s *situation) { s.pref.stored.Quiet, s.pref.loc = quiet, berlin }),
			want{status: model.StatusPending, next: eight, cycle: eight, reason: "quiet hours 21:00-08:00 in Europe/Berlin"}},
		{"the same hour in UTC is outside the window: it goes out",
			with(func(s *situation) {
				s.pref.stored.Quiet = []model.QuietHours{{Category: "marketing", Start: 23*60 + 30, End: 6 * 60}}
			}), want{call: true}},
		{"the category's default quiet hours hold a recipient who set none",
			with(func(s *situation) { s.pref.cat.Quiet = &QuietWindow{21 * 60, 8 * 60}; s.pref.loc = berlin }),
			want{status: model.StatusPending, next: eight, cycle: eight, reason: "category \"marketing\"'s default"}},
		{"the recipient's quiet hours for the category win over theirs for every category",
			with(func(s *situation) {
				s.pref.loc = berlin
				s.pref.stored.Quiet = append([]model.QuietHours{{Category: "marketing", Start: 6 * 60, End: 7 * 60}}, quiet...)
			}), want{call: true}},
		{"quiet hours never hold a retry: one already called goes on",
			with(func(s *situation) { s.c.Attempt = 2; s.pref.stored.Quiet, s.pref.loc = quiet, berlin }), want{call: true}},
		{"over the category's throttle it is skipped (throttled), not called",
			with(func(s *situation) {
				s.pref.cat.Throttle = Throttle{Max: 3, Per: 24 * time.Hour}
				s.pref.throttled = true
			}),
			want{status: model.StatusSkipped, reason: "skipped (throttled)"}},
		{"over a throttle whose excess folds into a digest that carries the recipient: skipped (throttled), its message folded into their feed with the same decision",
			with(func(s *situation) {
				s.pref.cat.Throttle = Throttle{Max: 2, Per: 24 * time.Hour, Digest: &FoldDigest{Job: "weekly", Tenant: "default", Audience: "all", Channel: "email"}}
				s.pref.throttled = true
			}),
			want{status: model.StatusSkipped, reason: `skipped (throttled), folded into digest weekly: its next run carries it; recipient u1 already got 2 of category "marketing"`, fold: "@u1"}},
		{"over a throttle whose digest would not carry the recipient: skipped (throttled) saying why, nothing folded",
			with(func(s *situation) {
				s.pref.cat.Throttle = Throttle{Max: 2, Per: 24 * time.Hour, Digest: &FoldDigest{Job: "weekly", Tenant: "default", Audience: "all", Channel: "email"}}
				s.pref.throttled, s.pref.unfoldable = true, `recipient u1 is not in digest weekly's audience "all"`
			}),
			want{status: model.StatusSkipped, reason: `skipped (throttled), not sent and not folded into digest weekly (recipient u1 is not in digest weekly's audience "all")`}},
		{"a digest audience that cannot be read makes it wait: neither folded into a digest that may not carry it nor skipped for good",
			with(func(s *situation) {
				s.pref.cat.Throttle = Throttle{Max: 2, Per: 24 * time.Hour, Digest: &FoldDigest{Job: "weekly", Tenant: "default", Audience: "all", Channel: "email"}}
				s.pref.throttled, s.pref.err = true, `the audience "all" of digest weekly could not be read: disk I/O error`
			}),
			want{status: model.StatusPending, next: now.Add(time.Second), reason: "could not be read"}},
	}
	for _, row := range rows {
		v := decide(row.s, func(time.Duration) time.Duration { return 0 })
		w := row.want
		if v.call != w.call {
			t.Errorf("%s: call %v (%s: %s), want %v", row.guarantee, v.call, v.Status, v.Reason, w.call)
			continue
		}
		if w.call {
			continue
		}
		if v.Status != w.status || !strings.Contains(v.Reason, w.reason) {
			t.Errorf("%s: %s (%q), want %s with %q", row.guarantee, v.Status, v.Reason, w.status, w.reason)
		}
		if w.status == model.StatusPending && !v.NextAttemptAt.Equal(w.next) {
			t.Errorf("%s: next attempt at %s, want %s", row.guarantee, v.NextAttemptAt, w.next)
		}
		if got := v.Fold; (got == nil) != (w.fold == "") || got != nil && got.Feed != w.fold {
			t.Errorf("%s: fold %+v, want into %q", row.guarantee, got, w.fold)
		}
		if !v.CycleStartsAt.Equal(w.cycle) {
			t.Errorf("%s: cycle starts at %s, want %s", row.guarantee, v.CycleStartsAt, w.cycle)
		}
	}
}

// needsSlot asks for a throttle's slot only where one applies.
func TestNeedsSlot(t *testing.T) {
	t.Parallel()
	th := Throttle{Max: 1, Per: time.Hour}
	for _, row := range []struct {
		p    prefInputs
		want bool
	}{
		{prefInputs{}, false},
		{prefInputs{category: "m"}, false},
		{prefInputs{category: "m", cat: Category{Throttle: th}}, true},
		{prefInputs{category: "m", cat: Category{Throttle: th, Required: true}}, false},
		{prefInputs{category: "m", cat: Category{Throttle: th}, throttled: true}, false},
		{prefInputs{category: "m", cat: Category{Throttle: th}, err: "x"}, false},
	} {
		if got := needsSlot(situation{pref: row.p}); got != row.want {
			t.Errorf("%+v: needsSlot %v, want %v", row.p, got, row.want)
		}
	}
}

// quietEnd reads the window on the recipient's wall clock, across
// midnight and across a DST change.
func TestQuietEnd(t *testing.T) {
	t.Parallel()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	w := QuietWindow{21 * 60, 8 * 60}
	for _, row := range []struct {
		now  time.Time
		in   bool
		ends time.Time
	}{
		{time.Date(2026, 3, 1, 23, 0, 0, 0, berlin), true, time.Date(2026, 3, 2, 8, 0, 0, 0, berlin)},
		{time.Date(2026, 3, 2, 3, 0, 0, 0, berlin), true, time.Date(2026, 3, 2, 8, 0, 0, 0, berlin)},
		{time.Date(2026, 3, 2, 8, 0, 0, 0, berlin), false, time.Time{}},
		{time.Date(2026, 3, 2, 20, 59, 0, 0, berlin), false, time.Time{}},
		// The night clocks go forward (29 March 2026): 08:00 CEST is 06:00 UTC.
		{time.Date(2026, 3, 28, 22, 0, 0, 0, berlin), true, time.Date(2026, 3, 29, 6, 0, 0, 0, time.UTC)},
	} {
		end, in := quietEnd(row.now, berlin, w)
		if in != row.in || !end.Equal(row.ends) {
			t.Errorf("%s: in %v until %s, want %v until %s", row.now, in, end, row.in, row.ends)
		}
	}
	day := QuietWindow{9 * 60, 17 * 60}
	if _, in := quietEnd(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), time.UTC, day); !in {
		t.Error("12:00 is not in 09:00–17:00")
	}
}

// unfoldable says why a digest would not carry a throttled notification,
// reading the digest's audience as it is stored; "" when it would.
func TestUnfoldable(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := t.Context()
	if err := r.PutAudience(ctx, "default", "team", []Recipient{{ID: "ada", Email: "ada@example.com"}, {ID: "ben", Phone: "+15550100"}}); err != nil {
		t.Fatal(err)
	}
	dg := FoldDigest{Job: "weekly", Tenant: "default", Audience: "team", Channel: "email"}
	for _, row := range []struct {
		c    model.Claimed
		dg   FoldDigest
		want string
	}{
		{model.Claimed{Tenant: "default", Recipient: "ada"}, dg, ""},
		{model.Claimed{Tenant: "default", Recipient: "bob"}, dg, `recipient bob is not in digest weekly's audience "team"`},
		{model.Claimed{Tenant: "default", Recipient: "ben"}, dg, `recipient ben has no email address in digest weekly's audience "team"`},
		{model.Claimed{Tenant: "acme", Recipient: "ada"}, dg, "digest weekly is tenant default's, not acme's"},
		{model.Claimed{Tenant: "default", Recipient: "ada"}, FoldDigest{Job: "w2", Tenant: "default", Audience: "nobody", Channel: "email"},
			`digest w2's audience "nobody" does not exist`},
		{model.Claimed{Tenant: "default", Recipient: "ada"}, FoldDigest{Job: "w3", Tenant: "default", Audience: "no such name!", Channel: "email"},
			`digest w3's audience "no such name!" cannot exist`},
	} {
		got, err := r.unfoldable(ctx, row.c, row.dg)
		if err != nil || !strings.HasPrefix(got, row.want) || (row.want == "") != (got == "") {
			t.Errorf("%s of %s into %s: %q, %v; want %q", row.c.Recipient, row.c.Tenant, row.dg.Job, got, err, row.want)
		}
	}
}

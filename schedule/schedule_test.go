package schedule

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustParse(t *testing.T, spec, tz string) *Schedule {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParse(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "30 0 9 * * MON", "Europe/Berlin")           // with seconds
	next := s.Next(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) // a Sunday
	if next.UTC().Format(time.RFC3339) != "2026-11-30T08:00:30Z" {
		t.Fatalf("next = %v", next.UTC())
	}
	for _, bad := range [][2]string{{"61 * * * *", ""}, {"* * *", ""}, {"@daily", "Mars/Olympus"}, {"TZ=UTC @daily", ""},
		{"@every 0s", ""}, {"@every 1500ms", ""}, {"@every soon", ""}, {"@every -1h", ""}} {
		if _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("Parse(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// Prev is the latest scheduled time at or before t, for every kind of
// schedule, across DST changes: p <= t, p is a scheduled time, and the
// next one after p is after t (none is in between).
func TestPrevIsTheLatestDueTime(t *testing.T) {
	t.Parallel()
	specs := [][2]string{
		{"* * * * * *", ""}, {"*/7 * * * *", ""}, {"0 2 * * *", ""}, {"30 0 9 * * MON", "Europe/Berlin"},
		{"30 2 * * *", "Europe/Berlin"}, {"0 3 * * *", "America/New_York"}, {"0 0 1 1 *", ""}, {"0 0 29 2 *", ""},
		{"@daily", "Asia/Kolkata"}, {"@every 1h", ""}, {"@every 7m", "Europe/Berlin"}, {"@every 36h", ""},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	// Around the 2026 DST changes, and anywhere in eight years.
	var times []time.Time
	for _, dst := range []time.Time{time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)} {
		for d := -3 * time.Hour; d <= 3*time.Hour; d += 13 * time.Minute {
			times = append(times, dst.Add(d))
		}
	}
	for range 100 {
		times = append(times, base.Add(time.Duration(rng.Int64N(int64(8*365*24*time.Hour)))))
	}
	for _, sp := range specs {
		s := mustParse(t, sp[0], sp[1])
		for _, at := range times {
			at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			p, ok := s.Prev(at)
			if !ok {
				t.Fatalf("%s: no Prev(%v)", s, at)
			}
			if p.After(at) || !s.Next(p.Add(-time.Second)).Equal(p) || !s.Next(p).After(at) {
				t.Fatalf("%s: Prev(%v) = %v: not the latest scheduled time at or before it (next after it %v)", s, at, p, s.Next(p))
			}
			if next := p.Add(time.Second); !s.On(p) || s.On(next) != s.Next(p).Equal(next) {
				t.Fatalf("%s: On(%v) wrong", s, p)
			}
		}
	}
	// A time on the schedule is its own Prev.
	s := mustParse(t, "0 2 * * *", "")
	if p, _ := s.Prev(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)); !p.Equal(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)) {
		t.Fatalf("Prev of a scheduled time = %v", p)
	}
	if s.On(time.Date(2026, 11, 30, 2, 0, 0, 500, time.UTC)) {
		t.Fatal("a time between seconds is on the schedule")
	}
}

// counting counts calls of Next.
type counting struct {
	cron.Schedule
	n int
}

func (c *counting) Next(t time.Time) time.Time { c.n++; return c.Schedule.Next(t) }

// Prev costs a few dozen calls of Next whether the schedule fires every
// second or once a year, and gives up on one that never fires.
func TestPrevIsCheap(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 22, 45, 0, time.UTC)
	for _, tc := range []struct {
		spec string
		ok   bool
	}{{"* * * * * *", true}, {"0 0 1 1 *", true}, {"0 0 29 2 *", true}, {"0 0 30 2 *", false}} {
		s := mustParse(t, tc.spec, "")
		c := &counting{Schedule: s.cron}
		s.cron = c
		start := time.Now()
		_, ok := s.Prev(at)
		took := time.Since(start)
		t.Logf("%s: %d calls of Next, %s", tc.spec, c.n, took)
		if ok != tc.ok || c.n > 70 {
			t.Errorf("%s: Prev found %v with %d calls of Next: want %v with at most 70", tc.spec, ok, c.n, tc.ok)
		}
	}
}

// "@every D" runs at the multiples of D since the Unix epoch: the same
// times whenever it is asked and whatever the time zone, so a run's
// identity does not depend on when the process started.
func TestEveryIsAnchoredToTheEpoch(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		spec string
		d    int64
	}{{"@every 1h", 3600}, {"@every 7m", 420}, {"@every 90s", 90}, {"@every 24h", 86400}} {
		a, b := mustParse(t, tc.spec, ""), mustParse(t, tc.spec, "Asia/Kolkata")
		next := a.Next(now)
		if next.Unix()%tc.d != 0 || !b.Next(now).Equal(next) {
			t.Fatalf("%s: next %v (%v in Kolkata): not a multiple of %ds since the epoch", tc.spec, next, b.Next(now), tc.d)
		}
		// Asked again later, before that time: the same next time.
		if later := a.Next(next.Add(-time.Second)); !later.Equal(next) {
			t.Fatalf("%s: next from now %v, from just before it %v", tc.spec, next, later)
		}
		if p, _ := a.Prev(now); p.Unix() != next.Unix()-tc.d {
			t.Fatalf("%s: prev %v, next %v", tc.spec, p, next)
		}
	}
	if got := strings.Join(func() (out []string) {
		for _, t := range mustParse(t, "@every 6h", "").NextRuns(time.Date(2026, 12, 1, 9, 22, 0, 0, time.UTC), 3) {
			out = append(out, t.UTC().Format("15:04"))
		}
		return
	}(), " "); got != "12:00 18:00 00:00" {
		t.Fatalf("@every 6h from 09:22: %s", got)
	}
}

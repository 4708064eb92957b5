package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is when a job runs: a cron expression in a time zone, or
// "@every D" anchored to the Unix epoch. Its times are whole seconds.
type Schedule struct {
	spec  string
	loc   *time.Location
	every time.Duration // @every D: the multiples of D since the epoch
	cron  cron.Schedule // otherwise
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a schedule in a time zone ("" for UTC): a cron expression
// (five fields, or six with seconds first; @daily, @hourly …) or
// "@every D" (a Go duration of whole seconds, at least 1s).
//
// "@every D" runs at the multiples of D since the Unix epoch (1970-01-01
// 00:00:00 UTC): @every 1h on the hour, @every 15m at :00, :15, :30, :45,
// @every 24h at midnight UTC, whatever the time zone and whenever the
// process started. A run is identified by its scheduled time, so a
// schedule counted from the start of the process (as robfig/cron's
// @every is) would give each restart runs of its own.
func Parse(spec, tz string) (*Schedule, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", tz, err)
	}
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		return nil, fmt.Errorf("schedule %q: give the time zone separately", spec)
	}
	s := &Schedule{spec: spec, loc: loc}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		if s.every, err = time.ParseDuration(strings.TrimSpace(d)); err != nil || s.every < time.Second || s.every%time.Second != 0 {
			return nil, fmt.Errorf("schedule %q: want @every and a duration of whole seconds, at least 1s (e.g. @every 1h)", spec)
		}
		return s, nil
	}
	if s.cron, err = cronParser.Parse("CRON_TZ=" + tz + " " + spec); err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return s, nil
}

// String is the schedule as written, with its time zone.
func (s *Schedule) String() string { return fmt.Sprintf("%q in %s", s.spec, s.loc) }

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next is the first scheduled time after t, or the zero time if there is
// none within five years (a cron expression that never matches).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every / time.Second)
		return time.Unix((floorDiv(t.Unix(), d)+1)*d, 0).In(s.loc)
	}
	return s.cron.Next(t)
}

// maxLookback bounds Prev's search: longer than the longest gap of any
// cron expression (Feb 29: four years).
const maxLookback = (1 << 22) * time.Minute // about 8 years

// Prev is the latest scheduled time at or before t: the run that was due
// last. False if there is none within maxLookback.
//
// robfig/cron only looks forward. Prev finds a window (t-w, t] that holds
// a scheduled time, w doubling from a minute, then the latest time in it
// by bisection on "Next(x) <= t", which only grows with x: about
// 2·log2(w/1min) calls of Next, as cheap for a schedule of every second
// as for a yearly one.
func (s *Schedule) Prev(t time.Time) (time.Time, bool) {
	t = t.Truncate(time.Second)
	if s.every > 0 {
		d := int64(s.every / time.Second)
		return time.Unix(floorDiv(t.Unix(), d)*d, 0).In(s.loc), true
	}
	due := func(x time.Time) bool {
		n := s.cron.Next(x)
		return !n.IsZero() && !n.After(t)
	}
	for w := time.Minute; w <= maxLookback; w *= 2 {
		lo := t.Add(-w)
		if !due(lo) {
			continue
		}
		// due(lo), and not due(t): Next(t) is after t. Narrow to one second.
		hi := t
		for hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
			if due(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		return s.cron.Next(lo), true
	}
	return time.Time{}, false
}

// On reports whether t is one of the schedule's times.
func (s *Schedule) On(t time.Time) bool {
	p, ok := s.Prev(t)
	return ok && p.Equal(t)
}

// NextRuns lists the next n scheduled times after from.
func (s *Schedule) NextRuns(from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		if t = s.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

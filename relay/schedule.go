package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/robfig/cron/v3"

	"edgerelay/store"
)

// Missed says what a job does about runs it missed while no process ran
// its schedule.
type Missed string

const (
	// MissedSkip (the default) forgets missed runs: the next run is the
	// next scheduled time from now.
	MissedSkip Missed = "skip"
	// MissedRunOnce runs once on start, as the most recent missed run (a
	// digest then covers everything since the last one).
	MissedRunOnce Missed = "run-once"
)

// Job is a scheduled job. A run is identified by the job's name and the
// time it was scheduled for, so a run repeated after a restart, by a second
// instance, or after it crashed half way, is the same run: what it sends
// derives its keys from that identity and cannot go out twice.
type Job struct {
	Name     string
	Schedule cron.Schedule
	Missed   Missed
	Run      func(ctx context.Context, run store.JobRun) error
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule reads a cron expression (five fields, or six with seconds
// first; @daily, @every 1h …) in a time zone ("" for UTC).
func ParseSchedule(spec, tz string) (cron.Schedule, error) {
	if tz == "" {
		tz = "UTC"
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return nil, fmt.Errorf("time zone %q: %w", tz, err)
	}
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		return nil, fmt.Errorf("schedule %q: give the time zone separately", spec)
	}
	s, err := cronParser.Parse("CRON_TZ=" + tz + " " + spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return s, nil
}

// NextRuns lists the job's next n scheduled times after from.
func (j *Job) NextRuns(from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = j.Schedule.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// RunJob runs one run of a job, scheduled for at. A run that already
// finished is not run again; one that started and did not finish (a crash,
// or another instance now) runs again, which is safe because everything it
// sends is keyed by the run.
func (r *Relay) RunJob(ctx context.Context, j *Job, at time.Time) error {
	at = at.UTC().Truncate(time.Second)
	run, err := r.store.BeginJobRun(ctx, j.Name, at, r.now())
	if err != nil {
		return err
	}
	if run.Status == "done" {
		r.log.Info("job run already done", "job", j.Name, "scheduled", at)
		return nil
	}
	r.log.Info("job run", "job", j.Name, "scheduled", at, "repeat", run.Repeat)
	runErr := j.Run(ctx, run)
	if err := r.store.FinishJobRun(context.Background(), j.Name, at, runErr, r.now()); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// RunSchedules runs the jobs on their schedules until ctx ends. On start,
// a job whose last run is older than its previous scheduled time missed
// runs while no process ran it, and follows its Missed policy.
func (r *Relay) RunSchedules(ctx context.Context, jobs []*Job) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runSchedule(ctx, j)
		}()
	}
	wg.Wait()
}

func (r *Relay) runSchedule(ctx context.Context, j *Job) {
	now := r.now()
	if j.Missed == MissedRunOnce {
		if missed, ok := r.lastMissed(ctx, j, now); ok {
			if err := r.RunJob(ctx, j, missed); err != nil {
				r.log.Error("job run failed", "job", j.Name, "scheduled", missed, "err", err)
			}
		}
	}
	for {
		next := j.Schedule.Next(r.now())
		if next.IsZero() {
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := r.RunJob(ctx, j, next); err != nil {
			r.log.Error("job run failed", "job", j.Name, "scheduled", next, "err", err)
		}
	}
}

// lastMissed returns the latest scheduled time after the job's last run
// and not after now, if there is one.
func (r *Relay) lastMissed(ctx context.Context, j *Job, now time.Time) (time.Time, bool) {
	last, ok, err := r.store.LastJobRun(ctx, j.Name)
	if err != nil || !ok {
		return time.Time{}, false // never ran: nothing was missed
	}
	var missed time.Time
	for t, i := j.Schedule.Next(last), 0; !t.IsZero() && !t.After(now) && i < 1_000_000; t, i = j.Schedule.Next(t), i+1 {
		missed = t
	}
	return missed, !missed.IsZero()
}

// DigestConfig is a digest job: one message per member of an audience with
// the feed items they have not read, posted since the previous run.
type DigestConfig struct {
	Tenant   string
	Audience string
	Channel  string
	Subject  string
	// Template renders the body (text/template) from .User (the
	// recipient), .Items (each with .Seq, .Feed, .Subject, .Body, .Created)
	// .More (items beyond MaxItems) and .Run (.Job, .ScheduledAt).
	Template string
	MaxItems int // default 50
}

// DefaultDigestTemplate lists the items' subjects.
const DefaultDigestTemplate = `{{len .Items}} new item{{if ne (len .Items) 1}}s{{end}} since the last digest:
{{range .Items}}- {{if .Subject}}{{.Subject}}{{else}}{{.Body}}{{end}}
{{end}}{{if .More}}… and {{.More}} more
{{end}}`

// Digest returns the run function of a digest job.
//
// Each run covers the feed items posted after the previous run's newest
// item and up to its own (fixed when the run first starts), so consecutive
// runs cover adjacent ranges of the item sequence: an item is in exactly
// one digest, whenever its event arrived (late, out of order, in the same
// second). The message of each member is an event keyed by the job, the
// run and the member, so repeating a run sends nothing twice.
func (r *Relay) Digest(job string, cfg DigestConfig) (func(context.Context, store.JobRun) error, error) {
	if cfg.Template == "" {
		cfg.Template = DefaultDigestTemplate
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = 50
	}
	if cfg.Tenant == "" {
		cfg.Tenant = "default"
	}
	tmpl, err := template.New(job).Parse(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("digest %s: template: %w", job, err)
	}
	return func(ctx context.Context, run store.JobRun) error {
		members, err := r.store.Audience(ctx, cfg.Tenant, cfg.Audience)
		if err != nil {
			return fmt.Errorf("digest %s: audience %q: %w", job, cfg.Audience, err)
		}
		sent := 0
		for _, m := range members {
			ev, ok, err := r.digestFor(ctx, job, cfg, tmpl, run, m)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			res, err := r.Accept(ctx, ev)
			if errors.Is(err, store.ErrEventConflict) {
				continue // this run's digest for this member went out before
			}
			if err != nil {
				return fmt.Errorf("digest %s for %s: %w", job, ev.Recipients[0].ID, err)
			}
			if !res.Duplicate {
				sent++
			}
		}
		r.log.Info("digest", "job", job, "scheduled", run.ScheduledAt, "items_after", run.PrevUpperSeq,
			"items_up_to", run.UpperSeq, "members", len(members), "sent", sent)
		return nil
	}, nil
}

type digestItem struct {
	Seq           int64
	Feed          string
	Subject, Body string
	Created       time.Time
}

// digestFor builds one member's digest event, or false when they have
// nothing new.
func (r *Relay) digestFor(ctx context.Context, job string, cfg DigestConfig, tmpl *template.Template, run store.JobRun, member []byte) (Event, bool, error) {
	var rcpt Recipient
	if err := json.Unmarshal(member, &rcpt); err != nil {
		return Event{}, false, err
	}
	page, _, err := r.store.FeedPage(ctx, cfg.Tenant, rcpt.ID, run.UpperSeq+1, cfg.MaxItems*4)
	if err != nil {
		return Event{}, false, err
	}
	var items []digestItem
	more := 0
	for _, it := range page {
		if it.Seq <= run.PrevUpperSeq || it.Read {
			continue
		}
		if len(items) == cfg.MaxItems {
			more++
			continue
		}
		var msg message
		json.Unmarshal(it.Message, &msg)
		items = append(items, digestItem{Seq: it.Seq, Feed: it.Feed, Subject: msg.Subject, Body: msg.Body, Created: it.CreatedAt})
	}
	if len(items) == 0 {
		return Event{}, false, nil
	}
	var body bytes.Buffer
	if err := tmpl.Execute(&body, map[string]any{"User": rcpt, "Items": items, "More": more, "Run": run}); err != nil {
		return Event{}, false, fmt.Errorf("digest %s: template: %w", job, err)
	}
	subject := cfg.Subject
	if subject == "" {
		subject = "Your digest"
	}
	return Event{
		ID:   fmt.Sprintf("digest:%s:%s:%s", job, run.ScheduledAt.UTC().Format(time.RFC3339), rcpt.ID),
		Type: "digest", Purpose: job, Tenant: cfg.Tenant, Channels: []string{cfg.Channel},
		Recipients: []Recipient{rcpt}, Subject: subject, Body: body.String(),
	}, true, nil
}

// PruneResult is what Prune deleted, and the age it used.
type PruneResult struct {
	store.PruneResult
	OlderThan time.Duration
	// Raised is set when the asked age was younger than the longest retry
	// window, and OlderThan was raised to it: a notification's row is its
	// idempotency key, and forgetting it while a retry (or a redelivery
	// within that window) may come would let a second copy out.
	Raised bool
}

// Prune deletes finished notifications (with their attempts and receipts),
// feed items, events left with neither, expired request keys and old job
// runs, older than olderThan, in small writes that never hold the writer
// for long.
func (r *Relay) Prune(ctx context.Context, olderThan time.Duration) (PruneResult, error) {
	floor := r.opts.Retry.MaxAge
	for _, p := range r.opts.ChannelRetry {
		floor = max(floor, p.MaxAge)
	}
	for _, p := range r.opts.TypeRetry {
		floor = max(floor, p.MaxAge)
	}
	res := PruneResult{OlderThan: olderThan}
	if olderThan < floor {
		res.OlderThan, res.Raised = floor, true
	}
	now := r.now()
	pr, err := r.store.Prune(ctx, now.Add(-res.OlderThan), now, 500)
	res.PruneResult = pr
	return res, err
}

// ParseAge reads an age: a Go duration ("36h") or whole days or weeks
// ("30d", "2w").
func ParseAge(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			var v int
			if _, err := fmt.Sscanf(n, "%d", &v); err == nil && v >= 0 && fmt.Sprint(v) == n {
				return time.Duration(v) * unit, nil
			}
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: write e.g. 30d, 2w or 36h", s)
	}
	return d, nil
}

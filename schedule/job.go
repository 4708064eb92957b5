package schedule

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
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
	Schedule *Schedule
	Missed   Missed
	Run      func(ctx context.Context, run model.JobRun) (Outcome, error)
	Tenant   string // whose feed sequence a run's range is in (digests); "" is "default"
}

// Outcome is what one run did. A run accepts events (a batch file's
// lines, a digest's messages); delivering them is the dispatcher's work,
// later or elsewhere (serve, dispatch).
type Outcome struct {
	// New events accepted, and the notifications they fanned out to.
	New           int `json:"new"`
	Notifications int `json:"notifications"`
	// Duplicate events: accepted by an earlier attempt of the same run
	// (or before it), so nothing new was created for them.
	Duplicate int `json:"duplicate"`
	// Rejected events or lines: invalid, or in conflict with an accepted
	// event.
	Rejected int `json:"rejected"`
	// Note says what else the run did ("pruned …"), for people.
	Note string `json:"note,omitempty"`
}

// ErrRejected: the run accepted what it could and rejected some events or
// lines (its Outcome counts them); the run is recorded as failed.
var ErrRejected = errors.New("rejected")

// Run is one run of a job and what became of it.
type Run struct {
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// Repeat: the run had begun before (a restart, another instance, an
	// earlier `cron run`); what it sends is keyed by the run, so a repeat
	// creates only what the earlier attempts did not.
	Repeat bool `json:"repeat"`
	// Skipped: it had finished before and was not run again.
	Skipped bool `json:"skipped,omitempty"`
	Outcome
}

// RunOptions tune RunJob.
type RunOptions struct {
	// Again runs a run that finished before once more (a person asking);
	// without it, a finished run is Skipped (the scheduler, a second
	// instance).
	Again bool
	// Unfinished runs the run only if it began and never finished (its
	// process died, or lost the schedules' lease, part way).
	Unfinished bool
}

// RunJob runs one run of a job, scheduled for at. A run that started and
// did not finish (a crash, or another instance now) runs again, which is
// safe because everything it sends is keyed by the run; one that finished
// runs again only with opts.Again. runs keeps the job's runs (the relay's
// store); the relay is the clock and the log.
func RunJob(ctx context.Context, r *relay.Relay, runs store.Jobs, j *Job, at time.Time, opts RunOptions) (Run, error) {
	at = at.UTC().Truncate(time.Second)
	res := Run{Job: j.Name, ScheduledAt: at}
	run, err := runs.BeginJobRun(ctx, j.Name, cmp.Or(j.Tenant, "default"), at, r.Now())
	if err != nil {
		return res, err
	}
	res.Repeat = run.Repeat
	if run.Status == "done" && !opts.Again || opts.Unfinished && run.Status != "running" {
		r.Log().Debug("job run not run again", "job", j.Name, "scheduled", at, "status", run.Status)
		res.Skipped = true
		return res, nil
	}
	r.Log().Info("job run", "job", j.Name, "scheduled", at, "repeat", run.Repeat)
	out, runErr := j.Run(ctx, run)
	res.Outcome = out
	if err := runs.FinishJobRun(context.WithoutCancel(ctx), j.Name, at, runErr, r.Now()); err != nil {
		return res, errors.Join(runErr, err)
	}
	return res, runErr
}

// RunSchedules runs the jobs on their schedules until ctx ends. On start,
// a job whose last run is older than its previous scheduled time missed
// runs while no process ran it, and follows its Missed policy.
func RunSchedules(ctx context.Context, r *relay.Relay, runs store.Jobs, jobs []*Job) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { runSchedule(ctx, r, runs, j) })
	}
	wg.Wait()
}

func runSchedule(ctx context.Context, r *relay.Relay, runs store.Jobs, j *Job) {
	// This process has just taken the schedules over (at start, or from a
	// process that died): it finishes what the last holder left, whatever
	// the Missed policy, since a handover is not time nobody ran them.
	// from is the last scheduled time handled: the schedule goes on from
	// it, so a run that falls due while earlier ones run is run next.
	from := r.Now()
	last, ran, err := runs.LastJobRun(ctx, j.Name)
	if err != nil {
		r.Log().Error("job: could not read its last run", "job", j.Name, "err", err)
	}
	if ran {
		// Its last run, if it began and never finished (keyed by the run,
		// a repeat creates only what the first attempt did not).
		runLogged(ctx, r, runs, j, last, RunOptions{Unfinished: true})
		// The runs that fell due while the lease moved (twice the bound: the
		// takeover itself may come late in it).
		for _, at := range handedOver(j.Schedule, last, from, 2*r.FailoverBound()) {
			runLogged(ctx, r, runs, j, at, RunOptions{})
		}
	}
	if j.Missed == MissedRunOnce {
		if missed, ok := lastMissed(ctx, runs, j, r.Now()); ok {
			runLogged(ctx, r, runs, j, missed, RunOptions{})
			if missed.After(from) {
				from = missed
			}
		}
	}
	for {
		// Runs already due (the one before took longer than the period,
		// or the catch-up above did): those within the handover's bound
		// of now run at once, in order, as a takeover's would; a slow run
		// on a loaded box makes the next ones late, not lost.
		if behind := handedOver(j.Schedule, from, r.Now(), 2*r.FailoverBound()); len(behind) > 0 {
			for _, at := range behind {
				if ctx.Err() != nil {
					return
				}
				runLogged(ctx, r, runs, j, at, RunOptions{})
				from = at
			}
			continue
		}
		next := j.Schedule.Next(from)
		if next.IsZero() {
			return
		}
		// Further behind than that (a stall longer than the bound): the
		// latest due runs, the ones between are skipped.
		if due, ok := j.Schedule.Prev(r.Now()); ok && due.After(next) {
			next = due
		}
		from = next
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		runLogged(ctx, r, runs, j, next, RunOptions{})
	}
}

// runLogged is RunJob for the scheduler: a run that fails is logged (its
// failure is recorded with the run) and the schedule goes on.
func runLogged(ctx context.Context, r *relay.Relay, runs store.Jobs, j *Job, at time.Time, opts RunOptions) {
	if _, err := RunJob(ctx, r, runs, j, at, opts); err != nil {
		r.Log().Error("job run failed", "job", j.Name, "scheduled", at, "err", err)
	}
}

// handedOver lists the scheduled times after last, up to now, that fell
// within bound of now: the runs due while the schedules' lease moved from a
// process that died to this one (relay.Relay.FailoverBound). Older missed
// runs are the Missed policy's.
func handedOver(s *Schedule, last, now time.Time, bound time.Duration) []time.Time {
	var out []time.Time
	from := last
	if cut := now.Add(-bound); cut.After(from) {
		from = cut
	}
	for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

// lastMissed returns the latest scheduled time at or before now, if it is
// after the job's last run.
func lastMissed(ctx context.Context, runs store.Jobs, j *Job, now time.Time) (time.Time, bool) {
	last, ok, err := runs.LastJobRun(ctx, j.Name)
	if err != nil || !ok {
		return time.Time{}, false // never ran: nothing was missed
	}
	due, ok := j.Schedule.Prev(now)
	if !ok || !due.After(last) {
		return time.Time{}, false
	}
	return due, true
}

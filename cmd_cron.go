package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/batch"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
)

func cronCommand() *cli.Command {
	return &cli.Command{
		Name:  "cron",
		Usage: "list and run the scheduled jobs of the config (serve runs them on schedule)",
		Description: `Jobs are declared under "jobs:" in the config file (see testdata/edgerelay.yaml):
a cron schedule (five fields, or six with seconds; @daily, @every 1h) in a time
zone, and one kind of work: a digest, a prune, or a batch file. "@every D" runs
at the multiples of D since the Unix epoch (@every 1h on the hour, @every 24h
at midnight UTC), whenever the process started.

A run is identified by its job and the time it was scheduled for. A run
repeated after a restart, started by two instances, run again by hand, or cut
short by a crash, is the same run: what it sends is keyed by it and cannot go
out twice. Runs missed while nothing ran the schedule: "missed: skip" (the
default) forgets them; "missed: run-once" runs the latest one when serve
starts.`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "show each job's next run times",
				Flags:        commonFlags(&cli.IntFlag{Name: "next", Value: 3, Usage: "how many next runs to show"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					r, s, err := openExistingSettings(c, true)
					if err != nil {
						return err
					}
					defer r.Close()
					jobs, err := buildJobs(s.cfg.Jobs, r)
					if err != nil {
						return err
					}
					if len(jobs) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no jobs: declare them under jobs: in the config file (--config)")
					}
					now := time.Now()
					for _, j := range jobs {
						last, ok, err := r.Store().LastJobRun(c.Context, j.Name)
						if err != nil {
							return err
						}
						lastS := "never"
						if ok {
							lastS = last.Format(time.RFC3339)
						}
						fmt.Fprintf(c.App.Writer, "%s (last run %s)\n", j.Name, lastS)
						for _, t := range j.Schedule.NextRuns(now, c.Int("next")) {
							fmt.Fprintf(c.App.Writer, "  %s\n", t.UTC().Format(time.RFC3339))
						}
					}
					return nil
				},
			},
			cronRunCommand(),
		},
	}
}

func cronRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run the latest due run of a job now (or, with --at, the run scheduled for TIME)",
		ArgsUsage: "JOB",
		Description: `Runs the latest run of JOB that was due: the one scheduled for the latest
time on its schedule at or before now. Running it again (by hand, or by serve
at that time) repeats that same run: what the run accepted before is counted
duplicate and nothing is sent twice. A job with no scheduled time at or before
now (a schedule that has never come due) is reported and nothing runs
(exit 0).

--at TIME repeats the run scheduled for TIME (RFC 3339), to catch up a run
that was missed or to finish one that failed. TIME must be one of the job's
scheduled times and not in the future; otherwise it is a usage error naming
the nearest scheduled times before and after.

A run accepts events (a batch file's lines, a digest's messages) and prints
what it accepted; delivering them is the dispatcher's work: edgerelay serve,
edgerelay dispatch, or --dispatch here (as dispatch --until-idle: everything
due in the database, through --route and --delivery).

Exit status:
   0  the run finished (and, with --dispatch, everything attempted was sent)
   5  the run rejected some events or lines; the others were accepted
   3, 4  --dispatch: as dispatch --until-idle
   2  usage: no such JOB, --at not a scheduled time or in the future
   1  could not work (database, config, I/O, the run failed): run it
      again to finish; nothing is accepted twice`,
		Flags: commonFlags(flagRoute(), flagDelivery(),
			&cli.StringFlag{Name: "at", Usage: "repeat the run scheduled for this `TIME` (RFC 3339), one of the job's scheduled times"},
			&cli.BoolFlag{Name: "dispatch", EnvVars: []string{"EDGERELAY_CRON_DISPATCH"}, Usage: "deliver what is due once the run is done (as dispatch --until-idle)"},
			&cli.DurationFlag{Name: "max-wait", Value: time.Minute, EnvVars: []string{"EDGERELAY_MAX_WAIT"}, Usage: "with --dispatch: the longest wait for a retry before exiting"},
			&cli.IntFlag{Name: "workers", EnvVars: []string{"EDGERELAY_WORKERS"}, Usage: "with --dispatch: the most provider calls in flight, over all providers (default 2048, or dispatch.workers in the config); each provider also has its own window (default 1024 for an HTTP API, 8 for SMTP)"},
			&cli.DurationFlag{Name: "lease", EnvVars: []string{"EDGERELAY_LEASE"}, Usage: "with --dispatch: how long a claim lasts (default 1m)"},
			&cli.BoolFlag{Name: "json", Usage: "print the run (and the dispatch summary) as JSON on stdout"},
		),
		// Flags may follow JOB (urfave/cli v2 stops at the first argument).
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			nc, args, err := interspersed(c)
			if err != nil {
				return err
			}
			if nc.Bool("help") {
				return cli.ShowCommandHelp(c.Lineage()[1], c.Command.Name)
			}
			return cronRun(nc, args)
		},
	}
}

// cronRunSummary is what cron run --json prints.
type cronRunSummary struct {
	schedule.Run
	Dispatch *relay.Summary `json:"dispatch,omitempty"`
}

func cronRun(c *cli.Context, args []string) error {
	if len(args) != 1 {
		return cli.Exit("cron run takes one JOB (see edgerelay cron list)", exitUsage)
	}
	name := args[0]
	var at time.Time
	if v := c.String("at"); v != "" {
		var err error
		if at, err = time.Parse(time.RFC3339, v); err != nil {
			return cli.Exit(fmt.Sprintf("--at %q: want an RFC 3339 time, e.g. 2026-11-30T09:00:00Z", v), exitUsage)
		}
	}
	dispatch := c.Bool("dispatch")
	var s *settings
	var err error
	if dispatch {
		s, err = deliverySettings(c) // a bad route fails before anything is accepted
	} else {
		s, err = loadSettings(c, c.App.ErrWriter)
	}
	if err != nil {
		return err
	}
	r, err := openRelayWith(c, s)
	if err != nil {
		return err
	}
	defer r.Close()
	jobs, err := buildJobs(s.cfg.Jobs, r)
	if err != nil {
		return err
	}
	var j *schedule.Job
	for _, jj := range jobs {
		if jj.Name == name {
			j = jj
		}
	}
	if j == nil {
		return cli.Exit(fmt.Sprintf("no job %q in the config (see edgerelay cron list)", name), exitUsage)
	}
	now := time.Now()
	due, ok := j.Schedule.Prev(now)
	switch {
	case at.IsZero() && !ok:
		fmt.Fprintf(c.App.ErrWriter, "job %s: no run is due yet (schedule %s; next %s); nothing run\n",
			j.Name, j.Schedule, fmtTime(j.Schedule.Next(now)))
		return nil
	case at.IsZero():
		at = due
	case !j.Schedule.On(at):
		before, _ := j.Schedule.Prev(at)
		return cli.Exit(fmt.Sprintf("--at %s: not a scheduled time of job %s (schedule %s); the nearest are %s before and %s after",
			at.Format(time.RFC3339), j.Name, j.Schedule, fmtTime(before), fmtTime(j.Schedule.Next(at))), exitUsage)
	case at.After(now):
		// Running it now would make the run at that time a repeat: it
		// would have gone out early.
		return cli.Exit(fmt.Sprintf("--at %s: in the future, not due yet; the latest due run of job %s is %s",
			at.Format(time.RFC3339), j.Name, fmtTime(due)), exitUsage)
	}

	run, runErr := schedule.RunJob(c.Context, r, r.Store(), j, at, schedule.RunOptions{Again: true})
	sum := cronRunSummary{Run: run}
	w := c.App.ErrWriter
	what := "run"
	if run.Repeat {
		what = "repeat of the run"
	}
	fmt.Fprintf(w, "job %s: %s scheduled for %s: accepted %d events (%d new, %d duplicate), %d rejected; %d new notifications\n",
		j.Name, what, fmtTime(at), run.New+run.Duplicate, run.New, run.Duplicate, run.Rejected, run.Notifications)
	if run.Note != "" {
		fmt.Fprintf(w, "job %s: %s\n", j.Name, run.Note)
	}
	code := exitOK
	switch {
	case errors.Is(runErr, schedule.ErrRejected):
		fmt.Fprintf(w, "job %s: %v\n", j.Name, runErr)
		code = exitRejected
	case runErr != nil:
		return fmt.Errorf("job %s: run %s: %w", j.Name, fmtTime(at), runErr)
	}
	if dispatch {
		ds, err := r.RunUntilIdle(c.Context, c.Duration("max-wait"))
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		sum.Dispatch = &ds
		fmt.Fprintf(w, "dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d; %d waiting for a retry\n",
			ds.Attempts, ds.Sent, ds.Failed, ds.Dead, ds.Unknown, ds.Waiting)
		switch {
		case ds.Failed+ds.Dead+ds.Unknown > 0:
			code = exitFailed
		case code == exitRejected:
		case ds.Waiting > 0 || err != nil:
			code = exitWaiting
		}
	} else if run.New > 0 {
		fmt.Fprintf(w, "job %s: nothing has gone out yet: delivery follows in edgerelay serve or dispatch (or run with --dispatch)\n", j.Name)
	}
	if c.Bool("json") {
		if err := json.NewEncoder(c.App.Writer).Encode(sum); err != nil {
			return err
		}
	}
	if code != exitOK {
		return cli.Exit("", code)
	}
	return nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none within years"
	}
	return t.UTC().Format(time.RFC3339)
}

// batchJob is the run function of a scheduled batch file send. Each
// event's id is prefixed with the run's identity (job and scheduled time),
// so the same file sent by two runs is two sends, and the same run
// repeated (a restart, an overlap, a crash half way, a second cron run)
// sends nothing twice.
func batchJob(r *relay.Relay, name, file string) func(context.Context, model.JobRun) (schedule.Outcome, error) {
	return func(ctx context.Context, run model.JobRun) (schedule.Outcome, error) {
		var out schedule.Outcome
		format, err := batch.FormatFor(file)
		if err != nil {
			return out, fmt.Errorf("job %s: %w", name, err)
		}
		f, err := os.Open(file)
		if err != nil {
			return out, fmt.Errorf("job %s: %w", name, err)
		}
		defer f.Close()
		br, err := batch.NewReader(f, format)
		if err != nil {
			return out, fmt.Errorf("job %s: %w", name, err)
		}
		prefix := name + "@" + run.ScheduledAt.UTC().Format(time.RFC3339) + "/"
		lines := func(yield func(batch.Line) bool) {
			for l := range br.Lines() {
				if l.Err == nil {
					l.Event.ID = prefix + l.Event.ID
				}
				if !yield(l) {
					return
				}
			}
		}
		res, err := batch.Accept(ctx, r, lines, batch.Options{OnReject: func(e *batch.LineError) {
			r.Log().Warn("batch job: line rejected", "job", name, "file", file, "line", e.Line, "reason", e.Err.Error())
		}})
		out = schedule.Outcome{New: res.New, Duplicate: res.Duplicate, Notifications: res.Notifications, Rejected: res.Rejected}
		if err == nil {
			err = br.Err()
		}
		if err == nil && res.Rejected > 0 {
			err = fmt.Errorf("job %s: %d of %d lines of %s %w", name, res.Rejected, res.Lines, file, schedule.ErrRejected)
		}
		return out, err
	}
}

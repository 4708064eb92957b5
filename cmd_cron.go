package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/batch"
	"edgerelay/relay"
	"edgerelay/store"
)

func cronCommand() *cli.Command {
	return &cli.Command{
		Name:  "cron",
		Usage: "list and run the scheduled jobs of the config (serve runs them on schedule)",
		Description: `Jobs are declared under "jobs:" in the config file (see testdata/edgerelay.yaml):
a cron schedule (five fields, or six with seconds; @daily, @every 1h) in a time
zone, and one kind of work: a digest, a prune, or a batch file.

A run is identified by its job and the time it was scheduled for. A run
repeated after a restart, started by two instances, or cut short by a crash,
is the same run: what it sends is keyed by it and cannot go out twice.
Runs missed while nothing ran the schedule: "missed: skip" (the default)
forgets them; "missed: run-once" runs the latest one when serve starts.`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "show each job's next run times",
				Flags:        commonFlags(&cli.IntFlag{Name: "next", Value: 3, Usage: "how many next runs to show"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					r, s, err := openRelay(c, c.App.ErrWriter)
					if err != nil {
						return err
					}
					defer r.Close()
					jobs, err := s.cfg.jobs(r)
					if err != nil {
						return err
					}
					if len(jobs) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no jobs: declare them under jobs: in the config file (--config)")
					}
					now := time.Now()
					for _, j := range jobs {
						last, ok, err := r.LastJobRun(c.Context, j.Name)
						if err != nil {
							return err
						}
						lastS := "never"
						if ok {
							lastS = last.Format(time.RFC3339)
						}
						fmt.Fprintf(c.App.Writer, "%s (last run %s)\n", j.Name, lastS)
						for _, t := range j.NextRuns(now, c.Int("next")) {
							fmt.Fprintf(c.App.Writer, "  %s\n", t.Format(time.RFC3339))
						}
					}
					return nil
				},
			},
			{
				Name:      "run",
				Usage:     "run one job now",
				ArgsUsage: "JOB",
				Flags: commonFlags(flagRoute(), flagDelivery(),
					&cli.StringFlag{Name: "at", Usage: "run as the run scheduled for this `TIME` (RFC 3339) instead of now: repeats that run, sending nothing it already sent"},
				),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("cron run takes one JOB (see edgerelay cron list)", exitUsage)
					}
					s, err := deliverySettings(c)
					if err != nil {
						return err
					}
					r, err := openRelayWith(c, s)
					if err != nil {
						return err
					}
					defer r.Close()
					jobs, err := s.cfg.jobs(r)
					if err != nil {
						return err
					}
					at := time.Now()
					if v := c.String("at"); v != "" {
						if at, err = time.Parse(time.RFC3339, v); err != nil {
							return cli.Exit(fmt.Sprintf("--at %q: want an RFC 3339 time, e.g. 2026-11-30T09:00:00Z", v), exitUsage)
						}
					}
					for _, j := range jobs {
						if j.Name == c.Args().First() {
							if err := r.RunJob(c.Context, j, at); err != nil {
								return err
							}
							fmt.Fprintf(c.App.Writer, "job %s: run %s done\n", j.Name, at.UTC().Truncate(time.Second).Format(time.RFC3339))
							return nil
						}
					}
					return cli.Exit(fmt.Sprintf("no job %q in the config", c.Args().First()), exitUsage)
				},
			},
		},
	}
}

// batchJob is the run function of a scheduled batch file send. Each
// event's id is prefixed with the run's identity (job and scheduled time),
// so the same file sent by two runs is two sends, and the same run
// repeated (a restart, an overlap, a crash half way) sends nothing twice.
func batchJob(r *relay.Relay, name, file string) func(context.Context, store.JobRun) error {
	return func(ctx context.Context, run store.JobRun) error {
		format, err := batch.FormatFor(file)
		if err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
		defer f.Close()
		br, err := batch.NewReader(f, format)
		if err != nil {
			return fmt.Errorf("job %s: %w", name, err)
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
		res, err := batch.Accept(ctx, r, lines, batch.Options{})
		if err == nil {
			err = br.Err()
		}
		if err == nil && res.Rejected > 0 {
			err = fmt.Errorf("job %s: %d of %d lines of %s rejected", name, res.Rejected, res.Lines, file)
		}
		return err
	}
}

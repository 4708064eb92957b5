package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/relay"
)

func dispatchCommand() *cli.Command {
	return &cli.Command{
		Name:      "dispatch",
		Usage:     "deliver due notifications (keeps running; --until-idle for cron)",
		ArgsUsage: " ",
		Description: `Claims due notifications, calls their providers (each call carries the
notification's Idempotency-Key) and records every attempt. On start it first
settles attempts that a crash interrupted (as unknown) and finishes fan-outs
that were cut short.

Outcomes: sent (2xx); refused (the provider definitely did not send: 503, 429,
connection refused), retried with backoff and Retry-After; refused for good
(400, 401, 403, 404, 422 ...), status failed; unknown (timeout, connection lost
after the request went out, 500/502/504): retried with the same key, except
for at-most-once types (--delivery TYPE=at-most-once) when the provider does
not honour keys: status unknown, not resent. Retries exhausted: status dead.

SIGINT/SIGTERM: stop claiming, wait up to --drain-timeout for calls in flight,
record them, exit. A second signal exits at once.

With --until-idle, exits when every notification is final or its next retry
is further off than --max-wait. Exit status:
   0  every notification attempted was sent, none is waiting
   3  some ended failed, dead or unknown (see: edgerelay status, edgerelay show ID)
   4  none ended badly, but some still wait for a retry beyond --max-wait
   1  could not work at all (database, config), or interrupted (Ctrl-C,
      SIGTERM): the last line says "interrupted" and counts what is pending

Interrupted with --until-idle, it stops claiming and waits up to 10 s for the
calls in flight (a fixed time; --drain-timeout is for the long-running mode),
then cancels them and records them unknown; a second signal exits at once.`,
		Flags: commonFlags(
			flagRoute(), flagDelivery(),
			&cli.BoolFlag{Name: "until-idle", EnvVars: []string{"EDGERELAY_UNTIL_IDLE"}, Usage: "exit when nothing is due within --max-wait (cron mode)"},
			&cli.DurationFlag{Name: "max-wait", Value: time.Minute, EnvVars: []string{"EDGERELAY_MAX_WAIT"}, Usage: "with --until-idle: the longest wait for a retry before exiting"},
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: []string{"EDGERELAY_DRAIN_TIMEOUT"}, Usage: "on shutdown: how long to wait for calls in flight"},
			&cli.IntFlag{Name: "workers", EnvVars: []string{"EDGERELAY_WORKERS"}, Usage: "the most provider calls in flight, over all providers (default 2048, or dispatch.workers in the config); each provider also has its own window (default 1024 for an HTTP API, 8 for SMTP)"},
			&cli.DurationFlag{Name: "lease", EnvVars: []string{"EDGERELAY_LEASE"}, Usage: "how long a claim lasts; a call is cut off before it ends (default 1m)"},
			&cli.BoolFlag{Name: "json", Usage: "print the --until-idle summary as JSON on stdout"},
		),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			s, err := deliverySettings(c)
			if err != nil {
				return err
			}
			r, err := openRelayWith(c, s)
			if err != nil {
				return err
			}
			defer r.Close()
			if c.Bool("until-idle") {
				sum, err := r.RunUntilIdle(c.Context, c.Duration("max-wait"))
				if err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
				if err != nil {
					return untilIdleInterrupted(c, r, sum)
				}
				if c.Bool("json") {
					json.NewEncoder(c.App.Writer).Encode(sum)
				} else {
					fmt.Fprintf(c.App.ErrWriter, "dispatch: %d attempts; sent %d, failed %d, dead %d, unknown %d, skipped %d; %d waiting for a retry\n",
						sum.Attempts, sum.Sent, sum.Failed, sum.Dead, sum.Unknown, sum.Skipped, sum.Waiting)
				}
				if sum.Suppressed > 0 && !c.Bool("json") {
					fmt.Fprintf(c.App.ErrWriter, "dispatch: %d not sent: the address is on its tenant's suppression list (edgerelay suppressions list)\n", sum.Suppressed)
				}
				if sum.RunsWaiting > 0 && !c.Bool("json") {
					fmt.Fprintf(c.App.ErrWriter, "dispatch: %d workflow runs wait for a later step (a delay): a later dispatch takes them on (edgerelay workflow runs --state waiting)\n", sum.RunsWaiting)
				}
				if sum.Quarantined > 0 {
					fmt.Fprintf(c.App.ErrWriter, "dispatch: %d events quarantined: the rest of their fan-out could not be written (edgerelay quarantine list)\n", sum.Quarantined)
				}
				switch {
				case sum.Failed+sum.Dead+sum.Unknown > 0:
					return cli.Exit("", exitFailed)
				case sum.Waiting > 0:
					return cli.Exit("", exitWaiting)
				}
				return nil
			}
			if err := r.Start(c.Context); err != nil {
				return err
			}
			<-c.Context.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout"))
			defer cancel()
			if err := r.Stop(ctx); err != nil {
				fmt.Fprintf(c.App.ErrWriter, "dispatch: provider calls still running after the drain timeout (%s) were cancelled and recorded as unknown (the log line \"dispatcher stopped\" counts them)\n", c.Duration("drain-timeout"))
			}
			return nil
		},
	}
}

// untilIdleInterrupted ends a --until-idle run a signal stopped: the
// summary (with interrupted and pending under --json), a last line that
// says so, and exit 1.
func untilIdleInterrupted(c *cli.Context, r *relay.Relay, sum relay.Summary) error {
	pending, err := countPending(r)
	if err != nil {
		return fmt.Errorf("dispatch: interrupted; %w", err)
	}
	if c.Bool("json") {
		out := struct {
			relay.Summary
			Interrupted bool  `json:"interrupted"`
			Pending     int64 `json:"pending"`
		}{sum, true, pending}
		if err := json.NewEncoder(c.App.Writer).Encode(out); err != nil {
			return err
		}
	}
	sayInterrupted(c, sum, pending)
	return cli.Exit("", exitError)
}

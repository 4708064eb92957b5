package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// workflowCommand shows workflow runs, step by step with why each step was
// decided as it was, and cancels them by cancel key.
func workflowCommand() *cli.Command {
	tenant := &cli.StringFlag{Name: "tenant", Value: "default", Usage: "the tenant whose runs"}
	return &cli.Command{
		Name:  "workflow",
		Usage: "list workflow runs with each step's decision, or cancel runs by their cancel key",
		Description: `An event whose type has a workflow becomes one run per recipient; each step
of a run is decided once, when it is due, and the decision is recorded with
why ("skipped: if \"!steps.inbox.read\" did not hold (inbox: in-app item 42
read, ...)"). Workflows are saved with PUT /v1/workflows/{type} or in the
config file (workflows:); docs/workflows.md has the whole story.`,
		Subcommands: []*cli.Command{
			{
				Name:  "runs",
				Usage: "a tenant's runs, oldest first, each with its steps",
				Flags: commonFlags(tenant,
					&cli.StringFlag{Name: "state", Usage: "only runs in this state: waiting, done or cancelled"},
					&cli.StringFlag{Name: "event", Usage: "only the runs of this event id"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many runs"},
					&cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					r, err := openExisting(c)
					if err != nil {
						return err
					}
					defer r.Close()
					runs, err := r.Runs(c.Context, model.RunFilter{Tenant: c.String("tenant"), State: c.String("state"),
						EventID: c.String("event"), Limit: c.Int("limit")})
					if err != nil {
						return cli.Exit(err.Error(), exitUsage)
					}
					if c.Bool("json") {
						return json.NewEncoder(c.App.Writer).Encode(runs)
					}
					if len(runs) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no workflow runs")
					}
					for _, v := range runs {
						printRun(c.App.Writer, v)
					}
					return nil
				},
			},
			{
				Name:         "cancel",
				Usage:        "cancel the tenant's waiting runs whose cancel key is KEY (as an event with \"cancels\": KEY does)",
				ArgsUsage:    "KEY",
				Flags:        commonFlags(tenant),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("workflow cancel takes one cancel key (as the workflow's cancel_key computed it, e.g. invoice-42)", exitUsage)
					}
					r, err := openExisting(c)
					if err != nil {
						return err
					}
					defer r.Close()
					n, err := r.CancelRuns(c.Context, c.String("tenant"), c.Args().First(), "edgerelay workflow cancel")
					if err != nil {
						return cli.Exit(err.Error(), exitUsage)
					}
					fmt.Fprintf(c.App.Writer, "%d runs cancelled\n", n)
					return nil
				},
			},
		},
	}
}

// printRun prints a run and its steps, control characters escaped.
func printRun(w io.Writer, v relay.RunView) {
	sc := relay.ShowControls
	fmt.Fprintf(w, "event %s, recipient %s: workflow %s v%d, %s", sc(v.EventID), sc(v.Recipient), sc(v.Type), v.Version, v.State)
	switch v.State {
	case model.RunWaiting:
		fmt.Fprintf(w, " (step %d due %s)", v.Step, v.DueAt.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, ": %s", sc(v.Reason))
	}
	fmt.Fprintln(w)
	for _, s := range v.Steps {
		fmt.Fprintf(w, "  %d %-10s %-8s due %s, decided %s: %s\n", s.Step, sc(s.StepID), s.Outcome,
			s.DueAt.Format(time.RFC3339), s.DecidedAt.Format(time.RFC3339), sc(s.Reason))
	}
}

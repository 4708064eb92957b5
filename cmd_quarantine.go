package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func quarantineCommand() *cli.Command {
	eventArg := func(c *cli.Context, verb string) (string, error) {
		return idArg(c, fmt.Sprintf("quarantine %s takes one quarantined event's ID (a number as edgerelay quarantine list prints it, or the ev_… id the API showed)", verb),
			relay.EventIDPrefix)
	}
	return &cli.Command{
		Name:  "quarantine",
		Usage: "list, retry or drop events whose fan-out could not go on",
		Description: `An event is quarantined when the rest of its fan-out cannot be written: its
stored payload no longer decodes (written by another version, or damaged), it
gives another number of notifications than it was accepted with, the fan-out
does not advance, or its writes keep failing. Its notifications written so far
are delivered as usual; nothing else waits for it. "retry" tries the fan-out
again (after a fix: an upgrade, a repaired row); "drop" gives up the rest of it
for good (the notifications never created are counted, not sent).`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "the quarantined events, newest first, with why",
				Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}, &cli.StringFlag{Name: "tenant", Usage: "only this tenant's"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					st, _, err := openExistingStore(c, true)
					if err != nil {
						return err
					}
					defer st.Close()
					qs, err := st.QuarantinedEvents(c.Context, c.String("tenant"), 0, 1000)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return json.NewEncoder(c.App.Writer).Encode(qs)
					}
					if len(qs) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no quarantined events")
					}
					for _, q := range qs {
						fmt.Fprintf(c.App.Writer, "%d\tevent %s (tenant %s, purpose %s)\t%d of %d notifications written\tsince %s\n\t%s\n",
							q.EventRow, relay.ShowControls(q.EventID), q.Tenant, relay.ShowControls(q.Purpose), q.Expanded, q.Targets, q.At.Format(time.RFC3339), relay.ShowControls(q.Reason))
					}
					return nil
				},
			},
			{
				Name:         "retry",
				Usage:        "lift the quarantine and try the rest of the fan-out again now",
				ArgsUsage:    "ID",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					arg, err := eventArg(c, "retry")
					if err != nil {
						return err
					}
					r, err := openExisting(c)
					if err != nil {
						return err
					}
					defer r.Close()
					id, err := rowOf(c.Context, arg, r.EventRowOf)
					if err != nil {
						return err
					}
					if err := r.RetryQuarantined(c.Context, "", id); errors.Is(err, model.ErrNotFound) {
						return cli.Exit(err.Error(), exitError)
					} else if err != nil {
						return err
					}
					qs, err := r.Store().QuarantinedEvents(c.Context, "", id+1, 1)
					if err != nil {
						return err
					}
					if len(qs) == 1 && qs[0].EventRow == id {
						return cli.Exit(fmt.Sprintf("event %s is quarantined again: %s", arg, qs[0].Reason), exitError)
					}
					fmt.Fprintf(c.App.Writer, "event %s: fan-out finished; its notifications are pending (edgerelay dispatch delivers them)\n", arg)
					return nil
				},
			},
			{
				Name:         "drop",
				Usage:        "give up the rest of a quarantined event's fan-out",
				ArgsUsage:    "ID",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					arg, err := eventArg(c, "drop")
					if err != nil {
						return err
					}
					r, err := openExisting(c)
					if err != nil {
						return err
					}
					defer r.Close()
					id, err := rowOf(c.Context, arg, r.EventRowOf)
					if err != nil {
						return err
					}
					n, err := r.Store().DropEvent(c.Context, "", id, r.Now())
					if errors.Is(err, model.ErrNotFound) {
						return cli.Exit(err.Error(), exitError)
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "event %s: %d notifications dropped, never to be created; those written before stay\n", arg, n)
					return nil
				},
			},
		},
	}
}

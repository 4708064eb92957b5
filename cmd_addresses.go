package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/store"
)

func addressesCommand() *cli.Command {
	return &cli.Command{
		Name:  "addresses",
		Usage: "list or clear the addresses providers declared dead",
		Description: `When a provider refuses an address for good (an unregistered push token, a
number that cannot receive, 550 5.1.1), the address is marked dead for that
tenant and channel: later notifications to it fail without a call until the
mark expires (dispatch.invalid_address_ttl, default 30 days), is cleared here,
or a notification to it is retried (edgerelay retry ID clears its mark).`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "the live marks: tenant, channel, address, who marked it, why, until when",
				Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}, &cli.StringFlag{Name: "tenant", Usage: "only this tenant's"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					r, err := openExistingFor(c, true)
					if err != nil {
						return err
					}
					defer r.Close()
					var all []store.InvalidAddress
					var after store.InvalidAddress
					for {
						page, err := r.InvalidAddresses(c.Context, c.String("tenant"), after, 500)
						if err != nil {
							return err
						}
						all = append(all, page...)
						if len(page) < 500 {
							break
						}
						after = page[len(page)-1]
					}
					if c.Bool("json") {
						if all == nil {
							all = []store.InvalidAddress{}
						}
						return json.NewEncoder(c.App.Writer).Encode(all)
					}
					if len(all) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no addresses marked dead")
					}
					for _, m := range all {
						fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\tmarked by %s at %s, until %s\t%s\n", m.Tenant, m.Channel, m.Address,
							m.Provider, m.CreatedAt.Format(time.RFC3339), m.ExpiresAt.Format(time.RFC3339), m.Reason)
					}
					return nil
				},
			},
			{
				Name:         "clear",
				Usage:        "lift the mark on one address",
				ArgsUsage:    "CHANNEL ADDRESS",
				Flags:        commonFlags(&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the tenant whose mark it is"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return cli.Exit("addresses clear takes CHANNEL ADDRESS (and --tenant)", exitUsage)
					}
					r, err := openExisting(c)
					if err != nil {
						return err
					}
					defer r.Close()
					ch, addr := c.Args().Get(0), c.Args().Get(1)
					if err := r.ClearInvalidAddress(c.Context, c.String("tenant"), ch, addr); errors.Is(err, store.ErrNotFound) {
						return cli.Exit(err.Error(), exitError)
					} else if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "cleared: %s address %q of tenant %s will be tried again\n", ch, addr, c.String("tenant"))
					return nil
				},
			},
		},
	}
}

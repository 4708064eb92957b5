package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"edgerelay/relay"
	"edgerelay/templates"
)

func templateCommand() *cli.Command {
	return &cli.Command{
		Name:  "template",
		Usage: "list the config's message templates, or render one without sending",
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "list the templates of the config's templates.dir: tenant (* for every tenant), name, channel, locale, version",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					set, err := configTemplates(c)
					if err != nil {
						return err
					}
					for _, t := range set.All() {
						src := t.Source()
						tenant := src.Tenant
						if tenant == "" {
							tenant = "*"
						}
						fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\t%s\t%s\n", tenant, src.Name, src.Channel, src.Locale, t.Version())
					}
					return nil
				},
			},
			{
				Name:      "render",
				Usage:     "print the message TYPE's template would send one recipient, as accept renders it, without sending",
				ArgsUsage: "TYPE",
				Description: `Renders the template named TYPE (a notification type or purpose) for the
recipient in --recipient (a recipient as in an event: id, its address for the
channel, and locale and timezone if it has them) with the data in --data (an
event's "data"), exactly as an accept would, and prints the message that
would be stored and sent (JSON: subject, body, html, data, and the template's
name, version and locale). Nothing is written, nothing is sent.

Exit status: 0 rendered, 5 the template cannot render this data (a missing
field, named with the template's file and line), 1 no config or templates.`,
				Flags: commonFlags(
					&cli.StringFlag{Name: "channel", Value: "email", Usage: "the `CHANNEL` to render for"},
					&cli.StringFlag{Name: "recipient", Required: true, Usage: "the recipient, a JSON `FILE`"},
					&cli.StringFlag{Name: "data", Usage: "the event's data, a JSON `FILE`"},
					&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the event's `TENANT`"},
				),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("template render takes one TYPE", exitUsage)
					}
					set, err := configTemplates(c)
					if err != nil {
						return err
					}
					b, err := os.ReadFile(c.String("recipient"))
					if err != nil {
						return cli.Exit(fmt.Sprintf("--recipient: %v", err), exitUsage)
					}
					var rc relay.Recipient
					if err := relay.DecodeJSON(b, &rc); err != nil {
						return cli.Exit(fmt.Sprintf("--recipient %s: %v", c.String("recipient"), err), exitUsage)
					}
					ev := relay.Event{Type: c.Args().First(), Tenant: c.String("tenant"), Recipients: []relay.Recipient{rc}}
					if f := c.String("data"); f != "" {
						if ev.Data, err = os.ReadFile(f); err != nil {
							return cli.Exit(fmt.Sprintf("--data: %v", err), exitUsage)
						}
						if !json.Valid(ev.Data) {
							return cli.Exit(fmt.Sprintf("--data %s: not JSON", f), exitUsage)
						}
					}
					msg, err := relay.Preview(set, ev, c.String("channel"))
					var inv *relay.InvalidEventError
					if errors.As(err, &inv) {
						return cli.Exit(err.Error(), exitRejected)
					}
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(c.App.Writer, "%s\n", msg)
					return err
				},
			},
		},
	}
}

// configTemplates loads the templates the config names, as serve would.
func configTemplates(c *cli.Context) (*templates.Set, error) {
	path := lookup(c, "config")
	if path == "" {
		return nil, cli.Exit("no config: templates come from the config's templates.dir (give --config FILE)", exitError)
	}
	cfg, err := loadConfig(path, nil)
	if err != nil {
		return nil, err
	}
	if cfg.templates == nil {
		return nil, cli.Exit(fmt.Sprintf("config %s has no templates.dir", path), exitError)
	}
	return cfg.templates, nil
}

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"edgerelay/relay"
)

func audienceCommand() *cli.Command {
	return &cli.Command{
		Name:  "audience",
		Usage: "manage named recipient lists that events can address with \"audience\"",
		Subcommands: []*cli.Command{{
			Name:      "set",
			Usage:     "replace an audience's members with those in FILE",
			ArgsUsage: "NAME FILE",
			Description: `FILE holds {"members": [RECIPIENT, ...]}, each recipient as in an event
({"id": "ada", "email": "ada@example.com"}). The list is replaced atomically;
events accepted afterwards resolve the audience to the new list.`,
			Flags:        commonFlags(&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the audience's tenant"}),
			OnUsageError: usageErr,
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return cli.Exit("audience set takes NAME FILE", exitUsage)
				}
				b, err := os.ReadFile(c.Args().Get(1))
				if err != nil {
					return cli.Exit(err.Error(), exitUsage)
				}
				var req struct {
					Members []relay.Recipient `json:"members"`
				}
				if err := relay.DecodeJSON(b, &req); err != nil {
					return cli.Exit(fmt.Sprintf("%s: want {\"members\": [RECIPIENT, ...]}: %v", c.Args().Get(1), err), exitRejected)
				}
				r, _, err := openRelay(c, c.App.ErrWriter)
				if err != nil {
					return err
				}
				defer r.Close()
				var inv *relay.InvalidEventError
				if err := r.PutAudience(c.Context, c.String("tenant"), c.Args().First(), req.Members); errors.As(err, &inv) {
					return cli.Exit(err.Error(), exitRejected)
				} else if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "audience %s (tenant %s): %d members\n", c.Args().First(), c.String("tenant"), len(req.Members))
				return nil
			},
		}},
	}
}

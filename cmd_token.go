package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"edgerelay/config"
	"edgerelay/relay"
)

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "create, list and revoke API tokens (each belongs to one tenant)",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a token for a tenant and print it (once: only its hash is stored)",
				ArgsUsage: " ",
				Flags: commonFlags(
					&cli.StringFlag{Name: "tenant", Usage: "the tenant the token acts as (required)"},
					&cli.StringFlag{Name: "name", Usage: "a label to recognise the token by (at most 64 bytes)"},
				),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					tenant := c.String("tenant")
					if tenant == "" {
						return cli.Exit("token create needs --tenant NAME", exitUsage)
					}
					if !config.ValidName(tenant) {
						return cli.Exit(fmt.Sprintf("--tenant %q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant), exitUsage)
					}
					r, _, err := openRelay(c, c.App.ErrWriter)
					if err != nil {
						return err
					}
					defer r.Close()
					t, token, err := r.CreateToken(c.Context, tenant, c.String("name"))
					var inv *relay.InvalidEventError
					if errors.As(err, &inv) {
						return cli.Exit(fmt.Sprintf("--%s: %s", inv.Field, inv.Reason), exitUsage)
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.ErrWriter, "token %d for tenant %s (shown once; send it as Authorization: Bearer TOKEN):\n", t.ID, tenant)
					fmt.Fprintln(c.App.Writer, token)
					return nil
				},
			},
			{
				Name:         "list",
				Usage:        "list tokens (ids, tenants, names; never the tokens)",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					st, _, err := openExistingStore(c, true)
					if err != nil {
						return err
					}
					defer st.Close()
					ts, err := st.Tokens(c.Context)
					if err != nil {
						return err
					}
					for _, t := range ts {
						fmt.Fprintf(c.App.Writer, "%d\t%s\t%s\t%s\n", t.ID, t.Tenant, t.Name, t.CreatedAt.Format("2006-01-02 15:04:05"))
					}
					return nil
				},
			},
			{
				Name:         "revoke",
				Usage:        "delete a token by id",
				ArgsUsage:    "ID",
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					id, err := strconv.ParseInt(c.Args().First(), 10, 64)
					if c.NArg() != 1 || err != nil {
						return cli.Exit("revoke takes one token id (see edgerelay token list)", exitUsage)
					}
					st, _, err := openExistingStore(c, false)
					if err != nil {
						return err
					}
					defer st.Close()
					return st.DeleteToken(c.Context, id)
				},
			},
		},
	}
}

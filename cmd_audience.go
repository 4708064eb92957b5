package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func audienceCommand() *cli.Command {
	tenantFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "tenant", Value: "default", Usage: "the audience's tenant"}
	}
	return &cli.Command{
		Name:  "audience",
		Usage: "manage named recipient lists that events can address with \"audience\"",
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "replace an audience's members with those in FILE",
				ArgsUsage: "NAME FILE",
				Description: `FILE holds {"members": [RECIPIENT, ...]}, each recipient as in an event
({"id": "ada", "email": "ada@example.com"}). The list is replaced atomically;
events accepted afterwards resolve the audience to the new list. "audience get"
prints an audience in this form.`,
				Flags:        commonFlags(tenantFlag()),
				OnUsageError: usageErr,
				Action:       audienceSet,
			},
			{
				Name:      "list",
				Usage:     "list a tenant's audiences: names, member counts, when each was set",
				ArgsUsage: " ",
				Flags:     commonFlags(tenantFlag(), &cli.BoolFlag{Name: "json", Usage: "one JSON object per audience"}),
				Description: `Prints NAME, MEMBERS and UPDATED (when it was last set, UTC) per audience,
in name order; --json prints {"name", "members", "updated_at"} lines.`,
				OnUsageError: usageErr,
				Action:       audienceList,
			},
			{
				Name:      "get",
				Usage:     "print an audience's members, as audience set reads them",
				ArgsUsage: "NAME",
				Description: `Prints {"members": [RECIPIENT, ...]} in the order set: save it, edit it and
give it back to "audience set NAME FILE".`,
				Flags:        commonFlags(tenantFlag()),
				OnUsageError: usageErr,
				Action:       audienceGet,
			},
			{
				Name:      "delete",
				Usage:     "delete an audience (events that name it afterwards are refused)",
				ArgsUsage: "NAME",
				Description: `Events accepted before keep the recipients they were fanned out to; an event
naming the audience afterwards is rejected (exit 5), as for one never set.`,
				Flags:        commonFlags(tenantFlag()),
				OnUsageError: usageErr,
				Action:       audienceDelete,
			},
		},
	}
}

// audienceErr words an audience read's error: a bad name or tenant is a
// usage error, a missing audience says which.
func audienceErr(err error, tenant, name string) error {
	var inv *relay.InvalidEventError
	switch {
	case errors.As(err, &inv):
		field := inv.Field
		if field == "name" {
			field = "NAME"
		} else {
			field = "--" + field
		}
		return cli.Exit(fmt.Sprintf("%s: %s", field, inv.Reason), exitUsage)
	case errors.Is(err, model.ErrNotFound):
		return cli.Exit(fmt.Sprintf("no audience %q in tenant %q (see edgerelay audience list --tenant %s)", name, tenant, tenant), exitError)
	}
	return err
}

// audienceSet replaces an audience's members with those of a file.
func audienceSet(c *cli.Context) error {
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
}

// audienceList prints a tenant's audiences with their member counts.
func audienceList(c *cli.Context) error {
	if c.NArg() != 0 {
		return cli.Exit("audience list takes no arguments (--tenant NAME picks the tenant)", exitUsage)
	}
	r, err := openExistingFor(c, true)
	if err != nil {
		return err
	}
	defer r.Close()
	var all []model.AudienceInfo
	for after := ""; ; {
		as, err := r.ListAudiences(c.Context, c.String("tenant"), after, 1000)
		if err != nil {
			return audienceErr(err, c.String("tenant"), "")
		}
		all = append(all, as...)
		if len(as) < 1000 {
			break
		}
		after = as[len(as)-1].Name
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, a := range all {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
		return nil
	}
	if len(all) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "no audiences in tenant %s\n", c.String("tenant"))
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMEMBERS\tUPDATED")
	for _, a := range all {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", a.Name, a.Members, a.UpdatedAt.UTC().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// audienceGet prints an audience's members in the form audience set reads.
func audienceGet(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("audience get takes one NAME", exitUsage)
	}
	r, err := openExistingFor(c, true)
	if err != nil {
		return err
	}
	defer r.Close()
	ms, err := r.Audience(c.Context, c.String("tenant"), c.Args().First())
	if err != nil {
		return audienceErr(err, c.String("tenant"), c.Args().First())
	}
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"members": ms})
}

// audienceDelete deletes an audience.
func audienceDelete(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("audience delete takes one NAME", exitUsage)
	}
	r, err := openExisting(c)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.DeleteAudience(c.Context, c.String("tenant"), c.Args().First()); err != nil {
		return audienceErr(err, c.String("tenant"), c.Args().First())
	}
	fmt.Fprintf(c.App.Writer, "audience %s (tenant %s): deleted\n", c.Args().First(), c.String("tenant"))
	return nil
}

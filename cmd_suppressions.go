package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// suppressionsCommand works on each tenant's suppression list from the
// host, on the database itself; the API has the same over HTTP
// (/v1/suppressions).
func suppressionsCommand() *cli.Command {
	tenantFlag := func(usage string) cli.Flag {
		return &cli.StringFlag{Name: "tenant", Value: "default", Usage: usage}
	}
	return &cli.Command{
		Name:    "suppressions",
		Aliases: []string{"addresses"},
		Usage:   "list, export, import, add or remove the addresses nothing is sent to; take bounce reports",
		Description: `Each tenant has a suppression list: addresses, per channel, that nothing is
sent to. A provider's refusal of the address itself (550 5.1.1, FCM
UNREGISTERED, Twilio 21211), a hard-bounce or complaint receipt, and a DSN or
ARF report (edgerelay suppressions bounce, POST /v1/bounces) put an address
there with the reason, source, provider and time. A notification to a listed
address ends suppressed, without a call. Hard bounces and complaints stay
until removed (suppression.hard_bounce_ttl sets a limit); soft bounces lapse
after suppression.soft_bounce_ttl (default 72h). edgerelay retry ID --lift
removes the entry of that notification's address and sends it.`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "the live entries: tenant, channel, address, reason, source, provider, since, until",
				Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}, &cli.StringFlag{Name: "tenant", Usage: "only this tenant's"}, &cli.StringFlag{Name: "channel", Usage: "only this channel's"}),
				OnUsageError: usageErr,
				Action:       suppressionsList,
			},
			{
				Name:         "export",
				Usage:        "every live entry as CSV (the columns import reads)",
				Flags:        commonFlags(&cli.StringFlag{Name: "tenant", Usage: "only this tenant's"}, &cli.StringFlag{Name: "channel", Usage: "only this channel's"}),
				OnUsageError: usageErr,
				Action:       suppressionsExport,
			},
			{
				Name:      "import",
				Usage:     "add the entries of a CSV file (- for stdin), all or none",
				ArgsUsage: "FILE",
				Description: `The first line names the columns: channel and address, and any of reason
(default manual), detail, created_at and expires_at (RFC 3339; empty: never),
tenant (default --tenant), provider, notification, source (read, but every
imported entry's source is import). An export reads back as it was.`,
				Flags:        commonFlags(tenantFlag("the tenant of lines that name none")),
				OnUsageError: usageErr,
				Action:       suppressionsImport,
			},
			{
				Name:      "add",
				Usage:     "put one address on a tenant's list",
				ArgsUsage: "CHANNEL ADDRESS",
				Flags: commonFlags(tenantFlag("the tenant whose list it is"),
					&cli.StringFlag{Name: "reason", Value: model.ReasonManual, Usage: "hard_bounce, soft_bounce, complaint or manual"},
					&cli.DurationFlag{Name: "ttl", Usage: "lapse after this long (0: never)"},
					&cli.StringFlag{Name: "detail", Usage: "a note kept with the entry"}),
				OnUsageError: usageErr,
				Action:       suppressionsAdd,
			},
			{
				Name:         "remove",
				Aliases:      []string{"clear"},
				Usage:        "take one address off a tenant's list",
				ArgsUsage:    "CHANNEL ADDRESS",
				Flags:        commonFlags(tenantFlag("the tenant whose list it is")),
				OnUsageError: usageErr,
				Action:       suppressionsRemove,
			},
			{
				Name:      "bounce",
				Usage:     "take DSN (RFC 3464) or ARF reports: mail message files, or a Maildir's new/ messages",
				ArgsUsage: "FILE|MAILDIR …",
				Description: `Each report is matched to its notification by the Message-ID it returns
(<KEY@domain>) or its VERP address (LOCAL+KEY@domain), recorded as a receipt,
and a hard bounce, soft bounce or complaint puts the address on its tenant's
list. For a Maildir (a directory with new/ and cur/), each message in new/
is taken and moved to cur/, whether it matched or not, so a cron run takes
each once; one that could not be read is left in new/ and named.`,
				Flags:        commonFlags(),
				OnUsageError: usageErr,
				Action:       suppressionsBounce,
			},
		},
	}
}

func suppressedNote(b relay.Bounced) string {
	switch {
	case b.Suppressed != "" && b.New:
		return ": suppressed, " + b.Suppressed
	case !b.New:
		return ": taken before"
	}
	return ""
}

// allSuppressions reads every live entry the flags select, page by page.
func allSuppressions(c *cli.Context) ([]model.Suppression, error) {
	r, err := openExistingFor(c, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	all := []model.Suppression{}
	f := model.SuppressionFilter{Tenant: c.String("tenant"), Channel: c.String("channel"), Limit: 500}
	for {
		page, err := r.Suppressions(c.Context, f)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			return all, nil
		}
		f.After = page[len(page)-1]
	}
}

// suppressionsList prints the live entries the flags select.
func suppressionsList(c *cli.Context) error {
	all, err := allSuppressions(c)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(all)
	}
	if len(all) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no addresses suppressed")
	}
	for _, e := range all {
		note := ""
		if e.Notification != 0 {
			note = fmt.Sprintf(" (notification %d)", e.Notification)
		}
		fmt.Fprintf(c.App.Writer, "%s\t%s\t%s\t%s%s\n", e.Tenant, e.Channel, e.Address, e.Describe(), note)
	}
	return nil
}

// suppressionsExport writes the live entries the flags select as CSV.
func suppressionsExport(c *cli.Context) error {
	all, err := allSuppressions(c)
	if err != nil {
		return err
	}
	return relay.WriteSuppressionsCSV(c.App.Writer, all, true, relay.RowNote)
}

// suppressionsImport adds the entries of a CSV file, all or none.
func suppressionsImport(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("suppressions import takes one FILE (- for stdin)", exitUsage)
	}
	var in io.Reader = c.App.Reader
	if name := c.Args().First(); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		defer f.Close()
		in = f
	}
	r, err := openExisting(c)
	if err != nil {
		return err
	}
	defer r.Close()
	read, written, err := r.ImportSuppressions(c.Context, in, c.String("tenant"), true, relay.RowNote)
	if err != nil {
		return cli.Exit(fmt.Sprintf("%s: %v (nothing imported)", c.Args().First(), err), exitError)
	}
	fmt.Fprintf(c.App.Writer, "imported %d entries (%d written; the others were listed already for as long or longer)\n", read, written)
	return nil
}

// suppressionsAdd puts one address on a tenant's list.
func suppressionsAdd(c *cli.Context) error {
	if c.NArg() != 2 {
		return cli.Exit("suppressions add takes CHANNEL ADDRESS (and --tenant, --reason, --ttl)", exitUsage)
	}
	if c.Duration("ttl") < 0 {
		return cli.Exit(fmt.Sprintf("--ttl %s: want 0 (never) or more", c.Duration("ttl")), exitUsage)
	}
	r, err := openExisting(c)
	if err != nil {
		return err
	}
	defer r.Close()
	e := model.Suppression{Tenant: c.String("tenant"), Channel: c.Args().Get(0), Address: c.Args().Get(1),
		Reason: c.String("reason"), Source: model.SourceCLI, Detail: c.String("detail")}
	if d := c.Duration("ttl"); d > 0 {
		t := time.Now().Add(d)
		e.ExpiresAt = &t
	}
	n, err := r.Suppress(c.Context, []model.Suppression{e})
	var se *relay.SuppressionError
	if errors.As(err, &se) {
		return cli.Exit(fmt.Sprintf("%s: %s", se.Field, se.Why), exitUsage)
	} else if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(c.App.Writer, "%s address %q of tenant %s is listed already, for as long or longer\n", e.Channel, e.Address, e.Tenant)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "suppressed: nothing more is sent to %s address %q of tenant %s\n", e.Channel, e.Address, e.Tenant)
	return nil
}

// suppressionsRemove takes one address off a tenant's list.
func suppressionsRemove(c *cli.Context) error {
	if c.NArg() != 2 {
		return cli.Exit("suppressions remove takes CHANNEL ADDRESS (and --tenant)", exitUsage)
	}
	r, err := openExisting(c)
	if err != nil {
		return err
	}
	defer r.Close()
	ch, addr := c.Args().Get(0), c.Args().Get(1)
	if err := r.Unsuppress(c.Context, c.String("tenant"), ch, addr); errors.Is(err, model.ErrNotFound) {
		return cli.Exit(err.Error(), exitError)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "removed: %s address %q of tenant %s will be sent to again\n", ch, addr, c.String("tenant"))
	return nil
}

// suppressionsBounce takes DSN and ARF reports from files and Maildirs.
func suppressionsBounce(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.Exit("suppressions bounce takes FILE or MAILDIR arguments", exitUsage)
	}
	r, err := openExisting(c)
	if err != nil {
		return err
	}
	defer r.Close()
	failed := 0
	for _, arg := range c.Args().Slice() {
		files, maildir := []string{arg}, false
		if st, err := os.Stat(filepath.Join(arg, "new")); err == nil && st.IsDir() {
			maildir = true
			entries, err := os.ReadDir(filepath.Join(arg, "new"))
			if err != nil {
				return cli.Exit(err.Error(), exitError)
			}
			files = files[:0]
			for _, e := range entries {
				if e.Type().IsRegular() {
					files = append(files, filepath.Join(arg, "new", e.Name()))
				}
			}
			sort.Strings(files)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintf(c.App.ErrWriter, "edgerelay: %v\n", err)
				failed++
				continue
			}
			b, err := r.AddBounce(c.Context, "", raw)
			switch {
			case err == nil:
				fmt.Fprintf(c.App.Writer, "%s: %s %s of notification %d (%s %q of %s)%s\n", f, b.Kind, b.Status, b.Notification,
					b.Channel, b.Address, b.Tenant, suppressedNote(b))
			case errors.Is(err, relay.ErrNotBounce), errors.Is(err, model.ErrNotFound):
				fmt.Fprintf(c.App.ErrWriter, "edgerelay: %s: %v\n", f, err)
				failed++
			default:
				return err // the store: stop; the message stays where it is
			}
			if maildir {
				cur := filepath.Join(filepath.Dir(filepath.Dir(f)), "cur", filepath.Base(f)+":2,S")
				if err := os.Rename(f, cur); err != nil {
					return cli.Exit(err.Error(), exitError)
				}
			}
		}
	}
	if failed > 0 {
		return cli.Exit(fmt.Sprintf("%d report(s) not taken (above)", failed), exitError)
	}
	return nil
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/templates"
)

func templateCommand() *cli.Command {
	return &cli.Command{
		Name:  "template",
		Usage: "manage message templates (stored over the API, or the config's files), or render one without sending",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the templates: the config's templates.dir and those stored over the API (tenant, name, channel, locale, version, source)",
				Description: `Prints a table with a header row: TENANT (* for every tenant's), NAME, CHANNEL,
LOCALE, VERSION and SOURCE per template: a file's version is a hash of its parts, a stored
template's its number; SOURCE is the file, or "api" ("api retired" once
deleted, "api shadowed" where a file of the same key wins). --json prints one
object per template.`,
				Flags: commonFlags(
					&cli.StringFlag{Name: "tenant", Usage: "only the templates `TENANT`'s events may use"},
					&cli.BoolFlag{Name: "json", Usage: "one JSON object per template"},
				),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					r, files, err := templateRelay(c)
					if err != nil {
						return err
					}
					ts := relay.FileTemplateInfos(files, c.String("tenant"))
					if r != nil {
						defer r.Close()
						if ts, err = r.ListTemplates(c.Context, c.String("tenant")); err != nil {
							return err
						}
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					if !c.Bool("json") && len(ts) > 0 {
						fmt.Fprintln(tw, "TENANT\tNAME\tCHANNEL\tLOCALE\tVERSION\tSOURCE")
					}
					for _, t := range ts {
						if c.Bool("json") {
							b, _ := json.Marshal(t)
							fmt.Fprintf(c.App.Writer, "%s\n", b)
							continue
						}
						tenant, source := t.Tenant, t.File
						if tenant == "" {
							tenant = "*"
						}
						if t.Source == "api" {
							source = "api"
							if t.Retired != nil {
								source += " retired"
							}
							if t.Shadowed {
								source += " shadowed"
							}
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", tenant, t.Name, t.Channel, t.Locale, t.Version, source)
					}
					if len(ts) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no templates")
					}
					return tw.Flush()
				},
			},
			templateSetCommand(),
			templateGetCommand(),
			{
				Name:      "render",
				Usage:     "print the message TYPE's template would send one recipient, as accept renders it, without sending",
				ArgsUsage: "TYPE",
				Description: `Renders the template named TYPE (a notification type or purpose) for the
recipient in --recipient (a recipient as in an event: id, its address for the
channel, and locale and timezone if it has them) with the data in --data (an
event's "data"), exactly as an accept would, and prints the message that
would be stored and sent (JSON: subject, body, html, data, and the template's
name, version and locale), with the templates an accept would use: the
config's files and those stored in the database (template set, PUT
/v1/templates/...). Nothing is written, nothing is sent.

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
					r, set, err := templateRelay(c)
					if err != nil {
						return err
					}
					if r != nil {
						defer r.Close()
						if set, err = r.Templates(c.Context); err != nil {
							return err
						}
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
					msg, err := relay.Preview(c.Context, set, ev, c.String("channel"))
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

// templateRelay opens the relay read-only for the templates an accept
// would use: the config's files and, when the database exists, the stored
// ones. Without a database, r is nil and files are all there is.
func templateRelay(c *cli.Context) (r *relay.Relay, files *templates.Set, err error) {
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return nil, nil, err
	}
	s.opts.ReadOnly = true
	if err := dbExists(s.flags.DB); err != nil {
		if s.opts.Templates == nil {
			return nil, nil, cli.Exit(fmt.Sprintf("no templates: no config with templates.dir (--config), and %v", err), exitError)
		}
		return nil, s.opts.Templates, nil
	}
	r, err = openRelayWith(c, s)
	return r, s.opts.Templates, err
}

// templateFlags name one stored template.
func templateFlags(own ...cli.Flag) []cli.Flag {
	return commonFlags(append([]cli.Flag{
		&cli.StringFlag{Name: "channel", Required: true, Usage: "the template's `CHANNEL` (email, sms, push, chat, webhook …)"},
		&cli.StringFlag{Name: "locale", Usage: "the translation's `LOCALE` (BCP 47; default: templates.default_locale, else en)"},
		&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the template's `TENANT`"},
	}, own...)...)
}

// cliTemplateKey is the key the flags name.
func cliTemplateKey(c *cli.Context, r *relay.Relay) (model.TemplateKey, error) {
	if c.NArg() != 1 {
		return model.TemplateKey{}, cli.Exit("takes one NAME (a notification type or purpose)", exitUsage)
	}
	locale := c.String("locale")
	if locale == "" {
		locale = "en"
		if set := r.FileTemplates(); set != nil {
			locale = set.DefaultLocale()
		}
	}
	k, err := relay.TemplateKey(c.String("tenant"), c.Args().First(), c.String("channel"), locale)
	if err != nil {
		return k, cli.Exit("--"+strings.TrimSpace(err.Error()), exitUsage)
	}
	return k, nil
}

func templateSetCommand() *cli.Command {
	return &cli.Command{
		Name:      "set",
		Usage:     "store the next version of a template from its part files",
		ArgsUsage: "NAME",
		Description: `Stores the parts in --file (one file per part, named as in templates.dir:
[CHANNEL.]PART.tmpl, e.g. email.subject.tmpl, email.html.tmpl) as the next
version of template NAME for --channel, --locale and --tenant, as PUT
/v1/templates/NAME/CHANNEL/LOCALE does: a part that does not parse is refused
with its line and column (exit 5), and parts equal to the latest version make
no new one. Every serve uses it within templates.refresh (1 s).`,
		Flags: templateFlags(
			&cli.StringSliceFlag{Name: "file", Required: true, Usage: "a part's `FILE` ([CHANNEL.]PART.tmpl); repeat for each part"},
		),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			parts := map[string]string{}
			for _, f := range c.StringSlice("file") {
				base, ok := strings.CutSuffix(filepath.Base(f), templates.Ext)
				if !ok {
					return cli.Exit(fmt.Sprintf("--file %s: name it [CHANNEL.]PART%s (email.subject%s)", f, templates.Ext, templates.Ext), exitUsage)
				}
				part := base
				if ch, p, ok := strings.Cut(base, "."); ok {
					if ch != c.String("channel") {
						return cli.Exit(fmt.Sprintf("--file %s: a %s part, not %s's", f, ch, c.String("channel")), exitUsage)
					}
					part = p
				}
				if _, dup := parts[part]; dup {
					return cli.Exit(fmt.Sprintf("--file %s: part %s given twice", f, part), exitUsage)
				}
				b, err := os.ReadFile(f)
				if err != nil {
					return cli.Exit(fmt.Sprintf("--file: %v", err), exitUsage)
				}
				parts[part] = string(b)
			}
			r, _, err := openRelay(c, c.App.ErrWriter)
			if err != nil {
				return err
			}
			defer r.Close()
			key, err := cliTemplateKey(c, r)
			if err != nil {
				return err
			}
			st, created, err := r.PutTemplate(c.Context, key, parts)
			var pe *templates.ParseError
			var inv *relay.InvalidEventError
			var ce *relay.TemplateConflictError
			switch {
			case errors.As(err, &pe):
				return cli.Exit(fmt.Sprintf("%s: line %d, column %d: %s", partFile(c, pe.Part), pe.Line, pe.Column, pe.Msg), exitRejected)
			case errors.As(err, &inv), errors.As(err, &ce):
				return cli.Exit(err.Error(), exitRejected)
			case err != nil:
				return err
			}
			what := "unchanged"
			if created {
				what = "stored"
			}
			fmt.Fprintf(c.App.Writer, "template %s/%s/%s (tenant %s): version %d %s\n", st.Name, st.Channel, st.Locale, st.Tenant, st.Version, what)
			return nil
		},
	}
}

// partFile is the --file a part came from.
func partFile(c *cli.Context, part string) string {
	for _, f := range c.StringSlice("file") {
		base := strings.TrimSuffix(filepath.Base(f), templates.Ext)
		if base == part || strings.HasSuffix(base, "."+part) {
			return f
		}
	}
	return part
}

func templateGetCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "print a stored template's latest version (or --version N)",
		ArgsUsage: "NAME",
		Description: `Prints the version as GET /v1/templates/NAME/CHANNEL/LOCALE answers it (JSON:
tenant, name, channel, locale, version, parts, created_at, retired_at), or with
--part PART that part's text alone, as a file for "template set" holds it.
--versions lists every version instead. Exit 1 if there is none.`,
		Flags: templateFlags(
			&cli.IntFlag{Name: "version", Usage: "the version `N` (default: the latest)"},
			&cli.StringFlag{Name: "part", Usage: "print only `PART`'s text"},
			&cli.BoolFlag{Name: "versions", Usage: "list every version, one JSON object a line"},
		),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			r, err := openExistingFor(c, true)
			if err != nil {
				return err
			}
			defer r.Close()
			key, err := cliTemplateKey(c, r)
			if err != nil {
				return err
			}
			if c.Bool("versions") {
				vs, err := r.Store().TemplateVersions(c.Context, key)
				if err != nil {
					return err
				}
				if len(vs) == 0 {
					return cli.Exit(fmt.Sprintf("no template %s/%s/%s in tenant %s", key.Name, key.Channel, key.Locale, key.Tenant), exitError)
				}
				for _, v := range vs {
					b, _ := json.Marshal(v)
					fmt.Fprintf(c.App.Writer, "%s\n", b)
				}
				return nil
			}
			st, err := r.Store().TemplateVersion(c.Context, key, c.Int("version"))
			if errors.Is(err, model.ErrNotFound) {
				return cli.Exit(err.Error(), exitError)
			}
			if err != nil {
				return err
			}
			if p := c.String("part"); p != "" {
				text, ok := st.Parts[p]
				if !ok {
					return cli.Exit(fmt.Sprintf("version %d has no part %q", st.Version, p), exitError)
				}
				_, err := fmt.Fprint(c.App.Writer, text)
				return err
			}
			b, err := json.Marshal(st)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
			return err
		},
	}
}

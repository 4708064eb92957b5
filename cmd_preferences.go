package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// preferencesCommand shows and changes what a recipient lets reach them
// (categories on or off, quiet hours), as GET and PUT
// /v1/recipients/{id}/preferences do.
func preferencesCommand() *cli.Command {
	tenant := &cli.StringFlag{Name: "tenant", Value: "default", Usage: "the recipient's tenant"}
	return &cli.Command{
		Name:  "preferences",
		Usage: "show or change a recipient's preferences: categories on or off, per channel, quiet hours",
		Description: `Categories are configured (categories:, and types' category:). A required
category is always on; an optional one is on or off by default, and each
recipient may turn it off or on, on every channel or on one. A notification
a preference forbids ends skipped, with the reason, without an attempt.`,
		Subcommands: []*cli.Command{
			{
				Name:         "show",
				Usage:        "every category of the tenant, and what the recipient set",
				ArgsUsage:    "RECIPIENT",
				Flags:        commonFlags(tenant, &cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("preferences show takes RECIPIENT (and --tenant)", exitUsage)
					}
					r, err := openExistingFor(c, true)
					if err != nil {
						return err
					}
					defer r.Close()
					p, err := r.RecipientPreferences(c.Context, c.String("tenant"), c.Args().First())
					if err != nil {
						return prefErr(err)
					}
					return printPreferences(c, p)
				},
			},
			{
				Name:      "set",
				Usage:     "change some of a recipient's preferences, keeping the rest",
				ArgsUsage: "RECIPIENT",
				Flags: commonFlags(tenant, &cli.BoolFlag{Name: "json", Usage: "print as JSON"},
					&cli.StringSliceFlag{Name: "off", Usage: "turn `CATEGORY[:CHANNEL]` off (on every channel without :CHANNEL)"},
					&cli.StringSliceFlag{Name: "on", Usage: "turn `CATEGORY[:CHANNEL]` on"},
					&cli.StringSliceFlag{Name: "default", Usage: "forget the recipient's switch for `CATEGORY[:CHANNEL]` (back to the default)"},
					&cli.StringSliceFlag{Name: "quiet", Usage: "quiet hours `[CATEGORY=]HH:MM-HH:MM` (no CATEGORY: every optional one); WINDOW none removes them"},
					&cli.StringFlag{Name: "timezone", Usage: "the recipient's IANA time `ZONE` (Europe/Berlin); none removes it"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("preferences set takes RECIPIENT (and --tenant)", exitUsage)
					}
					// A preference may come before anything was sent: the
					// database is created if missing.
					r, _, err := openRelay(c, c.App.ErrWriter)
					if err != nil {
						return err
					}
					defer r.Close()
					t, id := c.String("tenant"), c.Args().First()
					cur, err := r.RecipientPreferences(c.Context, t, id)
					if err != nil {
						return prefErr(err)
					}
					in, err := editPreferences(c, cur)
					if err != nil {
						return err
					}
					p, err := r.PutPreferences(c.Context, t, id, in, model.SetByCLI)
					if err != nil {
						return prefErr(err)
					}
					return printPreferences(c, p)
				},
			},
		},
	}
}

// editPreferences is cur as a put, with the flags' changes made.
func editPreferences(c *cli.Context, cur relay.Preferences) (relay.PreferencesInput, error) {
	type key struct{ cat, ch string }
	sw := map[key]bool{}
	var order []key
	setSw := func(k key, on bool) {
		if _, ok := sw[k]; !ok {
			order = append(order, k)
		}
		sw[k] = on
	}
	for _, cp := range cur.Categories {
		if !cp.SetAt.IsZero() {
			setSw(key{cp.Name, ""}, cp.Enabled)
		}
		for _, s := range cp.Channels {
			setSw(key{cp.Name, s.Channel}, s.Enabled)
		}
	}
	parse := func(flag, v string) (key, error) {
		cat, ch, _ := strings.Cut(v, ":")
		if cat == "" {
			return key{}, cli.Exit(fmt.Sprintf("--%s %q: want CATEGORY or CATEGORY:CHANNEL", flag, v), exitUsage)
		}
		return key{cat, ch}, nil
	}
	for _, f := range []string{"off", "on"} {
		for _, v := range c.StringSlice(f) {
			k, err := parse(f, v)
			if err != nil {
				return relay.PreferencesInput{}, err
			}
			setSw(k, f == "on")
		}
	}
	for _, v := range c.StringSlice("default") {
		k, err := parse("default", v)
		if err != nil {
			return relay.PreferencesInput{}, err
		}
		delete(sw, k)
	}
	in := relay.PreferencesInput{TimeZone: cur.TimeZone, Switches: []relay.SwitchInput{}, QuietHours: []relay.QuietPreference{}}
	for _, k := range order {
		if on, ok := sw[k]; ok {
			in.Switches = append(in.Switches, relay.SwitchInput{Category: k.cat, Channel: k.ch, Enabled: &on})
		}
	}
	quiet := map[string]string{}
	var qorder []string
	for _, q := range cur.Quiet {
		quiet[q.Category] = q.Window
		qorder = append(qorder, q.Category)
	}
	for _, v := range c.StringSlice("quiet") {
		cat, w, ok := strings.Cut(v, "=")
		if !ok {
			cat, w = "", v
		}
		if _, had := quiet[cat]; !had {
			qorder = append(qorder, cat)
		}
		quiet[cat] = w
	}
	for _, cat := range qorder {
		if w := quiet[cat]; w != "none" {
			in.QuietHours = append(in.QuietHours, relay.QuietPreference{Category: cat, Window: w})
		}
	}
	if c.IsSet("timezone") {
		in.TimeZone = c.String("timezone")
		if in.TimeZone == "none" {
			in.TimeZone = ""
		}
	}
	return in, nil
}

// prefErr makes a refused preference a usage error naming what was wrong.
func prefErr(err error) error {
	var inv *relay.InvalidEventError
	if errors.As(err, &inv) {
		return cli.Exit(fmt.Sprintf("%s: %s", inv.Field, inv.Reason), exitUsage)
	}
	return err
}

func printPreferences(c *cli.Context, p relay.Preferences) error {
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(p)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "recipient %s of tenant %s", p.Recipient, p.Tenant)
	if p.TimeZone != "" {
		fmt.Fprintf(w, ", time zone %s", p.TimeZone)
	}
	fmt.Fprintln(w)
	if len(p.Categories) == 0 {
		fmt.Fprintln(w, "no categories configured (categories: in the config file)")
	}
	onOff := map[bool]string{true: "on", false: "off"}
	for _, cp := range p.Categories {
		kind := "optional, " + onOff[cp.Default] + " by default"
		if cp.Required {
			kind = "required"
		}
		set := "default"
		if !cp.SetAt.IsZero() {
			set = fmt.Sprintf("set %s by %s", cp.SetAt.Format(time.RFC3339), cp.SetBy)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t(%s)\n", cp.Name, onOff[cp.Enabled], kind, set)
		for _, s := range cp.Channels {
			fmt.Fprintf(w, "  on %s\t%s\t\t(set %s by %s)\n", s.Channel, onOff[s.Enabled], s.SetAt.Format(time.RFC3339), s.SetBy)
		}
	}
	for _, q := range p.Quiet {
		cat := q.Category
		if cat == "" {
			cat = "every optional category"
		}
		fmt.Fprintf(w, "quiet hours %s\t%s\t\t(set %s by %s)\n", q.Window, cat, q.SetAt.Format(time.RFC3339), q.SetBy)
	}
	return w.Flush()
}

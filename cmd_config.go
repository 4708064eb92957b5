package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check a config file",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a config file and print every problem with its line, or what it configures",
			ArgsUsage: "[FILE]",
			Description: `Reads the file (FILE, or --config) and checks it as every command that reads
the config does (serve, dispatch, cron, batch send, tail ...): every key (an
unknown one is named, with the known key it is closest to), every value's
kind and range, ${VAR} references, routes to providers, channels with
routes, job schedules, time zones and digest templates, batch files (present,
readable, a known format), tail source URLs, and every provider built; then
it opens each tail source (its database reached, its table and columns
checked), which the other commands leave to the tailer, so that they work
while an application's database is down. Prints each problem with its line
and key path and exits 1, or prints the routes and exits 0. No secret is
printed.

With --connect it also connects to each routed provider that can be tried
without sending anything (smtp:// and smtps://: TCP, TLS or STARTTLS, EHLO
and AUTH, then QUIT), and prints what each answered; a provider that cannot
be reached, or refuses the configuration (no STARTTLS where the URL requires
it, a rejected password), is a problem (exit 1). HTTP providers are not
called: no request to them is free of effects.

A --route given to serve or dispatch counts as a route for the checks; this
command sees only the file.`,
			Flags: commonFlags(&cli.BoolFlag{Name: "connect", EnvVars: []string{"EDGERELAY_CONFIG_CONNECT"},
				Usage: "also connect to each routed SMTP provider (TLS, EHLO, AUTH, no message) and report what it answered"}),
			OnUsageError: usageErr,
			Action: func(c *cli.Context) error {
				path := lookup(c, "config")
				if c.NArg() == 1 {
					path = c.Args().First()
				}
				if path == "" || c.NArg() > 1 {
					return cli.Exit("config check takes one FILE (or --config FILE)", exitUsage)
				}
				// The same validation as every command that reads the
				// config (what this passes, serve and dispatch take), and
				// the tail: sources opened, which the others leave to the
				// tailer.
				cfg, err := config.Check(path)
				if err != nil {
					return err
				}
				routes, tenants, limits, err := cfg.Build(nil)
				if err != nil {
					return err
				}
				w := c.App.Writer
				fmt.Fprintf(w, "%s: ok\n", path)
				// A channel a slip away from a standard one is named
				// (it is a valid name for a channel of one's own, so not a
				// problem): a typo shows here, not at the first send.
				slip := func(ch string) string {
					if std, ok := config.NearMiss(ch); ok {
						return fmt.Sprintf("   (not a standard channel: did you mean %s? events name %q in channels or addresses to use it)", std, ch)
					}
					return ""
				}
				for _, ch := range slices.Sorted(maps.Keys(routes)) {
					fmt.Fprintf(w, "  route %-8s %s%s\n", ch, routeNames(routes[ch]), slip(ch))
				}
				for _, t := range slices.Sorted(maps.Keys(tenants)) {
					for _, ch := range slices.Sorted(maps.Keys(tenants[t])) {
						fmt.Fprintf(w, "  tenant %s: route %s %s%s\n", t, ch, routeNames(tenants[t][ch]), slip(ch))
					}
				}
				for _, name := range slices.Sorted(maps.Keys(limits)) {
					if l := limits[name]; l.Concurrency > 0 || l.Rate > 0 {
						fmt.Fprintf(w, "  limit %s: concurrency %d, rate %g/s, burst %d\n", name, l.Concurrency, l.Rate, l.Burst)
					}
				}
				if c.Bool("connect") {
					return connectProviders(c.Context, w, routes, tenants)
				}
				return nil
			},
		}},
	}
}

func routeNames[P interface{ Name() string }](ps []P) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	return strings.Join(names, " -> ")
}

// prober is a provider that can open a connection and close it again
// without sending anything (the smtp provider).
type prober interface {
	Name() string
	Probe(context.Context) error
}

// connectProviders tries each distinct routed provider that is a prober,
// once, and prints one line for each provider: ok, the problem, or that it
// is not tried. Any problem makes the command exit 1.
func connectProviders(ctx context.Context, w io.Writer, routes relay.Routes, tenants map[string]relay.Routes) error {
	var all []providers.Provider
	seen := map[providers.Provider]bool{}
	add := func(rs relay.Routes) {
		for _, ch := range slices.Sorted(maps.Keys(rs)) {
			for _, p := range rs[ch] {
				if !seen[p] {
					seen[p] = true
					all = append(all, p)
				}
			}
		}
	}
	add(routes)
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		add(tenants[t])
	}
	failed := 0
	for _, p := range all {
		pr, ok := p.(prober)
		if !ok {
			fmt.Fprintf(w, "  connect %s: not tried (only SMTP providers can be reached without sending)\n", p.Name())
			continue
		}
		if err := pr.Probe(ctx); err != nil {
			failed++
			fmt.Fprintf(w, "  connect %s: FAILED: %v\n", p.Name(), err)
			continue
		}
		fmt.Fprintf(w, "  connect %s: ok\n", p.Name())
	}
	if failed > 0 {
		return cli.Exit(fmt.Sprintf("config check --connect: %d of the providers tried could not be used (see above)", failed), exitError)
	}
	return nil
}

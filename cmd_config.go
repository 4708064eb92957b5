package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"edgerelay/config"
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

A --route given to serve or dispatch counts as a route for the checks; this
command sees only the file.`,
			Flags:        commonFlags(),
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

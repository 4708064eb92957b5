package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check a config file",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a config file and print every problem with its line, or what it configures",
			ArgsUsage: "[FILE]",
			Description: `Reads the file (FILE, or --config), checks every key and value, expands
${VAR} references, and builds every provider it names, as serve and dispatch
would. Prints each problem with its line and exits 1, or prints the routes
and exits 0. No secret is printed.`,
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
				// Every problem at once: the file's, then each provider's.
				cfg, problems, err := parseConfig(path)
				if err != nil {
					return err
				}
				if cfg == nil {
					return &ConfigError{Path: path, Problems: problems}
				}
				routes, tenants, limits, err := cfg.build(nil)
				var ce *ConfigError
				if errors.As(err, &ce) {
					problems = append(problems, ce.Problems...)
				} else if err != nil {
					return err
				}
				if len(problems) > 0 {
					return &ConfigError{Path: path, Problems: byLine(problems)}
				}
				w := c.App.Writer
				fmt.Fprintf(w, "%s: ok\n", path)
				for _, ch := range sortedKeys(routes) {
					fmt.Fprintf(w, "  route %-8s %s\n", ch, routeNames(routes[ch]))
				}
				for _, t := range sortedKeys(tenants) {
					for _, ch := range sortedKeys(tenants[t]) {
						fmt.Fprintf(w, "  tenant %s: route %s %s\n", t, ch, routeNames(tenants[t][ch]))
					}
				}
				for _, name := range sortedKeys(limits) {
					if l := limits[name]; l.Concurrency > 0 || l.Rate > 0 {
						fmt.Fprintf(w, "  limit %s: concurrency %d, rate %g/s, burst %d\n", name, l.Concurrency, l.Rate, l.Burst)
					}
				}
				return nil
			},
		}},
	}
}

// byLine orders problems by the line they name.
func byLine(problems []string) []string {
	line := func(p string) int {
		var n int
		fmt.Sscanf(p, "line %d", &n)
		return n
	}
	sort.SliceStable(problems, func(i, j int) bool { return line(problems[i]) < line(problems[j]) })
	return problems
}

func routeNames[P interface{ Name() string }](ps []P) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	return strings.Join(names, " -> ")
}

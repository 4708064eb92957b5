package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/bench"
	"github.com/edgerelay/edgerelay/store/postgres"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure this machine: ingest against the raw SQLite (or PostgreSQL) ceiling, dispatch, fan-out, memory, start-up",
		UsageText: "edgerelay bench [--events N] [--dir DIR] [--as-run] [--db postgres://…]",
		Description: `Runs the measurements behind the README's figures, each beside its baseline,
and prints one Markdown table. Every database is fresh, in --dir (the disk is
part of what is measured: its fsync is what a durable accept waits for), with
the settings edgerelay ships with (WAL, synchronous=FULL). The simulator runs
as its own process (this binary's "sim"), so its CPU share can be shown.
Loopback only. Takes a few minutes with the default 20,000 events on a
2-core machine; compare figures within one run, not across runs.

With --db postgres://…, the same for the PostgreSQL store on that database:
ingest beside a raw PostgreSQL ceiling measured in the same run (one
connection inserting 1,000-row batches with ON CONFLICT DO NOTHING), fan-out,
and dispatch end to end with one, two and three nodes (relays with their own
pools and dispatchers) on one database. Each measurement gets a schema of its
own (edgerelay_bench_…), dropped at the end; the server's version and
durability settings head the table.

The rows marked "as run" measure the way an operator runs edgerelay, each
part this binary with its defaults in a process of its own: a backlog written
by "batch send" and delivered by "dispatch --until-idle" through the simulator
answering at once, after 100 ms and after 300 ms (--latency), beside the
dispatch floor measured in the same run; "serve" taking new events over HTTP
from a load in another process (256 connections, every event new), beside
the raw SQLite ceiling; then steady loads from that process for 15 s at 50%,
90% and 150% of what serve took: the backlog at the end (read from serve's
database), the delivery rate, accept-to-sent times from the audit trail, and
whether ingest was shed (503 + Retry-After). Only the database, the route to
the simulator and a tenant's token are set. --as-run measures only those.

The same measurements as Go benchmarks:
  go test ./bench -run '^$' -bench 'Ingest|Dispatch' -benchtime 20000x
  go test ./bench -run '^$' -bench FanOut -benchtime 5x`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "events", Value: 20000, Usage: "events per ingest and dispatch measurement"},
			&cli.StringFlag{Name: "dir", Usage: "`DIR` for the databases (default: a new temporary directory, removed after)"},
			&cli.StringFlag{Name: "db", Usage: "measure the PostgreSQL store on this `postgres://` database instead (schemas of its own, dropped after)"},
			&cli.IntFlag{Name: "latency-events", Usage: "the backlog drained through the simulator with latency (default 4000, or --events if fewer; a small one is mostly the wait for its first and last windows)"},
			&cli.BoolFlag{Name: "as-run", Usage: "measure only the rows made as an operator runs edgerelay (the binary's defaults, load from another process), beside the ceiling and the floor"},
		},
		Subcommands: []*cli.Command{benchLoadCommand()},
		Action: func(c *cli.Context) error {
			if c.Int("events") < 100 {
				return cli.Exit("bench: --events must be at least 100", exitUsage)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: find this binary: %w", err)
			}
			dir := c.String("dir")
			if dir == "" {
				if dir, err = os.MkdirTemp("", "edgerelay-bench-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			var stderr io.Writer = os.Stderr
			if c.App.ErrWriter != nil {
				stderr = c.App.ErrWriter
			}
			cfg := bench.Config{Exe: exe, Dir: dir, Events: c.Int("events"), LatencyEvents: c.Int("latency-events"), Progress: stderr, AsRunOnly: c.Bool("as-run")}
			var rows []bench.Row
			if db := c.String("db"); db != "" {
				if cfg.AsRunOnly {
					return cli.Exit("bench: --as-run measures SQLite; leave out --db", exitUsage)
				}
				if !postgres.IsURL(db) {
					return cli.Exit("bench: --db takes a postgres:// URL (SQLite is measured on files of its own in --dir)", exitUsage)
				}
				rows, err = bench.PostgresSuite(c.Context, cfg, db)
			} else {
				rows, err = bench.Suite(c.Context, cfg)
			}
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			bench.WriteTable(c.App.Writer, rows)
			return nil
		},
	}
}

// benchLoadCommand is the load generator `bench` runs in a process of its
// own, so that the load's CPU is not counted to the server it measures.
func benchLoadCommand() *cli.Command {
	return &cli.Command{
		Name:   "load",
		Usage:  "post new one-recipient events to a serve (bench runs it as a separate process)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Required: true, Usage: "serve's base `URL` (http://127.0.0.1:8025)"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"EDGERELAY_BENCH_TOKEN"}, Usage: "a tenant's API `TOKEN` (none: an open API)"},
			&cli.IntFlag{Name: "conns", Value: 256, Usage: "connections, one request at a time each"},
			&cli.StringFlag{Name: "prefix", Value: "load-", Usage: "event ids are PREFIX0, PREFIX1 …"},
			&cli.Float64Flag{Name: "rate", Usage: "offer this many events per second for --for (open loop); 0: --events as fast as answered"},
			&cli.DurationFlag{Name: "for", Value: 15 * time.Second, Usage: "with --rate: how long"},
			&cli.IntFlag{Name: "events", Value: 20000, Usage: "without --rate: how many"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("conns") < 1 || c.Float64("rate") < 0 || c.Duration("for") <= 0 || c.Int("events") < 1 {
				return cli.Exit("bench load: --conns, --for and --events must be positive, --rate 0 or more", exitUsage)
			}
			r, err := bench.Load(c.Context, bench.LoadOptions{URL: c.String("url"), Token: c.String("token"), Conns: c.Int("conns"),
				Prefix: c.String("prefix"), Rate: c.Float64("rate"), For: c.Duration("for"), Events: c.Int("events")})
			if err != nil {
				return fmt.Errorf("bench load: %w", err)
			}
			return json.NewEncoder(c.App.Writer).Encode(r)
		},
	}
}

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"edgerelay/bench"
	"edgerelay/store/postgres"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure this machine: ingest against the raw SQLite (or PostgreSQL) ceiling, dispatch, fan-out, memory, start-up",
		UsageText: "edgerelay bench [--events N] [--dir DIR] [--db postgres://…]",
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

The same measurements as Go benchmarks:
  go test ./bench -run '^$' -bench 'Ingest|Dispatch' -benchtime 20000x
  go test ./bench -run '^$' -bench FanOut -benchtime 5x`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "events", Value: 20000, Usage: "events per ingest and dispatch measurement"},
			&cli.StringFlag{Name: "dir", Usage: "`DIR` for the databases (default: a new temporary directory, removed after)"},
			&cli.StringFlag{Name: "db", Usage: "measure the PostgreSQL store on this `postgres://` database instead (schemas of its own, dropped after)"},
		},
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
			cfg := bench.Config{Exe: exe, Dir: dir, Events: c.Int("events"), Progress: stderr}
			var rows []bench.Row
			if db := c.String("db"); db != "" {
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

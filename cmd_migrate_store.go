package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/store/migrate"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// migrate-store works below the relay, on the two stores' tables (package
// store/migrate): it copies rows and decides nothing, so it is the one
// command that does not go through *relay.Relay. The relay's guarantees
// are the target's to keep once serve runs on it.
func migrateStoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate-store",
		Usage:     "move an installation from its SQLite file to PostgreSQL",
		ArgsUsage: " ",
		Description: `Copies every event, notification (key, status, pinned provider, retry
budget), attempt, receipt, feed item and watermark, feed counter, token, request
key, job run, source position, audience, invalid address and the key of the API's
ids from the SQLite file
--from into the PostgreSQL database --to, keeping ids and keys, then sets the
target's id sequences past every id the source gave.

Stop serve (and cron, tail, dispatch) on the box first: the source is read in one
read-only snapshot, and a source with a live lease is refused. Notifications left
sending by a killed process are moved as they are and settled as unknown once by
the target. The target is migrated to this binary's schema (a newer one is
refused) and written one batch per transaction; running the command again is
harmless: it finishes an interrupted copy and carries over what the source
changed since (a rollback that served the box again), and a finished move
writes nothing. A target with other rows, or one that has taken work since it
was moved to, is refused.

One run at a time: while a run copies, a second one into the same schema is
refused, naming the first, and so is any other command on the target; the
source's write lock is held, so nothing commits to the file meanwhile. --to may
be a PgBouncer in transaction pooling (add default_query_exec_mode=simple_protocol).

Then: edgerelay serve --db postgres://…`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "the SQLite `FILE` to move", EnvVars: []string{"EDGERELAY_MIGRATE_FROM"}},
			&cli.StringFlag{Name: "to", Usage: "the PostgreSQL `URL` to move to (postgres://user:pass@host/db?sslmode=…)", EnvVars: []string{"EDGERELAY_MIGRATE_TO"}},
			&cli.IntFlag{Name: "batch", Value: 1000, Usage: "`ROWS` per target transaction", EnvVars: []string{"EDGERELAY_MIGRATE_BATCH"}},
			&cli.BoolFlag{Name: "json", Usage: "print the counts as JSON"},
		},
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("migrate-store takes no arguments: --from FILE --to URL", exitUsage)
			}
			to := c.String("to")
			if c.String("from") == "" || to == "" {
				return cli.Exit("migrate-store needs --from FILE (the SQLite file) and --to URL (postgres://…) (see --help)", exitUsage)
			}
			if !postgres.IsURL(to) {
				return cli.Exit("--to: want a postgres:// URL (migrate-store moves a SQLite file to PostgreSQL)", exitUsage)
			}
			if c.Int("batch") <= 0 {
				return cli.Exit("--batch: want a positive number of rows", exitUsage)
			}
			errw := c.App.ErrWriter
			last := time.Now()
			res, err := migrate.Run(c.Context, c.String("from"), to, migrate.Options{
				Batch: c.Int("batch"),
				Hooks: migrateHooks(errw),
				Progress: func(p migrate.Progress) {
					// Progress on stderr: each table's end, and a line a
					// second on a long one.
					if p.Done || time.Since(last) >= time.Second {
						last = time.Now()
						state := "…"
						if p.Done {
							state = "done"
						}
						fmt.Fprintf(errw, "migrate-store: %s: %d/%d read, %d copied %s\n", p.Table, p.Read, p.Total, p.Copied, state)
					}
				},
			})
			if err != nil {
				return fmt.Errorf("migrate-store: %w", err)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(c.App.Writer, "moved %s to %s\n", res.Source, res.Target)
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "table\tsource\tcopied\tupdated\talready there\t")
			for _, t := range res.Tables {
				if t.Skipped != "" {
					fmt.Fprintf(tw, "%s\t%d\t-\t-\t-\t\n", t.Table, t.Source)
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", t.Table, t.Source, t.Copied, t.Updated, t.Present)
			}
			tw.Flush()
			for _, t := range res.Tables {
				if t.Deleted > 0 {
					fmt.Fprintf(c.App.Writer, "%s: %d deleted (deleted on the source since a previous run)\n", t.Table, t.Deleted)
				}
			}
			fmt.Fprintf(c.App.Writer, "next ids: events %d, notifications %d, attempts %d, receipts %d, tokens %d\n",
				res.NextID["events"], res.NextID["notifications"], res.NextID["attempts"], res.NextID["receipts"], res.NextID["tokens"])
			return nil
		},
	}
}

// migrateHooks are migrate-store's crash and stop points, for drills of
// two runs at once and of a run killed part-way (crashpoint.go has the
// relay's). EDGERELAY_CRASH_AT=point:n kills the process (SIGKILL) the
// n-th time the run reaches point (migrate.Points: locked, copied);
// EDGERELAY_STOP_AT=point:n stops it there (SIGSTOP) with its locks held,
// until a SIGCONT. Each says so on stderr first.
func migrateHooks(errw io.Writer) migrate.Hooks {
	var hooks []func(migrate.Point)
	for _, v := range []struct {
		env    string
		sig    syscall.Signal
		action string
	}{{"EDGERELAY_CRASH_AT", syscall.SIGKILL, "killing this process (SIGKILL)"}, {"EDGERELAY_STOP_AT", syscall.SIGSTOP, "stopping this process (SIGSTOP) until a SIGCONT"}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		point, count, _ := strings.Cut(s, ":")
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 || !slices.Contains(migrate.Points, migrate.Point(point)) {
			fmt.Fprintf(errw, "edgerelay: ignoring %s=%q: migrate-store wants locked|copied:N with N >= 1\n", v.env, s)
			continue
		}
		var seen atomic.Int64
		hooks = append(hooks, func(p migrate.Point) {
			if p != migrate.Point(point) || seen.Add(1) != n {
				return
			}
			fmt.Fprintf(errw, "edgerelay: migrate-store point %s:%d reached, %s\n", p, n, v.action)
			if v.sig == syscall.SIGKILL {
				syscall.Kill(os.Getpid(), v.sig)
				select {} // the signal is on its way: nothing more is written
			}
			// A stop sent to oneself can take effect after the run has
			// gone on (another thread takes it; a loaded machine): wait
			// for the SIGCONT, so the run never passes its point stopped.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			syscall.Kill(os.Getpid(), v.sig)
			<-cont
			signal.Stop(cont)
		})
	}
	if len(hooks) == 0 {
		return migrate.Hooks{}
	}
	return migrate.Hooks{At: func(p migrate.Point) {
		for _, h := range hooks {
			h(p)
		}
	}}
}

package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/relay"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:      "prune",
		Usage:     "delete finished notifications, attempts, receipts, feed items and request keys past their retention",
		ArgsUsage: " ",
		Description: `Deletes what finished more than --older-than ago, in small transactions that
never hold the writer for long, so it can run beside serve. A notification's
row is its idempotency key: once deleted, a redelivery of its event would send
again. So prune never deletes a notification younger than the longest retry
window (the largest max_age of the retry policies) and says when it raised
--older-than to it.`,
		Flags:        commonFlags(&cli.StringFlag{Name: "older-than", Value: "30d", Usage: "`AGE` to keep: 30d, 2w, 720h"}),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			age, err := relay.ParseAge(c.String("older-than"))
			if err != nil {
				return cli.Exit("--older-than: "+err.Error(), exitUsage)
			}
			r, err := openExisting(c)
			if err != nil {
				return err
			}
			defer r.Close()
			res, err := r.Prune(c.Context, age)
			if err != nil {
				return err
			}
			if res.Raised {
				fmt.Fprintf(c.App.ErrWriter, "prune: --older-than raised to %s, the longest retry window: younger keys must stay to stop duplicates\n", res.OlderThan)
			}
			fmt.Fprintf(c.App.Writer, "pruned older than %s: %d notifications, %d attempts, %d receipts, %d events, %d feed items, %d request keys, %d job runs\n",
				res.OlderThan, res.Notifications, res.Attempts, res.Receipts, res.Events, res.FeedItems, res.RequestKeys, res.JobRuns)
			return nil
		},
	}
}

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "write a consistent copy of the database to FILE while the relay runs",
		ArgsUsage: "FILE",
		Description: `Uses SQLite's VACUUM INTO: one read snapshot, so the copy is consistent even
while serve or dispatch write. FILE must not exist.`,
		Flags:        commonFlags(),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("backup takes one FILE", exitUsage)
			}
			r, err := openExisting(c)
			if err != nil {
				return err
			}
			defer r.Close()
			if err := r.Backup(c.Context, c.Args().First()); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "backed up to %s\n", c.Args().First())
			return nil
		},
	}
}

package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// retryable are the statuses retry can put back.
var retryable = []string{model.StatusFailed, model.StatusDead, model.StatusUnknown, model.StatusSuppressed}

func retryCommand() *cli.Command {
	return &cli.Command{
		Name:      "retry",
		Usage:     "put a failed, dead, unknown or suppressed notification back in the queue, or every one the flags select",
		ArgsUsage: "ID [--lift] | --status failed|dead|unknown|suppressed [--since WHEN] [--dry-run]",
		Description: `Sets the notification to pending, due now, with a fresh retry budget. It keeps
its idempotency key, so a provider that honours keys and still remembers it
will not send twice. Retrying an unknown notification through a provider
without keys may deliver a second copy: that is the operator's call.

A notification whose address is on its tenant's suppression list is not
retried: retry says why (the entry's reason, source, provider and time) and
exits 1. --lift removes that entry too, in the same transaction.

In bulk: --status (failed, dead or unknown) with the selection flags of
edgerelay list retries every notification they select, oldest first.
--dry-run prints what would be retried, and how many, and changes nothing:

   edgerelay retry --status dead --since 1h --dry-run
   edgerelay retry --status dead --since 1h

It prints how many were retried and, on stderr, each one it could not
retry and why (another process retried it first, or it changed since it
was listed); then it exits 1.`,
		Flags: commonFlags(append(listFlags("retry every notification in this `STATUS`: failed, dead or unknown"),
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be retried, and how many; change nothing"},
			&cli.IntFlag{Name: "limit", Usage: "retry at most `N`, the oldest first (0: all that match)"},
			&cli.BoolFlag{Name: "lift", Usage: "also take its address off its tenant's suppression list"},
		)...),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			bulk := false // --lift goes with either form, so it does not make one bulk
			for _, name := range []string{"status", "since", "created-since", "tenant", "recipient", "dry-run", "limit"} {
				bulk = bulk || c.IsSet(name)
			}
			if bulk {
				if c.NArg() != 0 {
					return cli.Exit("retry takes one notification ID, or selection flags (--status …), not both", exitUsage)
				}
				return retryMatching(c)
			}
			arg, err := idArg(c, "retry takes one notification id (a number, or the n_… id the API showed; see edgerelay show), or --status failed|dead|unknown|suppressed to retry every one it selects", relay.NotificationIDPrefix)
			if err != nil {
				return err
			}
			r, err := openExisting(c)
			if err != nil {
				return err
			}
			defer r.Close()
			id, err := rowOf(c.Context, arg, r.NotificationRow)
			if err != nil {
				return err
			}
			var se *model.StateError
			var sup *model.SuppressedError
			if err := r.RetryLifting(c.Context, "", id, c.Bool("lift")); errors.As(err, &sup) {
				return cli.Exit(err.Error()+"\n(edgerelay retry "+arg+" --lift removes the entry and retries it)", exitError)
			} else if errors.As(err, &se) || errors.Is(err, model.ErrNotFound) {
				return cli.Exit(err.Error(), exitError)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "notification %s is pending again; run edgerelay dispatch to deliver it\n", arg)
			return nil
		},
	}
}

// retryMatching retries (or, with --dry-run, lists) every notification the
// selection flags select.
func retryMatching(c *cli.Context) error {
	f, err := listFilter(c, time.Now())
	if err != nil {
		return err
	}
	if !slices.Contains(retryable, f.Status) {
		return cli.Exit(fmt.Sprintf("retry in bulk needs --status failed, dead, unknown or suppressed (got %q): only those can be retried", f.Status), exitUsage)
	}
	limit := c.Int("limit")
	if limit < 0 {
		return cli.Exit(fmt.Sprintf("--limit %d: want 0 (all) or more", limit), exitUsage)
	}
	dry := c.Bool("dry-run")
	r, err := openExistingFor(c, dry)
	if err != nil {
		return err
	}
	defer r.Close()
	table := newNotificationTable(c.App.Writer)
	retried, failed := 0, 0
	// Pages are read by id after the last one seen, so a notification
	// retried (now pending) is not met again, and neither is one that
	// reaches the status after the walk passed its id.
	n, more, err := eachMatch(c.Context, r.Store(), f, limit, func(ns []model.Notification) error {
		if dry {
			table.add(ns)
			return nil
		}
		for _, n := range ns {
			var se *model.StateError
			var sup *model.SuppressedError
			switch err := r.RetryLifting(c.Context, n.Tenant, n.ID, c.Bool("lift")); {
			case err == nil:
				retried++
			case errors.As(err, &se), errors.As(err, &sup), errors.Is(err, model.ErrNotFound):
				failed++
				fmt.Fprintf(c.App.ErrWriter, "edgerelay: not retried: %v\n", err)
			default:
				return err // the store: stop, and say how far it got (below)
			}
		}
		return nil
	})
	if err != nil {
		if !dry {
			fmt.Fprintf(c.App.ErrWriter, "edgerelay: %d retried before the error\n", retried)
		}
		return err
	}
	if dry {
		if err := table.flush(); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "would retry %d notification%s (dry run: nothing changed)%s\n", n, plural(n), moreNote(more, limit))
		return nil
	}
	fmt.Fprintf(c.App.Writer, "retried %d notification%s%s", retried, plural(retried), moreNote(more, limit))
	if retried > 0 {
		fmt.Fprint(c.App.Writer, "; run edgerelay dispatch (or serve) to deliver them")
	}
	fmt.Fprintln(c.App.Writer)
	if failed > 0 {
		return cli.Exit(fmt.Sprintf("%d of %d could not be retried (above)", failed, n), exitError)
	}
	return nil
}

func moreNote(more bool, limit int) string {
	if !more {
		return ""
	}
	return fmt.Sprintf("; more match beyond --limit %d", limit)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
)

// listFlags select notifications, for list and for retry's bulk form.
func listFlags(statusUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "status", Usage: statusUsage},
		&cli.StringFlag{Name: "since", Usage: "only those last changed (accepted, attempted, retried, moved by a receipt; for failed, dead and unknown: " +
			"since they reached it) at or after `WHEN`: an age back from now (90m, 36h, 7d, 2w) or an RFC 3339 time"},
		&cli.StringFlag{Name: "created-since", Usage: "only those accepted at or after `WHEN` (as --since)"},
		&cli.StringFlag{Name: "tenant", Usage: "only this `TENANT`'s (default: every tenant)"},
		&cli.StringFlag{Name: "recipient", Usage: "only this recipient `ID`'s"},
	}
}

// listFilter reads the selection flags; now is what an age counts back from.
func listFilter(c *cli.Context, now time.Time) (model.ListFilter, error) {
	f := model.ListFilter{Status: c.String("status"), Tenant: c.String("tenant"), Recipient: c.String("recipient")}
	if f.Status != "" && !slices.Contains(model.Statuses, f.Status) {
		return f, cli.Exit(fmt.Sprintf("--status %q: want one of %s", f.Status, strings.Join(model.Statuses, ", ")), exitUsage)
	}
	if f.Tenant != "" {
		if err := relay.CheckTenant("--tenant", f.Tenant); err != nil {
			return f, cli.Exit(err.Error(), exitUsage)
		}
	}
	var err error
	if f.UpdatedSince, err = parseSince(c, "since", now); err != nil {
		return f, err
	}
	if f.CreatedSince, err = parseSince(c, "created-since", now); err != nil {
		return f, err
	}
	return f, nil
}

// parseSince reads a time flag: an age back from now (relay.ParseAge) or
// an RFC 3339 time. Unset is the zero time (no bound).
func parseSince(c *cli.Context, name string, now time.Time) (time.Time, error) {
	v := c.String(name)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	age, err := relay.ParseAge(v)
	if err != nil {
		return time.Time{}, cli.Exit(fmt.Sprintf("--%s %q: want an age back from now (90m, 36h, 7d, 2w) or an RFC 3339 time (2026-11-30T09:00:00Z)", name, v), exitUsage)
	}
	return now.Add(-age), nil
}

// eachMatch calls fn with the notifications f selects, a page at a time, in
// id order, until limit have been seen (0: all) or fn says stop. more says
// whether another notification matched beyond limit.
func eachMatch(ctx context.Context, reads store.Reads, f model.ListFilter, limit int, fn func([]model.Notification) error) (seen int, more bool, err error) {
	for {
		f.Limit = model.MaxListLimit
		if limit > 0 {
			f.Limit = min(model.MaxListLimit, limit-seen+1) // one beyond: is there more?
		}
		ns, err := reads.ListNotifications(ctx, f)
		if err != nil {
			return seen, false, err
		}
		if len(ns) == 0 {
			return seen, false, nil
		}
		next := ns[len(ns)-1].ID
		if limit > 0 && seen+len(ns) > limit {
			ns, more = ns[:limit-seen], true
		}
		if err := fn(ns); err != nil {
			return seen, false, err
		}
		if seen += len(ns); more {
			return seen, true, nil
		}
		f.After = next
	}
}

// notificationTable writes notifications as aligned columns, for people.
type notificationTable struct {
	tw     *tabwriter.Writer
	header bool
}

func newNotificationTable(w io.Writer) *notificationTable {
	return &notificationTable{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (t *notificationTable) add(ns []model.Notification) {
	if !t.header && len(ns) > 0 {
		fmt.Fprintln(t.tw, "ID\tSTATUS\tATTEMPTS\tCHANGED\tTENANT\tRECIPIENT\tCHANNEL\tADDRESS\tWHY")
		t.header = true
	}
	for _, n := range ns {
		fmt.Fprintf(t.tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Status, n.Attempts, n.UpdatedAt.Format(time.RFC3339),
			n.Tenant, relay.ShowControls(n.Recipient), n.Channel, relay.ShowControls(n.Address), oneLine(n.Reason, 100))
	}
}

func (t *notificationTable) flush() error { return t.tw.Flush() }

func listCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list notifications by status, time, tenant and recipient",
		ArgsUsage: " ",
		Description: `Lists the notifications the flags select, oldest first (in id order), one a
line: id, status, attempts, when it last changed, tenant, recipient, channel,
address and why (for failed, dead, unknown). With no flags: every
notification, up to --limit.

   edgerelay list --status dead --since 1h        died in the last hour
   edgerelay list --status failed --tenant acme   refused for good, one tenant
   edgerelay list --created-since 2026-11-30T09:00:00Z --recipient ada

More than --limit: the rest follow with --after, the last id printed (stderr
says so). edgerelay retry takes the same flags to send them again.

--since reads the notifications the other flags select and keeps those that
changed since: with --status (failed, dead, unknown hold few) that is quick;
with none, it reads the whole table once.`,
		Flags: commonFlags(append(listFlags("only notifications in this `STATUS`: "+strings.Join(model.Statuses, ", ")),
			&cli.IntFlag{Name: "limit", Value: 100, Usage: "print at most `N` (0: all)"},
			&cli.Int64Flag{Name: "after", Usage: "start after this notification `ID` (the last one of the previous listing)"},
			&cli.BoolFlag{Name: "json", Usage: `print {"notifications": [...], "next_after": ID} (next_after only when more match)`},
		)...),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return cli.Exit(fmt.Sprintf("list takes no arguments (got %q): select with --status, --since, --tenant, --recipient", c.Args().First()), exitUsage)
			}
			f, err := listFilter(c, time.Now())
			if err != nil {
				return err
			}
			limit := c.Int("limit")
			if limit < 0 {
				return cli.Exit(fmt.Sprintf("--limit %d: want 0 (all) or more", limit), exitUsage)
			}
			f.After = c.Int64("after")
			r, err := openExistingFor(c, true)
			if err != nil {
				return err
			}
			defer r.Close()
			var all []model.Notification
			table := newNotificationTable(c.App.Writer)
			var last int64
			n, more, err := eachMatch(c.Context, r.Store(), f, limit, func(ns []model.Notification) error {
				last = ns[len(ns)-1].ID
				if c.Bool("json") {
					all = append(all, ns...)
					return nil
				}
				table.add(ns)
				return nil
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				out := struct {
					Notifications []model.Notification `json:"notifications"`
					NextAfter     int64                `json:"next_after,omitempty"`
				}{Notifications: all}
				if out.Notifications == nil {
					out.Notifications = []model.Notification{}
				}
				if more {
					out.NextAfter = last
				}
				return json.NewEncoder(c.App.Writer).Encode(out)
			}
			if err := table.flush(); err != nil {
				return err
			}
			switch {
			case n == 0:
				fmt.Fprintln(c.App.ErrWriter, "no notifications match")
			case more:
				fmt.Fprintf(c.App.ErrWriter, "%d listed; more match: add --after %d for the next ones\n", n, last)
			}
			return nil
		},
	}
}

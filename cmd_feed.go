package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func feedCommand() *cli.Command {
	return &cli.Command{
		Name:  "feed",
		Usage: "manage in-app feeds (events post to them with \"feeds\": [...])",
		Subcommands: []*cli.Command{{
			Name:      "members",
			Usage:     "set or print who reads a topic or team feed",
			ArgsUsage: "FEED [USER...]",
			Description: `With USERs, replaces the feed's members. Members who stay keep when they
joined; new members see items posted from now on (--history: the feed's whole
past); members not listed leave. --clear (and no USERs) empties the feed.

Without USERs, prints the members in user order: USER and JOINED (the tenant's
newest item seq when they joined: they see the items after it; 0 with
--history); --json prints {"user", "joined_seq"} lines. No USERs never empties
a feed by accident.

"*" (the tenant's feed) and "@USER" (a user's own) need no members.`,
			Flags: commonFlags(
				&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the feed's tenant"},
				&cli.BoolFlag{Name: "history", Usage: "new members also see items posted before they joined"},
				&cli.BoolFlag{Name: "clear", Usage: "remove every member (give no USERs)"},
				&cli.BoolFlag{Name: "json", Usage: "print the members as JSON lines"},
			),
			OnUsageError: usageErr,
			Action: func(c *cli.Context) error {
				feed := c.Args().First()
				if c.NArg() < 1 || !relay.ValidFeed(feed) || feed == model.TenantFeed || feed[0] == '@' {
					return cli.Exit(`feed members takes a topic or team FEED ("team:ops") and its USERs`, exitUsage)
				}
				users := c.Args().Slice()[1:]
				if c.Bool("clear") && len(users) > 0 {
					return cli.Exit("feed members: --clear removes every member; give no USERs with it", exitUsage)
				}
				if len(users) == 0 && !c.Bool("clear") {
					return printFeedMembers(c, feed)
				}
				r, _, err := openRelay(c, c.App.ErrWriter)
				if err != nil {
					return err
				}
				defer r.Close()
				var inv *relay.InvalidEventError
				if err := r.SetFeedMembers(c.Context, c.String("tenant"), feed, users, c.Bool("history")); errors.As(err, &inv) {
					return cli.Exit(err.Error(), exitUsage)
				} else if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "feed %s (tenant %s): %d members\n", feed, c.String("tenant"), len(users))
				return nil
			},
		}},
	}
}

// printFeedMembers prints a feed's members, every page of them.
func printFeedMembers(c *cli.Context, feed string) error {
	r, err := openExistingFor(c, true)
	if err != nil {
		return err
	}
	defer r.Close()
	var all []model.FeedMember
	for after := ""; ; {
		ms, err := r.FeedMembers(c.Context, c.String("tenant"), feed, after, 1000)
		var inv *relay.InvalidEventError
		if errors.As(err, &inv) {
			return cli.Exit(err.Error(), exitUsage)
		}
		if err != nil {
			return err
		}
		all = append(all, ms...)
		if len(ms) < 1000 {
			break
		}
		after = ms[len(ms)-1].User
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, m := range all {
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	if len(all) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "feed %s (tenant %s) has no members\n", feed, c.String("tenant"))
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tJOINED")
	for _, m := range all {
		fmt.Fprintf(tw, "%s\t%d\n", m.User, m.JoinedSeq)
	}
	return tw.Flush()
}

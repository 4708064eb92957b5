package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"edgerelay/relay"
	"edgerelay/store"
)

func feedCommand() *cli.Command {
	return &cli.Command{
		Name:  "feed",
		Usage: "manage in-app feeds (events post to them with \"feeds\": [...])",
		Subcommands: []*cli.Command{{
			Name:      "members",
			Usage:     "set who reads a topic or team feed",
			ArgsUsage: "FEED USER...",
			Description: `Replaces the feed's members. Members who stay keep when they joined; new
members see items posted from now on (--history: the feed's whole past);
members not listed leave. "*" (the tenant's feed) and "@USER" (a user's own)
need no members.`,
			Flags: commonFlags(
				&cli.StringFlag{Name: "tenant", Value: "default", Usage: "the feed's tenant"},
				&cli.BoolFlag{Name: "history", Usage: "new members also see items posted before they joined"},
			),
			OnUsageError: usageErr,
			Action: func(c *cli.Context) error {
				feed := c.Args().First()
				if c.NArg() < 1 || !relay.ValidFeed(feed) || feed == store.TenantFeed || feed[0] == '@' {
					return cli.Exit(`feed members takes a topic or team FEED ("team:ops") and its USERs`, exitUsage)
				}
				r, _, err := openRelay(c, c.App.ErrWriter)
				if err != nil {
					return err
				}
				defer r.Close()
				users := c.Args().Slice()[1:]
				if err := r.SetFeedMembers(c.Context, c.String("tenant"), feed, users, c.Bool("history")); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "feed %s (tenant %s): %d members\n", feed, c.String("tenant"), len(users))
				return nil
			},
		}},
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/relay"
)

// The commands take a notification or an event by its row id (as they
// print it) or by the id the API showed (n_…, ev_…): an operator pastes
// either. idArg checks the one argument's shape before anything is opened;
// rowOf turns it into the row once the relay is open (an API id needs the
// database's key).

// idArg is the command's one argument, if it is spelled as a row id or an
// id of the kind prefix names.
func idArg(c *cli.Context, usage, prefix string) (string, error) {
	arg := c.Args().First()
	if _, isRow := relay.ParseRow(arg); c.NArg() != 1 || !isRow && !strings.HasPrefix(arg, prefix) {
		return "", cli.Exit(usage, exitUsage)
	}
	return arg, nil
}

// rowOf is the row arg names; an id that is not one of the API's (a typo)
// is a usage error naming it.
func rowOf(ctx context.Context, arg string, row func(context.Context, string) (int64, error)) (int64, error) {
	n, err := row(ctx, arg)
	if errors.Is(err, relay.ErrNotAnID) {
		return 0, cli.Exit(fmt.Sprint(err), exitUsage)
	}
	return n, err
}

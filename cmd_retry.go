package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"edgerelay/store"
)

func retryCommand() *cli.Command {
	return &cli.Command{
		Name:      "retry",
		Usage:     "put a failed, dead or unknown notification back in the queue",
		ArgsUsage: "ID",
		Description: `Sets the notification to pending, due now, with a fresh retry budget. It keeps
its idempotency key, so a provider that honours keys and still remembers it
will not send twice. Retrying an unknown notification through a provider
without keys may deliver a second copy: that is the operator's call.`,
		Flags:        commonFlags(),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			id, err := strconv.ParseInt(c.Args().First(), 10, 64)
			if c.NArg() != 1 || err != nil {
				return cli.Exit("retry takes one notification id (a number; see edgerelay show)", exitUsage)
			}
			r, err := openExisting(c)
			if err != nil {
				return err
			}
			defer r.Close()
			var se *store.StateError
			if err := r.Retry(c.Context, id); errors.As(err, &se) || errors.Is(err, store.ErrNotFound) {
				return cli.Exit(err.Error(), exitError)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "notification %d is pending again; run edgerelay dispatch to deliver it\n", id)
			return nil
		},
	}
}

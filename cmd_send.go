package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "accept one event and fan it out (does not deliver: run dispatch)",
		ArgsUsage: " ",
		Description: `Reads one JSON event from --file or standard input, writes it and one
notification per recipient and channel, and prints one JSON line per
notification: its id, idempotency key, recipient, channel, status and whether
it is new or a duplicate of one accepted before. Then one JSON line per feed
item the event posted ("feeds": [...]): its feed and seq, the number the
feed's pages, marks and cursors use. Sending the same event again prints the
same ids and seqs, marked duplicate, and creates nothing.

The event:
   {"id": "evt_501", "type": "payment.succeeded", "purpose": "receipt",
    "tenant": "default", "channels": ["email"],
    "recipients": [{"id": "ada", "email": "ada@example.com"}],
    "subject": "Your receipt", "body": "Thanks for your payment.", "data": {}}

id and type are required; purpose defaults to type, tenant to "default".
Recipient addresses: email (channel email, a bare address), phone (sms, E.164:
+15550100), device_token (push), url (webhook, an absolute http(s) URL), or
"addresses": {"CHANNEL": "ADDRESS"} for any channel. With --config, each
notification's channel must have a route, and the route's first provider must
take its address.

Exit status: 0 accepted (new or duplicate), 5 rejected (invalid, or the same
id was accepted with different content; nothing written), 1 could not work.`,
		Flags: commonFlags(
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "read the event from `FILE` (- or absent: standard input)"},
		),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			in := c.App.Reader
			if f := c.String("file"); f != "" && f != "-" {
				fh, err := os.Open(f)
				if err != nil {
					return cli.Exit(fmt.Sprintf("--file: %v", err), exitUsage)
				}
				defer fh.Close()
				in = fh
			} else if isTerminal(in) {
				return cli.Exit("no event: give --file FILE or pipe the JSON on standard input", exitUsage)
			}
			ev, err := relay.DecodeEvent(in)
			if err != nil {
				return cli.Exit(err.Error(), exitRejected)
			}
			// The config's routes are built: an event for a channel no route
			// serves, or an address its provider would not use, is refused
			// here rather than retried by dispatch for hours.
			s, err := deliverySettings(c)
			if err != nil {
				return err
			}
			// Reject a bad event before touching the database (an audience
			// event can only be checked once its members are read).
			if err := ev.Normalize(s.opts.MaxRecipients); ev.Audience == "" && err != nil {
				return cli.Exit(err.Error(), exitRejected)
			}
			r, err := openRelayWith(c, s)
			if err != nil {
				return err
			}
			defer r.Close()
			res, err := r.Accept(c.Context, ev)
			var inv *relay.InvalidEventError
			if errors.As(err, &inv) || errors.Is(err, model.ErrEventConflict) {
				return cli.Exit(err.Error(), exitRejected)
			}
			if err != nil {
				return err
			}
			return printAccepted(c.App.Writer, res)
		},
	}
}

// acceptedLine is what send prints per notification.
type acceptedLine struct {
	ID        int64  `json:"id"`
	Key       string `json:"key"`
	Tenant    string `json:"tenant"`
	EventID   string `json:"event_id"`
	Purpose   string `json:"purpose"`
	Recipient string `json:"recipient"`
	Channel   string `json:"channel"`
	Status    string `json:"status"`
	// Result is "new" or "duplicate".
	Result string `json:"result"`
}

// feedItemLine is what send prints per feed item the event posted.
type feedItemLine struct {
	Tenant  string `json:"tenant"`
	EventID string `json:"event_id"`
	Purpose string `json:"purpose"`
	Feed    string `json:"feed"`
	Seq     int64  `json:"seq"`
	// Result is "new" or "duplicate".
	Result string `json:"result"`
}

func printAccepted(w io.Writer, res relay.AcceptResult) error {
	enc := json.NewEncoder(w)
	result := "new"
	if res.Duplicate {
		result = "duplicate"
	}
	for _, n := range res.Notifications {
		if err := enc.Encode(acceptedLine{ID: n.ID, Key: n.Key, Tenant: res.Tenant, EventID: res.EventID, Purpose: res.Purpose,
			Recipient: n.Recipient, Channel: n.Channel, Status: n.Status, Result: result}); err != nil {
			return err
		}
	}
	for _, it := range res.FeedItems {
		if err := enc.Encode(feedItemLine{Tenant: res.Tenant, EventID: res.EventID, Purpose: res.Purpose,
			Feed: it.Feed, Seq: it.Seq, Result: result}); err != nil {
			return err
		}
	}
	return nil
}

// isTerminal reports whether r is an interactive terminal (no piped input).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

func showCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print the audit trail of one notification, by id (a number, or the n_… id the API showed) or idempotency key, or of one workflow run (run_…)",
		ArgsUsage: "ID|KEY|RUN",
		Description: `Prints the notification (key, event, recipient, channel, provider, status and
why) and every attempt: its start and end, outcome (sent, refused, unknown),
HTTP status, the provider's message id and the provider's response. This is
the answer to "did my OTP go out?". A notification a workflow step wrote is
followed by its run; a run_… id prints the run: each step, when it was due,
what was decided and why.`,
		Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("show takes one notification id or idempotency key", exitUsage)
			}
			r, err := openExistingFor(c, true)
			if err != nil {
				return err
			}
			defer r.Close()
			if arg := c.Args().First(); strings.HasPrefix(arg, relay.RunIDPrefix) {
				return showRun(c, r, arg)
			}
			n, err := r.Notification(c.Context, c.Args().First())
			if errors.Is(err, model.ErrNotFound) {
				return cli.Exit(err.Error(), exitError)
			}
			if errors.Is(err, relay.ErrNotAnID) {
				return cli.Exit(err.Error(), exitUsage)
			}
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(n)
			}
			// The id the API shows for it (what a client holds), when the
			// database has the key of those ids (a read-only open cannot
			// make one).
			apiID := ""
			if x, err := r.IDs(c.Context); err == nil {
				apiID = x.Notification(n.ID)
			}
			printNotification(c.App.Writer, n, apiID)
			// A workflow step's notification: the run it belongs to.
			runs, err := r.Runs(c.Context, model.RunFilter{Notification: n.ID, Limit: 1})
			if err != nil {
				return err
			}
			for _, v := range runs {
				fmt.Fprintln(c.App.Writer, "\nWritten by a workflow step of this run:")
				printRun(c.App.Writer, v)
			}
			return nil
		},
	}
}

// showRun prints one workflow run, by the run_… id the API showed.
func showRun(c *cli.Context, r *relay.Relay, arg string) error {
	x, err := r.IDs(c.Context)
	if err != nil {
		return err
	}
	row, ok := x.RunRow(arg)
	if !ok {
		return cli.Exit(fmt.Sprintf("%q: a run's id is run_ and 13 characters, as the API showed it", arg), exitUsage)
	}
	runs, err := r.Runs(c.Context, model.RunFilter{ID: row, Limit: 1})
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return cli.Exit(fmt.Sprintf("workflow run %s: not found", arg), exitError)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(runs[0])
	}
	printRun(c.App.Writer, runs[0])
	return nil
}

// printNotification prints n; apiID, when known, is the id the API shows.
func printNotification(w io.Writer, n model.Notification, apiID string) {
	fmt.Fprintf(w, "notification %d  %s\n", n.ID, n.Key)
	if apiID != "" {
		fmt.Fprintf(w, "  api id     %s\n", apiID)
	}
	fmt.Fprintf(w, "  event      %s  (tenant %s, type %s, purpose %s)\n", relay.ShowControls(n.EventID), n.Tenant, relay.ShowControls(n.Type), relay.ShowControls(n.Purpose))
	fmt.Fprintf(w, "  recipient  %s via %s to %s\n", relay.ShowControls(n.Recipient), n.Channel, relay.ShowControls(n.Address))
	fmt.Fprintf(w, "  status     %s after %d attempt%s\n", n.Status, n.Attempts, plural(n.Attempts))
	if n.NextAttemptAt != nil {
		fmt.Fprintf(w, "  next       %s\n", n.NextAttemptAt.Format(time.RFC3339Nano))
	}
	if n.LeaseUntil != nil {
		fmt.Fprintf(w, "  leased     until %s (a call is in flight)\n", n.LeaseUntil.Format(time.RFC3339Nano))
	}
	if n.Reason != "" {
		fmt.Fprintf(w, "  why        %s\n", relay.ShowControls(n.Reason))
	}
	if n.Provider != "" {
		fmt.Fprintf(w, "  provider   %s\n", n.Provider)
	}
	if n.ProviderMessageID != "" {
		fmt.Fprintf(w, "  message id %s\n", n.ProviderMessageID)
	}
	fmt.Fprintf(w, "  created    %s\n", n.CreatedAt.Format(time.RFC3339Nano))
	printMessage(w, n.Message)
	if q := n.Quarantine; q != nil {
		fmt.Fprintf(w, "  event      fan-out quarantined since %s at %d of %d notifications: %s (edgerelay quarantine retry|drop %d)\n",
			q.At.Format(time.RFC3339), q.Expanded, q.Targets, relay.ShowControls(q.Reason), q.EventRow)
	}
	for _, a := range n.AttemptLog {
		outcome := a.Outcome
		if a.Permanent {
			outcome += " (for good)"
		}
		if answer := attemptAnswer(a); answer != "" {
			outcome += ", " + answer
		}
		fmt.Fprintf(w, "  attempt %d  %s  %s .. %s (%s)  %s\n", a.N, a.Provider,
			a.StartedAt.Format("15:04:05.000"), a.EndedAt.Format("15:04:05.000"), a.EndedAt.Sub(a.StartedAt).Round(time.Millisecond),
			outcome)
		if a.Detail != "" {
			fmt.Fprintf(w, "             %s\n", a.Detail)
		}
		if a.MessageID != "" {
			fmt.Fprintf(w, "             provider message id %s\n", a.MessageID)
		}
		if a.Response != "" {
			fmt.Fprintf(w, "             response: %s\n", oneLine(a.Response, 300))
		}
		if a.Decision != "" {
			fmt.Fprintf(w, "             then %s\n", a.Decision)
		}
	}
	for _, rc := range n.Receipts {
		fmt.Fprintf(w, "  receipt    %s from %s, received %s", rc.Status, rc.Provider, rc.ReceivedAt.Format(time.RFC3339))
		if rc.Detail != "" {
			fmt.Fprintf(w, ": %s", relay.ShowControls(oneLine(rc.Detail, 200)))
		}
		fmt.Fprintln(w)
	}
	for _, c := range n.Clicks {
		fmt.Fprintf(w, "  clicked    %s  %d time%s, first %s, last %s\n", relay.ShowControls(c.URL), c.Count, plural(int(c.Count)),
			c.First.Format(time.RFC3339), c.Last.Format(time.RFC3339))
	}
}

// smtpReply is how the smtp provider records a server's answer: the reply
// as it came, its code first ("451 4.3.0 try again later").
var smtpReply = regexp.MustCompile(`^[2-5][0-9][0-9]( |-|$)`)

// attemptAnswer is what the provider answered on an attempt: an HTTP
// status, an SMTP reply code, "no answer" for a call that failed without
// one, or "" for a provider that answers nothing when it succeeds (log://,
// whose detail says where the line went).
func attemptAnswer(a model.Attempt) string {
	switch {
	case a.HTTPStatus != 0:
		return fmt.Sprintf("HTTP %d", a.HTTPStatus)
	case smtpReply.MatchString(a.Response):
		return "SMTP " + a.Response[:3]
	case a.Outcome == string(providers.Sent):
		return ""
	}
	return "no answer"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// oneLine folds a response body onto one line, cut at max bytes.
func oneLine(s string, max int) string {
	s = relay.ShowControls(strings.Join(strings.Fields(s), " "))
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// printMessage shows what the notification sends, as stored at accept:
// the template that rendered it, if any, and its subject and text.
func printMessage(w io.Writer, raw []byte) {
	var m struct {
		Subject  string              `json:"subject"`
		Body     string              `json:"body"`
		Template *relay.TemplateUsed `json:"template"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	if t := m.Template; t != nil {
		fmt.Fprintf(w, "  template   %s version %s (%s), rendered at accept\n", t.Name, t.Version, t.Locale)
	}
	if m.Subject != "" {
		fmt.Fprintf(w, "  subject    %s\n", oneLine(m.Subject, 300))
	}
	if m.Body != "" {
		fmt.Fprintf(w, "  text       %s\n", oneLine(m.Body, 300))
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/store"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "print notifications by status, dispatch lag, and outcomes per provider",
		ArgsUsage: " ",
		Description: `Statuses: pending (waiting for an attempt), sending (a call in flight), sent,
failed (refused for good), dead (retries exhausted), unknown (maybe sent; not
resent because its type is at-most-once and the provider has no keys; each is
listed by id), delivered and bounced (a provider's receipt said so).
"oldest due" is how long the oldest due notification has waited: dispatch lag.`,
		Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			r, err := openExistingFor(c, true)
			if err != nil {
				return err
			}
			defer r.Close()
			st, err := r.Status(c.Context)
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				type out struct {
					store.Status
					OldestDueSeconds float64 `json:"oldest_due_seconds"`
				}
				return json.NewEncoder(w).Encode(out{Status: st, OldestDueSeconds: st.OldestDue.Seconds()})
			}
			fmt.Fprintln(w, "notifications")
			for _, s := range store.Statuses {
				fmt.Fprintf(w, "  %-8s %d\n", s, st.Counts[s])
			}
			if len(st.Unknown) > 0 {
				ids := make([]string, len(st.Unknown))
				for i, id := range st.Unknown {
					ids[i] = strconv.FormatInt(id, 10)
				}
				fmt.Fprintf(w, "unknown ids %s (maybe sent, not resent: edgerelay show ID, then edgerelay retry ID if it must go out)\n", strings.Join(ids, " "))
			}
			if st.Quarantined > 0 {
				ids := make([]string, len(st.QuarantinedIDs))
				for i, id := range st.QuarantinedIDs {
					ids[i] = strconv.FormatInt(id, 10)
				}
				fmt.Fprintf(w, "quarantined events %d: %s (their fan-out could not go on: edgerelay quarantine list, then retry or drop)\n",
					st.Quarantined, strings.Join(ids, " "))
			}
			if st.InvalidAddresses > 0 {
				fmt.Fprintf(w, "addresses marked dead %d (edgerelay addresses list)\n", st.InvalidAddresses)
			}
			fmt.Fprintf(w, "oldest due  %s\n", st.OldestDue.Round(time.Millisecond))
			if st.NextDue != nil {
				fmt.Fprintf(w, "next retry  %s\n", st.NextDue.Format(time.RFC3339))
			}
			names := make([]string, 0, len(st.Providers))
			for p := range st.Providers {
				names = append(names, p)
			}
			sort.Strings(names)
			if len(names) > 0 {
				fmt.Fprintln(w, "attempts by provider     sent  refused  unknown")
			}
			for _, p := range names {
				o := st.Providers[p]
				fmt.Fprintf(w, "  %s\n  %20s %7d %8d %8d\n", p, "", o["sent"], o["refused"], o["unknown"])
			}
			return nil
		},
	}
}

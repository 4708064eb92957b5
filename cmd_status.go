package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "print notifications by status, dispatch lag, and outcomes per provider",
		ArgsUsage: " ",
		Description: `Statuses: pending (waiting for an attempt), sending (a call in flight), sent,
failed (refused for good), dead (retries exhausted), unknown (maybe sent; not
resent because its type is at-most-once and the provider has no keys),
skipped (a recipient's preference or a throttle forbade it: no attempt; a
throttle's excess may be folded into a digest, which the reason names),
delivered and bounced (a provider's receipt said so). Failed, dead and unknown
notifications each need a person: the newest 20 of each are listed by id
(edgerelay show ID says why; edgerelay list --status S lists them all).
"oldest due" is how long the oldest due notification has waited: dispatch lag.
--json has the same, with the lists as failed_ids, dead_ids and unknown_ids.

Tailed outboxes ("sources" in --json): each one's saved position and the
gap ids below it still waited on (the oldest for how long); for those the
config names under tail: (--config), also the committed rows not relayed
yet and how long ago the oldest was created, read from the outbox itself
(see the README, "Tailing"). A source that cannot be reached is shown as
such; the rest are still shown.`,
		Flags:        commonFlags(&cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
		OnUsageError: usageErr,
		Action: func(c *cli.Context) error {
			db, s, err := openExistingStore(c, true)
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := db.Status(c.Context, time.Now())
			if err != nil {
				return err
			}
			tails, err := tailStatus(c.Context, db, time.Now(), s.cfg.TailSpecs())
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("json") {
				type out struct {
					model.Status
					OldestDueSeconds float64        `json:"oldest_due_seconds"`
					Sources          []sourceStatus `json:"sources"`
				}
				return json.NewEncoder(w).Encode(out{Status: st, OldestDueSeconds: st.OldestDue.Seconds(), Sources: tails})
			}
			printStatus(w, st)
			printTailStatus(w, tails)
			return nil
		},
	}
}

// printStatus writes the status as aligned columns: the counts, with the
// newest ids of the statuses that need a person beside theirs, then the
// queue, then the attempts by provider.
func printStatus(w io.Writer, st model.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	newest := map[string][]int64{model.StatusFailed: st.Failed, model.StatusDead: st.Dead, model.StatusUnknown: st.Unknown}
	fmt.Fprintln(tw, "notifications") // no tab: a heading, not a cell of the columns below
	for _, s := range model.Statuses {
		ids := newest[s]
		if len(ids) == 0 {
			fmt.Fprintf(tw, "  %s\t%d\n", s, st.Counts[s])
			continue
		}
		more := ""
		if int64(len(ids)) < st.Counts[s] {
			more = " …"
		}
		fmt.Fprintf(tw, "  %s\t%d\tnewest %s%s\n", s, st.Counts[s], joinIDs(ids), more)
	}
	if len(st.Failed)+len(st.Dead)+len(st.Unknown) > 0 {
		fmt.Fprintln(tw, "  edgerelay show ID says why; edgerelay list --status S lists them all; edgerelay retry ID, or retry --status S, sends again")
	}
	if len(st.Unknown) > 0 {
		fmt.Fprintln(tw, "  unknown: maybe sent, not resent; a retry through a provider without keys may deliver a second copy")
	}
	fmt.Fprintf(tw, "oldest due\t%s\n", st.OldestDue.Round(time.Millisecond))
	if st.NextDue != nil {
		fmt.Fprintf(tw, "next retry\t%s\n", st.NextDue.Format(time.RFC3339))
	}
	if st.Quarantined > 0 {
		fmt.Fprintf(tw, "quarantined events\t%d\tnewest %s (their fan-out could not go on: edgerelay quarantine list, then retry or drop)\n",
			st.Quarantined, joinIDs(st.QuarantinedIDs))
	}
	if len(st.SourceRejects) > 0 {
		fmt.Fprintf(tw, "rejected outbox rows\t%s\t(edgerelay tail rejects list; fix the rows, then retry)\n", countsBySource(st.SourceRejects))
	}
	if st.Suppressions > 0 {
		fmt.Fprintf(tw, "addresses suppressed\t%d\t(edgerelay suppressions list)\n", st.Suppressions)
	}
	tw.Flush()
	names := slices.Sorted(maps.Keys(st.Providers))
	if len(names) == 0 {
		return
	}
	fmt.Fprintln(w)
	// Counts right-aligned under their headings; the provider, the last
	// column, is left as it is (a URL can be long).
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sent\trefused\tunknown\t  attempts by provider")
	for _, p := range names {
		o := st.Providers[p]
		fmt.Fprintf(tw, "%d\t%d\t%d\t  %s\n", o["sent"], o["refused"], o["unknown"], p)
	}
	tw.Flush()
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, " ")
}

// countsBySource is "3 (name: 2, other: 1)", sources in name order.
func countsBySource(m map[string]int64) string {
	var total int64
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		total += m[name]
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[name]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
	"github.com/edgerelay/edgerelay/store"
)

// tailRejectsCommand is `tail rejects`: the outbox rows whose event was
// rejected, as recorded in edgerelay's store (the API has the same under
// /v1/sources/{name}/rejects).
func tailRejectsCommand() *cli.Command {
	sourceFlag := func(usage string) cli.Flag {
		return &cli.StringFlag{Name: "source", EnvVars: []string{"EDGERELAY_SOURCE"}, Usage: usage}
	}
	allFlag := func(usage string) cli.Flag {
		return &cli.BoolFlag{Name: "all", Usage: usage}
	}
	return &cli.Command{
		Name:  "rejects",
		Usage: "list, retry or drop the outbox rows whose event was rejected",
		Description: `A row whose event is invalid (or reuses an accepted event's identity with
other content) is skipped so that it does not hold up the rows behind it, and
recorded in edgerelay's database with its id and the reason, in the same
transaction that saves the position past it. Fix the row in the application's
database (UPDATE its event), then "retry": the tailer of that source (serve,
or tail) reads the rows again by id on its next round and accepts them as any
row (at most once in effect: a retry of an accepted event is a duplicate).
Accepted, a record goes; rejected again, it gets the new reason; a row no
longer in the outbox is marked gone. "drop" removes records (seen, or not to
be fixed). --source takes the source's name as list prints it, or the URL
tail --source took.`,
		Subcommands: []*cli.Command{
			{
				Name:         "list",
				Usage:        "the rejected rows, by source and row, with why",
				Flags:        commonFlags(sourceFlag("only this source's (its `NAME` or URL)"), &cli.BoolFlag{Name: "json", Usage: "print as JSON"}),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					st, _, err := openExistingStore(c, true)
					if err != nil {
						return err
					}
					defer st.Close()
					name := ""
					if c.String("source") != "" {
						if name, err = rejectSource(c, st); err != nil {
							return err
						}
					}
					var all []model.SourceReject
					f := model.SourceRejectFilter{Source: name, Limit: 1000}
					for {
						page, err := st.SourceRejects(c.Context, f)
						if err != nil {
							return err
						}
						all = append(all, page...)
						if len(page) < f.Limit {
							break
						}
						f.AfterSource, f.AfterRow = page[len(page)-1].Source, page[len(page)-1].Row
					}
					if c.Bool("json") {
						if all == nil {
							all = []model.SourceReject{}
						}
						return json.NewEncoder(c.App.Writer).Encode(all)
					}
					if len(all) == 0 {
						fmt.Fprintln(c.App.ErrWriter, "no rejected outbox rows")
					}
					for i, x := range all {
						if i == 0 || all[i-1].Source != x.Source {
							fmt.Fprintf(c.App.Writer, "source %s\n", x.Source)
						}
						fmt.Fprintf(c.App.Writer, "  %d\t%s\n\t%s\n", x.Row, describeReject(x), relay.ShowControls(x.Reason))
					}
					return nil
				},
			},
			{
				Name:         "retry",
				Usage:        "ask the source's tailer to read rows again (after the application fixed them)",
				ArgsUsage:    "ROW... | --all",
				Flags:        commonFlags(sourceFlag("the source (its `NAME` or URL; required)"), allFlag("every rejected row of the source")),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					return actOnRejects(c, "retry", func(st store.Sources, name string, rows []int64) ([]int64, error) {
						return st.RetrySourceRejects(c.Context, name, rows, time.Now())
					}, "asked to be read again: the source's tailer (serve, or tail) reads them on its next round; tail rejects list shows what is left")
				},
			},
			{
				Name:         "drop",
				Usage:        "remove the records of rows (their events stay unaccepted)",
				ArgsUsage:    "ROW... | --all",
				Flags:        commonFlags(sourceFlag("the source (its `NAME` or URL; required)"), allFlag("every rejected row of the source")),
				OnUsageError: usageErr,
				Action: func(c *cli.Context) error {
					return actOnRejects(c, "drop", func(st store.Sources, name string, rows []int64) ([]int64, error) {
						return st.DropSourceRejects(c.Context, name, rows)
					}, "records dropped; their events were never accepted")
				},
			},
		},
	}
}

// actOnRejects parses `--source NAME ROW...|--all`, applies act and says
// which rows it reached; rows without a record are an error naming them.
func actOnRejects(c *cli.Context, verb string, act func(st store.Sources, name string, rows []int64) ([]int64, error), done string) error {
	if c.String("source") == "" {
		return cli.Exit(fmt.Sprintf("tail rejects %s needs --source NAME (as tail rejects list prints it)", verb), exitUsage)
	}
	var rows []int64 // nil: every row
	switch {
	case c.Bool("all") && c.NArg() > 0:
		return cli.Exit(fmt.Sprintf("tail rejects %s takes row ids or --all, not both", verb), exitUsage)
	case !c.Bool("all") && c.NArg() == 0:
		return cli.Exit(fmt.Sprintf("tail rejects %s takes the row ids (as tail rejects list prints them) or --all", verb), exitUsage)
	case !c.Bool("all"):
		rows = []int64{}
		for _, a := range c.Args().Slice() {
			id, err := strconv.ParseInt(a, 10, 64)
			if err != nil || id < 1 {
				return cli.Exit(fmt.Sprintf("tail rejects %s: row %q: want a row id, a positive number as tail rejects list prints it", verb, a), exitUsage)
			}
			rows = append(rows, id)
		}
	}
	st, _, err := openExistingStore(c, false)
	if err != nil {
		return err
	}
	defer st.Close()
	name, err := rejectSource(c, st)
	if err != nil {
		return err
	}
	got, err := act(st, name, rows)
	if err != nil {
		return err
	}
	if len(got) > 0 {
		fmt.Fprintf(c.App.Writer, "source %s: rows %s %s\n", name, joinIDs(got), done)
	}
	var missing []int64
	for _, id := range rows {
		if !slices.Contains(got, id) {
			missing = append(missing, id)
		}
	}
	switch {
	case len(missing) > 0:
		return cli.Exit(fmt.Sprintf("source %s: no rejected row %s recorded (never rejected, accepted since, or dropped; tail rejects list shows them)", name, joinIDs(missing)), exitError)
	case len(got) == 0:
		return cli.Exit(fmt.Sprintf("source %s: no rejected rows recorded (tail rejects list shows the sources that have some)", name), exitError)
	}
	return nil
}

// rejectSource is the source --source names: a name with records as it
// is; else, if it is a source URL, the name that source is kept under
// (the URL tail --source took); else the name as given.
func rejectSource(c *cli.Context, st store.Sources) (string, error) {
	v := c.String("source")
	rs, err := st.SourceRejects(c.Context, model.SourceRejectFilter{Source: v, Limit: 1})
	if err != nil || len(rs) > 0 || !strings.Contains(v, ":") {
		return v, err
	}
	// Its name is known from the URL alone: the app's database may be down.
	spec, err := sources.Parse(v)
	if err != nil {
		return v, nil // not a source URL: a name with no records
	}
	return spec.Name(), nil
}

// describeReject is a record's line: its event, how often and when it was
// rejected, and a retry or a disappearance pending a person.
func describeReject(x model.SourceReject) string {
	var b strings.Builder
	if x.EventID != "" {
		fmt.Fprintf(&b, "event %s\t", relay.ShowControls(x.EventID))
	} else {
		b.WriteString("(no event id)\t")
	}
	times := "once"
	if x.Times > 1 {
		times = strconv.FormatInt(x.Times, 10) + " times"
	}
	fmt.Fprintf(&b, "rejected %s, last at %s", times, x.Last.Format(time.RFC3339))
	if x.RetryAt != nil {
		fmt.Fprintf(&b, "; retry asked at %s", x.RetryAt.Format(time.RFC3339))
	}
	if x.GoneAt != nil {
		fmt.Fprintf(&b, "; gone from the outbox at %s (drop it, or retry once the row is back)", x.GoneAt.Format(time.RFC3339))
	}
	return b.String()
}

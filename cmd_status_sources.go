package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/sources"
	"github.com/edgerelay/edgerelay/store"
)

// sourceStatus is a tailed outbox as edgerelay status shows it: its saved
// state (position, gaps) from edgerelay's database and, when the config
// names it under tail:, what the outbox holds that is not relayed yet.
type sourceStatus struct {
	Source           string  `json:"source"`
	Position         int64   `json:"position"`
	Gaps             int     `json:"gaps"`
	GapIDs           int64   `json:"gap_ids"`
	OldestGapSeconds float64 `json:"oldest_gap_seconds"`
	// Configured: the config's tail: names it, so its outbox was read.
	Configured             bool     `json:"configured"`
	RowsBehind             *int64   `json:"rows_behind,omitempty"`
	RowsBehindEstimated    bool     `json:"rows_behind_estimated,omitempty"`
	OldestUnrelayedSeconds *float64 `json:"oldest_unrelayed_seconds,omitempty"`
	AgeUnknown             bool     `json:"age_unknown,omitempty"`
	// Unreachable is why the outbox could not be read (its saved state
	// is still shown, when it has one).
	Unreachable string `json:"unreachable,omitempty"`
}

// measureTimeout bounds measuring one source for status.
const measureTimeout = 15 * time.Second

// tailStatus gathers every saved source's state and measures the
// configured ones (the config's tail:), side by side, each opened for
// this with measureTimeout: one that cannot be reached is shown as such,
// not an error.
func tailStatus(ctx context.Context, keep store.Sources, now time.Time, specs []*sources.Spec) ([]sourceStatus, error) {
	states, err := keep.SourceStates(ctx)
	if err != nil {
		return nil, err
	}
	saved := func(name string, st model.SourceState) sourceStatus {
		ss := sourceStatus{Source: name, Position: st.Position, Gaps: len(st.Gaps)}
		var oldest time.Time
		for _, g := range st.Gaps {
			ss.GapIDs += g.Last - g.First + 1
			if oldest.IsZero() || g.Since.Before(oldest) {
				oldest = g.Since
			}
		}
		if !oldest.IsZero() {
			ss.OldestGapSeconds = max(0, now.Sub(oldest).Seconds())
		}
		return ss
	}
	byName := map[string]sourceStatus{}
	for name, st := range states {
		byName[name] = saved(name, st)
	}
	measured := make([]sourceStatus, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, measureTimeout)
			defer cancel()
			measured[i] = measureSource(ctx, spec, states, saved)
		})
	}
	wg.Wait()
	for _, ss := range measured {
		byName[ss.Source] = ss
	}
	out := make([]sourceStatus, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	// Those that cannot be reached last: their errors end the columns.
	slices.SortStableFunc(out, func(a, b sourceStatus) int {
		return cmp.Compare(min(1, len(a.Unreachable)), min(1, len(b.Unreachable)))
	})
	return out, nil
}

// measureSource opens one configured source and measures its backlog
// after its saved state.
func measureSource(ctx context.Context, spec *sources.Spec, states map[string]model.SourceState, saved func(string, model.SourceState) sourceStatus) sourceStatus {
	ss := saved(spec.Name(), states[spec.Name()])
	ss.Configured = true
	src, err := spec.Open(ctx)
	if err != nil {
		// On one line: a driver's error may span several, and a tab
		// would break the columns. (The source's errors never hold its
		// password.)
		ss.Unreachable = oneLine(err.Error(), 500)
		return ss
	}
	defer src.Close()
	ls, ok := src.(sources.LagSource)
	if !ok {
		return ss
	}
	b, err := ls.Backlog(ctx, ss.Position, states[src.Name()].Gaps)
	if err != nil {
		ss.Unreachable = oneLine(err.Error(), 500)
		return ss
	}
	behind := b.Rows + b.GapRows
	ss.RowsBehind, ss.RowsBehindEstimated = &behind, b.Estimated
	if b.AgeKnown {
		age := b.OldestAge.Seconds()
		ss.OldestUnrelayedSeconds = &age
	} else {
		ss.AgeUnknown = behind > 0
	}
	return ss
}

// printTailStatus writes the sources as aligned columns.
func printTailStatus(w io.Writer, ss []sourceStatus) {
	if len(ss) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tail sources\tposition\trows behind\toldest not relayed\tgaps waited on")
	for _, s := range ss {
		behind, oldest := "—", "—"
		switch {
		case s.Unreachable != "":
			behind = "unreachable: " + s.Unreachable
		case !s.Configured:
			behind = "(not in the config's tail:)"
		case s.RowsBehind != nil:
			behind = fmt.Sprint(*s.RowsBehind)
			if s.RowsBehindEstimated {
				behind += " (estimated)"
			}
			switch {
			case s.AgeUnknown:
				oldest = "unknown (no created_column, or no time in it)"
			case s.OldestUnrelayedSeconds != nil && *s.RowsBehind > 0:
				oldest = "created " + (time.Duration(*s.OldestUnrelayedSeconds * float64(time.Second))).Round(time.Second).String() + " ago"
			default:
				oldest = "none"
			}
		}
		gaps := "none"
		if s.GapIDs > 0 {
			gaps = fmt.Sprintf("%d id%s, oldest missing for %s", s.GapIDs, plural(int(s.GapIDs)), (time.Duration(s.OldestGapSeconds * float64(time.Second))).Round(time.Second))
		}
		if s.Unreachable != "" {
			// The last cell, so that a long error widens no column; the
			// saved state, if any, before it.
			pos := "—"
			if s.Position > 0 || s.Gaps > 0 {
				pos = fmt.Sprint(s.Position)
				behind += " (gaps waited on: " + gaps + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.Source, pos, behind)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", s.Source, s.Position, behind, oldest, gaps)
	}
	tw.Flush()
}

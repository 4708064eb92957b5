package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgerelay/edgerelay/sources"
)

// TailSource is one outbox serve tails, as /metrics and /readyz show it.
type TailSource struct {
	sources.TailStats
	// Here says this process holds the source's lease and tails it now.
	// Only then are its position, gaps and lag shown: the process that
	// holds the lease has the live figures, and this one's would be stale.
	Here bool
}

// tailDetail is a source as /readyz's body shows it; nil fields are not
// known here (another process tails it, or the lag is not measured yet).
type tailDetail struct {
	Source              string   `json:"source"`
	Here                bool     `json:"here"`
	Position            *int64   `json:"position,omitempty"`
	RowsBehind          *int64   `json:"rows_behind,omitempty"`
	RowsBehindEstimated bool     `json:"rows_behind_estimated,omitempty"`
	OldestUnrelayed     *float64 `json:"oldest_unrelayed_seconds,omitempty"`
	Gaps                *int     `json:"gaps,omitempty"`
	GapIDs              *int64   `json:"gap_ids,omitempty"`
	OldestGap           *float64 `json:"oldest_gap_seconds,omitempty"`
	GaveUp              int64    `json:"gave_up"`
}

// detail is what is known of ts at now.
func (ts TailSource) detail(now time.Time) tailDetail {
	d := tailDetail{Source: ts.Source, Here: ts.Here, GaveUp: ts.GaveUp}
	if !ts.Here {
		return d
	}
	st := ts.TailStats
	d.Position, d.Gaps, d.GapIDs = &st.Position, &st.Gaps, &st.GapIDs
	gap := 0.0
	if !st.OldestGap.IsZero() {
		gap = max(0, now.Sub(st.OldestGap).Seconds())
	}
	d.OldestGap = &gap
	if st.LagMeasured.IsZero() {
		return d
	}
	d.RowsBehind, d.RowsBehindEstimated = &st.RowsBehind, st.RowsBehindEstimated
	if !st.AgeUnknown {
		age := 0.0
		if !st.OldestUnrelayed.IsZero() {
			age = max(0, now.Sub(st.OldestUnrelayed).Seconds())
		}
		d.OldestUnrelayed = &age
	}
	return d
}

// WatchTails adds serve's tailed sources (read at each scrape): per
// source, whether this process tails it, and where it does, its position,
// rows behind, oldest row not relayed, gaps; and this process's counters
// of rows relayed and ids given up. now is the clock the tailers use.
func (m *Metrics) WatchTails(tails func() []TailSource, now func() time.Time) {
	m.reg.MustRegister(tailCollector{tails, now})
}

type tailCollector struct {
	tails func() []TailSource
	now   func() time.Time
}

var (
	tailHereDesc = prometheus.NewDesc("edgerelay_tail_here",
		"1 if this process tails the source now (it holds its lease), else 0; the other edgerelay_tail_ gauges come only from the process that does.", []string{"source"}, nil)
	tailPosDesc    = prometheus.NewDesc("edgerelay_tail_position", "The id of the last outbox row relayed.", []string{"source"}, nil)
	tailBehindDesc = prometheus.NewDesc("edgerelay_tail_rows_behind",
		"Committed outbox rows not relayed yet, after the position and in the gaps (exact up to 10000, then estimated from the highest id), as last measured.", []string{"source"}, nil)
	tailOldestDesc = prometheus.NewDesc("edgerelay_tail_oldest_unrelayed_seconds",
		"Age of the oldest committed outbox row not relayed yet (its created_column, by the database's clock); 0 when none; absent when the table has no creation column.", []string{"source"}, nil)
	tailGapsDesc      = prometheus.NewDesc("edgerelay_tail_gaps", "Ranges of ids below the position waited on (their transactions may still commit).", []string{"source"}, nil)
	tailGapIDsDesc    = prometheus.NewDesc("edgerelay_tail_gap_ids", "Ids below the position waited on.", []string{"source"}, nil)
	tailOldestGapDesc = prometheus.NewDesc("edgerelay_tail_oldest_gap_seconds",
		"How long the oldest gap has been waited on (given up past the source's gap_timeout); 0 when none.", []string{"source"}, nil)
	tailRowsDesc = prometheus.NewDesc("edgerelay_tail_rows_total",
		"Outbox rows relayed by this process, by outcome: accepted (new), duplicate (accepted before), rejected (invalid event, skipped).", []string{"source", "outcome"}, nil)
	tailGaveUpDesc = prometheus.NewDesc("edgerelay_tail_gave_up_total",
		"Gap ids this process gave up waiting on after gap_timeout: rows that would not be relayed if their transaction committed later.", []string{"source"}, nil)
	tailErrorsDesc = prometheus.NewDesc("edgerelay_tail_errors_total", "Failures to read the source or write edgerelay's database, retried.", []string{"source"}, nil)
)

func (c tailCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tailHereDesc, tailPosDesc, tailBehindDesc, tailOldestDesc, tailGapsDesc,
		tailGapIDsDesc, tailOldestGapDesc, tailRowsDesc, tailGaveUpDesc, tailErrorsDesc} {
		ch <- d
	}
}

func (c tailCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, ts := range c.tails() {
		name := ts.Source
		here := 0.0
		if ts.Here {
			here = 1
		}
		gauge(tailHereDesc, here, name)
		counter(tailRowsDesc, ts.Accepted, name, "accepted")
		counter(tailRowsDesc, ts.Duplicates, name, "duplicate")
		counter(tailRowsDesc, ts.Rejected, name, "rejected")
		counter(tailGaveUpDesc, ts.GaveUp, name)
		counter(tailErrorsDesc, ts.Errors, name)
		d := ts.detail(now)
		if !d.Here {
			continue
		}
		gauge(tailPosDesc, float64(*d.Position), name)
		gauge(tailGapsDesc, float64(*d.Gaps), name)
		gauge(tailGapIDsDesc, float64(*d.GapIDs), name)
		gauge(tailOldestGapDesc, *d.OldestGap, name)
		if d.RowsBehind != nil {
			gauge(tailBehindDesc, float64(*d.RowsBehind), name)
		}
		if d.OldestUnrelayed != nil {
			gauge(tailOldestDesc, *d.OldestUnrelayed, name)
		}
	}
}

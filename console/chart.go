package console

import (
	"context"
	"fmt"
	"html/template"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// The overview's chart: accepts and attempts per minute over the last hour,
// drawn here as inline SVG (no script, no image fetched). Bars are the
// attempts, stacked by outcome; the line is the notifications accepted.

const (
	chartW, chartH = 720.0, 180.0
	chartLeft      = 44.0 // room for the scale
	chartBottom    = 22.0 // room for the time labels
)

type chart struct {
	W, H     float64
	Bars     []bar
	Line     string // the accepts' polyline points
	Max      int64
	Ticks    []tick
	Labels   []tick
	Summary  string // the chart in words, for screen readers
	Left     float64
	Baseline float64
}

type bar struct {
	X, W  float64
	Parts []barPart
	Title string
}

type barPart struct {
	Y, H  float64
	Class string
}

type tick struct {
	X, Y float64
	Text string
}

func newChart(o model.Overview) chart {
	n := len(o.Accepted)
	c := chart{W: chartW, H: chartH, Left: chartLeft, Baseline: chartH - chartBottom}
	if n == 0 {
		return c
	}
	var max, acc, sent, refused, unknown int64 = 1, 0, 0, 0, 0
	for i := range n {
		total := o.Attempted["sent"][i] + o.Attempted["refused"][i] + o.Attempted["unknown"][i]
		max = maxInt(max, maxInt(total, o.Accepted[i]))
		acc += o.Accepted[i]
		sent += o.Attempted["sent"][i]
		refused += o.Attempted["refused"][i]
		unknown += o.Attempted["unknown"][i]
	}
	c.Max = max
	plotH := c.Baseline - 8
	step := (chartW - chartLeft - 4) / float64(n)
	y := func(v int64) float64 { return c.Baseline - float64(v)/float64(max)*plotH }
	var points []byte
	for i := range n {
		x := chartLeft + float64(i)*step
		b := bar{X: x + step*0.1, W: step * 0.8}
		base := c.Baseline
		for _, oc := range []string{"sent", "refused", "unknown"} {
			v := o.Attempted[oc][i]
			if v == 0 {
				continue
			}
			h := float64(v) / float64(max) * plotH
			base -= h
			b.Parts = append(b.Parts, barPart{Y: base, H: h, Class: oc})
		}
		at := o.Since.Add(time.Duration(i) * o.Bucket).UTC()
		b.Title = fmt.Sprintf("%s: %d accepted; attempts %d sent, %d refused, %d unknown", at.Format("15:04"),
			o.Accepted[i], o.Attempted["sent"][i], o.Attempted["refused"][i], o.Attempted["unknown"][i])
		c.Bars = append(c.Bars, b)
		points = fmt.Appendf(points, "%.1f,%.1f ", x+step/2, y(o.Accepted[i]))
		if i%15 == 0 {
			c.Labels = append(c.Labels, tick{X: x, Y: chartH - 6, Text: at.Format("15:04")})
		}
	}
	c.Line = string(points)
	for _, v := range []int64{0, max / 2, max} {
		c.Ticks = append(c.Ticks, tick{X: chartLeft - 6, Y: y(v) + 4, Text: fmt.Sprint(v)})
	}
	c.Summary = fmt.Sprintf("In the last %s: %d notifications accepted; attempts: %d sent, %d refused, %d unknown; at most %d in one minute.",
		time.Duration(n)*o.Bucket, acc, sent, refused, unknown, max)
	return c
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// funcs are the templates' helpers.
func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"nid": c.nid,
		"eid": c.eid,
		"rid": c.rid,
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
		},
		"whenp": func(t *time.Time) string {
			if t == nil {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
		},
		"ago": func(now, t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return now.Sub(t).Round(time.Second).String() + " ago"
		},
		"took": func(a, b time.Time) string { return b.Sub(a).Round(time.Millisecond).String() },
		"age":  func(d time.Duration) string { return d.Round(time.Second).String() },
		"excerpt": func(s string) string {
			if r := []rune(s); len(r) > 300 {
				return string(r[:300]) + "…"
			}
			return s
		},
		"rate":      func(v float64) string { return fmt.Sprintf("%.2f", v) },
		"retryable": retryable,
		"json":      func(b []byte) string { return string(b) },
		// shown makes control characters in stored text visible rather
		// than letting them reorder or hide what the page reads as.
		"shown": relay.ShowControls,
	}
}

// nid and eid spell a notification's and an event's row as the API shows
// them (n_…, ev_…): row ids come from one sequence for every tenant, so a
// page that showed them would let a tenant count the others' traffic.
// The pages take either spelling back.
func (c *Console) nid(row int64) string { return c.spell(row, (*relay.IDs).Notification) }
func (c *Console) eid(row int64) string { return c.spell(row, (*relay.IDs).Event) }
func (c *Console) rid(row int64) string { return c.spell(row, (*relay.IDs).Run) }

func (c *Console) spell(row int64, f func(*relay.IDs, int64) string) string {
	x, err := c.r.IDs(context.Background()) // made at open: an atomic load
	if err != nil {
		return "?"
	}
	return f(x, row)
}

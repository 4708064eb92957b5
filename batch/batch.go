package batch

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// DefaultGroup is how many lines' events go to one relay.AcceptAll call,
// and so into one commit, unless Options.Group says otherwise.
const DefaultGroup = 32

// Options tune Accept and Check.
type Options struct {
	// Group is the most events accepted in one call of relay.AcceptAll
	// (default DefaultGroup): one commit, one fsync, for all of them.
	// Groups are accepted one after another, in file order; at most
	// three groups of lines are held in memory (one being accepted, one
	// read ahead, one being read).
	Group int
	// OnReject is told of each line not accepted (a bad line, an invalid
	// event, or a conflict with an event accepted before), in file order.
	OnReject func(*LineError)
	// Progress is called after each line is settled, in file order; it
	// must be cheap (throttle any output).
	Progress func(Progress)
}

// Result counts what a batch did. Every line of the file (for CSV, every
// row after the header) is counted once: Lines is Accepted() + Rejected +
// Skipped (for Check, Valid + Rejected + Skipped). A CSV row whose quoted
// cell spans lines is one.
type Result struct {
	// Lines settled: accepted, rejected, skipped or (Check) checked.
	Lines int `json:"lines"`
	// New events written, and the notifications they fanned out to.
	New           int `json:"new"`
	Notifications int `json:"notifications"`
	// Duplicate events: accepted before (an earlier run, or an earlier
	// line), nothing written.
	Duplicate int `json:"duplicate"`
	// Rejected lines: not an event, invalid, or the same id and purpose as
	// an accepted event with different content.
	Rejected int `json:"rejected"`
	// Skipped lines: blank, or JSON Lines comments.
	Skipped int `json:"skipped"`
	// Valid lines, for Check.
	Valid int `json:"valid,omitempty"`
}

// Accepted is how many lines were accepted, new or duplicate.
func (r Result) Accepted() int { return r.New + r.Duplicate }

// Progress is the state of a running batch.
type Progress struct {
	Result
	// Read is how many lines were read (events and bad lines); Bytes how
	// many bytes of the file.
	Read  int
	Bytes int64
}

// Accept accepts each line's event through r.AcceptAll, Group lines at a
// time, and returns the counts. A bad line or a rejected event is counted
// and reported to OnReject, and the rest go on. It stops at the first
// error that is not about a line (the database, ctx), returning the counts
// so far and the error; lines not settled then were not accepted, or were
// accepted and are duplicates on a re-run.
//
// lines is ranged over on a goroutine of its own, one group ahead of the
// accepts; OnReject and Progress are called on the caller's.
func Accept(ctx context.Context, r *relay.Relay, lines iter.Seq[Line], opts Options) (Result, error) {
	return run(ctx, r, lines, opts, false)
}

// Check decodes, resolves and validates every line as Accept would, and
// writes nothing: the first pass of a strict batch. It cannot see
// conflicts (the same id and purpose with different content), which only
// the write finds.
func Check(ctx context.Context, r *relay.Relay, lines iter.Seq[Line], opts Options) (Result, error) {
	return run(ctx, r, lines, opts, true)
}

// group is lines read together, with the reader's progress after them.
type group struct {
	lines []Line
	read  int
	bytes int64
}

// run reads groups of lines on one goroutine and accepts (or checks) them
// on this one, one group at a time, in file order: decoding the next group
// overlaps writing this one.
func run(ctx context.Context, r *relay.Relay, lines iter.Seq[Line], opts Options, check bool) (Result, error) {
	n := opts.Group
	if n <= 0 {
		n = DefaultGroup
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	groups := make(chan group, 1) // one group read ahead
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(groups)
		g := group{}
		send := func() bool {
			select {
			case groups <- g:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for l := range lines {
			g.lines = append(g.lines, l)
			g.read++
			g.bytes = l.Offset
			if len(g.lines) < n {
				continue
			}
			if !send() {
				return
			}
			g = group{read: g.read, bytes: g.bytes}
		}
		if len(g.lines) > 0 {
			send()
		}
	}()

	var res Result
	err := func() error {
		for g := range groups {
			if err := ctx.Err(); err != nil {
				return err
			}
			accs, errs := accept(ctx, r, g.lines, check)
			if err := count(g, accs, errs, opts, check, &res); err != nil {
				return err
			}
		}
		return ctx.Err() // the reader stops early only if ctx ended
	}()
	cancel()
	<-readDone // the caller's iterator is not used after return
	return res, err
}

// accept accepts (or checks) one group's events.
func accept(ctx context.Context, r *relay.Relay, lines []Line, check bool) ([]relay.AcceptResult, []error) {
	errs := make([]error, len(lines))
	accs := make([]relay.AcceptResult, len(lines))
	var events []relay.Event
	var at []int // the line of each event
	for i, l := range lines {
		if l.Err != nil || l.Skip {
			continue
		}
		if check {
			errs[i] = r.Check(ctx, l.Event)
			continue
		}
		events = append(events, l.Event)
		at = append(at, i)
	}
	if len(events) > 0 {
		// 0: the batch needs the counts, not the notifications.
		results, aerrs := r.AcceptAll(ctx, events, 0)
		for k, i := range at {
			accs[i], errs[i] = results[k], aerrs[k]
		}
	}
	return accs, errs
}

// count counts each line of a settled group, in order, up to the first
// error that is not about a line.
func count(g group, accs []relay.AcceptResult, errs []error, opts Options, check bool, res *Result) error {
	// Progress reports what was read up to each line.
	read := g.read - len(g.lines)
	for i, l := range g.lines {
		read++
		var rej *LineError
		var inv *relay.InvalidEventError
		switch err := errs[i]; {
		case l.Err != nil:
			if !errors.As(l.Err, &rej) {
				rej = &LineError{Line: l.Line, Err: l.Err}
			}
		case err == nil:
		case errors.As(err, &inv), errors.Is(err, model.ErrEventConflict):
			rej = &LineError{Line: l.Line, Err: err}
		default:
			return fmt.Errorf("line %d: %w", l.Line, err)
		}
		switch {
		case l.Skip:
			res.Skipped++
		case rej != nil:
			res.Rejected++
			if opts.OnReject != nil {
				opts.OnReject(rej)
			}
		case check:
			res.Valid++
		case accs[i].Duplicate:
			res.Duplicate++
		default:
			res.New++
			res.Notifications += accs[i].Count
		}
		res.Lines++
		if opts.Progress != nil {
			opts.Progress(Progress{Result: *res, Read: read, Bytes: l.Offset})
		}
	}
	return nil
}

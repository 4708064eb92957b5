package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"edgerelay/relay"
	"edgerelay/store"
)

// Tailing an outbox: an application writes its business row and an event
// row in one transaction of its own database; the tailer reads the event
// rows in id order and accepts each, like POST /v1/events.
//
//	read      src.Read: rows after the saved position
//	accept    relay.AcceptAll: the batch's events in order, one commit;
//	          an invalid one is logged and skipped
//	mark      src.MarkProcessed: the rows relayed (if the source marks)
//	save      relay.SaveSourcePosition: the last row of the batch
//
// Accept dedupes on the event's identity (tenant, id, purpose), so a crash
// anywhere before the position is saved makes the next run read those rows
// again and find them duplicates: nothing is lost (the position never
// passes a row that was not accepted or rejected) and nothing is repeated
// (no notification is created twice). Marking comes before saving, so a
// row at or below the saved position with processed_at still NULL is one
// that was rejected.

// TailOptions configure a Tailer. The zero value is usable.
type TailOptions struct {
	// Poll is how long the tailer waits before reading again when the
	// source had nothing new. Default 1s.
	Poll time.Duration
	// Batch is the most rows read at a time; the position is saved once per
	// batch, so it is also the most rows read again after a crash.
	// Default 100.
	Batch int
	// OnBatch, if set, is called on the tailer's goroutine after each batch
	// is settled (its position saved), with the counters so far. It must be
	// quick.
	OnBatch func(TailStats)
}

// TailStats are a Tailer's counters since it started.
type TailStats struct {
	Source string `json:"source"`
	// Position is the id of the last row settled: every row up to it was
	// accepted (or found a duplicate) or rejected.
	Position int64 `json:"position"`
	// Read counts rows read, re-reads after a failure included.
	Read int64 `json:"read"`
	// Accepted counts rows whose event was new.
	Accepted int64 `json:"accepted"`
	// Duplicates counts rows whose event had been accepted before: rows
	// read again after a crash or a failed batch, or an event the
	// application wrote twice. Nothing new was created for them.
	Duplicates int64 `json:"duplicates"`
	// Rejected counts rows skipped because their event is invalid or
	// conflicts with an accepted event of the same identity.
	Rejected int64 `json:"rejected"`
	// Errors counts failures that were retried: the source or the
	// database could not be read or written.
	Errors int64 `json:"errors"`
	// Rejections are the latest rejected rows, at most maxRejections.
	Rejections []Rejection `json:"rejections,omitempty"`
}

// Rejection is a row the tailer skipped, and why.
type Rejection struct {
	Row     int64  `json:"row"`
	EventID string `json:"event_id,omitempty"`
	Reason  string `json:"reason"`
}

const (
	maxRejections = 20
	// maxTailBackoff caps the wait between retries of a failing source.
	maxTailBackoff = 30 * time.Second
	// settleTimeout bounds marking and saving a batch that was accepted
	// when the tailer is asked to stop: it is finished rather than left to
	// be read again.
	settleTimeout = 10 * time.Second
)

// Tailer relays one source into a relay. Create it with NewTailer, run it
// with Run; Stats may be called from any goroutine.
type Tailer struct {
	r    *relay.Relay
	src  Source
	opts TailOptions

	mu    sync.Mutex
	stats TailStats
}

// NewTailer returns a tailer of src into r. It does not start it.
func NewTailer(r *relay.Relay, src Source, opts TailOptions) *Tailer {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	return &Tailer{r: r, src: src, opts: opts, stats: TailStats{Source: src.Name()}}
}

// Tail relays src into r until ctx ends: NewTailer(r, src, opts).Run(ctx).
func Tail(ctx context.Context, r *relay.Relay, src Source, opts TailOptions) error {
	return NewTailer(r, src, opts).Run(ctx)
}

// Stats returns the counters so far.
func (t *Tailer) Stats() TailStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stats
	st.Rejections = append([]Rejection(nil), t.stats.Rejections...)
	return st
}

// Run reads the source from its saved position and accepts every row's
// event, polling when it has caught up, until ctx ends; then it returns
// nil. Failures of the source or the database are logged and retried with
// backoff; the only error returned is a closed relay (store.ErrClosed).
// Running two tailers of one source (two processes) is safe: each accepts
// what the other did as a duplicate, and the saved position only moves
// forward.
func (t *Tailer) Run(ctx context.Context) error {
	name := t.src.Name()
	log := t.r.Log().With("source", name)
	wait := t.opts.Poll
	backoff := func(what string, err error) bool {
		t.count(func(s *TailStats) { s.Errors++ })
		log.Warn("tail: "+what+" failed; retrying", "in", wait, "error", err)
		ok := sleepCtx(ctx, wait)
		wait = min(2*wait, max(t.opts.Poll, maxTailBackoff))
		return ok
	}

	var pos int64
	for {
		p, err := t.r.SourcePosition(ctx, name)
		if err == nil {
			pos = p
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, store.ErrClosed) {
			return err
		}
		if !backoff("reading the saved position", err) {
			return nil
		}
	}
	t.count(func(s *TailStats) { s.Position = pos })
	log.Info("tail: reading rows after the saved position", "position", pos)

	for {
		rows, err := t.src.Read(ctx, pos, t.opts.Batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !backoff("reading the source", err) {
				return nil
			}
			continue
		}
		if len(rows) == 0 {
			wait = t.opts.Poll
			if !sleepCtx(ctx, t.opts.Poll) {
				return nil
			}
			continue
		}
		next, err := t.relay(ctx, pos, rows)
		if next > pos {
			pos = next
			if t.opts.OnBatch != nil {
				t.opts.OnBatch(t.Stats())
			}
		}
		switch {
		case err == nil:
			wait = t.opts.Poll
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, store.ErrClosed):
			return err
		default:
			if !backoff("relaying a batch", err) {
				return nil
			}
		}
	}
}

// relay accepts rows (read after pos) in order, with one commit for all of
// them (AcceptAll), until one fails; then settles the ones handled:
// marks those relayed and saves the position to the last one handled. It
// returns the new position and the failure, if any; rows after a failure
// are read again.
func (t *Tailer) relay(ctx context.Context, pos int64, rows []Row) (int64, error) {
	var failed error
	prev := pos
	for i, row := range rows {
		if row.ID <= prev {
			// A source bug; going on would move the position backwards.
			failed = fmt.Errorf("source %s returned row %d after row %d: rows must come in increasing id order", t.src.Name(), row.ID, prev)
			rows = rows[:i]
			break
		}
		prev = row.ID
	}
	if err := ctx.Err(); err != nil {
		return pos, err
	}
	// Decode every row; the decodable ones are accepted together, in order.
	events := make([]relay.Event, 0, len(rows))
	decodeErrs := make([]error, len(rows))
	at := make([]int, len(rows)) // row → its index in events, or -1
	for i, row := range rows {
		ev, err := relay.DecodeEvent(bytes.NewReader(row.Event))
		if err != nil {
			decodeErrs[i], at[i] = err, -1
			continue
		}
		at[i] = len(events)
		events = append(events, ev)
	}
	// The batch in flight is finished even if ctx ends meanwhile (the store
	// bounds it); the loop stops after it.
	results, errs := t.r.AcceptAll(context.WithoutCancel(ctx), events, 0)
	t.count(func(s *TailStats) { s.Read += int64(len(rows)) })
	done := pos
	var relayed []int64
	for i, row := range rows {
		err, eventID := decodeErrs[i], ""
		if at[i] >= 0 {
			err, eventID = errs[at[i]], events[at[i]].ID
		}
		var inv *relay.InvalidEventError
		switch {
		case err == nil:
			dup := results[at[i]].Duplicate
			t.count(func(s *TailStats) {
				if dup {
					s.Duplicates++
				} else {
					s.Accepted++
				}
			})
			relayed = append(relayed, row.ID)
		case errors.As(err, &inv) || errors.Is(err, store.ErrEventConflict):
			// Permanent: the same row would fail the same way forever, and
			// must not hold up the rows behind it.
			t.reject(row, eventID, err)
		default:
			// The relay could not read or write: this row and the ones
			// after it are read again.
			return t.settle(ctx, pos, done, relayed, errors.Join(err, failed))
		}
		done = row.ID
	}
	return t.settle(ctx, pos, done, relayed, failed)
}

// settle marks the rows relayed and saves the position done (if it moved
// past pos), and returns the position and failed.
func (t *Tailer) settle(ctx context.Context, pos, done int64, relayed []int64, failed error) (int64, error) {
	if done == pos {
		return pos, failed
	}
	// Settle what was accepted even if ctx has ended, so a clean stop does
	// not leave it to be read again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	// Mark before saving: a crash in between reads the rows again (all
	// duplicates) and marks them again (a no-op), whereas the other order
	// could leave relayed rows unmarked for good.
	if err := t.src.MarkProcessed(sctx, relayed); err != nil {
		return pos, errors.Join(failed, err)
	}
	if err := t.r.SaveSourcePosition(sctx, t.src.Name(), done); err != nil {
		return pos, errors.Join(failed, err)
	}
	t.count(func(s *TailStats) { s.Position = done })
	t.r.Log().Debug("tail: batch relayed", "source", t.src.Name(), "position", done)
	return done, failed
}

// reject logs and counts a row whose event was rejected.
func (t *Tailer) reject(row Row, eventID string, err error) {
	t.r.Log().Warn("tail: skipped an outbox row: its event was rejected",
		"source", t.src.Name(), "row", row.ID, "event", eventID, "reason", err.Error())
	t.count(func(s *TailStats) {
		s.Rejected++
		s.Rejections = append(s.Rejections, Rejection{Row: row.ID, EventID: eventID, Reason: err.Error()})
		if len(s.Rejections) > maxRejections {
			s.Rejections = s.Rejections[len(s.Rejections)-maxRejections:]
		}
	})
}

func (t *Tailer) count(f func(*TailStats)) {
	t.mu.Lock()
	f(&t.stats)
	t.mu.Unlock()
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

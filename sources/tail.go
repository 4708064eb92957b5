package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
)

// Tailing an outbox: an application writes its business row and an event
// row in one transaction of its own database; the tailer reads the event
// rows in id order and accepts each, like POST /v1/events.
//
//	read      src.Read: rows after the saved position (and, for a
//	          GapSource, the rows of its gaps, and its horizon)
//	          and the rows an operator asked to read again (rejected
//	          before, perhaps fixed since)
//	accept    relay.AcceptAll: the batch's events in order, one commit;
//	          an invalid one is logged and skipped
//	mark      src.MarkProcessed: the rows relayed (if the source marks)
//	save      relay.SettleSource: the last row of the batch, and the
//	          gaps: ids skipped below it, minus those read or closed; the
//	          rows rejected, recorded in the same transaction, so the
//	          position never passes a rejected row without its record;
//	          and the answers to the retries
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
	// Once makes Run return when it has caught up instead of polling (the
	// cron mode): after a round that read fewer new rows than Batch, and
	// every committed row of the gaps. A failure is returned, not retried:
	// what was settled before it is saved, and the next run goes on from
	// there.
	Once bool
	// LagEvery is how often, at most, the tailer measures its backlog
	// (TailStats' lag) while it is busy: a round that read everything
	// committed needs no query (it is behind by nothing). Default 2s.
	LagEvery time.Duration
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
	// conflicts with an accepted event of the same identity (each is
	// recorded in edgerelay's store: tail rejects list), a retry rejected
	// again included.
	Rejected int64 `json:"rejected"`
	// Retried counts rows read again because an operator asked (tail
	// rejects retry); Gone those asked for that the source no longer has.
	Retried int64 `json:"retried"`
	Gone    int64 `json:"gone"`
	// Errors counts failures that were retried: the source or the
	// database could not be read or written.
	Errors int64 `json:"errors"`
	// Gaps counts the ranges of ids below Position not read yet (their
	// transactions may still commit), GapIDs the ids in them.
	Gaps   int   `json:"gaps"`
	GapIDs int64 `json:"gap_ids"`
	// Late counts rows read from a gap: committed after a row with a
	// larger id had been read. GapsEnded counts gap ids dropped because
	// every transaction that could have committed them had ended (rolled
	// back); GaveUp those dropped after the gap timeout.
	Late      int64 `json:"late"`
	GapsEnded int64 `json:"gaps_ended"`
	GaveUp    int64 `json:"gave_up"`
	// OldestGap is when the oldest gap was first missed (edgerelay's
	// clock, as gap_timeout counts; zero: no gap).
	OldestGap time.Time `json:"oldest_gap,omitzero"`
	// The lag, as measured at LagMeasured (zero: not yet, or the source is
	// no LagSource): RowsBehind counts the committed rows not relayed yet,
	// after the position and in the gaps (estimated beyond BacklogExact:
	// RowsBehindEstimated). OldestUnrelayed is when the oldest of them was
	// created: its age by the database's clock, set back from this host's
	// clock at the measurement (zero: none, or AgeUnknown: the table has
	// no creation time column, or none of those rows a time in it).
	RowsBehind          int64     `json:"rows_behind"`
	RowsBehindEstimated bool      `json:"rows_behind_estimated,omitempty"`
	OldestUnrelayed     time.Time `json:"oldest_unrelayed,omitzero"`
	AgeUnknown          bool      `json:"age_unknown,omitempty"`
	LagMeasured         time.Time `json:"lag_measured,omitzero"`
	// CaughtUp is when a read last found nothing after the position: the
	// tailer was behind the source by nothing then (zero: not yet).
	CaughtUp time.Time `json:"caught_up,omitzero"`
	// Rejections are the latest rejected rows, at most maxRejections
	// (every one is recorded in the store).
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
	r *relay.Relay
	// st is the relay's store: where the source's position and its
	// rejected rows are read.
	st   store.Sources
	src  Source // on Run's goroutine when spec is set
	opts TailOptions
	// spec, if set, is what Run opens src from, and closes it again when
	// it returns (NewTailerFor).
	spec *Spec
	name string

	warnedHorizon bool      // on Run's goroutine
	lagAt         time.Time // when the backlog was last queried; on Run's goroutine
	// retriesAt is when the tailer last looked for requested retries, and
	// retriesLeft whether it found a full batch of them (on Run's
	// goroutine).
	retriesAt   time.Time
	retriesLeft bool

	mu    sync.Mutex
	stats TailStats
}

// NewTailer returns a tailer of src into r, whose store is st. It does not
// start it.
func NewTailer(r *relay.Relay, st store.Sources, src Source, opts TailOptions) *Tailer {
	t := newTailer(r, st, src.Name(), opts)
	t.src = src
	return t
}

func newTailer(r *relay.Relay, st store.Sources, name string, opts TailOptions) *Tailer {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.LagEvery <= 0 {
		opts.LagEvery = 2 * time.Second
	}
	return &Tailer{r: r, st: st, name: name, opts: opts, stats: TailStats{Source: name}}
}

// NewTailerFor returns a tailer of the source spec names into r (whose
// store is st), which
// opens it only when it runs: Run opens it (retrying with backoff while
// the database cannot be reached, logged) and closes it when it returns,
// so a process that does not run the tailer (another holds the source's
// lease) holds no connection to the application's database.
func NewTailerFor(r *relay.Relay, st store.Sources, spec *Spec, opts TailOptions) *Tailer {
	t := newTailer(r, st, spec.Name(), opts)
	t.spec = spec
	return t
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
// nil (with Once: see TailOptions). Failures of the source or the database are logged and retried with
// backoff; the only error returned is a closed relay (model.ErrClosed).
// Running two tailers of one source (two processes) is safe: each accepts
// what the other did as a duplicate, and the saved position only moves
// forward. A tailer made by NewTailerFor opens its source first (a
// failure is retried as any, until ctx ends) and closes it on return.
func (t *Tailer) Run(ctx context.Context) error {
	name := t.name
	if t.src != nil {
		name = t.src.Name()
	}
	log := t.r.Log().With("source", name)
	wait := t.opts.Poll
	var onceErr error
	backoff := func(what string, err error) bool {
		t.count(func(s *TailStats) { s.Errors++ })
		if t.opts.Once {
			onceErr = fmt.Errorf("tail %s: %s: %w", name, what, err)
			return false
		}
		log.Warn("tail: "+what+" failed; retrying", "in", wait, "error", err)
		ok := sleepCtx(ctx, wait)
		wait = min(2*wait, max(t.opts.Poll, maxTailBackoff))
		return ok
	}
	if t.spec != nil {
		for t.src == nil {
			src, err := t.spec.Open(ctx)
			if err == nil {
				t.src = src
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			if !backoff("opening the source", err) {
				return onceErr
			}
		}
		defer func() { t.src.Close(); t.src = nil }()
		wait = t.opts.Poll
	}

	var st model.SourceState
	for {
		s, err := t.st.SourceState(ctx, name)
		if err == nil {
			st = s
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, model.ErrClosed) {
			return err
		}
		if !backoff("reading the saved position", err) {
			return onceErr
		}
	}
	t.count(func(s *TailStats) { s.Position = st.Position; s.setGaps(st.Gaps) })
	log.Info("tail: reading rows after the saved position", "position", st.Position, "gaps", len(st.Gaps))

	for {
		r, err := t.read(ctx, st)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, model.ErrClosed) {
				return err // the round's first read is on the relay's store
			}
			if !backoff("reading the source", err) {
				return onceErr
			}
			continue
		}
		if len(r.rows) == 0 {
			// Nothing after the position: the tailer is behind the source
			// by nothing now (gaps below it aside).
			now := t.r.Now()
			t.count(func(s *TailStats) { s.CaughtUp = now })
		}
		next, err := t.relay(ctx, st, r)
		// Whole: the round read every committed row and relayed them, so
		// the tailer is behind by nothing (as of the read).
		t.measureLag(ctx, next, err == nil && len(r.rows) < t.opts.Batch && (len(r.late) == 0 || r.lateAll))
		if moved := !sameState(next, st); moved {
			st = next
			if t.opts.OnBatch != nil {
				t.opts.OnBatch(t.Stats())
			}
		}
		switch {
		case err == nil:
			wait = t.opts.Poll
			if t.opts.Once && len(r.rows) < t.opts.Batch && (len(r.late) == 0 || r.lateAll) && !t.retriesLeft {
				return nil
			}
			if len(r.rows) == 0 && len(r.late) == 0 && len(r.retry) == 0 {
				if !sleepCtx(ctx, t.opts.Poll) {
					return nil
				}
			}
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, model.ErrClosed):
			return err
		default:
			if !backoff("relaying a batch", err) {
				return onceErr
			}
		}
	}
}

// round is what one read returned.
type round struct {
	rows []Row // after the position, in id order
	late []Row // in the gaps, in id order
	// mark is the source's clock after rows were read (0 if not a
	// GapSource); horizon the start of its oldest open transaction, read
	// before late (0: unknown); lateAll that late holds every committed
	// row of the gaps (it was not cut at the batch size).
	mark, horizon int64
	lateAll       bool
	// retry are the rows an operator asked to read again, in id order;
	// asked holds each one's request (the time it answers), gone the
	// requests whose row the source no longer has.
	retry []Row
	asked map[int64]time.Time
	gone  []model.SourceReject
}

// read reads one round: the gaps' rows first (after the horizon, so that
// a gap the horizon has passed and the read did not find is known to be
// empty for good), then the rows after the position.
func (t *Tailer) read(ctx context.Context, st model.SourceState) (round, error) {
	var r round
	if err := t.readRetries(ctx, &r); err != nil {
		return r, err
	}
	gs, isGap := t.src.(GapSource)
	if isGap && len(st.Gaps) > 0 {
		h, err := gs.Horizon(ctx)
		switch {
		case errors.Is(err, ErrNoHorizon):
			if !t.warnedHorizon {
				t.warnedHorizon = true
				t.r.Log().Warn("tail: the source cannot see the database's open transactions, so an id missing below the position is waited for until the gap timeout; grant the privilege (see the README) for gaps to close as soon as their transactions end",
					"source", t.src.Name(), "gap_timeout", gs.GapTimeout(), "error", err)
			}
		case err != nil:
			return r, err
		default:
			r.horizon = h
		}
		if r.late, err = gs.ReadGaps(ctx, st.Gaps, t.opts.Batch); err != nil {
			return r, err
		}
		r.lateAll = len(r.late) < t.opts.Batch
	}
	rows, err := t.src.Read(ctx, st.Position, t.opts.Batch)
	if err != nil {
		return r, err
	}
	r.rows = rows
	if isGap && len(rows) > 0 {
		if r.mark, err = gs.Clock(ctx); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readRetries reads the rows an operator asked to read again: at most a
// batch of them, at most once a poll unless more are waiting.
func (t *Tailer) readRetries(ctx context.Context, r *round) error {
	now := time.Now()
	if !t.retriesLeft && !t.retriesAt.IsZero() && now.Sub(t.retriesAt) < t.opts.Poll {
		return nil
	}
	reqs, err := t.st.SourceRejects(ctx, model.SourceRejectFilter{Source: t.src.Name(), Requested: true, Limit: t.opts.Batch})
	if err != nil {
		return fmt.Errorf("read the retries asked for: %w", err)
	}
	t.retriesAt, t.retriesLeft = now, len(reqs) == t.opts.Batch
	if len(reqs) == 0 {
		return nil
	}
	ids := make([]int64, len(reqs))
	r.asked = make(map[int64]time.Time, len(reqs))
	for i, q := range reqs {
		ids[i], r.asked[q.Row] = q.Row, *q.RetryAt
	}
	rows, err := readIDs(ctx, t.src, ids)
	if err != nil {
		return err
	}
	found := map[int64]bool{}
	for _, row := range rows {
		if _, ok := r.asked[row.ID]; ok && !found[row.ID] {
			found[row.ID] = true
			r.retry = append(r.retry, row)
		}
	}
	for _, id := range ids {
		if !found[id] {
			at := r.asked[id]
			r.gone = append(r.gone, model.SourceReject{Row: id, RetryAt: &at})
		}
	}
	return nil
}

// readIDs reads the rows with these ids (in id order) that the source
// still has, through the source's own reads, so whatever a source does to
// read a row (its column, its dialect) applies: a gap source's read of
// ranges one id wide, else one read per id (retries are few).
func readIDs(ctx context.Context, src Source, ids []int64) ([]Row, error) {
	if gs, ok := src.(GapSource); ok {
		ranges := make([]model.SourceGap, len(ids))
		for i, id := range ids {
			ranges[i] = model.SourceGap{First: id, Last: id}
		}
		return gs.ReadGaps(ctx, ranges, len(ids))
	}
	var out []Row
	for _, id := range ids {
		rows, err := src.Read(ctx, id-1, 1)
		if err != nil {
			return nil, err
		}
		if len(rows) == 1 && rows[0].ID == id {
			out = append(out, rows[0])
		}
	}
	return out, nil
}

// relay accepts a round's rows (the late ones, then the new ones) in order,
// with one commit for all of them (AcceptAll), until one fails; then
// settles the ones handled: marks those relayed and saves the state they
// lead to. It returns that state and the failure, if any; rows after a
// failure are read again.
func (t *Tailer) relay(ctx context.Context, st model.SourceState, r round) (model.SourceState, error) {
	var failed error
	rows := r.rows
	prev := st.Position
	for i, row := range rows {
		if row.ID <= prev {
			// A source bug; going on would move the position backwards.
			failed = fmt.Errorf("source %s returned row %d after row %d: rows must come in increasing id order", t.src.Name(), row.ID, prev)
			rows = rows[:i]
			break
		}
		prev = row.ID
	}
	late := r.late
	for i, row := range late {
		if !inGaps(st.Gaps, row.ID) || (i > 0 && row.ID <= late[i-1].ID) {
			failed = errors.Join(failed, fmt.Errorf("source %s returned row %d, not in order in its gaps", t.src.Name(), row.ID))
			late, r.lateAll = late[:i], false
			break
		}
	}
	// The retried rows first: they are the oldest, and their outcome moves
	// no position.
	retry := r.retry
	all := append(append(append(make([]Row, 0, len(retry)+len(late)+len(rows)), retry...), late...), rows...)
	if err := ctx.Err(); err != nil {
		return st, err
	}
	// Decode every row; the decodable ones are accepted together, in order.
	events := make([]relay.Event, 0, len(all))
	decodeErrs := make([]error, len(all))
	at := make([]int, len(all)) // row → its index in events, or -1
	for i, row := range all {
		if row.Err != nil {
			decodeErrs[i], at[i] = row.Err, -1
			continue
		}
		ev, err := relay.DecodeEvent(bytes.NewReader(row.Event))
		if err != nil {
			decodeErrs[i], at[i] = err, -1
			continue
		}
		at[i] = len(events)
		events = append(events, ev)
	}
	var results []relay.AcceptResult
	var errs []error
	if len(events) > 0 {
		// The batch in flight is finished even if ctx ends meanwhile (the
		// store bounds it); the loop stops after it.
		results, errs = t.r.AcceptAll(context.WithoutCancel(ctx), events, 0)
	}
	t.count(func(s *TailStats) { s.Read += int64(len(all)) })
	handled := 0
	var relayed []int64
	set := model.SourceSettle{Gone: r.gone}
rows:
	for i, row := range all {
		err, eventID := decodeErrs[i], ""
		if at[i] >= 0 {
			err, eventID = errs[at[i]], events[at[i]].ID
		}
		var inv *relay.InvalidEventError
		asked, retried := r.asked[row.ID]
		retried = retried && i < len(retry)
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
			if retried {
				set.Accepted = append(set.Accepted, row.ID)
			}
		case errors.As(err, &inv) || errors.Is(err, model.ErrEventConflict):
			// Permanent: the same row would fail the same way forever, and
			// must not hold up the rows behind it. Recorded with the
			// position, for an operator to retry once the app fixed it.
			t.reject(row, eventID, err)
			rej := model.SourceReject{Row: row.ID, EventID: eventID, Reason: err.Error()}
			if retried {
				rej.RetryAt = &asked
			}
			set.Rejects = append(set.Rejects, rej)
		default:
			// The relay could not read or write: this row and the ones
			// after it are read again.
			failed = errors.Join(err, failed)
			break rows
		}
		handled = i + 1
	}
	t.count(func(s *TailStats) {
		s.Retried += int64(min(handled, len(retry)))
		s.Gone += int64(len(r.gone))
	})
	nl := max(0, handled-len(retry)) // late and new rows handled
	set.State = t.advance(st, r, late[:min(nl, len(late))], rows[:max(0, nl-len(late))], handled == len(all) && failed == nil)
	if len(relayed) == 0 && !set.Changes() && sameState(set.State, st) {
		return st, failed
	}
	return t.settle(ctx, st, set, relayed, failed)
}

// advance returns the state after a round: late rows handled leave their
// gaps, the ids skipped between the new rows handled become gaps, and a gap
// closes when the horizon shows that no transaction that could commit in
// it is left (complete: the whole round was handled, so every committed
// row of the gap was seen) or when it has been waited for past the gap
// timeout.
func (t *Tailer) advance(st model.SourceState, r round, late, rows []Row, complete bool) model.SourceState {
	now := t.r.Now()
	gaps := st.Gaps
	for _, row := range late {
		gaps = removeID(gaps, row.ID)
	}
	var lateN int64 = int64(len(late))
	gs, isGap := t.src.(GapSource)
	var kept []model.SourceGap
	var ended, gaveUp int64
	for _, g := range gaps {
		switch {
		case complete && r.lateAll && r.horizon > 0 && g.Mark > 0 && g.Mark < r.horizon:
			// Rolled back (or never inserted): every transaction that began
			// before the gap was seen has ended, and the read after that
			// found none of its ids.
			ended += g.Last - g.First + 1
		case isGap && now.Sub(g.Since) > gs.GapTimeout():
			gaveUp += g.Last - g.First + 1
			t.r.Log().Warn("tail: gave up waiting for outbox ids: their transaction may still be open and commit them later, and those rows would not be relayed (see gap_timeout in the README)",
				"source", t.src.Name(), "first", g.First, "last", g.Last, "missing_since", g.Since, "gap_timeout", gs.GapTimeout())
		default:
			kept = append(kept, g)
		}
	}
	pos := st.Position
	for _, row := range rows {
		if isGap && row.ID > pos+1 {
			kept = append(kept, model.SourceGap{First: pos + 1, Last: row.ID - 1, Since: now, Mark: r.mark})
		}
		pos = row.ID
	}
	sortGaps(kept)
	t.count(func(s *TailStats) {
		s.Late += lateN
		s.GapsEnded += ended
		s.GaveUp += gaveUp
		s.setGaps(kept)
	})
	return model.SourceState{Position: pos, Gaps: kept}
}

// settle marks the rows relayed and saves the state set leads to with its
// rejects and retries, and returns the state saved (st if saving failed)
// and failed.
func (t *Tailer) settle(ctx context.Context, st model.SourceState, set model.SourceSettle, relayed []int64, failed error) (model.SourceState, error) {
	next := set.State
	// Settle what was accepted even if ctx has ended, so a clean stop does
	// not leave it to be read again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	// Mark before saving: a crash in between reads the rows again (all
	// duplicates) and marks them again (a no-op), whereas the other order
	// could leave relayed rows unmarked for good.
	if err := t.src.MarkProcessed(sctx, relayed); err != nil {
		t.count(func(s *TailStats) { s.setGaps(st.Gaps) })
		return st, errors.Join(failed, err)
	}
	if sameState(next, st) && !set.Changes() {
		return st, failed
	}
	if err := t.r.SettleSource(sctx, t.src.Name(), set); err != nil {
		t.count(func(s *TailStats) { s.setGaps(st.Gaps) })
		return st, errors.Join(failed, err)
	}
	t.count(func(s *TailStats) { s.Position = next.Position })
	t.r.Log().Debug("tail: batch relayed", "source", t.src.Name(), "position", next.Position, "gaps", len(next.Gaps), "rejected", len(set.Rejects))
	for _, g := range set.Gone {
		t.r.Log().Warn("tail: a row asked for again is no longer in the source; its record says so (drop it, or retry once the row is back)",
			"source", t.src.Name(), "row", g.Row)
	}
	return next, failed
}

// measureLag updates the lag in the stats: none after a whole round, else
// the source's backlog after st, at most every LagEvery.
func (t *Tailer) measureLag(ctx context.Context, st model.SourceState, whole bool) {
	ls, ok := t.src.(LagSource)
	if !ok {
		return
	}
	now := t.r.Now()
	if whole {
		t.count(func(s *TailStats) {
			s.RowsBehind, s.RowsBehindEstimated, s.OldestUnrelayed, s.AgeUnknown, s.LagMeasured = 0, false, time.Time{}, false, now
		})
		return
	}
	if now.Sub(t.lagAt) < t.opts.LagEvery {
		return
	}
	t.lagAt = now
	b, err := ls.Backlog(ctx, st.Position, st.Gaps)
	if err != nil {
		// The figures stay as last measured (LagMeasured says when); the
		// read that failed with it is what is retried and counted.
		t.r.Log().Debug("tail: measuring the backlog failed", "source", t.src.Name(), "error", err)
		return
	}
	t.count(func(s *TailStats) {
		s.RowsBehind, s.RowsBehindEstimated, s.LagMeasured = b.Rows+b.GapRows, b.Estimated, now
		s.AgeUnknown = !b.AgeKnown && s.RowsBehind > 0
		s.OldestUnrelayed = time.Time{}
		if b.AgeKnown && s.RowsBehind > 0 {
			s.OldestUnrelayed = now.Add(-b.OldestAge)
		}
	})
}

// reject logs and counts a row whose event was rejected (the settle records it).
func (t *Tailer) reject(row Row, eventID string, err error) {
	t.r.Log().Warn("tail: skipped an outbox row: its event was rejected (recorded: edgerelay tail rejects list; retry once the row is fixed)",
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

func (s *TailStats) setGaps(gaps []model.SourceGap) {
	s.Gaps, s.GapIDs, s.OldestGap = len(gaps), 0, time.Time{}
	for _, g := range gaps {
		s.GapIDs += g.Last - g.First + 1
		if s.OldestGap.IsZero() || g.Since.Before(s.OldestGap) {
			s.OldestGap = g.Since
		}
	}
}

// sameState reports whether two states are the same position and gaps.
func sameState(a, b model.SourceState) bool {
	if a.Position != b.Position || len(a.Gaps) != len(b.Gaps) {
		return false
	}
	for i := range a.Gaps {
		if a.Gaps[i] != b.Gaps[i] {
			return false
		}
	}
	return true
}

func inGaps(gaps []model.SourceGap, id int64) bool {
	for _, g := range gaps {
		if id >= g.First && id <= g.Last {
			return true
		}
	}
	return false
}

// removeID returns gaps without id, splitting the range that holds it.
func removeID(gaps []model.SourceGap, id int64) []model.SourceGap {
	out := make([]model.SourceGap, 0, len(gaps)+1)
	for _, g := range gaps {
		if id < g.First || id > g.Last {
			out = append(out, g)
			continue
		}
		if id > g.First {
			h := g
			h.Last = id - 1
			out = append(out, h)
		}
		if id < g.Last {
			h := g
			h.First = id + 1
			out = append(out, h)
		}
	}
	return out
}

func sortGaps(gaps []model.SourceGap) {
	sort.Slice(gaps, func(i, j int) bool { return gaps[i].First < gaps[j].First })
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

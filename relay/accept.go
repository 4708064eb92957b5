package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/edgerelay/edgerelay/model"
)

// Accepting: the one way events come in, whoever sends them (the API, a
// batch file, a tailed outbox, a digest). Each event is validated, its
// audience resolved and its keys derived before anything is written; then
// the events are written in the order given, each with the first chunk of
// its fan-out, in one commit; then the rest of each large fan-out follows,
// chunk by chunk.

// AcceptResult says what Accept did with an event.
type AcceptResult struct {
	Tenant  string `json:"tenant"`
	EventID string `json:"event_id"`
	Purpose string `json:"purpose"`
	// Duplicate is true when the event had been accepted before: nothing
	// new was created, and Notifications are the ones created then.
	Duplicate bool  `json:"duplicate"`
	EventRow  int64 `json:"-"`
	// Count is how many notifications the event fanned out to.
	Count         int                       `json:"count"`
	Notifications []model.EventNotification `json:"notifications"`
	// FeedItems are the items the event posted, one per feed, in seq
	// order (for a duplicate, those posted when it was first accepted).
	FeedItems []model.FeedPost `json:"feed_items"`
}

// ListAll, as AcceptAll's list, lists every notification of each event.
const ListAll = -1

// Accept validates the event, writes it and its notifications, and returns
// once they are durable. Accepting the same event again creates nothing and
// returns the same notifications, marked Duplicate. An invalid event is an
// *InvalidEventError and writes nothing.
func (r *Relay) Accept(ctx context.Context, ev Event) (AcceptResult, error) {
	res, errs := r.AcceptAll(ctx, []Event{ev}, ListAll)
	return res[0], errs[0]
}

// AcceptAll accepts events in the order given, with one commit for all of
// them (one fsync for many events, and their feed items in that order), and
// returns once they are durable. Each result lists at most list of its
// event's notifications (ListAll: every one; 0: none; Count always says how
// many there are).
//
// errs[i] is why events[i] was not accepted: an *InvalidEventError or a
// model.ErrEventConflict concern that event alone, and the others are
// written. Any other error (the database could not be read or written)
// stops the run there: that event and every later one get an error and
// were not written, so a caller that retries from the first failed event
// loses nothing and repeats nothing.
func (r *Relay) AcceptAll(ctx context.Context, events []Event, list int) ([]AcceptResult, []error) {
	res, errs := make([]AcceptResult, len(events)), make([]error, len(events))
	seen := latestWorkflows{} // one read of each tenant and type's workflow for the whole run
	type prepared struct {
		i       int
		targets []model.Target
	}
	var (
		in    []model.AcceptInput
		preps []prepared
		stop  = len(events)
		runs  bool // some event starts workflow runs
	)
	for i := range events {
		rec, targets, err := r.prepare(ctx, &events[i], seen)
		if err != nil {
			errs[i] = err
			var inv *InvalidEventError
			if !errors.As(err, &inv) {
				stop = i
				break
			}
			continue
		}
		runs = runs || len(targets) > 0 && targets[0].Run != nil
		in = append(in, model.AcceptInput{Event: rec, First: targets[:min(len(targets), r.opts.Chunk)]})
		preps = append(preps, prepared{i, targets})
	}
	for j := stop + 1; j < len(events); j++ {
		errs[j] = fmt.Errorf("event %q not accepted: an event before it failed: %w", events[j].ID, errs[stop])
	}
	if len(in) == 0 {
		return res, errs
	}
	r.hooks.at(PhaseAccept)
	accs, accErrs, err := r.store.AcceptEvents(ctx, in, r.now())
	if err != nil {
		for _, p := range preps {
			errs[p.i] = fmt.Errorf("accept event %q: %w", events[p.i].ID, err)
		}
		return res, errs
	}
	r.hooks.at(PhaseAccepted)
	if runs {
		r.runsWritten.Store(true) // the stepper looks at once (notify wakes it)
	}
	for k, p := range preps {
		ev, acc := events[p.i], accs[k]
		if accErrs[k] != nil {
			errs[p.i] = fmt.Errorf("accept event %q: %w", ev.ID, accErrs[k])
			continue
		}
		if err := r.accepted(ctx, ev, acc, p.targets); err != nil {
			// Durable already; the rest of a large fan-out is finished by
			// the dispatcher. Later events were written too.
			errs[p.i] = err
			continue
		}
		res[p.i] = AcceptResult{Tenant: ev.Tenant, EventID: ev.ID, Purpose: ev.Purpose, Duplicate: acc.Duplicate,
			EventRow: acc.EventRow, Count: acc.Targets, FeedItems: acc.FeedItems}
		if list != 0 {
			if res[p.i].Notifications, err = r.listed(ctx, acc, list); err != nil {
				errs[p.i] = err
			}
		}
	}
	r.notify()
	return res, errs
}

// listed returns at most limit of an accepted event's notifications (all
// when limit < 0): those the accept wrote, else read back.
func (r *Relay) listed(ctx context.Context, acc model.Accepted, limit int) ([]model.EventNotification, error) {
	if limit < 0 || limit > acc.Targets {
		limit = acc.Targets
	}
	ns := acc.Notifications // a new event: the accept wrote them, no need to read back
	if len(ns) < limit {
		var err error
		if ns, err = r.store.EventNotifications(ctx, acc.EventRow, -1, limit); err != nil {
			return nil, err
		}
	}
	return ns[:min(len(ns), limit)], nil
}

// prepare resolves an event's audience, validates and normalises it,
// checks that a route (and its first provider) takes each notification,
// and makes its rows: all an accept does before it writes. seen (may be
// nil) remembers the latest workflows read for earlier events.
func (r *Relay) prepare(ctx context.Context, ev *Event, seen latestWorkflows) (model.NewEvent, []model.Target, error) {
	if err := r.resolveAudience(ctx, ev); err != nil {
		return model.NewEvent{}, nil, err
	}
	if err := ev.Normalize(r.opts.MaxRecipients); err != nil {
		return model.NewEvent{}, nil, err
	}
	// A type with a workflow: one run per recipient, whose steps choose
	// the channels and render the messages when they come due.
	if w, version, err := r.latestWorkflow(ctx, ev.Tenant, ev.Type, seen); err != nil {
		return model.NewEvent{}, nil, err
	} else if w != nil && len(ev.Recipients) > 0 { // feeds only: no one to run a workflow for
		rec, _, err := ev.record()
		if err != nil {
			return rec, nil, err
		}
		runs, err := prepareRuns(ev, &rec, w, version)
		return rec, runs, err
	}
	if err := r.checkRoutes(ev); err != nil {
		return model.NewEvent{}, nil, err
	}
	rec, targets, err := ev.record()
	if err != nil {
		return rec, targets, err
	}
	set, err := r.Templates(ctx)
	if err != nil {
		return model.NewEvent{}, nil, err
	}
	if name := templateName(set, ev); name != "" {
		srcs, err := renderTargets(ctx, r, set, name, ev, targets)
		if err != nil {
			return model.NewEvent{}, nil, err
		}
		// The fingerprint stays that of the event as submitted: a resend
		// after a template changed is still a duplicate.
		if rec.Payload, err = json.Marshal(payloadWithTemplates{Event: *ev, Templates: srcs, DefaultLocale: set.DefaultLocale()}); err != nil {
			return model.NewEvent{}, nil, err
		}
	}
	return rec, targets, nil
}

// accepted finishes an accept once its first chunk is durable: the rest of
// a large fan-out, each chunk its own transaction (if this is cut short,
// the dispatcher finishes the expansion from the stored payload), and the
// observer.
func (r *Relay) accepted(ctx context.Context, ev Event, acc model.Accepted, targets []model.Target) error {
	var err error
	if acc.Duplicate && acc.Expanded < acc.Targets {
		// The first accept of this event was cut short: finish it from what
		// was stored then (an audience may have changed since).
		err = r.finishFanOut(ctx)
	} else {
		err = r.expand(ctx, acc.EventRow, acc.Expanded, targets)
	}
	if err != nil {
		return fmt.Errorf("accept event %q: %w", ev.ID, err)
	}
	if r.opts.Observer != nil {
		r.opts.Observer.Accepted(ev.Tenant, acc.Duplicate, acc.Targets)
	}
	return nil
}

// expand writes targets[from:] in chunks. A fan-out that stops advancing
// (the event row keeps naming a position the chunks do not move) is
// errNoProgress rather than a loop without end.
func (r *Relay) expand(ctx context.Context, eventRow int64, from int, targets []model.Target) error {
	for tries := 0; from < len(targets); tries++ {
		if tries > len(targets)/max(r.opts.Chunk, 1)+2 {
			return fmt.Errorf("%w: still at %d of %d after %d chunks", errNoProgress, from, len(targets), tries)
		}
		end := min(len(targets), from+r.opts.Chunk)
		next, err := r.store.ExpandEvent(ctx, eventRow, from, targets[from:end], r.now())
		if errors.Is(err, model.ErrFanOutEnded) {
			return nil // an operator dropped the rest while this chunk was on its way
		}
		if err != nil {
			return err
		}
		from = next
	}
	return nil
}

// innermost is the last error of err's chain.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// errNoProgress: a fan-out whose chunks do not advance it.
var errNoProgress = errors.New("the fan-out does not advance")

// maxExpandFailures is how many sweeps in a row may fail to write an
// event's fan-out (for a reason of that event, not of the store) before it
// is quarantined.
const maxExpandFailures = 5

// finishFanOut completes the fan-out of events left part way (a crash, a
// caller that went away). An event that cannot be finished is quarantined,
// so that it holds up nothing else; only a failure of the store itself is
// returned (and the next sweep tries again).
func (r *Relay) finishFanOut(ctx context.Context) error {
	var after int64
	for {
		evs, err := r.store.UnexpandedEvents(ctx, 16)
		if err != nil || len(evs) == 0 {
			return err
		}
		progressed := false
		for _, u := range evs {
			if u.EventRow <= after {
				continue // failed this sweep already; the next sweep tries again
			}
			after = u.EventRow
			if err := r.finishEvent(ctx, u); err != nil {
				if model.IsUnavailable(err) || errors.Is(err, model.ErrClosed) || ctx.Err() != nil {
					return err
				}
				r.log.Warn("fan-out: writing the rest of an event failed; the next sweep tries again",
					"event", u.EventID, "tenant", u.Tenant, "row", u.EventRow, "err", err)
				continue
			}
			progressed = true
		}
		if !progressed {
			return nil
		}
	}
}

// finishEvent writes the rest of one event's fan-out from its stored
// payload, or quarantines it when that cannot work: the payload no longer
// decodes, gives another number of notifications than the event was
// accepted with, the fan-out does not advance, or its writes keep failing.
func (r *Relay) finishEvent(ctx context.Context, u model.Unexpanded) error {
	why := ""
	var ev Event
	runs, isRun, runErr := storedRuns(u.Payload)
	if err := errors.Join(json.Unmarshal(u.Payload, &ev), runErr); err != nil {
		why = "its stored payload no longer decodes: " + err.Error()
	} else if isRun && len(runs) != u.Targets {
		why = fmt.Sprintf("its stored payload gives %d workflow runs, but it was accepted with %d", len(runs), u.Targets)
	} else if isRun {
		r.log.Info("finishing fan-out (workflow runs)", "event", u.EventID, "tenant", u.Tenant, "done", u.Expanded, "of", u.Targets)
		return r.finishExpand(ctx, u, runs)
	} else if ts := ev.targets(); len(ts) != u.Targets {
		why = fmt.Sprintf("its stored payload gives %d notifications, but it was accepted with %d", len(ts), u.Targets)
	} else if set, name, err := storedTemplates(u.Payload); err != nil {
		why = "its stored templates no longer compile: " + err.Error()
	} else if _, err := renderIfTemplated(ctx, r, set, name, &ev, ts[min(u.Expanded, len(ts)):]); err != nil {
		why = "rendering the rest from its stored templates failed: " + err.Error()
	} else {
		r.log.Info("finishing fan-out", "event", u.EventID, "tenant", u.Tenant, "done", u.Expanded, "of", u.Targets)
		return r.finishExpand(ctx, u, ts)
	}
	return r.quarantine(ctx, u, why)
}

// finishExpand writes the rest of u's fan-out, ts, and quarantines the
// event when that cannot work: it does not advance, or its writes keep
// failing.
func (r *Relay) finishExpand(ctx context.Context, u model.Unexpanded, ts []model.Target) error {
	var why string
	err := r.expand(ctx, u.EventRow, u.Expanded, ts)
	switch {
	case err == nil:
		r.expandFailures.Delete(u.EventRow)
		return nil
	case errors.Is(err, errNoProgress):
		why = err.Error()
	case model.IsUnavailable(err) || errors.Is(err, model.ErrClosed) || ctx.Err() != nil:
		return err
	default:
		n, _ := r.expandFailures.LoadOrStore(u.EventRow, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) < maxExpandFailures {
			return err
		}
		// The reason is shown to the event's tenant (the API): the
		// store's innermost error, without its context, which names the
		// event's row (a count of every tenant's events; the log has it).
		why = fmt.Sprintf("writing its fan-out failed %d times in a row: %v", maxExpandFailures, innermost(err))
	}
	return r.quarantine(ctx, u, why)
}

// quarantine takes u's fan-out off the work list, with why.
func (r *Relay) quarantine(ctx context.Context, u model.Unexpanded, why string) error {
	r.expandFailures.Delete(u.EventRow)
	r.log.Error("fan-out quarantined: its notifications so far are delivered, the rest waits for an operator (edgerelay quarantine)",
		"event", u.EventID, "tenant", u.Tenant, "row", u.EventRow, "done", u.Expanded, "of", u.Targets, "why", why)
	if r.opts.Observer != nil {
		r.opts.Observer.Quarantined(u.Tenant)
	}
	return r.store.QuarantineEvent(ctx, u.EventRow, why, r.now())
}

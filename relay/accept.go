package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"edgerelay/store"
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
	Notifications []store.EventNotification `json:"notifications"`
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
// store.ErrEventConflict concern that event alone, and the others are
// written. Any other error (the database could not be read or written)
// stops the run there: that event and every later one get an error and
// were not written, so a caller that retries from the first failed event
// loses nothing and repeats nothing.
func (r *Relay) AcceptAll(ctx context.Context, events []Event, list int) ([]AcceptResult, []error) {
	res, errs := make([]AcceptResult, len(events)), make([]error, len(events))
	type prepared struct {
		i       int
		targets []store.Target
	}
	var (
		in    []store.AcceptInput
		preps []prepared
		stop  = len(events)
	)
	for i := range events {
		rec, targets, err := r.prepare(ctx, &events[i])
		if err != nil {
			errs[i] = err
			var inv *InvalidEventError
			if !errors.As(err, &inv) {
				stop = i
				break
			}
			continue
		}
		in = append(in, store.AcceptInput{Event: rec, First: targets[:min(len(targets), r.opts.Chunk)]})
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
			EventRow: acc.EventRow, Count: acc.Targets}
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
func (r *Relay) listed(ctx context.Context, acc store.Accepted, limit int) ([]store.EventNotification, error) {
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

// prepare resolves an event's audience, validates and normalises it, and
// makes its rows: all an accept does before it writes.
func (r *Relay) prepare(ctx context.Context, ev *Event) (store.NewEvent, []store.Target, error) {
	if err := r.resolveAudience(ctx, ev); err != nil {
		return store.NewEvent{}, nil, err
	}
	if err := ev.Normalize(r.opts.MaxRecipients); err != nil {
		return store.NewEvent{}, nil, err
	}
	return ev.record()
}

// accepted finishes an accept once its first chunk is durable: the rest of
// a large fan-out, each chunk its own transaction (if this is cut short,
// the dispatcher finishes the expansion from the stored payload), and the
// observer.
func (r *Relay) accepted(ctx context.Context, ev Event, acc store.Accepted, targets []store.Target) error {
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

// expand writes targets[from:] in chunks.
func (r *Relay) expand(ctx context.Context, eventRow int64, from int, targets []store.Target) error {
	for from < len(targets) {
		end := min(len(targets), from+r.opts.Chunk)
		next, err := r.store.ExpandEvent(ctx, eventRow, from, targets[from:end], r.now())
		if err != nil {
			return err
		}
		from = next
	}
	return nil
}

// finishFanOut completes the fan-out of events left part way by a crash.
func (r *Relay) finishFanOut(ctx context.Context) error {
	for {
		evs, err := r.store.UnexpandedEvents(ctx, 16)
		if err != nil || len(evs) == 0 {
			return err
		}
		for _, u := range evs {
			ev, err := DecodeEvent(bytes.NewReader(u.Payload))
			if err == nil {
				err = ev.Normalize(0)
			}
			if err != nil {
				return fmt.Errorf("event row %d: stored payload: %w", u.EventRow, err)
			}
			r.log.Info("finishing fan-out", "event", ev.ID, "tenant", ev.Tenant, "done", u.Expanded, "of", u.Targets)
			if err := r.expand(ctx, u.EventRow, u.Expanded, ev.targets()); err != nil {
				return err
			}
		}
	}
}

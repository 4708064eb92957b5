package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"

	"github.com/jackc/pgx/v5"
)

// AcceptEvents writes events in the order given, each with the first chunk
// of its fan-out, in one transaction: one commit for them all, durable
// (synchronous_commit is on, Open checks) before this returns. A resend of
// an accepted event (same tenant, id and purpose) writes nothing and is
// reported Duplicate; with other content it is ErrEventConflict in errs.
// The unique constraint decides, not a prior lookup: of two nodes
// accepting one event at once, the second's insert waits for the first's
// commit and then does nothing.
//
// A duplicate or conflicting event's insert does nothing, and nothing else
// of it is written, so it needs no savepoint: the other events of the call
// are written whatever it was. err is a failure of the write itself: then
// nothing was written.
func (s *Store) AcceptEvents(ctx context.Context, in []model.AcceptInput, now time.Time) (out []model.Accepted, errs []error, err error) {
	call := &acceptCall{in: in, now: now}
	op := &groupOp{class: model.WriteAccept, accept: call, fn: func(ctx context.Context, tx pgx.Tx) error {
		return s.acceptMany(ctx, tx, []*acceptCall{call})
	}}
	if err := s.groupedOp(ctx, op); err != nil {
		return nil, nil, err
	}
	return call.out, call.errs, nil
}

// acceptCall is one AcceptEvents call: the accepts of a group are written
// together (acceptMany).
type acceptCall struct {
	in   []model.AcceptInput
	now  time.Time
	out  []model.Accepted
	errs []error
}

// rows is how many notifications c writes at most (0 for nil).
func (c *acceptCall) rows() int {
	if c == nil {
		return 0
	}
	n := 0
	for _, a := range c.in {
		n += len(a.First)
	}
	return n
}

// acceptMany writes the events of calls, in their order, in a few
// statements for them all: one INSERT of the events, one of their first
// chunks, and a lookup per duplicate (an event accepted before, or earlier
// in these calls). It starts from scratch each time it is run.
func (s *Store) acceptMany(ctx context.Context, tx pgx.Tx, calls []*acceptCall) error {
	type ref struct{ c, i int }
	var refs []ref
	drawing := false
	for ci, c := range calls {
		c.out, c.errs = make([]model.Accepted, len(c.in)), make([]error, len(c.in))
		for i, a := range c.in {
			refs = append(refs, ref{ci, i})
			drawing = drawing || len(a.First) > 0
		}
	}
	if len(refs) == 0 {
		return nil
	}
	if drawing {
		if err := s.drawingIDs(ctx, tx); err != nil {
			return err
		}
	}
	n := len(refs)
	tenants, eids, purposes, types, fps := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, msgs := make([][]byte, n), make([][]byte, n)
	targets, expanded, created := make([]int32, n), make([]int32, n), make([]int64, n)
	for k, r := range refs {
		a := calls[r.c].in[r.i]
		ev := a.Event
		tenants[k], eids[k], purposes[k], types[k], fps[k] = ev.Tenant, ev.EventID, ev.Purpose, ev.Type, ev.Fingerprint
		payloads[k], msgs[k], targets[k], expanded[k], created[k] = ev.Payload, ev.Message, int32(ev.Targets), int32(len(a.First)), ms(calls[r.c].now)
	}
	// The event rows record their first chunks as expanded: they are
	// written in this same transaction. The unique constraint decides
	// which events are new: of two nodes accepting one event at once, the
	// second's insert waits for the first's commit and then does nothing.
	rows, err := tx.Query(ctx, `INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
		SELECT tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bytea[], $7::text[], $8::integer[], $9::integer[], $10::bigint[])
			WITH ORDINALITY AS e (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at, ord)
		ORDER BY ord
		ON CONFLICT (tenant, event_id, purpose) DO NOTHING
		RETURNING id, tenant, event_id, purpose`, tenants, eids, purposes, types, payloads, msgs, fps, targets, expanded, created)
	if err != nil {
		return fmt.Errorf("insert %d events: %w", n, err)
	}
	type key struct{ tenant, id, purpose string }
	inserted := make(map[key]int64, n)
	for rows.Next() {
		var k key
		var id int64
		if err := rows.Scan(&id, &k.tenant, &k.id, &k.purpose); err != nil {
			rows.Close()
			return fmt.Errorf("insert %d events: %w", n, err)
		}
		inserted[k] = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert %d events: %w", n, err)
	}
	var chunk []model.Target
	var chunkRef []ref // whose target each of chunk is
	var events []int64
	var seqs []int64
	for _, r := range refs {
		c, a := calls[r.c], calls[r.c].in[r.i]
		ev := a.Event
		k := key{ev.Tenant, ev.EventID, ev.Purpose}
		row, ok := inserted[k]
		if !ok { // accepted before, or earlier in these calls
			res, err := duplicateEvent(ctx, tx, ev)
			if err != nil && !errors.Is(err, model.ErrEventConflict) {
				return err
			}
			c.out[r.i], c.errs[r.i] = res, err
			continue
		}
		delete(inserted, k)
		res := model.Accepted{Targets: ev.Targets, EventRow: row, Expanded: len(a.First)}
		if res.FeedItems, err = insertFeedItems(ctx, tx, ev.Tenant, row, ev.Feeds, c.now); err != nil {
			return err
		}
		if ev.Cancels != "" {
			if _, err := sqlstore.CancelRuns(ctx, shared(tx), ev.Tenant, ev.Cancels, model.CancelledBy(ev), c.now); err != nil {
				return err
			}
		}
		if len(a.First) > 0 && a.First[0].Run != nil { // a workflow's runs, not notifications
			if err := sqlstore.InsertRuns(ctx, shared(tx), row, ev.Tenant, ev.Type, 0, a.First, c.now); err != nil {
				return err
			}
			c.out[r.i] = res
			continue
		}
		res.Notifications = make([]model.EventNotification, len(a.First))
		for i, tg := range a.First {
			res.Notifications[i] = model.EventNotification{Key: tg.Key, Recipient: tg.Recipient, Channel: tg.Channel, Status: model.StatusPending}
			chunk, chunkRef, events, seqs = append(chunk, tg), append(chunkRef, r), append(events, row), append(seqs, int64(i))
		}
		c.out[r.i] = res
	}
	if len(chunk) == 0 {
		return nil
	}
	m := len(chunk)
	keys, rcpts, chans, addrs, tns, typs := make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m)
	addrKeys := make([]*string, m) // NULL where the address is its own key
	tmsgs := make([][]byte, m)     // nil: NULL, the event's message
	nows := make([]int64, m)
	for i, tg := range chunk {
		r := chunkRef[i]
		ev := calls[r.c].in[r.i].Event
		keys[i], rcpts[i], chans[i], addrs[i], addrKeys[i], tmsgs[i] = tg.Key, tg.Recipient, tg.Channel, tg.Address, strPtr(tg.AddressKey), tg.Message
		tns[i], typs[i], nows[i] = ev.Tenant, ev.Type, ms(calls[r.c].now)
	}
	// Ids are drawn in the events' order, each fan-out in its order.
	rows, err = tx.Query(ctx, `INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, address_key,
			next_attempt_at, cycle_started_at, created_at, updated_at, message)
		SELECT t.key, t.event, t.seq, t.tenant, t.type, t.recipient, t.channel, t.address, t.address_key, t.now, t.now, t.now, t.now, t.message
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bytea[])
			WITH ORDINALITY AS t (key, event, seq, tenant, type, recipient, channel, address, address_key, now, message, ord)
		ORDER BY t.ord
		ON CONFLICT DO NOTHING
		RETURNING id, event, seq`, keys, events, seqs, tns, typs, rcpts, chans, addrs, addrKeys, nows, tmsgs)
	if err != nil {
		return fmt.Errorf("insert the notifications of %d events: %w", n, err)
	}
	type pos struct {
		event int64
		seq   int
	}
	ids := make(map[pos]int64, m)
	for rows.Next() {
		var p pos
		var id int64
		if err := rows.Scan(&id, &p.event, &p.seq); err != nil {
			rows.Close()
			return fmt.Errorf("insert the notifications of %d events: %w", n, err)
		}
		ids[p] = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert the notifications of %d events: %w", n, err)
	}
	for i := range chunk {
		r := chunkRef[i]
		res := &calls[r.c].out[r.i]
		res.Notifications[seqs[i]].ID = ids[pos{events[i], int(seqs[i])}] // 0: the key was another's
	}
	return nil
}

// drawingIDs takes, for the rest of tx, the shared side of the lock that
// ListNotifications takes exclusively: a transaction that will draw
// notification ids holds it from before its first id until its commit.
//
// Writes grouped in one transaction take it once.
func (s *Store) drawingIDs(ctx context.Context, tx pgx.Tx) error {
	st, _ := ctx.Value(txStateKey{}).(*txState)
	if st != nil && st.drawing {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, s.listLock); err != nil {
		return fmt.Errorf("lock notification ids: %w", err)
	}
	if st != nil {
		st.drawing = true
	}
	return nil
}

// duplicateEvent is what accepting ev, already stored, says: Duplicate if
// its content is the same (and its feed items), ErrEventConflict if not.
func duplicateEvent(ctx context.Context, tx pgx.Tx, ev model.NewEvent) (model.Accepted, error) {
	res := model.Accepted{Targets: ev.Targets}
	var fp string
	if err := tx.QueryRow(ctx, `SELECT id, fingerprint, expanded, targets FROM events WHERE tenant = $1 AND event_id = $2 AND purpose = $3`,
		ev.Tenant, ev.EventID, ev.Purpose).Scan(&res.EventRow, &fp, &res.Expanded, &res.Targets); err != nil {
		return res, fmt.Errorf("read duplicate event: %w", err)
	}
	if fp != ev.Fingerprint {
		return model.Accepted{Targets: ev.Targets}, fmt.Errorf("%w: tenant %q, event %q, purpose %q", model.ErrEventConflict, ev.Tenant, ev.EventID, ev.Purpose)
	}
	res.Duplicate = true
	if len(ev.Feeds) > 0 { // the same content: the same feeds
		var err error
		if res.FeedItems, err = sqlstore.EventFeedItems(ctx, shared(tx), ev.Tenant, res.EventRow); err != nil {
			return res, err
		}
	}
	return res, nil
}

// ExpandEvent writes the next chunk of an event's fan-out. The event row is
// locked first, so two nodes finishing one fan-out take turns: from is how
// many targets the caller believes are written, and if the row disagrees
// (the other got there first) nothing is written and the real count is
// returned. Inserts are ON CONFLICT DO NOTHING, so even a chunk written
// twice adds no notification.
func (s *Store) ExpandEvent(ctx context.Context, eventRow int64, from int, chunk []model.Target, now time.Time) (int, error) {
	var expanded int
	err := s.write(ctx, model.WriteAccept, func(ctx context.Context, tx pgx.Tx) error {
		if err := s.drawingIDs(ctx, tx); err != nil {
			return err
		}
		var tenant, typ string
		var targets int
		// FOR UPDATE orders this chunk with a DropEvent (an UPDATE of the
		// same row): whichever commits second sees the other's change.
		if err := tx.QueryRow(ctx, `SELECT expanded, targets, tenant, type FROM events WHERE id = $1 FOR UPDATE`, eventRow).Scan(&expanded, &targets, &tenant, &typ); err != nil {
			return fmt.Errorf("expand event %d: %w", eventRow, err)
		}
		if expanded != from {
			return nil
		}
		if from >= targets { // dropped meanwhile (DropEvent sets targets = expanded)
			return fmt.Errorf("expand event %d from %d of %d: %w", eventRow, from, targets, model.ErrFanOutEnded)
		}
		if _, err := insertTargets(ctx, tx, eventRow, tenant, typ, from, chunk, now); err != nil {
			return err
		}
		expanded = from + len(chunk)
		if _, err := tx.Exec(ctx, `UPDATE events SET expanded = $1 WHERE id = $2`, expanded, eventRow); err != nil {
			return fmt.Errorf("advance fan-out of event %d: %w", eventRow, err)
		}
		return nil
	})
	return expanded, err
}

// insertTargets writes notifications from position from on, in one
// statement, and returns the ids it wrote by position (a notification that
// was already there, or whose key another has, is not in the map). Ids are
// drawn in fan-out order.
func insertTargets(ctx context.Context, tx pgx.Tx, eventRow int64, tenant, typ string, from int, chunk []model.Target, now time.Time) (map[int]int64, error) {
	ids := make(map[int]int64, len(chunk))
	if len(chunk) == 0 {
		return ids, nil
	}
	if chunk[0].Run != nil { // a workflow's runs, not notifications
		return ids, sqlstore.InsertRuns(ctx, shared(tx), eventRow, tenant, typ, from, chunk, now)
	}
	keys, seqs, rcpts, chans, addrs := make([]string, len(chunk)), make([]int64, len(chunk)), make([]string, len(chunk)),
		make([]string, len(chunk)), make([]string, len(chunk))
	addrKeys := make([]*string, len(chunk)) // NULL where the address is its own key
	msgs := make([][]byte, len(chunk))      // nil: NULL, the event's message
	for i, tg := range chunk {
		keys[i], seqs[i], rcpts[i], chans[i], addrs[i] = tg.Key, int64(from+i), tg.Recipient, tg.Channel, tg.Address
		addrKeys[i] = strPtr(tg.AddressKey)
		msgs[i] = tg.Message
	}
	rows, err := tx.Query(ctx, `INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, address_key,
			next_attempt_at, cycle_started_at, created_at, updated_at, message)
		SELECT t.key, $1, t.seq, $2, $3, t.recipient, t.channel, t.address, t.address_key, $4, $4, $4, $4, t.message
		FROM unnest($5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[]) AS t (key, seq, recipient, channel, address, address_key, message)
		ORDER BY t.seq
		ON CONFLICT DO NOTHING
		RETURNING id, seq`, eventRow, tenant, typ, ms(now), keys, seqs, rcpts, chans, addrs, addrKeys, msgs)
	if err != nil {
		return nil, fmt.Errorf("insert notifications of event %d: %w", eventRow, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var seq int
		if err := rows.Scan(&id, &seq); err != nil {
			return nil, err
		}
		ids[seq] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert notifications of event %d: %w", eventRow, err)
	}
	return ids, nil
}

// UnexpandedEvents lists events whose fan-out stopped part way and is not
// quarantined, oldest first, from the partial index of such events.
func (s *Store) UnexpandedEvents(ctx context.Context, limit int) ([]model.Unexpanded, error) {
	var out []model.Unexpanded
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT id, tenant, event_id, payload, expanded, targets FROM events
			WHERE expanded < targets AND quarantined_at IS NULL ORDER BY id LIMIT $1`, limit)
		if err != nil {
			return fmt.Errorf("unexpanded events: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Unexpanded, error) {
			var u model.Unexpanded
			err := r.Scan(&u.EventRow, &u.Tenant, &u.EventID, &u.Payload, &u.Expanded, &u.Targets)
			return u, err
		})
		if err != nil {
			return fmt.Errorf("unexpanded events: %w", err)
		}
		return nil
	})
	return out, err
}

// QuarantineEvent takes an event's fan-out off the work list.
func (s *Store) QuarantineEvent(ctx context.Context, eventRow int64, reason string, now time.Time) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE events SET quarantined_at = $1, quarantine_reason = $2 WHERE id = $3 AND quarantined_at IS NULL`,
			ms(now), reason, eventRow); err != nil {
			return fmt.Errorf("quarantine event %d: %w", eventRow, err)
		}
		return nil
	})
}

// ReleaseEvent lifts a quarantine: the expander tries the fan-out again.
func (s *Store) ReleaseEvent(ctx context.Context, tenant string, eventRow int64) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE events SET quarantined_at = NULL, quarantine_reason = NULL
			WHERE id = $1 AND ($2 = '' OR tenant = $2) AND quarantined_at IS NOT NULL`, eventRow, tenant)
		if err != nil {
			return fmt.Errorf("release event %d: %w", eventRow, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("quarantined event %d: %w", eventRow, model.ErrNotFound)
		}
		return nil
	})
}

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"strings"
	"time"
)

// AcceptEvent writes the event and the first chunk of its fan-out in one
// transaction: the event is durable (and so acknowledged) as a whole, with
// every recipient in its payload, the moment this returns. The rest of the
// fan-out, if any, is written by ExpandEvent in later transactions, so a
// large event does not hold the writer for its whole fan-out; a crash in
// between loses nothing because the event row records how far it got.
//
// A resend of an accepted event (same tenant, id and purpose) writes
// nothing and reports Duplicate; one with different content is
// ErrEventConflict. The unique constraint decides, not a prior lookup.
func (s *Store) AcceptEvent(ctx context.Context, ev model.NewEvent, first []model.Target, now time.Time) (model.Accepted, error) {
	var res model.Accepted
	err := s.w.do(ctx, func(tx *Tx) error {
		var err error
		res, err = acceptEvent(tx, ev, first, now)
		return err
	})
	return res, err
}

// AcceptEvents writes events in the order given, in one transaction, each
// as AcceptEvent would: one commit (one fsync) for them all, and their
// feed items in that order. An event that conflicts with an accepted one
// (ErrEventConflict) is rolled back alone, in its own savepoint, and
// reported in errs; the others are written. err is a failure of the write
// itself (a full disk): then nothing was written.
func (s *Store) AcceptEvents(ctx context.Context, in []model.AcceptInput, now time.Time) (out []model.Accepted, errs []error, err error) {
	err = s.w.doAs(ctx, model.WriteAccept, func(tx *Tx) error {
		out, errs = make([]model.Accepted, len(in)), make([]error, len(in))
		for i, a := range in {
			// A conflict writes nothing (the event's INSERT did nothing; its
			// fan-out is written only for a new event), so it needs no
			// savepoint of its own; any other failure fails the write.
			res, err := acceptEvent(tx, a.Event, a.First, now)
			if err != nil && !errors.Is(err, model.ErrEventConflict) {
				return err
			}
			out[i], errs[i] = res, err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, errs, nil
}

// acceptEvent is AcceptEvent's write, in tx.
func acceptEvent(tx *Tx, ev model.NewEvent, first []model.Target, now time.Time) (model.Accepted, error) {
	res := model.Accepted{Targets: ev.Targets}
	// The event row records the first chunk as expanded: it is written
	// in this same transaction.
	ins, err := tx.exec(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, event_id, purpose) DO NOTHING`,
		ev.Tenant, ev.EventID, ev.Purpose, ev.Type, ev.Payload, ev.Message, ev.Fingerprint, ev.Targets, len(first), ms(now))
	if err != nil {
		return res, fmt.Errorf("insert event: %w", err)
	}
	if n, _ := ins.RowsAffected(); n == 0 {
		var fp string
		if err := tx.queryRow(`SELECT id, fingerprint, expanded, targets FROM events WHERE tenant = ? AND event_id = ? AND purpose = ?`,
			ev.Tenant, ev.EventID, ev.Purpose).Scan(&res.EventRow, &fp, &res.Expanded, &res.Targets); err != nil {
			return res, fmt.Errorf("read duplicate event: %w", err)
		}
		if fp != ev.Fingerprint {
			return res, fmt.Errorf("%w: tenant %q, event %q, purpose %q", model.ErrEventConflict, ev.Tenant, ev.EventID, ev.Purpose)
		}
		res.Duplicate = true
		if len(ev.Feeds) > 0 { // the same content: the same feeds
			if res.FeedItems, err = sqlstore.EventFeedItems(context.Background(), tx.shared(), ev.Tenant, res.EventRow); err != nil {
				return res, err
			}
		}
		return res, nil
	}
	if res.EventRow, err = ins.LastInsertId(); err != nil {
		return res, fmt.Errorf("insert event: %w", err)
	}
	if res.FeedItems, err = insertFeedItems(tx, ev.Tenant, res.EventRow, ev.Feeds, now); err != nil {
		return res, err
	}
	res.Expanded = len(first)
	if ev.Cancels != "" {
		if _, err := sqlstore.CancelRuns(context.Background(), tx.shared(), ev.Tenant, ev.Cancels, model.CancelledBy(ev), now); err != nil {
			return res, err
		}
	}
	if len(first) > 0 && first[0].Run != nil { // a workflow's runs, not notifications
		return res, sqlstore.InsertRuns(context.Background(), tx.shared(), res.EventRow, ev.Tenant, ev.Type, 0, first, now)
	}
	ids, err := insertTargets(tx, res.EventRow, ev.Tenant, ev.Type, 0, first, now)
	if err != nil {
		return res, err
	}
	res.Notifications = make([]model.EventNotification, len(first))
	for i, tg := range first {
		res.Notifications[i] = model.EventNotification{ID: ids[i], Key: tg.Key, Recipient: tg.Recipient, Channel: tg.Channel, Status: model.StatusPending}
	}
	return res, nil
}

// ExpandEvent writes the next chunk of an event's fan-out. from is how many
// targets the caller believes are written; if the event row disagrees (a
// second expander got there first), nothing is written and the event's real
// count is returned. Inserts are ON CONFLICT DO NOTHING, so even a chunk
// written twice adds no notification.
func (s *Store) ExpandEvent(ctx context.Context, eventRow int64, from int, chunk []model.Target, now time.Time) (int, error) {
	var expanded int
	err := s.w.doAs(ctx, model.WriteAccept, func(tx *Tx) error {
		var tenant, typ string
		var targets int
		if err := tx.queryRow(`SELECT expanded, targets, tenant, type FROM events WHERE id = ?`, eventRow).Scan(&expanded, &targets, &tenant, &typ); err != nil {
			return fmt.Errorf("expand event %d: %w", eventRow, err)
		}
		if expanded != from {
			return nil
		}
		if from >= targets { // dropped meanwhile (DropEvent sets targets = expanded)
			return fmt.Errorf("expand event %d from %d of %d: %w", eventRow, from, targets, model.ErrFanOutEnded)
		}
		if _, err := insertTargets(tx, eventRow, tenant, typ, from, chunk, now); err != nil {
			return err
		}
		expanded = from + len(chunk)
		if _, err := tx.exec(`UPDATE events SET expanded = ? WHERE id = ?`, expanded, eventRow); err != nil {
			return fmt.Errorf("advance fan-out of event %d: %w", eventRow, err)
		}
		return nil
	})
	return expanded, err
}

// insertRows is how many notifications one INSERT statement writes: one
// statement per row costs more in statement overhead than in B-tree work.
const insertRows = 100

// insertTargets writes notifications from position from on, and returns
// the ids it wrote by position (a notification that was already there, as
// after a crash mid-fan-out, is not in the map).
func insertTargets(tx *Tx, eventRow int64, tenant, typ string, from int, chunk []model.Target, now time.Time) (map[int]int64, error) {
	if len(chunk) > 0 && chunk[0].Run != nil { // a workflow's runs, not notifications
		return map[int]int64{}, sqlstore.InsertRuns(context.Background(), tx.shared(), eventRow, tenant, typ, from, chunk, now)
	}
	t := ms(now)
	ids := make(map[int]int64, len(chunk))
	args := make([]any, 0, min(len(chunk), insertRows)*14)
	for i := 0; i < len(chunk); i += insertRows {
		rows := chunk[i:min(i+insertRows, len(chunk))]
		args = args[:0]
		for j, tg := range rows {
			args = append(args, tg.Key, eventRow, from+i+j, tenant, typ, tg.Recipient, tg.Channel, tg.Address, sqlstore.NullStr(tg.AddressKey), t, t, t, t, tg.Message)
		}
		if len(rows) == 1 {
			// One row (the usual event): last_insert_rowid() names it, and
			// skipping RETURNING's trip through database/sql rows gave 10%
			// more accepts per second with 256 callers (bench, A/B runs).
			r, err := tx.exec(insertOneNotification, args...)
			if err != nil {
				return nil, fmt.Errorf("insert notifications of event %d: %w", eventRow, err)
			}
			if n, _ := r.RowsAffected(); n == 1 {
				if ids[from+i], err = r.LastInsertId(); err != nil {
					return nil, err
				}
			}
			continue
		}
		res, err := tx.query(insertNotifications(len(rows))+` RETURNING id, seq`, args...)
		if err != nil {
			return nil, fmt.Errorf("insert notifications of event %d: %w", eventRow, err)
		}
		for res.Next() {
			var id int64
			var seq int
			if err := res.Scan(&id, &seq); err != nil {
				res.Close()
				return nil, err
			}
			ids[seq] = id
		}
		res.Close()
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("insert notifications of event %d: %w", eventRow, err)
		}
	}
	return ids, nil
}

// insertOneNotification is built once: the writer's statement cache is
// keyed by the text, so building it per accept cost a concatenation and a
// long hash each time.
var insertOneNotification = insertNotifications(1)

// insertNotifications is the INSERT of n notification rows. ON CONFLICT DO
// NOTHING makes a chunk written twice (after a crash) add nothing.
func insertNotifications(n int) string {
	return `INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, address_key,
			next_attempt_at, cycle_started_at, created_at, updated_at, message)
		VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", n), ", ") + `
		ON CONFLICT DO NOTHING`
}

// UnexpandedEvents lists events whose fan-out stopped part way (a crash, or
// an accept whose caller went away) and is not quarantined, oldest first,
// from the partial index of such events.
func (s *Store) UnexpandedEvents(ctx context.Context, limit int) ([]model.Unexpanded, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, tenant, event_id, payload, expanded, targets FROM events INDEXED BY events_unexpanded
		WHERE expanded < targets AND quarantined_at IS NULL ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("unexpanded events: %w", err)
	}
	defer rows.Close()
	var out []model.Unexpanded
	for rows.Next() {
		var u model.Unexpanded
		if err := rows.Scan(&u.EventRow, &u.Tenant, &u.EventID, &u.Payload, &u.Expanded, &u.Targets); err != nil {
			return nil, fmt.Errorf("unexpanded events: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// QuarantineEvent takes an event's fan-out off the work list.
func (s *Store) QuarantineEvent(ctx context.Context, eventRow int64, reason string, now time.Time) error {
	return s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`UPDATE events SET quarantined_at = ?, quarantine_reason = ? WHERE id = ? AND quarantined_at IS NULL`,
			ms(now), reason, eventRow)
		if err != nil {
			return fmt.Errorf("quarantine event %d: %w", eventRow, err)
		}
		return nil
	})
}

// ReleaseEvent lifts a quarantine: the expander tries the fan-out again.
func (s *Store) ReleaseEvent(ctx context.Context, tenant string, eventRow int64) error {
	return s.w.do(ctx, func(tx *Tx) error {
		res, err := tx.exec(`UPDATE events SET quarantined_at = NULL, quarantine_reason = NULL
			WHERE id = ?1 AND (?2 = '' OR tenant = ?2) AND quarantined_at IS NOT NULL`, eventRow, tenant)
		if err != nil {
			return fmt.Errorf("release event %d: %w", eventRow, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("quarantined event %d: %w", eventRow, model.ErrNotFound)
		}
		return nil
	})
}

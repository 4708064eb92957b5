package sqlite

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"strings"
)

// defaultListLimit applies when ListFilter.Limit is zero or less.
const defaultListLimit = 100

// ListNotifications returns notifications matching f in id order, without
// their attempt logs (AttemptLog is nil). To page, pass the last id returned
// as After. Pages neither skip nor repeat a row, even while notifications are
// being written: ids come from AUTOINCREMENT and write transactions are
// serialized (one writer here, SQLite's file lock across processes), so a
// row committed after a page was read has a larger id than any row that page
// could have returned. (A row whose status changes may of
// course enter or leave a status filter between pages.)
func (s *Store) ListNotifications(ctx context.Context, f model.ListFilter) ([]model.Notification, error) {
	statusFew := false
	if f.Tenant != "" && f.Type != "" && f.Status != "" && !fewRows(f) {
		// A type and a status: each has an index, and a page is quick on
		// either unless that index holds many rows the other filter
		// rejects (dead digests when the tenant's digests are a million and
		// none is dead). Without per-value statistics SQLite cannot tell
		// which, so ask: if the status holds few rows after the cursor, read
		// those (at most statusProbe, checked for the type); else the type's.
		var n int
		if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM notifications
			WHERE tenant = ? AND status = ? AND id `+idBeyond(f)+` ? LIMIT ?)`, f.Tenant, f.Status, f.ListCursor(), statusProbe).Scan(&n); err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		statusFew = n < statusProbe
	}
	q, args := listQueryWith(f, statusFew)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	out := []model.Notification{}
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	return out, nil
}

// listQuery writes only the conditions f sets: a condition that matches
// anything when its parameter is empty would keep SQLite from using an index
// for it.
// Each combination has an index ending in id (see 0002_api.sql), so a page
// is a range read in id order that stops after the limit.
func listQuery(f model.ListFilter) (string, []any) { return listQueryWith(f, false) }

// fewRows reports whether f names a filter of few rows (a recipient, an
// address, an event), whose own index is read and the rest checked on it.
func fewRows(f model.ListFilter) bool {
	return f.Recipient != "" || f.Address != "" || f.EventID != "" || f.EventRow != 0
}

// statusProbe is how many of a status's rows ListNotifications counts, at
// most, to choose between the status's index and the type's.
const statusProbe = 20000

// listQueryWith is listQuery; statusFew reads a type and a status from the
// status's index (the type checked on its rows), else from the type's.
// (ListNotifications sets it only without a few-row filter.)
func listQueryWith(f model.ListFilter, statusFew bool) (string, []any) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, model.MaxListLimit)
	var b strings.Builder
	b.WriteString(`SELECT ` + notificationCols + `
		FROM notifications n JOIN events e ON e.id = n.event
		WHERE `)
	var args []any
	few := fewRows(f)
	if f.Tenant != "" && !few && (!f.CreatedSince.IsZero() || !f.CreatedBefore.IsZero()) {
		// A tenant's creation range also bounds the ids read: the least and
		// the greatest id created in it, from the (tenant, created_at)
		// index alone. Ids follow creation only roughly, so the times are
		// still checked on each row; but the walk in id order starts at the
		// range's first row and ends at its last, wherever in a million
		// rows the range lies, instead of reading from the cursor to it.
		// One lower bound (the cursor's or the range's, the greater), so
		// that SQLite seeks to it; an empty range reads nothing.
		rng, rargs := ` FROM notifications INDEXED BY notifications_created WHERE tenant = ?`, []any{f.Tenant}
		if !f.CreatedSince.IsZero() {
			rng += ` AND created_at >= ?`
			rargs = append(rargs, ms(f.CreatedSince))
		}
		if !f.CreatedBefore.IsZero() {
			rng += ` AND created_at < ?`
			rargs = append(rargs, ms(f.CreatedBefore))
		}
		// Newest first, the same from the other end: one upper bound, the
		// cursor's or the range's.
		switch {
		case f.Newest:
			b.WriteString(`n.id < min(?, coalesce((SELECT max(id)` + rng + `) + 1, 0))`)
			args = append(append(args, f.ListCursor()), rargs...)
			if !f.CreatedSince.IsZero() {
				b.WriteString(` AND n.id >= (SELECT min(id)` + rng + `)`)
				args = append(args, rargs...)
			}
		default:
			b.WriteString(`n.id > max(?, coalesce((SELECT min(id)` + rng + `) - 1, 9223372036854775807))`)
			args = append(append(args, f.After), rargs...)
			if !f.CreatedBefore.IsZero() {
				b.WriteString(` AND n.id <= (SELECT max(id)` + rng + `)`)
				args = append(args, rargs...)
			}
		}
	} else {
		b.WriteString(`n.id ` + idBeyond(f) + ` ?`)
		args = append(args, f.ListCursor())
	}
	if f.Tenant != "" && f.EventID != "" {
		// The event's rows are few: keep SQLite on them (notifications_event),
		// not on the tenant's index.
		b.WriteString(` AND +n.tenant = ?`)
		args = append(args, f.Tenant)
	} else if f.Tenant != "" {
		b.WriteString(` AND n.tenant = ?`)
		args = append(args, f.Tenant)
	}
	if f.EventID != "" {
		// Every purpose of the event id, by the identity index (tenant,
		// event_id, purpose) when the tenant is known.
		b.WriteString(` AND n.event IN (SELECT id FROM events WHERE event_id = ?`)
		args = append(args, f.EventID)
		if f.Tenant != "" {
			b.WriteString(` AND tenant = ?`)
			args = append(args, f.Tenant)
		}
		b.WriteString(`)`)
	}
	if f.Status != "" && (few || (f.Type != "" && !statusFew)) {
		// The unary + keeps SQLite off the status index: a recipient's
		// notifications are few, a status's may be millions, and without
		// statistics the planner cannot tell.
		b.WriteString(` AND +n.status = ?`)
		args = append(args, f.Status)
	} else if f.Status != "" {
		b.WriteString(` AND n.status = ?`)
		args = append(args, f.Status)
	}
	if f.Recipient != "" && f.Address != "" {
		b.WriteString(` AND +n.recipient = ?`) // the address index, which holds fewer rows
		args = append(args, f.Recipient)
	} else if f.Recipient != "" {
		b.WriteString(` AND n.recipient = ?`)
		args = append(args, f.Recipient)
	}
	if f.Address != "" {
		b.WriteString(` AND n.address = ?`)
		args = append(args, f.Address)
	}
	if f.Type != "" && f.Status != "" && statusFew {
		b.WriteString(` AND +n.type = ?`)
		args = append(args, f.Type)
	} else if f.Type != "" {
		// A tenant's type has an index (tenant, type, id); with a few-row
		// filter it is checked on that filter's rows.
		b.WriteString(` AND n.type = ?`)
		args = append(args, f.Type)
	}
	if f.EventRow != 0 {
		b.WriteString(` AND n.event = ?`)
		args = append(args, f.EventRow)
	}
	// The times are checked on the rows the conditions above select, in id
	// order: no index is ordered by both a time and id, and one on a time
	// would make every page sort all that time matches. With a status the
	// status index is read; the statuses an operator lists by time (failed,
	// dead, unknown) hold few rows. Without any other filter it is one pass
	// over the table from the cursor, across all pages together; within a
	// tenant a creation range also bounds the ids (above).
	if !f.CreatedSince.IsZero() {
		b.WriteString(` AND n.created_at >= ?`)
		args = append(args, ms(f.CreatedSince))
	}
	if !f.CreatedBefore.IsZero() {
		b.WriteString(` AND n.created_at < ?`)
		args = append(args, ms(f.CreatedBefore))
	}
	if !f.UpdatedSince.IsZero() {
		b.WriteString(` AND n.updated_at >= ?`)
		args = append(args, ms(f.UpdatedSince))
	}
	if f.Newest {
		b.WriteString(` ORDER BY n.id DESC LIMIT ?`)
	} else {
		b.WriteString(` ORDER BY n.id LIMIT ?`)
	}
	args = append(args, limit)
	return b.String(), args
}

// idBeyond is how a page's ids compare with its cursor: greater, or less
// newest first.
func idBeyond(f model.ListFilter) string {
	if f.Newest {
		return "<"
	}
	return ">"
}

// EventRow returns the row id of the event tenant accepted under eventID
// and purpose (its identity). ErrNotFound when there is none.
func (s *Store) EventRow(ctx context.Context, tenant, eventID, purpose string) (int64, error) {
	var id int64
	err := s.rdb.QueryRowContext(ctx, `SELECT id FROM events WHERE tenant = ? AND event_id = ? AND purpose = ?`,
		tenant, eventID, purpose).Scan(&id)
	if isNoRows(err) {
		return 0, fmt.Errorf("event %q (purpose %q): %w", eventID, purpose, model.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read event %q: %w", eventID, err)
	}
	return id, nil
}

// EventRows lists the events tenant accepted under eventID, one per
// purpose, from the identity's unique index.
func (s *Store) EventRows(ctx context.Context, tenant, eventID string) ([]model.EventRef, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, purpose FROM events WHERE tenant = ? AND event_id = ? ORDER BY id`, tenant, eventID)
	if err != nil {
		return nil, fmt.Errorf("read events %q: %w", eventID, err)
	}
	defer rows.Close()
	out := []model.EventRef{}
	for rows.Next() {
		var e model.EventRef
		if err := rows.Scan(&e.Row, &e.Purpose); err != nil {
			return nil, fmt.Errorf("read events %q: %w", eventID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events %q: %w", eventID, err)
	}
	return out, nil
}

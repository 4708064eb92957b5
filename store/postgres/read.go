package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const notificationCols = `n.id, n.key, n.tenant, e.event_id, e.purpose, n.type, n.recipient, n.channel, n.address, n.status,
	n.attempts, n.next_attempt_at, n.lease_until, n.provider, n.provider_message_id, n.last_response, n.reason,
	n.created_at, n.updated_at`

func scanNotification(row pgx.Row) (model.Notification, error) {
	var n model.Notification
	var next, created, updated int64
	var lease *int64
	var provider, msgID, resp, reason *string
	err := row.Scan(&n.ID, &n.Key, &n.Tenant, &n.EventID, &n.Purpose, &n.Type, &n.Recipient, &n.Channel, &n.Address,
		&n.Status, &n.Attempts, &next, &lease, &provider, &msgID, &resp, &reason, &created, &updated)
	if err != nil {
		return n, err
	}
	if n.Status == model.StatusPending {
		t := fromMS(next)
		n.NextAttemptAt = &t
	}
	if lease != nil && n.Status == model.StatusSending {
		t := fromMS(*lease)
		n.LeaseUntil = &t
	}
	n.Provider, n.ProviderMessageID, n.LastResponse, n.Reason = deref(provider), deref(msgID), deref(resp), deref(reason)
	n.CreatedAt, n.UpdatedAt = fromMS(created), fromMS(updated)
	return n, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Notification returns one notification, by id or by idempotency key, with
// every attempt, in one snapshot. tenant "" means any tenant.
func (s *Store) Notification(ctx context.Context, tenant string, id int64, key string) (model.Notification, error) {
	var n model.Notification
	err := s.snapshot(ctx, func(q querier) error {
		var err error
		n, err = scanNotification(q.QueryRow(ctx, `SELECT `+notificationCols+`
			FROM notifications n JOIN events e ON e.id = n.event
			WHERE (n.id = $1 OR n.key = $2) AND ($3 = '' OR n.tenant = $3)`, id, key, tenant))
		if isNoRows(err) {
			if key != "" {
				return fmt.Errorf("notification with key %q: %w", key, model.ErrNotFound)
			}
			return fmt.Errorf("notification %d: %w", id, model.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read notification: %w", err)
		}
		if n.AttemptLog, err = sqlstore.Attempts(ctx, shared(q), n.ID); err != nil {
			return err
		}
		var msg []byte
		if err := q.QueryRow(ctx, `SELECT coalesce(n.message, e.message) FROM notifications n JOIN events e ON e.id = n.event
			WHERE n.id = $1`, n.ID).Scan(&msg); err != nil {
			return fmt.Errorf("read notification message: %w", err)
		}
		if json.Valid(msg) {
			n.Message = msg
		}
		if err := notificationExtras(ctx, q, &n); err != nil {
			return err
		}
		if n.Clicks, err = sqlstore.ClicksFor(ctx, shared(q), n.ID); err != nil {
			return err
		}
		if n.Quarantine, err = sqlstore.NotificationQuarantine(ctx, shared(q), n.ID); err != nil {
			return err
		}
		if n.ProviderMessageID != "" {
			n.Receipts, err = sqlstore.ReceiptsFor(ctx, shared(q), n.ID, n.Provider, n.ProviderMessageID)
			return err
		}
		return nil
	})
	return n, err
}

// EventNotifications lists an event's notifications in fan-out order,
// after position after (-1 for the start), at most limit.
func (s *Store) EventNotifications(ctx context.Context, eventRow int64, after, limit int) ([]model.EventNotification, error) {
	var out []model.EventNotification
	err := s.read(ctx, func(q querier) (err error) {
		out, err = sqlstore.EventNotifications(ctx, shared(q), eventRow, after, limit)
		return err
	})
	return out, err
}

// Status counts notifications by status and attempts by provider and
// outcome, in one snapshot.
func (s *Store) Status(ctx context.Context, now time.Time) (model.Status, error) {
	var st model.Status
	err := s.snapshot(ctx, func(q querier) error {
		st = model.Status{Counts: map[string]int64{}, Providers: map[string]map[string]int64{}, QuarantinedIDs: []int64{}}
		for _, s := range model.Statuses {
			st.Counts[s] = 0
		}
		rows, err := q.Query(ctx, `SELECT status, count(*) FROM notifications GROUP BY status`)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				rows.Close()
				return err
			}
			st.Counts[k] = n
		}
		rows.Close()
		// The oldest due and the next not yet due: two ends of the
		// partial index of pending rows.
		var oldest, next *int64
		if err := q.QueryRow(ctx, `SELECT (SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending' AND next_attempt_at <= $1),
				(SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending' AND next_attempt_at > $1)`, ms(now)).Scan(&oldest, &next); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if oldest != nil {
			st.OldestDue = now.Sub(fromMS(*oldest))
		}
		if next != nil {
			t := fromMS(*next)
			st.NextDue = &t
		}
		// The newest unknown, failed and dead ones: the status index read
		// backwards.
		for _, l := range []struct {
			status string
			ids    *[]int64
		}{{model.StatusUnknown, &st.Unknown}, {model.StatusFailed, &st.Failed}, {model.StatusDead, &st.Dead}} {
			if *l.ids, err = ids(ctx, q, `SELECT id FROM notifications WHERE status = $1 ORDER BY id DESC LIMIT 20`, l.status); err != nil {
				return fmt.Errorf("status: %w", err)
			}
		}
		if err := q.QueryRow(ctx, `SELECT count(*) FROM events WHERE quarantined_at IS NOT NULL`).Scan(&st.Quarantined); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if st.QuarantinedIDs, err = ids(ctx, q, `SELECT id FROM events WHERE quarantined_at IS NOT NULL ORDER BY id DESC LIMIT 20`); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if err := q.QueryRow(ctx, `SELECT count(*) FROM suppressions WHERE expires_at IS NULL OR expires_at > $1`, ms(now)).Scan(&st.Suppressions); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if st.SourceRejects, err = sqlstore.RejectCounts(ctx, shared(q)); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		rows, err = q.Query(ctx, `SELECT provider, outcome, count(*) FROM attempts GROUP BY provider, outcome`)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var p, o string
			var n int64
			if err := rows.Scan(&p, &o, &n); err != nil {
				return err
			}
			if st.Providers[p] == nil {
				st.Providers[p] = map[string]int64{"sent": 0, "refused": 0, "unknown": 0}
			}
			st.Providers[p][o] = n
		}
		return rows.Err()
	})
	return st, err
}

func ids(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if out == nil {
		out = []int64{}
	}
	return out, err
}

// Live counts notifications not yet final: pending ones due by horizon,
// pending ones due later, and those being sent.
func (s *Store) Live(ctx context.Context, horizon time.Time) (dueSoon, later, sending int64, err error) {
	err = s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT
				count(*) FILTER (WHERE status = 'pending' AND next_attempt_at <= $1),
				count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > $1),
				count(*) FILTER (WHERE status = 'sending')
			FROM notifications WHERE status IN ('pending', 'sending')`, ms(horizon)).Scan(&dueSoon, &later, &sending)
	})
	if err != nil {
		err = fmt.Errorf("count live notifications: %w", err)
	}
	return
}

// NextDue returns when the earliest pending notification is due, and
// false when none is pending: the first entry of the partial index.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var t *int64
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending'`).Scan(&t)
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next due: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return fromMS(*t), true, nil
}

// defaultListLimit applies when ListFilter.Limit is zero or less.
const defaultListLimit = 100

// ListNotifications returns notifications matching f in id order, without
// their attempt logs. To page, pass the last id returned as After.
//
// Pages neither skip nor repeat a row while notifications are written, on
// any number of nodes. Ids come from a sequence, drawn before commit: a
// page could see id 12 committed while 11 is not yet, and its cursor would
// then pass 11 for good. So every transaction that draws notification ids
// holds a shared advisory lock from before its first id to its commit
// (AcceptEvents, ExpandEvent), and a page is read under the exclusive
// lock: when it is granted no id is in flight, so every row below any id
// the page sees is committed already, and later ones get higher ids. The
// page waits for the transactions in flight, and holds new ones back for
// as long as its query runs.
func (s *Store) ListNotifications(ctx context.Context, f model.ListFilter) ([]model.Notification, error) {
	q, args := listQuery(f)
	out := []model.Notification{}
	err := s.read(ctx, func(db querier) error {
		// One round trip: a batch runs as one implicit transaction (until
		// its Sync) or in read's, so the lock holds through the query, and
		// the query's snapshot is taken after the lock is granted.
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, s.listLock)
		b.Queue(q, args...)
		br := db.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("list notifications: lock: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("list notifications: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			n, err := scanNotification(rows)
			if err != nil {
				return fmt.Errorf("list notifications: %w", err)
			}
			out = append(out, n)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list notifications: %w", err)
		}
		rows.Close()
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listQuery writes only the conditions f sets, so each combination uses its
// index ending in id (0002_api.sql): a page is a range read in id order
// that stops after the limit.
func listQuery(f model.ListFilter) (string, []any) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, model.MaxListLimit)
	beyond, order := ">", ""
	if f.Newest {
		beyond, order = "<", " DESC" // newest first, paged from the other end
	}
	var b strings.Builder
	args := []any{f.ListCursor()}
	cond := func(c string, v any) {
		args = append(args, v)
		b.WriteString(" AND " + c + " = $" + strconv.Itoa(len(args)))
	}
	b.WriteString(`SELECT ` + notificationCols + `
		FROM notifications n JOIN events e ON e.id = n.event
		WHERE n.id ` + beyond + ` $1`)
	few := f.Recipient != "" || f.Address != "" || f.EventID != "" || f.EventRow != 0
	if f.Tenant != "" && !few && (!f.CreatedSince.IsZero() || !f.CreatedBefore.IsZero()) {
		// A tenant's creation range also bounds the ids read, as in
		// store/sqlite: the least and the greatest id created in it, from
		// the (tenant, created_at) index (0013); the times are still
		// checked on each row. An empty range reads nothing.
		args = append(args, f.Tenant)
		rng := ` FROM notifications WHERE tenant = $` + strconv.Itoa(len(args))
		if !f.CreatedSince.IsZero() {
			args = append(args, ms(f.CreatedSince))
			rng += ` AND created_at >= $` + strconv.Itoa(len(args))
		}
		if !f.CreatedBefore.IsZero() {
			args = append(args, ms(f.CreatedBefore))
			rng += ` AND created_at < $` + strconv.Itoa(len(args))
		}
		// OFFSET 0 keeps the planner on the range: min(id) alone it turns
		// into a walk of the primary key from the first id until a row
		// matches, the whole table for a recent range. The index holds id
		// (INCLUDE), so the range is read from it alone.
		switch {
		case f.Newest:
			b.WriteString(` AND n.id < coalesce((SELECT max(id) FROM (SELECT id` + rng + ` OFFSET 0) r) + 1, 0)`)
			if !f.CreatedSince.IsZero() {
				b.WriteString(` AND n.id >= (SELECT min(id) FROM (SELECT id` + rng + ` OFFSET 0) r)`)
			}
		default:
			b.WriteString(` AND n.id > coalesce((SELECT min(id) FROM (SELECT id` + rng + ` OFFSET 0) r) - 1, 9223372036854775807)`)
			if !f.CreatedBefore.IsZero() {
				b.WriteString(` AND n.id <= (SELECT max(id) FROM (SELECT id` + rng + ` OFFSET 0) r)`)
			}
		}
	}
	if f.Tenant != "" {
		cond("n.tenant", f.Tenant)
	}
	if f.Status != "" {
		cond("n.status", f.Status)
	}
	if f.Recipient != "" {
		cond("n.recipient", f.Recipient)
	}
	if f.Address != "" {
		cond("n.address", f.Address)
	}
	if f.Type != "" {
		cond("n.type", f.Type)
	}
	if f.EventID != "" {
		// Every purpose of the event id, by the identity index (tenant,
		// event_id, purpose) when the tenant is known.
		args = append(args, f.EventID)
		b.WriteString(" AND n.event IN (SELECT id FROM events WHERE event_id = $" + strconv.Itoa(len(args)))
		if f.Tenant != "" {
			args = append(args, f.Tenant)
			b.WriteString(" AND tenant = $" + strconv.Itoa(len(args)))
		}
		b.WriteString(")")
	}
	if f.EventRow != 0 {
		cond("n.event", f.EventRow)
	}
	// The times are checked on the rows the conditions above select, in id
	// order (as store/sqlite does): no index is ordered by both a time and
	// id.
	if !f.CreatedSince.IsZero() {
		args = append(args, ms(f.CreatedSince))
		b.WriteString(" AND n.created_at >= $" + strconv.Itoa(len(args)))
	}
	if !f.CreatedBefore.IsZero() {
		args = append(args, ms(f.CreatedBefore))
		b.WriteString(" AND n.created_at < $" + strconv.Itoa(len(args)))
	}
	if !f.UpdatedSince.IsZero() {
		args = append(args, ms(f.UpdatedSince))
		b.WriteString(" AND n.updated_at >= $" + strconv.Itoa(len(args)))
	}
	args = append(args, limit)
	b.WriteString(` ORDER BY n.id` + order + ` LIMIT $` + strconv.Itoa(len(args)))
	return b.String(), args
}

// EventRow returns the row id of the event tenant accepted under eventID
// and purpose (its identity). ErrNotFound when there is none.
func (s *Store) EventRow(ctx context.Context, tenant, eventID, purpose string) (int64, error) {
	var id int64
	err := s.read(ctx, func(q querier) error {
		err := q.QueryRow(ctx, `SELECT id FROM events WHERE tenant = $1 AND event_id = $2 AND purpose = $3`,
			tenant, eventID, purpose).Scan(&id)
		if isNoRows(err) {
			return fmt.Errorf("event %q (purpose %q): %w", eventID, purpose, model.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read event %q: %w", eventID, err)
		}
		return nil
	})
	return id, err
}

// EventRows lists every event tenant accepted under eventID (one per
// purpose), in row order.
func (s *Store) EventRows(ctx context.Context, tenant, eventID string) ([]model.EventRef, error) {
	out := []model.EventRef{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT id, purpose FROM events WHERE tenant = $1 AND event_id = $2 ORDER BY id`, tenant, eventID)
		if err != nil {
			return fmt.Errorf("read events %q: %w", eventID, err)
		}
		defer rows.Close()
		for rows.Next() {
			var e model.EventRef
			if err := rows.Scan(&e.Row, &e.Purpose); err != nil {
				return fmt.Errorf("read events %q: %w", eventID, err)
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

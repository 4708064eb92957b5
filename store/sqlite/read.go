package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"
)

const notificationCols = `n.id, n.key, n.tenant, e.event_id, e.purpose, n.type, n.recipient, n.channel, n.address, n.status,
	n.attempts, n.next_attempt_at, n.lease_until, n.provider, n.provider_message_id, n.last_response, n.reason,
	n.created_at, n.updated_at`

func scanNotification(row interface{ Scan(...any) error }) (model.Notification, error) {
	var n model.Notification
	var next int64
	var lease sql.NullInt64
	var provider, msgID, resp, reason sql.NullString
	var created, updated int64
	err := row.Scan(&n.ID, &n.Key, &n.Tenant, &n.EventID, &n.Purpose, &n.Type, &n.Recipient, &n.Channel, &n.Address,
		&n.Status, &n.Attempts, &next, &lease, &provider, &msgID, &resp, &reason, &created, &updated)
	if err != nil {
		return n, err
	}
	if n.Status == model.StatusPending {
		t := fromMS(next)
		n.NextAttemptAt = &t
	}
	if lease.Valid && n.Status == model.StatusSending {
		t := fromMS(lease.Int64)
		n.LeaseUntil = &t
	}
	n.Provider, n.ProviderMessageID, n.LastResponse, n.Reason = provider.String, msgID.String, resp.String, reason.String
	n.CreatedAt, n.UpdatedAt = fromMS(created), fromMS(updated)
	return n, nil
}

// Notification returns one notification, by id or by idempotency key, with
// every attempt. tenant "" means any tenant.
func (s *Store) Notification(ctx context.Context, tenant string, id int64, key string) (model.Notification, error) {
	row := s.rdb.QueryRowContext(ctx, `SELECT `+notificationCols+`
		FROM notifications n JOIN events e ON e.id = n.event
		WHERE (n.id = ?1 OR n.key = ?2) AND (?3 = '' OR n.tenant = ?3)`, id, key, tenant)
	n, err := scanNotification(row)
	if isNoRows(err) {
		if key != "" {
			return n, fmt.Errorf("notification with key %q: %w", key, model.ErrNotFound)
		}
		return n, fmt.Errorf("notification %d: %w", id, model.ErrNotFound)
	}
	if err != nil {
		return n, fmt.Errorf("read notification: %w", err)
	}
	if n.AttemptLog, err = sqlstore.Attempts(ctx, s.reader(), n.ID); err != nil {
		return n, err
	}
	var msg []byte
	if err := s.rdb.QueryRowContext(ctx, `SELECT coalesce(n.message, e.message) FROM notifications n JOIN events e ON e.id = n.event
		WHERE n.id = ?`, n.ID).Scan(&msg); err != nil {
		return n, fmt.Errorf("read notification message: %w", err)
	}
	if json.Valid(msg) {
		n.Message = msg
	}
	if err := s.notificationExtras(ctx, &n); err != nil {
		return n, err
	}
	if n.Clicks, err = sqlstore.ClicksFor(ctx, s.reader(), n.ID); err != nil {
		return n, err
	}
	if n.Quarantine, err = sqlstore.NotificationQuarantine(ctx, s.reader(), n.ID); err != nil {
		return n, err
	}
	err = nil
	if n.ProviderMessageID != "" {
		n.Receipts, err = sqlstore.ReceiptsFor(ctx, s.reader(), n.ID, n.Provider, n.ProviderMessageID)
	}
	return n, err
}

// EventNotifications lists an event's notifications in fan-out order,
// after position after (-1 for the start), at most limit.
func (s *Store) EventNotifications(ctx context.Context, eventRow int64, after, limit int) ([]model.EventNotification, error) {
	return sqlstore.EventNotifications(ctx, s.reader(), eventRow, after, limit)
}

// Status counts notifications by status and attempts by provider and outcome.
func (s *Store) Status(ctx context.Context, now time.Time) (model.Status, error) {
	st := model.Status{Counts: map[string]int64{}, Providers: map[string]map[string]int64{}}
	for _, s := range model.Statuses {
		st.Counts[s] = 0
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT status, count(*) FROM notifications GROUP BY status`)
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.Counts[k] = n
	}
	rows.Close()
	var oldest sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending'`).Scan(&oldest); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	backlog := false
	if oldest.Valid {
		if t := fromMS(oldest.Int64); !t.After(now) {
			st.OldestDue, backlog = now.Sub(t), true
		} else {
			st.NextDue = &t
		}
	}
	if backlog {
		// Others are due already: the next one not yet due, from the same
		// index.
		var next sql.NullInt64
		if err := s.rdb.QueryRowContext(ctx, `SELECT min(next_attempt_at) FROM notifications INDEXED BY notifications_due
			WHERE status = 'pending' AND next_attempt_at > ?`, ms(now)).Scan(&next); err != nil {
			return st, fmt.Errorf("status: %w", err)
		}
		if next.Valid {
			t := fromMS(next.Int64)
			st.NextDue = &t
		}
	}
	for _, l := range []struct {
		status string
		ids    *[]int64
	}{{model.StatusUnknown, &st.Unknown}, {model.StatusFailed, &st.Failed}, {model.StatusDead, &st.Dead}} {
		if *l.ids, err = s.newest(ctx, l.status, statusListed); err != nil {
			return st, fmt.Errorf("status: %w", err)
		}
	}
	st.QuarantinedIDs = []int64{}
	rows, err = s.rdb.QueryContext(ctx, `SELECT id FROM events WHERE quarantined_at IS NOT NULL ORDER BY id DESC`)
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return st, err
		}
		if st.Quarantined++; len(st.QuarantinedIDs) < 20 {
			st.QuarantinedIDs = append(st.QuarantinedIDs, id)
		}
	}
	rows.Close()
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM suppressions WHERE expires_at IS NULL OR expires_at > ?`, ms(now)).Scan(&st.Suppressions); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	if st.SourceRejects, err = sqlstore.RejectCounts(ctx, s.reader()); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	rows, err = s.rdb.QueryContext(ctx, `SELECT provider, outcome, count(*) FROM attempts GROUP BY provider, outcome`)
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p, o string
		var n int64
		if err := rows.Scan(&p, &o, &n); err != nil {
			return st, err
		}
		if st.Providers[p] == nil {
			st.Providers[p] = map[string]int64{"sent": 0, "refused": 0, "unknown": 0}
		}
		st.Providers[p][o] = n
	}
	return st, rows.Err()
}

// statusListed is how many ids of each status Status lists.
const statusListed = 20

const newestSQL = `SELECT id FROM notifications WHERE status = ? ORDER BY id DESC LIMIT ?`

// newest lists the ids of the newest notifications in status, newest
// first: the status index read backwards, limit rows.
func (s *Store) newest(ctx context.Context, status string, limit int) ([]int64, error) {
	rows, err := s.rdb.QueryContext(ctx, newestSQL, status, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := []int64{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Live counts notifications not yet final: pending ones due by horizon,
// pending ones due later, and those being sent.
func (s *Store) Live(ctx context.Context, horizon time.Time) (dueSoon, later, sending int64, err error) {
	err = s.rdb.QueryRowContext(ctx, `SELECT
			coalesce(sum(status = 'pending' AND next_attempt_at <= ?1), 0),
			coalesce(sum(status = 'pending' AND next_attempt_at > ?1), 0),
			coalesce(sum(status = 'sending'), 0)
		FROM notifications WHERE status IN ('pending', 'sending')`, ms(horizon)).Scan(&dueSoon, &later, &sending)
	if err != nil {
		err = fmt.Errorf("count live notifications: %w", err)
	}
	return
}

// nextDueSQL reads the first entry of the partial index of pending rows
// (the status index would scan every pending row).
const nextDueSQL = `SELECT min(next_attempt_at) FROM notifications INDEXED BY notifications_due WHERE status = 'pending'`

// NextDue returns when the earliest pending notification is due, and
// false when none is pending.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var t sql.NullInt64
	if err := s.readRow(ctx, nextDueSQL).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("next due: %w", err)
	}
	return fromMS(t.Int64), t.Valid, nil
}

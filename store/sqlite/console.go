package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"
)

// What the console reads and writes beyond the other parts: an overview of
// a tenant, every feed membership listed, and a retry that records who
// asked.

// overviewListed is how many ids of each status needing a decision an
// overview lists.
const overviewListed = 10

// Overview reads a tenant's state. Counts come from the status indexes;
// activity is read newest first, by id, until the window's start (ids
// follow commit order, and the times in a row are within a lease of that
// order), at most model.OverviewMaxRows rows of each kind.
func (s *Store) Overview(ctx context.Context, tenant string, now, since time.Time, bucket time.Duration) (model.Overview, error) {
	o := model.Overview{Counts: map[string]int64{}, Since: since, Bucket: bucket,
		Attempted: map[string][]int64{}, Providers: map[string]map[string]int64{}}
	if bucket <= 0 || !now.After(since) {
		return o, fmt.Errorf("overview: want a window after since and a positive bucket, got %s to %s by %s", since, now, bucket)
	}
	n := int((now.Sub(since) + bucket - 1) / bucket)
	o.Accepted = make([]int64, n)
	for _, oc := range []string{"sent", "refused", "unknown"} {
		o.Attempted[oc] = make([]int64, n)
	}
	for _, st := range model.Statuses {
		o.Counts[st] = 0
	}
	// Through one read transaction: counts, lists and activity are of one
	// moment.
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	defer tx.Rollback()
	countQ, dueQ, targs := overviewCounts(tenant)
	rows, err := tx.QueryContext(ctx, countQ, targs...)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	for rows.Next() {
		var st string
		var c int64
		if err := rows.Scan(&st, &c); err != nil {
			rows.Close()
			return o, fmt.Errorf("overview: %w", err)
		}
		o.Counts[st] = c
	}
	rows.Close()
	var oldest sql.NullInt64
	if err := tx.QueryRowContext(ctx, dueQ, targs...).Scan(&oldest); err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	if oldest.Valid {
		if t := fromMS(oldest.Int64); !t.After(now) {
			o.OldestDue = now.Sub(t)
		}
	}
	for _, l := range []struct {
		status string
		ids    *[]int64
	}{{model.StatusUnknown, &o.Unknown}, {model.StatusDead, &o.Dead}, {model.StatusFailed, &o.Failed}} {
		q := `SELECT id FROM notifications WHERE status = ?1 ORDER BY id DESC LIMIT ?2`
		if tenant != "" {
			q = `SELECT id FROM notifications WHERE tenant = ?3 AND status = ?1 ORDER BY id DESC LIMIT ?2`
		}
		if *l.ids, err = ids(ctx, tx, q, l.status, overviewListed, tenant); err != nil {
			return o, fmt.Errorf("overview: %w", err)
		}
	}
	at := func(t int64) int { return int(fromMS(t).Sub(since) / bucket) }
	// Newest first; a row older than the window by more than a lease-sized
	// margin ends the walk (an id is given at commit; the time it carries
	// may be a little older).
	const margin = 10 * time.Minute
	stop := ms(since.Add(-margin))
	walk := func(q string, args []any, each func(rows *sql.Rows) error) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		read := 0
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
			if read++; read >= model.OverviewMaxRows {
				o.Capped = true
				break
			}
		}
		return rows.Err()
	}
	var q string
	if tenant == "" {
		q = `SELECT created_at FROM notifications ORDER BY id DESC`
	} else {
		q = `SELECT created_at FROM notifications WHERE tenant = ? ORDER BY id DESC`
	}
	var args []any
	if tenant != "" {
		args = []any{tenant}
	}
	errStop := errors.New("past the window")
	err = walk(q, args, func(rows *sql.Rows) error {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return err
		}
		if t < stop {
			return errStop
		}
		if i := at(t); t >= ms(since) && i >= 0 && i < n {
			o.Accepted[i]++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return o, fmt.Errorf("overview: accepts: %w", err)
	}
	// Attempts are walked whatever their tenant and the tenant checked
	// here: a walk filtered in SQL would read every older attempt of the
	// others to find a tenant's first one before the window.
	q = `SELECT a.ended_at, a.provider, a.outcome, n.tenant FROM attempts a JOIN notifications n ON n.id = a.notification
		ORDER BY a.id DESC`
	err = walk(q, nil, func(rows *sql.Rows) error {
		var t int64
		var p, oc, of string
		if err := rows.Scan(&t, &p, &oc, &of); err != nil {
			return err
		}
		if t < stop {
			return errStop
		}
		if t < ms(since) || tenant != "" && of != tenant {
			return nil
		}
		if i := at(t); i >= 0 && i < n && o.Attempted[oc] != nil {
			o.Attempted[oc][i]++
		}
		if o.Providers[p] == nil {
			o.Providers[p] = map[string]int64{"sent": 0, "refused": 0, "unknown": 0}
		}
		o.Providers[p][oc]++
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return o, fmt.Errorf("overview: attempts: %w", err)
	}
	return o, nil
}

func ids(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []int64{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// RetryAs retries a notification as Retry does and records who asked, in
// one write: a retry is never without its audit row, nor a row without its
// retry.
func (s *Store) RetryAs(ctx context.Context, tenant string, id int64, now time.Time, actor string) error {
	return s.w.do(ctx, func(tx *Tx) error {
		// A person's retry never lifts a suppression: the entry is named
		// in the refusal (SuppressedError), lifted where suppressions are.
		from, err := dialect.Retry(ctx, tx.shared(), tenant, id, false, now)
		if err != nil {
			return err
		}
		if _, err := tx.exec(`INSERT INTO notification_audit (notification, at, actor, action, detail) VALUES (?, ?, ?, ?, ?)`,
			id, ms(now), actor, model.AuditRetry, "was "+from); err != nil {
			return fmt.Errorf("retry notification %d: audit: %w", id, err)
		}
		return nil
	})
}

// notificationExtras reads what Notification shows beyond the row and
// its attempts: the audit log.
func (s *Store) notificationExtras(ctx context.Context, n *model.Notification) error {
	var err error
	n.Audit, err = sqlstore.Audit(ctx, s.reader(), n.ID)
	return err
}

// FeedMemberships lists a tenant's feed memberships by feed and user.
func (s *Store) FeedMemberships(ctx context.Context, tenant string, after model.FeedMembership, limit int) ([]model.FeedMembership, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT tenant, feed, user, joined_seq FROM feed_members
		WHERE (?1 = '' OR tenant = ?1) AND (tenant, feed, user) > (?2, ?3, ?4)
		ORDER BY tenant, feed, user LIMIT ?5`, tenant, after.Tenant, after.Feed, after.User, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("list feed members: %w", err)
	}
	defer rows.Close()
	out := []model.FeedMembership{}
	for rows.Next() {
		var m model.FeedMembership
		if err := rows.Scan(&m.Tenant, &m.Feed, &m.User, &m.JoinedSeq); err != nil {
			return nil, fmt.Errorf("list feed members: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// overviewCounts returns the overview's count by status and its oldest due
// query, for one tenant or ("") all. The tenant's condition is written
// only when there is one: "(? = ” OR tenant = ?)" is planned before the
// value is known, so it kept SQLite off the (tenant, status) index and
// counted the whole table (TestOverviewQueriesUseIndexes).
func overviewCounts(tenant string) (count, due string, args []any) {
	if tenant == "" {
		return `SELECT status, count(*) FROM notifications GROUP BY status`,
			`SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending'`, nil
	}
	return `SELECT status, count(*) FROM notifications WHERE tenant = ? GROUP BY status`,
		`SELECT min(next_attempt_at) FROM notifications WHERE status = 'pending' AND tenant = ?`, []any{tenant}
}

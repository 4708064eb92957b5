package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"

	"github.com/jackc/pgx/v5"
)

// What the console reads and writes beyond the other parts, as
// store/sqlite's console.go: an overview of a tenant, every feed membership
// listed, and a retry that records who asked.

// overviewListed is how many ids of each status needing a decision an
// overview lists.
const overviewListed = 10

// overviewMargin is how far past the window's start the newest-first walks
// read: an id is drawn in its transaction, and the time it carries may be a
// little older than a neighbour's.
const overviewMargin = 10 * time.Minute

// overviewChunk is how many rows one query of an overview's walk reads.
const overviewChunk = 1000

// Overview reads a tenant's state in one snapshot. Counts come from the
// status indexes; activity is read newest first, by id, until a margin
// before the window's start, at most model.OverviewMaxRows rows of each.
func (s *Store) Overview(ctx context.Context, tenant string, now, since time.Time, bucket time.Duration) (model.Overview, error) {
	if bucket <= 0 || !now.After(since) {
		return model.Overview{}, fmt.Errorf("overview: want a window after since and a positive bucket, got %s to %s by %s", since, now, bucket)
	}
	n := int((now.Sub(since) + bucket - 1) / bucket)
	var o model.Overview
	err := s.snapshot(ctx, func(q querier) error {
		o = model.Overview{Counts: map[string]int64{}, Since: since, Bucket: bucket,
			Attempted: map[string][]int64{}, Providers: map[string]map[string]int64{}, Accepted: make([]int64, n)}
		for _, oc := range []string{"sent", "refused", "unknown"} {
			o.Attempted[oc] = make([]int64, n)
		}
		for _, st := range model.Statuses {
			o.Counts[st] = 0
		}
		// "($1 = '' OR tenant = $1)" (here and across this store) is safe
		// with pgx's prepared statements: a custom plan folds the known $1
		// (a tenant's count is an index scan), and PostgreSQL switches to
		// the generic plan (a scan with a filter) only when it costs no
		// more than the custom plans did: only while the table is small. Seen on
		// PostgreSQL 15 with a million rows in 50 tenants: after eight
		// executions the plan is still the index's.
		rows, err := q.Query(ctx, `SELECT status, count(*) FROM notifications WHERE ($1 = '' OR tenant = $1) GROUP BY status`, tenant)
		if err != nil {
			return err
		}
		for rows.Next() {
			var st string
			var c int64
			if err := rows.Scan(&st, &c); err != nil {
				rows.Close()
				return err
			}
			o.Counts[st] = c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var oldest *int64
		if err := q.QueryRow(ctx, `SELECT min(next_attempt_at) FROM notifications
			WHERE status = 'pending' AND ($1 = '' OR tenant = $1)`, tenant).Scan(&oldest); err != nil {
			return err
		}
		if oldest != nil {
			if t := fromMS(*oldest); !t.After(now) {
				o.OldestDue = now.Sub(t)
			}
		}
		for _, l := range []struct {
			status string
			ids    *[]int64
		}{{model.StatusUnknown, &o.Unknown}, {model.StatusDead, &o.Dead}, {model.StatusFailed, &o.Failed}} {
			if *l.ids, err = ids(ctx, q, `SELECT id FROM notifications WHERE status = $1 AND ($3 = '' OR tenant = $3)
				ORDER BY id DESC LIMIT $2`, l.status, overviewListed, tenant); err != nil {
				return err
			}
		}
		at := func(t int64) int { return int(fromMS(t).Sub(since) / bucket) }
		stop, start := ms(since.Add(-overviewMargin)), ms(since)
		// Newest first by id, a chunk at a time (a query reads no further
		// than its chunk), until a row older than the margin or the cap.
		walk := func(query string, args []any, each func(t int64, p, oc, of string)) error {
			cursor, read := int64(1<<63-1), 0
			for {
				rows, err := q.Query(ctx, query, append([]any{cursor, overviewChunk}, args...)...)
				if err != nil {
					return err
				}
				got, past := 0, false
				for rows.Next() {
					var id, t int64
					var p, oc, of string
					if err := rows.Scan(&id, &t, &p, &oc, &of); err != nil {
						rows.Close()
						return err
					}
					got, cursor = got+1, id
					if t < stop {
						past = true
						break
					}
					if read++; read > model.OverviewMaxRows {
						o.Capped = true
						past = true
						break
					}
					each(t, p, oc, of)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				if past || got < overviewChunk {
					return nil
				}
			}
		}
		// By the tenant's index (tenant, id), or the primary key for any.
		query, args := `SELECT id, created_at, '', '', tenant FROM notifications WHERE id < $1 ORDER BY id DESC LIMIT $2`, []any(nil)
		if tenant != "" {
			query, args = `SELECT id, created_at, '', '', tenant FROM notifications WHERE tenant = $3 AND id < $1
				ORDER BY id DESC LIMIT $2`, []any{tenant}
		}
		err = walk(query, args, func(t int64, _, _, _ string) {
			if i := at(t); t >= start && i >= 0 && i < n {
				o.Accepted[i]++
			}
		})
		if err != nil {
			return fmt.Errorf("accepts: %w", err)
		}
		// Attempts are walked whatever their tenant and the tenant checked
		// here: a walk filtered in SQL would read every older attempt of the
		// others to find a tenant's first one before the window. Attempt ids
		// follow their ends within a lease, as notification ids follow
		// creation (a settle writes them).
		err = walk(`SELECT a.id, a.ended_at, a.provider, a.outcome, n.tenant FROM attempts a JOIN notifications n ON n.id = a.notification
			WHERE a.id < $1 ORDER BY a.id DESC LIMIT $2`, nil, func(t int64, p, oc, of string) {
			if t < start || tenant != "" && of != tenant {
				return
			}
			if i := at(t); i >= 0 && i < n && o.Attempted[oc] != nil {
				o.Attempted[oc][i]++
			}
			if o.Providers[p] == nil {
				o.Providers[p] = map[string]int64{"sent": 0, "refused": 0, "unknown": 0}
			}
			o.Providers[p][oc]++
		})
		if err != nil {
			return fmt.Errorf("attempts: %w", err)
		}
		return nil
	})
	if err != nil {
		return model.Overview{}, fmt.Errorf("overview: %w", err)
	}
	return o, nil
}

// RetryAs retries a notification as Retry does and records who asked, in
// one write: a retry is never without its audit row, nor a row without its
// retry.
func (s *Store) RetryAs(ctx context.Context, tenant string, id int64, now time.Time, actor string) error {
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		// A person's retry never lifts a suppression: the entry is named
		// in the refusal (SuppressedError), lifted where suppressions are.
		from, err := dialect.Retry(ctx, shared(tx), tenant, id, false, now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notification_audit (notification, at, actor, action, detail) VALUES ($1, $2, $3, $4, $5)`,
			id, ms(now), actor, model.AuditRetry, "was "+from); err != nil {
			return fmt.Errorf("retry notification %d: audit: %w", id, err)
		}
		return nil
	})
}

// notificationExtras reads what Notification shows beyond the row and
// its attempts: the audit log.
func notificationExtras(ctx context.Context, q querier, n *model.Notification) error {
	var err error
	n.Audit, err = sqlstore.Audit(ctx, shared(q), n.ID)
	return err
}

// FeedMemberships lists a tenant's feed memberships by feed and user
// (bytewise: COLLATE "C", whatever the database's collation).
func (s *Store) FeedMemberships(ctx context.Context, tenant string, after model.FeedMembership, limit int) ([]model.FeedMembership, error) {
	out := []model.FeedMembership{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT tenant, feed, "user", joined_seq FROM feed_members
			WHERE ($1 = '' OR tenant = $1)
				AND (tenant COLLATE "C", feed COLLATE "C", "user" COLLATE "C") > ($2 COLLATE "C", $3 COLLATE "C", $4 COLLATE "C")
			ORDER BY tenant COLLATE "C", feed COLLATE "C", "user" COLLATE "C" LIMIT $5`,
			tenant, after.Tenant, after.Feed, after.User, max(limit, 1))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m model.FeedMembership
			if err := rows.Scan(&m.Tenant, &m.Feed, &m.User, &m.JoinedSeq); err != nil {
				return err
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list feed memberships: %w", err)
	}
	return out, nil
}

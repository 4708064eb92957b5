package postgres

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LastJobRun returns when the job's latest run was scheduled for, and
// false if it never ran.
func (s *Store) LastJobRun(ctx context.Context, job string) (time.Time, bool, error) {
	var at *int64
	err := s.read(ctx, func(q querier) error {
		return q.QueryRow(ctx, `SELECT max(scheduled_at) FROM job_runs WHERE job = $1`, job).Scan(&at)
	})
	if err != nil || at == nil {
		return time.Time{}, false, err
	}
	return fromMS(*at), true, nil
}

// Prune deletes what finished before cutoff: final notifications with their
// attempts and receipts, receipts that match no notification, feed items,
// events left with nothing (never one whose fan-out is unfinished or
// quarantined: its other recipients are still to come), expired request
// keys and address marks, and old job runs. It works in writes of at most
// batch rows, so no write holds locks for long, and skips rows another
// transaction holds (a node settling or retrying them) rather than
// waiting: the next prune gets them.
func (s *Store) Prune(ctx context.Context, cutoff, now time.Time, batch int) (model.PruneResult, error) {
	var res model.PruneResult
	if batch <= 0 {
		batch = 500 // a step ends when it deletes fewer than batch rows: 0 would never end
	}
	c := ms(cutoff)
	step := func(count *int64, fn func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error)) error {
		for {
			var n int64
			err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
				tag, err := fn(ctx, tx)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return err
			}
			*count += n
			if n < int64(batch) {
				return nil
			}
		}
	}
	err := step(&res.Notifications, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
		// The rows are locked, so none changes (a retry) between being
		// chosen and being deleted; attempts and receipts go with them, in
		// the same write.
		// Not while a workflow run of its event waits: a later step's
		// condition may read what became of it.
		rows, err := tx.Query(ctx, `SELECT id FROM notifications WHERE status IN (`+sqlstore.PrunableStatuses+`)
			AND updated_at < $1 AND NOT EXISTS (SELECT 1 FROM workflow_runs w WHERE w.event = notifications.event AND w.state = 'waiting')
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, c, batch)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return pgconn.CommandTag{}, err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM attempts WHERE notification = ANY($1)`, ids)
		if err != nil {
			return tag, err
		}
		attempts := tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM notification_audit WHERE notification = ANY($1)`, ids); err != nil {
			return pgconn.CommandTag{}, err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM link_clicks WHERE notification = ANY($1)`, ids); err != nil {
			return pgconn.CommandTag{}, err
		}
		// Not a receipt another notification with the same message id
		// has (its own, or one naming none while others are left).
		if tag, err = tx.Exec(ctx, `DELETE FROM receipts WHERE (provider, message_id) IN
				(SELECT provider, provider_message_id FROM notifications WHERE id = ANY($1) AND provider_message_id IS NOT NULL)
			AND (notification = ANY($1) OR (notification IS NULL AND NOT EXISTS (SELECT 1 FROM notifications n
				WHERE n.provider = receipts.provider AND n.provider_message_id = receipts.message_id AND NOT n.id = ANY($1))))`, ids); err != nil {
			return tag, err
		}
		receipts := tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM notifications WHERE id = ANY($1)`, ids)
		if err == nil {
			// Counted only with the write that commits (a retried write
			// runs this again).
			res.Attempts += attempts
			res.Receipts += receipts
		}
		return tag, err
	})
	if err == nil {
		err = step(&res.Receipts, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			return tx.Exec(ctx, `DELETE FROM receipts WHERE id IN (SELECT r.id FROM receipts r WHERE r.received_at < $1
				AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.provider = r.provider AND n.provider_message_id = r.message_id)
				ORDER BY r.id LIMIT $2)`, c, batch)
		})
	}
	if err == nil {
		res.FeedItems, err = sqlstore.PruneFeedItems(ctx, s.runRead, s.runWrite, c, batch)
	}
	var itemMarks int64
	if err == nil {
		// Marks on items that are gone: they would otherwise be subtracted
		// from unread counts forever.
		err = step(&itemMarks, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			return tx.Exec(ctx, `DELETE FROM feed_item_marks WHERE (tenant, "user", kind, seq) IN
				(SELECT m.tenant, m."user", m.kind, m.seq FROM feed_item_marks m
				 WHERE NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.tenant = m.tenant AND i.seq = m.seq) LIMIT $1)`, batch)
		})
	}
	if err == nil {
		// Finished workflow runs, with what their steps decided; a waiting
		// run keeps its event.
		err = step(&res.Runs, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			tag, err := tx.Exec(ctx, `WITH doomed AS MATERIALIZED (SELECT id FROM workflow_runs
					WHERE updated_at < $1 AND state <> 'waiting' AND NOT EXISTS (`+sqlstore.CarriedByWaitingSQL+`)
					ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED),
				steps AS (DELETE FROM workflow_steps USING doomed WHERE workflow_steps.run = doomed.id),
				batched AS (DELETE FROM workflow_batch_runs USING doomed WHERE workflow_batch_runs.run = doomed.id)
				DELETE FROM workflow_runs USING doomed WHERE workflow_runs.id = doomed.id`, c, batch)
			if err == nil {
				_, err = tx.Exec(ctx, sqlstore.PruneBatchesSQL)
			}
			return tag, err
		})
	}
	if err == nil {
		err = step(&res.Events, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			// Chosen once (a materialized CTE; see PruneRequests).
			return tx.Exec(ctx, `WITH doomed AS MATERIALIZED (SELECT e.id FROM events e WHERE e.created_at < $1
				AND e.expanded >= e.targets AND e.quarantined_at IS NULL
				AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.event = e.id)
				AND NOT EXISTS (SELECT 1 FROM feed_items f WHERE f.event = e.id)
				AND NOT EXISTS (SELECT 1 FROM workflow_runs w WHERE w.event = e.id) ORDER BY e.id LIMIT $2 FOR UPDATE SKIP LOCKED)
				DELETE FROM events USING doomed WHERE events.id = doomed.id`, c, batch)
		})
	}
	if err == nil {
		err = sqlstore.Drain(batch, &res.RequestKeys, func() (int, error) { return s.PruneRequests(ctx, now, batch) })
	}
	if err == nil {
		// Suppressions end at their expiry; a lapsed one is only clutter.
		err = step(&res.Suppressions, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			return tx.Exec(ctx, `DELETE FROM suppressions WHERE (tenant, channel, address) IN
				(SELECT tenant, channel, address FROM suppressions WHERE expires_at <= $1 LIMIT $2)`, ms(now), batch)
		})
	}
	if err == nil {
		err = step(&res.JobRuns, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			// Keep each job's latest run: it anchors the next digest's range.
			return tx.Exec(ctx, `DELETE FROM job_runs WHERE (job, scheduled_at) IN (SELECT job, scheduled_at FROM job_runs r
				WHERE scheduled_at < $1 AND scheduled_at < (SELECT max(scheduled_at) FROM job_runs WHERE job = r.job) LIMIT $2)`, c, batch)
		})
	}
	if err == nil {
		// Throttle slots count until their window ends, then go.
		err = step(&res.ThrottleSlots, func(ctx context.Context, tx pgx.Tx) (pgconn.CommandTag, error) {
			return tx.Exec(ctx, sqlstore.PruneSlotsSQL, ms(now), batch)
		})
	}
	return res, err
}

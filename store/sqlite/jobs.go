package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"os"
	"time"
)

// LastJobRun returns when the job's latest run was scheduled for, and
// false if it never ran.
func (s *Store) LastJobRun(ctx context.Context, job string) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT max(scheduled_at) FROM job_runs WHERE job = ?`, job).Scan(&at); err != nil {
		return time.Time{}, false, err
	}
	return fromMS(at.Int64), at.Valid, nil
}

// Prune deletes what finished before cutoff: final notifications with their
// attempts and receipts, events left with nothing, feed items, expired
// request keys and old job runs. It works in writes of at most batch rows,
// so the writer is never held for long. Deleting a notification forgets
// its key: the caller must keep cutoff older than any retry window (and
// any redelivery a source may still make).
func (s *Store) Prune(ctx context.Context, cutoff, now time.Time, batch int) (model.PruneResult, error) {
	var res model.PruneResult
	if batch <= 0 {
		batch = 500 // a step ends when it deletes fewer than batch rows: 0 would never end
	}
	c := ms(cutoff)
	// after, if set, runs once a step's write has committed (a write may run
	// more than once before it does: counts are taken only then).
	var after func()
	step := func(count *int64, fn func(tx *Tx) (sql.Result, error)) error {
		defer func() { after = nil }()
		for {
			var n int64
			err := s.w.do(ctx, func(tx *Tx) error {
				r, err := fn(tx)
				if err != nil {
					return err
				}
				n, _ = r.RowsAffected()
				return nil
			})
			if err != nil {
				return err
			}
			*count += n
			if after != nil {
				after()
			}
			if n < int64(batch) {
				return nil
			}
		}
	}
	var attempts, receipts int64
	after = func() { res.Attempts += attempts; res.Receipts += receipts }
	err := step(&res.Notifications, func(tx *Tx) (sql.Result, error) {
		// Attempts, receipts and clicks go with their notification, in the same write.
		// Not while a workflow run of its event waits: a later step's
		// condition may read what became of it.
		ids := `SELECT id FROM notifications WHERE status IN (` + sqlstore.PrunableStatuses + `)
			AND updated_at < ?1 AND NOT EXISTS (SELECT 1 FROM workflow_runs w WHERE w.event = notifications.event AND w.state = 'waiting')
			ORDER BY id LIMIT ?2`
		r, err := tx.exec(`DELETE FROM attempts WHERE notification IN (`+ids+`)`, c, batch)
		if err != nil {
			return nil, err
		}
		attempts, _ = r.RowsAffected()
		if _, err := tx.exec(`DELETE FROM notification_audit WHERE notification IN (`+ids+`)`, c, batch); err != nil {
			return nil, err
		}
		if _, err := tx.exec(`DELETE FROM link_clicks WHERE notification IN (`+ids+`)`, c, batch); err != nil {
			return nil, err
		}
		// Not a receipt another notification with the same message id
		// has (its own, or one naming none while others are left).
		if r, err = tx.exec(`DELETE FROM receipts WHERE (provider, message_id) IN
				(SELECT provider, provider_message_id FROM notifications WHERE id IN (`+ids+`) AND provider_message_id IS NOT NULL)
			AND (notification IN (`+ids+`) OR (notification IS NULL AND NOT EXISTS (SELECT 1 FROM notifications n
				WHERE n.provider = receipts.provider AND n.provider_message_id = receipts.message_id AND n.id NOT IN (`+ids+`))))`, c, batch); err != nil {
			return nil, err
		}
		receipts, _ = r.RowsAffected()
		return tx.exec(`DELETE FROM notifications WHERE id IN (`+ids+`)`, c, batch)
	})
	if err == nil {
		res.FeedItems, err = sqlstore.PruneFeedItems(ctx, s.runRead, s.runWrite, c, batch)
	}
	if err == nil {
		// Receipts about no notification (another system's message on a
		// shared provider account, a callback for one pruned before it
		// came): nothing can apply them any more.
		err = step(&res.Receipts, func(tx *Tx) (sql.Result, error) {
			return tx.exec(`DELETE FROM receipts WHERE id IN (SELECT r.id FROM receipts r WHERE r.received_at < ?
				AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.provider = r.provider AND n.provider_message_id = r.message_id)
				ORDER BY r.id LIMIT ?)`, c, batch)
		})
	}
	var itemMarks int64
	if err == nil {
		// Marks on items that are gone: they would otherwise be subtracted
		// from unread counts forever.
		err = step(&itemMarks, func(tx *Tx) (sql.Result, error) {
			return tx.exec(pruneItemMarksSQL, batch)
		})
	}
	if err == nil {
		// Finished workflow runs, with what their steps decided; a waiting
		// run keeps its event.
		err = step(&res.Runs, func(tx *Tx) (sql.Result, error) {
			for _, del := range []string{`DELETE FROM workflow_steps WHERE run IN `, `DELETE FROM workflow_batch_runs WHERE run IN `} {
				if _, err := tx.exec(del+finishedRunsSQL, c, batch); err != nil {
					return nil, err
				}
			}
			r, err := tx.exec(`DELETE FROM workflow_runs WHERE id IN `+finishedRunsSQL, c, batch)
			if err == nil {
				_, err = tx.exec(sqlstore.PruneBatchesSQL)
			}
			return r, err
		})
	}
	if err == nil {
		err = step(&res.Events, func(tx *Tx) (sql.Result, error) {
			// An event whose fan-out is unfinished (or quarantined) stays,
			// whatever became of the notifications it has: the others are
			// still to be written from it.
			return tx.exec(`DELETE FROM events WHERE id IN (SELECT e.id FROM events e WHERE e.created_at < ?
				AND e.expanded >= e.targets AND e.quarantined_at IS NULL
				AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.event = e.id)
				AND NOT EXISTS (SELECT 1 FROM feed_items f WHERE f.event = e.id)
				AND NOT EXISTS (SELECT 1 FROM workflow_runs w WHERE w.event = e.id) ORDER BY e.id LIMIT ?)`, c, batch)
		})
	}
	if err == nil {
		err = sqlstore.Drain(batch, &res.RequestKeys, func() (int, error) { return s.PruneRequests(ctx, now, batch) })
	}
	if err == nil {
		// Suppressions end at their expiry; a lapsed one is only clutter.
		err = step(&res.Suppressions, func(tx *Tx) (sql.Result, error) {
			return tx.exec(`DELETE FROM suppressions WHERE (tenant, channel, address) IN
				(SELECT tenant, channel, address FROM suppressions WHERE expires_at <= ? LIMIT ?)`, ms(now), batch)
		})
	}
	if err == nil {
		err = step(&res.JobRuns, func(tx *Tx) (sql.Result, error) {
			// Keep each job's latest run: it anchors the next digest's range.
			return tx.exec(`DELETE FROM job_runs WHERE (job, scheduled_at) IN (SELECT job, scheduled_at FROM job_runs r
				WHERE scheduled_at < ? AND scheduled_at < (SELECT max(scheduled_at) FROM job_runs WHERE job = r.job) LIMIT ?)`, c, batch)
		})
	}
	if err == nil {
		// Throttle slots count until their window ends, then go.
		err = step(&res.ThrottleSlots, func(tx *Tx) (sql.Result, error) {
			return tx.exec(sqlstore.PruneSlotsSQL, ms(now), batch)
		})
	}
	return res, err
}

// Prune's feed queries (TestFeedQueriesUseIndexes checks their plans).
const (
	// Each tenant's oldest item, and its first item created at or after
	// the cutoff (or the next seq if none): what is below it goes.
	pruneItemMarksSQL = `DELETE FROM feed_item_marks WHERE (tenant, user, kind, seq) IN
		(SELECT m.tenant, m.user, m.kind, m.seq FROM feed_item_marks m
		 WHERE NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.tenant = m.tenant AND i.seq = m.seq) LIMIT ?)`
)

// Backup writes a consistent copy of the database to dest with VACUUM INTO,
// while the relay keeps running (it reads one snapshot). dest must not
// exist.
func (s *Store) Backup(ctx context.Context, dest string) error {
	if _, err := os.Stat(dest); err == nil {
		return fmt.Errorf("backup: %s already exists", dest)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	// Its own connection: VACUUM cannot run in the writer's transactions,
	// and the read pool is query-only.
	db, err := sql.Open("sqlite", dsn(s.path, 10*time.Second, false, ""))
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dest); err != nil {
		return fmt.Errorf("backup to %s: %w", dest, err)
	}
	return nil
}

// finishedRunsSQL (cutoff, batch) chooses the finished runs a prune takes:
// not one whose event a batch carries on while its leader still waits.
const finishedRunsSQL = `(SELECT id FROM workflow_runs INDEXED BY workflow_runs_finished
	WHERE updated_at < ? AND state <> 'waiting' AND NOT EXISTS (` + sqlstore.CarriedByWaitingSQL + `)
	ORDER BY updated_at LIMIT ?)`

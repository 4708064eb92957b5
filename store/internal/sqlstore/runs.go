package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Workflow runs, written once for both stores. A run is written
// in the accept's transaction (InsertRuns, from each driver's fan-out
// write); the stepper reads due runs outside any transaction (DueRuns) and
// decides each in one write transaction that re-reads and locks the run,
// reads the facts its condition needs, and writes the decision: the
// step's notification or in-app item, the step's record and the run's next
// step (DecideSteps). On SQLite the writer serialises that transaction
// with every other write (a mark-read commits before it or after it); on
// PostgreSQL the run's row lock (Dialect.LockRun) keeps two nodes from
// deciding one step, and each read of a fact sees every write committed
// before it began.

const runCols = `r.id, r.tenant, r.event, e.event_id, e.purpose, r.seq, r.recipient, r.type, r.version, r.step, r.attempt, r.state,
	r.due_at, coalesce(r.cancel_key, ''), coalesce(r.reason, ''), r.created_at, r.updated_at, e.targets`

func scanRun(r Row, payload *[]byte) (model.Run, error) {
	var run model.Run
	var due, created, updated int64
	dest := []any{&run.ID, &run.Tenant, &run.EventRow, &run.EventID, &run.Purpose, &run.Seq, &run.Recipient, &run.Type,
		&run.Version, &run.Step, &run.Attempt, &run.State, &due, &run.CancelKey, &run.Reason, &created, &updated, &run.Targets}
	if payload != nil {
		dest = append(dest, payload) // text on SQLite, bytea on PostgreSQL
	}
	if err := r.Scan(dest...); err != nil {
		return run, err
	}
	run.DueAt, run.CreatedAt, run.UpdatedAt = FromMS(due), FromMS(created), FromMS(updated)
	return run, nil
}

// InsertRuns writes the runs of an event's fan-out from position from on,
// in q, the accept's (or a fan-out chunk's) write transaction: each due
// now, at its first step. A run already there (a chunk written twice)
// is left as it is.
func InsertRuns(ctx context.Context, q Querier, eventRow int64, tenant, typ string, from int, chunk []model.Target, now time.Time) error {
	for i, tg := range chunk {
		if tg.Run == nil {
			return fmt.Errorf("insert runs of event %d: target %d (%s) is not a run", eventRow, from+i, tg.Recipient)
		}
		if _, err := q.Exec(ctx, `INSERT INTO workflow_runs (tenant, event, seq, recipient, type, version, cancel_key, due_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $8) ON CONFLICT DO NOTHING`,
			tenant, eventRow, from+i, tg.Recipient, typ, tg.Run.Version, NullStr(tg.Run.CancelKey), MS(now)); err != nil {
			return fmt.Errorf("insert the workflow run of event %d for %s: %w", eventRow, tg.Recipient, err)
		}
	}
	return nil
}

// CancelRuns cancels tenant's waiting runs whose cancel key is key, in q,
// a write transaction, recording why; it returns how many it cancelled.
func CancelRuns(ctx context.Context, q Querier, tenant, key, why string, now time.Time) (int64, error) {
	n, err := q.Exec(ctx, `UPDATE workflow_runs SET state = 'cancelled', reason = $3, updated_at = $4
		WHERE tenant = $1 AND cancel_key = $2 AND state = 'waiting'`, tenant, key, why, MS(now))
	if err != nil {
		return 0, fmt.Errorf("cancel the workflow runs of key %q: %w", key, err)
	}
	return n, nil
}

// DueRuns reads up to limit waiting runs due by now, soonest due first,
// each with its event's payload. It locks nothing: DecideSteps checks
// each run again in the deciding transaction.
func DueRuns(ctx context.Context, q Querier, now time.Time, limit int) ([]model.Run, error) {
	rows, err := q.Query(ctx, `SELECT `+runCols+`, e.payload FROM workflow_runs r JOIN events e ON e.id = r.event
		WHERE r.state = 'waiting' AND r.due_at <= $1 ORDER BY r.due_at, r.id LIMIT $2`, MS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due workflow runs: %w", err)
	}
	defer rows.Close()
	var out []model.Run
	for rows.Next() {
		var payload []byte
		run, err := scanRun(rows, &payload)
		if err != nil {
			return nil, fmt.Errorf("due workflow runs: %w", err)
		}
		run.Payload = payload
		out = append(out, run)
	}
	return out, rows.Err()
}

// WaitingRuns counts the waiting runs and says when the soonest is due.
func WaitingRuns(ctx context.Context, q Querier) (n int64, next time.Time, err error) {
	var due *int64
	if err := q.QueryRow(ctx, `SELECT count(*), min(due_at) FROM workflow_runs WHERE state = 'waiting'`).Scan(&n, &due); err != nil {
		return 0, next, fmt.Errorf("waiting workflow runs: %w", err)
	}
	if due != nil {
		next = FromMS(*due)
	}
	return n, next, nil
}

// DecideSteps decides the step of each plan's run, in q, one write
// transaction: a run that is no longer waiting at the plan's step and due
// (another node decided it, it was cancelled, or a PostgreSQL node holds
// it now) is left alone; for the others the facts the step needs are
// read, decide is called, and its decision is written. It returns how
// many steps it decided (a Wait is not a decision).
func (d *Dialect) DecideSteps(ctx context.Context, q Querier, plans []model.StepPlan, decide model.StepDecider, now time.Time) (int, error) {
	decided := 0
	var windows []slotWindow
	for _, p := range plans {
		if th := p.Throttle; th != nil {
			windows = append(windows, slotWindow{p.Run.Tenant, p.Run.Recipient, th.Window})
		}
	}
	if err := d.lockSlots(ctx, q, windows); err != nil {
		return 0, err
	}
	for _, p := range plans {
		var step, attempt int
		var state string
		var due int64
		err := q.QueryRow(ctx, `SELECT step, attempt, state, due_at FROM workflow_runs WHERE id = $1`+d.LockRun, p.Run.ID).Scan(&step, &attempt, &state, &due)
		switch {
		case IsNoRows(err):
			continue // locked by another node's decision
		case err != nil:
			return decided, fmt.Errorf("lock workflow run %d: %w", p.Run.ID, err)
		case state != model.RunWaiting || step != p.Run.Step || attempt != p.Run.Attempt || due > MS(now):
			continue
		}
		facts := make([]model.StepFact, len(p.Needs))
		for i, s := range p.Needs {
			if facts[i], err = stepFact(ctx, q, p.Run, s); err != nil {
				return decided, err
			}
		}
		if p.Throttle != nil {
			if p.Slots, err = countSlots(ctx, q, slotWindow{p.Run.Tenant, p.Run.Recipient, p.Throttle.Window}, now.Add(-p.Throttle.Per)); err != nil {
				return decided, fmt.Errorf("step %d of workflow run %d: %w", p.Run.Step, p.Run.ID, err)
			}
		}
		// A batch step is decided against its batch as read, locked, here;
		// an opener that finds the open batch taken since (another node
		// opened it) reads it again and decides once more: it joins.
		for try := 1; ; try++ {
			if p.Batched {
				if p.Batch, err = d.batchFact(ctx, q, p.Run); err != nil {
					return decided, err
				}
			}
			dec := decide(p, facts)
			if !dec.Wait.IsZero() {
				if _, err := q.Exec(ctx, `UPDATE workflow_runs SET due_at = $2, updated_at = $3 WHERE id = $1`,
					p.Run.ID, MS(dec.Wait), MS(now)); err != nil {
					return decided, fmt.Errorf("defer workflow run %d: %w", p.Run.ID, err)
				}
				break
			}
			err = d.writeDecision(ctx, q, p, FromMS(due), dec, now)
			if errors.Is(err, errBatchTaken) && try < 3 {
				continue
			}
			if err != nil {
				return decided, err
			}
			decided++
			break
		}
	}
	return decided, nil
}

func (d *Dialect) writeDecision(ctx context.Context, q Querier, p model.StepPlan, due time.Time, dec model.StepDecision, now time.Time) error {
	run := p.Run
	if dec.Batch != "" {
		more, err := writeBatch(ctx, q, run, p.Batch, dec, now)
		if err != nil {
			return err
		}
		dec.Reason += more
	}
	if dec.TakeSlot {
		// The window's lock is held (lockSlots) since the count the
		// decision read: no other taker counted in between.
		w := slotWindow{run.Tenant, run.Recipient, p.Throttle.Window}
		if err := insertSlot(ctx, q, fmt.Sprintf("r%d.%d", run.ID, run.Step), w, now, p.Throttle.Per); err != nil {
			return err
		}
	}
	var note, seq *int64
	if tg := dec.Notification; tg != nil {
		id, err := insertStepNotification(ctx, q, run, dec.Seq, *tg, now)
		if err != nil {
			return err
		}
		note = &id
	}
	if dec.Feed != "" {
		s, err := postStepItem(ctx, q, run, dec.Feed, dec.FeedMessage, dec.FeedShared, now)
		if err != nil {
			return err
		}
		seq = &s
	}
	if dec.Outcome == "" && dec.Amend != "" && run.Attempt > 0 {
		if _, err := q.Exec(ctx, `UPDATE workflow_steps SET reason = reason || $4 WHERE run = $1 AND step = $2 AND attempt = $3`,
			run.ID, run.Step, run.Attempt-1, dec.Amend); err != nil {
			return fmt.Errorf("record step %d of workflow run %d: %w", run.Step, run.ID, err)
		}
	}
	if dec.Outcome != "" {
		if _, err := q.Exec(ctx, `INSERT INTO workflow_steps (run, step, attempt, step_id, outcome, reason, due_at, decided_at, notification, feed_seq)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			run.ID, run.Step, dec.Attempt, dec.StepID, dec.Outcome, dec.Reason, MS(due), MS(now), note, seq); err != nil {
			return fmt.Errorf("record step %d of workflow run %d: %w", run.Step, run.ID, err)
		}
	}
	state, reason, next := model.RunWaiting, any(nil), dec.NextDue
	if dec.Done {
		state, reason, next = model.RunDone, dec.RunReason, now
	}
	if _, err := q.Exec(ctx, `UPDATE workflow_runs SET step = $2, attempt = $3, state = $4, due_at = $5, reason = $6, updated_at = $7 WHERE id = $1`,
		run.ID, dec.Next, dec.NextAttempt, state, MS(next), reason, MS(now)); err != nil {
		return fmt.Errorf("advance workflow run %d: %w", run.ID, err)
	}
	return nil
}

// insertStepNotification writes a step's notification, pending and due
// now, and returns its id (that of the one already there, should its key
// be taken: the unique key decides).
func insertStepNotification(ctx context.Context, q Querier, run model.Run, seq int, tg model.Target, now time.Time) (int64, error) {
	t := MS(now)
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO notifications (key, event, seq, tenant, type, recipient, channel, address, address_key,
			next_attempt_at, cycle_started_at, created_at, updated_at, message)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $10, $10, $11)
		ON CONFLICT DO NOTHING RETURNING id`,
		tg.Key, run.EventRow, seq, run.Tenant, run.Type, run.Recipient, tg.Channel, tg.Address, NullStr(tg.AddressKey), t, tg.Message).Scan(&id)
	if IsNoRows(err) {
		err = q.QueryRow(ctx, `SELECT id FROM notifications WHERE key = $1`, tg.Key).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("write the notification of step %d of workflow run %d: %w", run.Step, run.ID, err)
	}
	return id, nil
}

// postStepItem posts the run's event to feed (the recipient's own) with
// msg as the item's message, numbered from the tenant's counter as an
// accept's items are (on PostgreSQL the counter's row stays locked until
// commit, so the tenant's items still become visible in seq order). A feed
// that holds the event already keeps its item, and that item's seq is
// returned.
func postStepItem(ctx context.Context, q Querier, run model.Run, feed string, msg []byte, shared int, now time.Time) (int64, error) {
	var seq int64
	err := q.QueryRow(ctx, `SELECT seq FROM feed_items WHERE event = $1 AND feed = $2`, run.EventRow, feed).Scan(&seq)
	if err == nil {
		return seq, nil
	}
	if !IsNoRows(err) {
		return 0, fmt.Errorf("read the item of step %d of workflow run %d: %w", run.Step, run.ID, err)
	}
	if err := q.QueryRow(ctx, `INSERT INTO feed_counters (tenant, seq) VALUES ($1, 1)
		ON CONFLICT (tenant) DO UPDATE SET seq = feed_counters.seq + 1 RETURNING seq`, run.Tenant).Scan(&seq); err != nil {
		return 0, fmt.Errorf("number the item of step %d of workflow run %d: %w", run.Step, run.ID, err)
	}
	// copies tells the unread count to look for a second copy of the event
	// among a user's feeds. Other recipients' own feeds (@…) are never a
	// user's, so only the event's items in shared feeds ("*", topics: the
	// accept posted those, and the relay says how many) count, and a large
	// audience's own items do not make each post rewrite every earlier one.
	copies := int64(shared) + 1
	if _, err := q.Exec(ctx, `INSERT INTO feed_items (tenant, seq, feed, pos, event, copies, created_at, message)
		VALUES ($1, $2, $3, coalesce((SELECT max(pos) FROM feed_items WHERE tenant = $1 AND feed = $3), 0) + 1, $4, $5, $6, $7)`,
		run.Tenant, seq, feed, run.EventRow, copies, MS(now), msg); err != nil {
		return 0, fmt.Errorf("post step %d of workflow run %d to feed %q: %w", run.Step, run.ID, feed, err)
	}
	if err := FeedChanged(ctx, q, run.Tenant); err != nil {
		return 0, err
	}
	if shared > 0 {
		if _, err := q.Exec(ctx, `UPDATE feed_items SET copies = $2 WHERE event = $1 AND feed NOT LIKE '@%' AND copies < $2`,
			run.EventRow, copies); err != nil {
			return 0, fmt.Errorf("count the items of event %d: %w", run.EventRow, err)
		}
	}
	return seq, nil
}

// stepFact reads what step s of run left: its record, its notification's
// status and clicks, and its in-app item's marks for the run's recipient.
func stepFact(ctx context.Context, q Querier, run model.Run, s int) (model.StepFact, error) {
	f := model.StepFact{Step: s}
	var note, seq *int64
	var next int64
	var readOne, dismissedOne bool
	// One statement: the step's record (an undelivered fallback's is what
	// its last channel tried left), its notification's status (none when
	// pruned: Status stays "", which no condition reads as any state), its
	// in-app item's own marks and whether a tracked link was clicked.
	err := q.QueryRow(ctx, `SELECT s.outcome, s.notification, s.feed_seq, coalesce(n.status, ''), coalesce(n.next_attempt_at, 0),
			EXISTS (SELECT 1 FROM feed_item_marks m WHERE m.tenant = $3 AND m."user" = $4 AND m.kind = 'read' AND m.seq = s.feed_seq),
			EXISTS (SELECT 1 FROM feed_item_marks m WHERE m.tenant = $3 AND m."user" = $4 AND m.kind = 'dismissed' AND m.seq = s.feed_seq),
			EXISTS (SELECT 1 FROM link_clicks c WHERE c.notification = s.notification)
		FROM workflow_steps s LEFT JOIN notifications n ON n.id = s.notification
		WHERE s.run = $1 AND s.step = $2 ORDER BY s.attempt DESC LIMIT 1`,
		run.ID, s, run.Tenant, run.Recipient).Scan(&f.Outcome, &note, &seq, &f.Status, &next, &readOne, &dismissedOne, &f.Clicked)
	if IsNoRows(err) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read step %d of workflow run %d: %w", s, run.ID, err)
	}
	if note != nil {
		f.NextAttemptAt = FromMS(next)
	}
	if seq != nil {
		f.FeedSeq = *seq
		read, dismissed, err := marks(ctx, q, run.Tenant, run.Recipient)
		if err != nil {
			return f, err
		}
		f.Read, f.Dismissed = f.FeedSeq <= read || readOne, f.FeedSeq <= dismissed || dismissedOne
	}
	return f, nil
}

// Runs lists a tenant's runs by f, in id order.
func Runs(ctx context.Context, q Querier, f model.RunFilter) ([]model.Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := q.Query(ctx, `SELECT `+runCols+` FROM workflow_runs r JOIN events e ON e.id = r.event
		WHERE ($1 = '' OR r.tenant = $1) AND ($2 = '' OR r.state = $2) AND ($3 = '' OR e.event_id = $3) AND r.id > $4
		  AND ($6 = 0 OR r.id = $6)
		  AND ($7 = 0 OR r.id IN (SELECT s.run FROM workflow_steps s WHERE s.notification = $7))
		ORDER BY r.id LIMIT $5`, f.Tenant, f.State, f.EventID, f.AfterID, limit, f.ID, f.Notification)
	if err != nil {
		return nil, fmt.Errorf("list workflow runs: %w", err)
	}
	defer rows.Close()
	var out []model.Run
	for rows.Next() {
		run, err := scanRun(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("list workflow runs: %w", err)
		}
		out = append(out, run)
	}
	return out, rows.Err()
}

// RunSteps lists what was decided at each step of a run, in step order.
func RunSteps(ctx context.Context, q Querier, run int64) ([]model.RunStep, error) {
	rows, err := q.Query(ctx, `SELECT step, attempt, step_id, outcome, reason, due_at, decided_at, coalesce(notification, 0), coalesce(feed_seq, 0)
		FROM workflow_steps WHERE run = $1 ORDER BY step, attempt`, run)
	if err != nil {
		return nil, fmt.Errorf("steps of workflow run %d: %w", run, err)
	}
	defer rows.Close()
	var out []model.RunStep
	for rows.Next() {
		var s model.RunStep
		var due, decided int64
		if err := rows.Scan(&s.Step, &s.Attempt, &s.StepID, &s.Outcome, &s.Reason, &due, &decided, &s.Notification, &s.FeedSeq); err != nil {
			return nil, fmt.Errorf("steps of workflow run %d: %w", run, err)
		}
		s.DueAt, s.DecidedAt = FromMS(due), FromMS(decided)
		out = append(out, s)
	}
	return out, rows.Err()
}

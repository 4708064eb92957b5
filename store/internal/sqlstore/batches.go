package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Batch steps, written once for both stores. The first of a recipient's
// runs (of one workflow version) to reach a batch step opens a batch and
// leads it; the runs that reach the step while it is open join it. The
// open batch is one row by the partial unique index workflow_batches_open:
// an opener that finds the index taken (another node opened it first)
// reads the batch again and joins it. Closing marks the runs still waiting
// in it carried, and the leader goes on with their events (BatchItems);
// the others end when they come due. A join that fills the batch closes it
// then, for its leader. Every change to a batch reads it
// locked first (Dialect.LockBatch), so joins, the close and a takeover
// decide one after the other.

// errBatchTaken is an opener's insert that found the open batch taken:
// DecideSteps reads the batch again and decides once more.
var errBatchTaken = errors.New("the open batch was taken")

const batchFactCols = `b.id, b.leader, coalesce(r.state, ''), b.state, b.size, b.closes_at`

func scanBatchFact(row Row) (*model.BatchFact, error) {
	var f model.BatchFact
	var leaderState, state string
	var closes int64
	if err := row.Scan(&f.ID, &f.Leader, &leaderState, &state, &f.Size, &closes); err != nil {
		if IsNoRows(err) {
			return nil, nil
		}
		return nil, err
	}
	f.LeaderWaiting, f.Open, f.ClosesAt = leaderState == model.RunWaiting, state == "open", FromMS(closes)
	return &f, nil
}

// batchFact reads, locked, the batch a batch step's run may join (the
// open one of its recipient, at attempt 0) or the one it is in.
func (d *Dialect) batchFact(ctx context.Context, q Querier, run model.Run) (*model.BatchFact, error) {
	var f *model.BatchFact
	var err error
	if run.Attempt == 0 {
		f, err = scanBatchFact(q.QueryRow(ctx, `SELECT `+batchFactCols+` FROM workflow_batches b LEFT JOIN workflow_runs r ON r.id = b.leader
			WHERE b.tenant = $1 AND b.type = $2 AND b.version = $3 AND b.recipient = $4 AND b.step = $5 AND b.state = 'open'`+d.LockBatch,
			run.Tenant, run.Type, run.Version, run.Recipient, run.Step))
	} else {
		f, err = scanBatchFact(q.QueryRow(ctx, `SELECT `+batchFactCols+` FROM workflow_batches b LEFT JOIN workflow_runs r ON r.id = b.leader
			WHERE b.id = (SELECT max(m.batch) FROM workflow_batch_runs m WHERE m.run = $1)`+d.LockBatch, run.ID))
	}
	if err != nil {
		return nil, fmt.Errorf("read the batch of workflow run %d: %w", run.ID, err)
	}
	return f, nil
}

// writeBatch writes a decision's batch operation, before the rest of the
// decision; it returns what to add to the step's reason.
func writeBatch(ctx context.Context, q Querier, run model.Run, b *model.BatchFact, dec model.StepDecision, now time.Time) (string, error) {
	switch dec.Batch {
	case model.BatchOpen:
		var id int64
		err := q.QueryRow(ctx, `INSERT INTO workflow_batches (tenant, type, version, recipient, step, leader, state, size, opened_at, closes_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'open', 1, $7, $8) ON CONFLICT DO NOTHING RETURNING id`,
			run.Tenant, run.Type, run.Version, run.Recipient, run.Step, run.ID, MS(now), MS(now.Add(dec.Window))).Scan(&id)
		if IsNoRows(err) {
			return "", errBatchTaken
		}
		if err != nil {
			return "", fmt.Errorf("open a batch for workflow run %d: %w", run.ID, err)
		}
		if _, err := q.Exec(ctx, `INSERT INTO workflow_batch_runs (batch, run) VALUES ($1, $2)`, id, run.ID); err != nil {
			return "", fmt.Errorf("open a batch for workflow run %d: %w", run.ID, err)
		}
		return "", nil
	case model.BatchJoin:
		closes := MS(b.ClosesAt)
		if dec.Window > 0 {
			closes = MS(now.Add(dec.Window)) // a batch left by a cancelled leader: a window anew
		}
		if dec.Fill {
			closes = MS(now)
			// The leader closes it at once; its run is not being decided
			// (it is due only when the window ends).
			if _, err := q.Exec(ctx, `UPDATE workflow_runs SET due_at = $2, updated_at = $2 WHERE id = $1 AND state = 'waiting' AND due_at > $2`,
				b.Leader, MS(now)); err != nil {
				return "", fmt.Errorf("wake the leader of batch %d: %w", b.ID, err)
			}
		}
		if _, err := q.Exec(ctx, `UPDATE workflow_batches SET size = size + 1, closes_at = $2 WHERE id = $1`, b.ID, closes); err != nil {
			return "", fmt.Errorf("join batch %d: %w", b.ID, err)
		}
		if _, err := q.Exec(ctx, `INSERT INTO workflow_batch_runs (batch, run) VALUES ($1, $2) ON CONFLICT DO NOTHING`, b.ID, run.ID); err != nil {
			return "", fmt.Errorf("join batch %d: %w", b.ID, err)
		}
		if dec.Fill {
			// Full: closed now, for its leader, so that the next run to
			// reach the step opens a batch of its own.
			return closeBatch(ctx, q, b.ID, b.Leader, now)
		}
		return "", nil
	case model.BatchClose:
		return closeBatch(ctx, q, b.ID, run.ID, now)
	}
	return "", nil
}

// closeBatch closes batch id, to be led on by leader: the runs still
// waiting in it are carried. It returns what to add to the reason.
func closeBatch(ctx context.Context, q Querier, id, leader int64, now time.Time) (string, error) {
	n, err := q.Exec(ctx, `UPDATE workflow_batch_runs SET carried = 1 WHERE batch = $1
		AND EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = workflow_batch_runs.run AND r.state = 'waiting')`, id)
	if err != nil {
		return "", fmt.Errorf("close batch %d: %w", id, err)
	}
	if _, err := q.Exec(ctx, `UPDATE workflow_batches SET state = 'closed', closed_at = $2, leader = $3, size = $4 WHERE id = $1`,
		id, MS(now), leader, n); err != nil {
		return "", fmt.Errorf("close batch %d: %w", id, err)
	}
	return fmt.Sprintf("; it carries %d event%s", n, map[bool]string{true: "", false: "s"}[n == 1]), nil
}

// BatchItems lists the events of the batch run last closed and leads
// on, in the order their runs were written: none when it leads none.
func BatchItems(ctx context.Context, q Querier, run int64) ([]model.BatchItem, error) {
	items, err := All(ctx, q, func(r Rows) (model.BatchItem, error) {
		var it model.BatchItem
		return it, r.Scan(&it.EventID, &it.Type, &it.Payload)
	}, `SELECT e.event_id, e.type, e.payload FROM workflow_batch_runs m JOIN workflow_runs r ON r.id = m.run JOIN events e ON e.id = r.event
		WHERE m.batch = (SELECT max(id) FROM workflow_batches WHERE leader = $1 AND state = 'closed') AND m.carried = 1
		ORDER BY r.id`, run)
	if err != nil {
		return nil, fmt.Errorf("read the batch workflow run %d carries: %w", run, err)
	}
	return items, nil
}

// CarriedByWaitingSQL is true of a run (workflow_runs in the enclosing
// query) whose event a closed batch carries on while the batch's leader
// still waits: a prune keeps it, and so its event, for the leader's next
// steps to read.
const CarriedByWaitingSQL = `SELECT 1 FROM workflow_batch_runs m JOIN workflow_batches b ON b.id = m.batch
	JOIN workflow_runs l ON l.id = b.leader WHERE m.run = workflow_runs.id AND m.carried = 1 AND l.state = 'waiting'`

// PruneBatchesSQL deletes the closed batches no run is in any more (a
// prune took their runs).
const PruneBatchesSQL = `DELETE FROM workflow_batches WHERE state = 'closed'
	AND NOT EXISTS (SELECT 1 FROM workflow_batch_runs m WHERE m.batch = workflow_batches.id)`

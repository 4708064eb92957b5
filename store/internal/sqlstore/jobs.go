package sqlstore

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// BeginJobRun records, in q, a write transaction, the start of a run, or finds it: a run repeated
// after a restart, or started by another node at the same moment, is the
// same row (the second insert waits for the first's commit, then does
// nothing). The run fixes, at its first start, the newest item of tenant's
// feed sequence (a digest covers the items after the previous run's and up
// to its own); a repeat asked for another tenant is an error, as its range
// would be in another sequence.
func BeginJobRun(ctx context.Context, q Querier, job, tenant string, at, now time.Time) (model.JobRun, error) {
	run := model.JobRun{Job: job, ScheduledAt: at}
	err := func() error {
		var upper, legacy int64
		err := q.QueryRow(ctx, `SELECT seq, legacy_seq FROM feed_counters WHERE tenant = $1`, tenant).Scan(&upper, &legacy)
		if err != nil && !IsNoRows(err) {
			return err
		}
		// A run begun after a later run of the job (caught up by hand)
		// covers nothing: the later run already covered everything after
		// the run before this one. Its range is empty, so no item is in two
		// digests.
		var later bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_runs WHERE job = $1 AND scheduled_at > $2 AND (tenant = $3 OR tenant IS NULL))`,
			job, MS(at), tenant).Scan(&later); err != nil {
			return err
		}
		if later {
			var prevUpper int64
			var prevTenant *string
			err := q.QueryRow(ctx, `SELECT tenant, upper_seq FROM job_runs WHERE job = $1 AND scheduled_at < $2 AND (tenant = $3 OR tenant IS NULL)
				ORDER BY scheduled_at DESC LIMIT 1`, job, MS(at), tenant).Scan(&prevTenant, &prevUpper)
			switch {
			case IsNoRows(err):
				prevUpper = 0
			case err != nil:
				return err
			case prevTenant == nil:
				prevUpper = min(prevUpper, legacy)
			}
			upper = prevUpper
		}
		n, err := q.Exec(ctx, `INSERT INTO job_runs (job, scheduled_at, tenant, upper_seq, started_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT DO NOTHING`, job, MS(at), tenant, upper, MS(now))
		if err != nil {
			return fmt.Errorf("begin run of %s: %w", job, err)
		}
		run.Repeat = n == 0
		var runTenant *string
		if err := q.QueryRow(ctx, `SELECT tenant, upper_seq, status FROM job_runs WHERE job = $1 AND scheduled_at = $2`, job, MS(at)).
			Scan(&runTenant, &run.UpperSeq, &run.Status); err != nil {
			return err
		}
		if runTenant != nil && *runTenant != tenant {
			return fmt.Errorf("run of %s scheduled for %s began for tenant %q, not %q", job, at.UTC().Format(time.RFC3339), *runTenant, tenant)
		}
		// A run from before feed sequences were per tenant (migration 0007)
		// fixed a global seq: of this tenant's items it covered those up to
		// the tenant's counter then.
		if runTenant == nil {
			run.UpperSeq = min(run.UpperSeq, legacy)
		}
		var prevTenant *string
		err = q.QueryRow(ctx, `SELECT tenant, upper_seq FROM job_runs WHERE job = $1 AND scheduled_at < $2 AND (tenant = $3 OR tenant IS NULL)
			ORDER BY scheduled_at DESC LIMIT 1`, job, MS(at), tenant).Scan(&prevTenant, &run.PrevUpperSeq)
		if IsNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if prevTenant == nil {
			run.PrevUpperSeq = min(run.PrevUpperSeq, legacy)
		}
		return nil
	}()
	return run, err
}

// FinishJobRun records how a run ended, in q, a write transaction.
func FinishJobRun(ctx context.Context, q Querier, job string, at time.Time, runErr error, now time.Time) error {
	status, detail := "done", ""
	if runErr != nil {
		status, detail = "failed", runErr.Error()
	}
	_, err := q.Exec(ctx, `UPDATE job_runs SET status = $1, detail = $2, finished_at = $3 WHERE job = $4 AND scheduled_at = $5`,
		status, NullStr(detail), MS(now), job, MS(at))
	return err
}

// BeginJobRun records the start of a run, or finds it (see the function
// BeginJobRun).
func (m Methods) BeginJobRun(ctx context.Context, job, tenant string, at, now time.Time) (model.JobRun, error) {
	return get(ctx, m.Write, func(q Querier) (model.JobRun, error) { return BeginJobRun(ctx, q, job, tenant, at, now) })
}

// FinishJobRun records how a run ended.
func (m Methods) FinishJobRun(ctx context.Context, job string, at time.Time, runErr error, now time.Time) error {
	return m.Write(ctx, func(q Querier) error { return FinishJobRun(ctx, q, job, at, runErr, now) })
}

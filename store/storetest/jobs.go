package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// jobRuns are the behaviours the README's "Schedules, digests, retention"
// states of runs: a run is its job and scheduled time, its range of the
// tenant's feed items is fixed at its first start, and consecutive runs
// cover adjacent ranges, so an item is in exactly one digest.
func jobRuns(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "ARepeatIsTheSameRun", run: testJobRepeat},
		{name: "ConcurrentBeginsAreOneRun", run: testJobConcurrentBegins},
		{name: "ConsecutiveRunsAreAdjacent", run: testJobRunsAdjacent},
		{name: "RangeInTheTenantsSequence", run: testJobTenantSequence},
		{name: "FinishRecordsHowARunEnded", run: testJobFinish},
		{name: "LastRunIsTheLatestScheduled", run: testLastJobRun},
		{name: "PruneKeepsEachJobsLatestRun", run: testJobPrune},
		{name: "ARunBegunLateCoversNoItemTwice", run: testJobBegunLate},
	})
}

// hour is the suite's clock plus n hours: runs are scheduled on the hour.
func hour(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }

func begin(t *testing.T, s store.Store, job, tenant string, at, now time.Time) model.JobRun {
	t.Helper()
	run, err := s.BeginJobRun(t.Context(), job, tenant, at, now)
	if err != nil {
		t.Fatalf("begin %s at %s for %s: %v", job, at, tenant, err)
	}
	return run
}

func finish(t *testing.T, s store.Store, job string, at time.Time, runErr error, now time.Time) {
	t.Helper()
	if err := s.FinishJobRun(t.Context(), job, at, runErr, now); err != nil {
		t.Fatalf("finish %s at %s: %v", job, at, err)
	}
}

// wantRun checks a run's identity, range, status and whether it was begun
// before.
func wantRun(t *testing.T, what string, got model.JobRun, job string, at time.Time, prev, upper int64, status string, repeat bool) {
	t.Helper()
	if got.Job != job || !got.ScheduledAt.Equal(at) || got.PrevUpperSeq != prev || got.UpperSeq != upper ||
		got.Status != status || got.Repeat != repeat {
		t.Errorf("%s: %+v; want %s at %s covering (%d, %d], %s, repeat %v", what, got, job, at, prev, upper, status, repeat)
	}
}

// A run is its job and scheduled time: begun again (after a restart, by a
// second instance, by hand) it is the same run, Repeat set, and covers the
// same items, fixed at its first start however many came since; its
// status follows FinishJobRun. The same run asked for another tenant is
// refused (its range is in acme's sequence) with an error naming acme, and
// changes nothing.
func testJobRepeat(t *testing.T, s store.Store) {
	for i := range 3 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed)
	}
	at := hour(1)
	wantRun(t, "the first start", begin(t, s, "digest", "acme", at, at), "digest", at, 0, 3, "running", false)
	post(t, s, t0, "acme", "late", model.TenantFeed) // 4
	wantRun(t, "begun again", begin(t, s, "digest", "acme", at, at.Add(time.Minute)), "digest", at, 0, 3, "running", true)
	_, err := s.BeginJobRun(t.Context(), "digest", "beta", at, at.Add(2*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "acme") {
		t.Errorf("the same run for beta: %v; want an error naming the tenant it began for, acme", err)
	}
	finish(t, s, "digest", at, nil, at.Add(3*time.Minute))
	wantRun(t, "begun after it finished", begin(t, s, "digest", "acme", at, at.Add(4*time.Minute)), "digest", at, 0, 3, "done", true)
}

// Instances that begin the same run at once (two overlapping serve
// processes, serve and cron run) while items arrive get one run: one of
// them begins it, the others find it begun, and all get the same range.
func testJobConcurrentBegins(t *testing.T, s store.Store) {
	for i := range 5 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed)
	}
	const n, posts = 8, 40
	start := make(chan struct{})
	runs := make([]model.JobRun, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		for i := range posts {
			if err := postErr(t, s, "acme", fmt.Sprintf("during%d", i), model.TenantFeed); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := range n {
		wg.Go(func() {
			<-start
			runs[i], errs[i] = s.BeginJobRun(t.Context(), "digest", "acme", hour(1), hour(1))
		})
	}
	close(start)
	wg.Wait()
	began := 0
	for i, r := range runs {
		if errs[i] != nil {
			t.Fatalf("begin %d: %v", i, errs[i])
		}
		if !r.Repeat {
			began++
		}
		if r.UpperSeq != runs[0].UpperSeq || r.PrevUpperSeq != 0 {
			t.Errorf("begin %d covers (%d, %d], begin 0 (%d, %d]: one run, two ranges", i, r.PrevUpperSeq, r.UpperSeq, 0, runs[0].UpperSeq)
		}
	}
	if began != 1 {
		t.Errorf("%d of %d begins at once say they began the run, want 1", began, n)
	}
	if up := runs[0].UpperSeq; up < 5 || up > 5+posts {
		t.Errorf("the run covers up to %d: not an item number of acme's then (5 to %d)", up, 5+posts)
	}
	wantRun(t, "begun once more, later", begin(t, s, "digest", "acme", hour(1), hour(2)), "digest", hour(1), 0, runs[0].UpperSeq, "running", true)
}

// Consecutive runs of a job cover adjacent ranges of the tenant's items
// (PrevUpperSeq is the previous run's UpperSeq), whether the previous run
// finished, failed or is still running, so an item is in exactly one
// digest; a repeat of an earlier run keeps its range. Another job's runs
// are its own.
func testJobRunsAdjacent(t *testing.T, s store.Store) {
	next := 0
	postN := func(n int) {
		for range n {
			post(t, s, t0, "acme", evtID(next), model.TenantFeed)
			next++
		}
	}
	postN(2)
	wantRun(t, "run 0", begin(t, s, "digest", "acme", hour(0), hour(0)), "digest", hour(0), 0, 2, "running", false)
	finish(t, s, "digest", hour(0), nil, hour(0))
	postN(3)
	wantRun(t, "run 1", begin(t, s, "digest", "acme", hour(1), hour(1)), "digest", hour(1), 2, 5, "running", false)
	finish(t, s, "digest", hour(1), errors.New("ben's digest refused: no address for email"), hour(1))
	wantRun(t, "run 2, nothing new", begin(t, s, "digest", "acme", hour(2), hour(2)), "digest", hour(2), 5, 5, "running", false)
	postN(1)
	wantRun(t, "run 3, run 2 still running", begin(t, s, "digest", "acme", hour(3), hour(3)), "digest", hour(3), 5, 6, "running", false)
	wantRun(t, "run 1 again", begin(t, s, "digest", "acme", hour(1), hour(4)), "digest", hour(1), 2, 5, "failed", true)
	wantRun(t, "another job's first run", begin(t, s, "weekly", "acme", hour(1), hour(4)), "weekly", hour(1), 0, 6, "running", false)
	wantRun(t, "another job's next run", begin(t, s, "weekly", "acme", hour(3), hour(4)), "weekly", hour(3), 6, 6, "running", false)
}

// A run's range is in its own tenant's item sequence: another tenant's
// volume neither widens nor shifts it, and a job that digests another
// tenant starts there from that tenant's first item, and its next run for
// the first tenant goes on from that tenant's previous run.
func testJobTenantSequence(t *testing.T, s store.Store) {
	for i := range 3 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed)
	}
	for i := range 10 {
		post(t, s, t0, "beta", evtID(i), model.TenantFeed)
	}
	wantRun(t, "acme's first run", begin(t, s, "digest", "acme", hour(0), hour(0)), "digest", hour(0), 0, 3, "running", false)
	post(t, s, t0, "acme", "a3", model.TenantFeed) // acme's 4
	for i := range 10 {
		post(t, s, t0, "beta", fmt.Sprintf("more%d", i), model.TenantFeed)
	}
	finish(t, s, "digest", hour(0), nil, hour(0))
	wantRun(t, "acme's next run", begin(t, s, "digest", "acme", hour(1), hour(1)), "digest", hour(1), 3, 4, "running", false)
	wantRun(t, "the job's run for beta", begin(t, s, "digest", "beta", hour(2), hour(2)), "digest", hour(2), 0, 20, "running", false)
	wantRun(t, "acme's run after beta's", begin(t, s, "digest", "acme", hour(3), hour(3)), "digest", hour(3), 4, 4, "running", false)
}

// FinishJobRun records how a run ended: done, or failed with its error. A
// failed run begun again (cron run --at, to finish it) is the same run,
// failed until it finishes done. Finishing one run leaves the others as
// they were.
func testJobFinish(t *testing.T, s store.Store) {
	begin(t, s, "digest", "acme", hour(0), hour(0))
	begin(t, s, "digest", "acme", hour(1), hour(1))
	finish(t, s, "digest", hour(0), errors.New("smtp refused"), hour(1))
	wantRun(t, "a failed run begun again", begin(t, s, "digest", "acme", hour(0), hour(2)), "digest", hour(0), 0, 0, "failed", true)
	wantRun(t, "the next run", begin(t, s, "digest", "acme", hour(1), hour(2)), "digest", hour(1), 0, 0, "running", true)
	finish(t, s, "digest", hour(0), nil, hour(2))
	wantRun(t, "the failed run, finished", begin(t, s, "digest", "acme", hour(0), hour(3)), "digest", hour(0), 0, 0, "done", true)
	wantRun(t, "the next run", begin(t, s, "digest", "acme", hour(1), hour(3)), "digest", hour(1), 0, 0, "running", true)
}

// LastJobRun is when the job's latest run was scheduled for, finished or
// not: the latest scheduled, not the latest begun. A job that never ran
// has none (so serve starting has missed nothing of it); another job's
// runs are its own.
func testLastJobRun(t *testing.T, s store.Store) {
	last := func(job string) (time.Time, bool) {
		t.Helper()
		at, ok, err := s.LastJobRun(t.Context(), job)
		if err != nil {
			t.Fatalf("last run of %s: %v", job, err)
		}
		return at, ok
	}
	if at, ok := last("digest"); ok {
		t.Errorf("a job that never ran: last run %s", at)
	}
	begin(t, s, "digest", "acme", hour(2), hour(2))
	begin(t, s, "digest", "acme", hour(1), hour(3)) // caught up later
	finish(t, s, "digest", hour(1), nil, hour(3))
	begin(t, s, "weekly", "acme", hour(5), hour(5))
	for job, want := range map[string]time.Time{"digest": hour(2), "weekly": hour(5)} {
		if at, ok := last(job); !ok || !at.Equal(want) {
			t.Errorf("last run of %s: %s, %v; want %s", job, at, ok, want)
		}
	}
	if at, ok := last("never"); ok {
		t.Errorf("a job that never ran, beside others: last run %s", at)
	}
}

// Prune deletes job runs scheduled before the cutoff but each job's latest
// run, which anchors the next run's range: after it the next run goes on
// from there.
func testJobPrune(t *testing.T, s store.Store) {
	for i := range 3 {
		post(t, s, t0, "acme", evtID(i), model.TenantFeed)
		begin(t, s, "digest", "acme", hour(i-3), hour(i-3))
	}
	begin(t, s, "weekly", "acme", hour(-5), hour(-5))
	begin(t, s, "kept", "acme", hour(0), hour(0)) // not before the cutoff
	begin(t, s, "kept", "acme", hour(1), hour(1))
	res, err := s.Prune(t.Context(), hour(0), hour(1), 1) // one row per write
	if err != nil {
		t.Fatal(err)
	}
	if res.JobRuns != 2 {
		t.Errorf("pruned %d job runs, want digest's 2 older ones", res.JobRuns)
	}
	for job, want := range map[string]time.Time{"digest": hour(-1), "weekly": hour(-5), "kept": hour(1)} {
		if at, ok, err := s.LastJobRun(t.Context(), job); err != nil || !ok || !at.Equal(want) {
			t.Errorf("last run of %s after prune: %s, %v, %v; want %s", job, at, ok, err, want)
		}
	}
	post(t, s, t0, "acme", "after", model.TenantFeed) // 4
	wantRun(t, "digest's next run", begin(t, s, "digest", "acme", hour(0), hour(0)), "digest", hour(0), 3, 4, "running", false)
	wantRun(t, "kept's first run", begin(t, s, "kept", "acme", hour(0), hour(2)), "kept", hour(0), 0, 3, "running", true)
}

// A run begun after a later run of its job (a missed run caught up with
// cron run --at TIME) must not cover items that later run covers: the
// README promises that an item is in exactly one digest. The runs' ranges
// stay disjoint, and together cover every item.
func testJobBegunLate(t *testing.T, s store.Store) {
	posted := 0
	postN := func(n int) {
		for range n {
			post(t, s, t0, "acme", evtID(posted), model.TenantFeed)
			posted++
		}
	}
	postN(2)
	runs := []model.JobRun{begin(t, s, "digest", "acme", hour(0), hour(0))}
	postN(3)
	runs = append(runs, begin(t, s, "digest", "acme", hour(2), hour(2)))
	postN(1)
	runs = append(runs, begin(t, s, "digest", "acme", hour(1), hour(3))) // hour 1 was missed; caught up now
	postN(1)
	runs = append(runs, begin(t, s, "digest", "acme", hour(3), hour(3)))
	in := map[int64][]string{} // item → the runs that cover it
	for _, r := range runs {
		for seq := r.PrevUpperSeq + 1; seq <= r.UpperSeq; seq++ {
			in[seq] = append(in[seq], r.ScheduledAt.Format("15:04"))
		}
	}
	for seq := int64(1); seq <= int64(posted); seq++ {
		if len(in[seq]) != 1 {
			t.Errorf("item %d is in the runs at %v, want exactly one", seq, in[seq])
		}
	}
	if t.Failed() {
		for _, r := range runs {
			t.Logf("the run at %s covers (%d, %d]", r.ScheduledAt.Format("15:04"), r.PrevUpperSeq, r.UpperSeq)
		}
	}
}

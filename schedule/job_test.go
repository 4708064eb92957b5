package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// setupRelay opens a relay on a fresh database in t.TempDir(), closed when
// the test ends, its log at Info to t.Output().
func setupRelay(t *testing.T, opts relay.Options) *relay.Relay {
	t.Helper()
	opts.Poll = 20 * time.Millisecond
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := relaytest.Open(context.Background(), filepath.Join(t.TempDir(), "relay.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})
	return r
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// digestSetup is a relay whose email channel goes to a log buffer, with an
// audience of ada and ben.
func digestSetup(t *testing.T) (*relay.Relay, *syncBuffer) {
	t.Helper()
	var out syncBuffer
	r := setupRelay(t, relay.Options{Routes: relay.Routes{"*": {providers.NewLog(&out, "log://digest")}}})
	if err := r.PutAudience(context.Background(), "default", "everyone", []relay.Recipient{
		{ID: "ada", Email: "ada@example.com"}, {ID: "ben", Email: "ben@example.com"}}); err != nil {
		t.Fatal(err)
	}
	return r, &out
}

func post(t *testing.T, r *relay.Relay, id string, feeds ...string) {
	t.Helper()
	if _, err := r.Accept(context.Background(), relay.Event{ID: id, Type: "activity", Feeds: feeds, Subject: id}); err != nil {
		t.Fatal(err)
	}
}

// digested delivers what is due and returns, per user, the feed item
// seqs their digests listed (the test template writes the seqs).
func digested(t *testing.T, r *relay.Relay, out *syncBuffer) map[string][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sum, err := r.RunUntilIdle(ctx, time.Second); err != nil {
		t.Fatalf("RunUntilIdle: %v (%+v)", err, sum)
	}
	got := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var m struct {
			Type        string `json:"type"`
			RecipientID string `json:"recipient_id"`
			Body        string `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m.Type != "digest" {
			continue
		}
		for _, f := range strings.Fields(m.Body) {
			seq, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("digest body %q", m.Body)
			}
			got[m.RecipientID] = append(got[m.RecipientID], seq)
		}
	}
	for _, v := range got {
		sort.Ints(v)
	}
	return got
}

func digestJob(t *testing.T, r *relay.Relay) *Job {
	t.Helper()
	run, err := Digest(r, "weekly", DigestConfig{Audience: "everyone", Channel: "email", Template: "{{range .Items}}{{.Seq}} {{end}}"})
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Name: "weekly", Schedule: mustParse(t, "@every 1h", ""), Run: run}
}

// Consecutive digest runs cover adjacent ranges of the item sequence: an
// item is in exactly one digest, late or not; a run repeated (or run by
// two instances at once) sends nothing twice.
func TestDigestEachItemOnce(t *testing.T) {
	t.Parallel()
	r, out := digestSetup(t)
	ctx := context.Background()
	j := digestJob(t, r)
	t1 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	post(t, r, "e1", "*")
	post(t, r, "e2", "@ada")
	var wg sync.WaitGroup
	for range 4 { // overlapping instances of the same run
		wg.Go(func() {
			if _, err := RunJob(ctx, r, r.Store(), j, t1, RunOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Repeated after it finished: skipped, or (asked again) all duplicates.
	if run, err := RunJob(ctx, r, r.Store(), j, t1, RunOptions{}); err != nil || !run.Skipped || !run.Repeat {
		t.Fatalf("repeat of a finished run: %+v, %v; want it skipped", run, err)
	}
	if run, err := RunJob(ctx, r, r.Store(), j, t1, RunOptions{Again: true}); err != nil || run.Skipped || run.New != 0 || run.Duplicate != 2 {
		t.Fatalf("a finished run run again: %+v, %v; want 2 duplicates and nothing new", run, err)
	}
	got := digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2]" || fmt.Sprint(got["ben"]) != "[1]" {
		t.Fatalf("after run 1: %v", got)
	}
	// A late event (its payment happened before t1, it arrives after) and
	// a new one: both in the next digest, nothing from the first again.
	post(t, r, "e3-late", "*")
	post(t, r, "e4", "@ben")
	if run, err := RunJob(ctx, r, r.Store(), j, t1.Add(time.Hour), RunOptions{}); err != nil || run.New != 2 || run.Notifications != 2 || run.Repeat {
		t.Fatalf("run 2: %+v, %v", run, err)
	}
	got = digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2 3]" || fmt.Sprint(got["ben"]) != "[1 3 4]" {
		t.Fatalf("after run 2: %v", got)
	}
	// Read items are left out.
	post(t, r, "e5", "*")
	if _, err := r.MarkAll(ctx, "default", "ben", model.MarkRead, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := RunJob(ctx, r, r.Store(), j, t1.Add(2*time.Hour), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	got = digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2 3 5]" || fmt.Sprint(got["ben"]) != "[1 3 4]" {
		t.Fatalf("after run 3: %v", got)
	}
}

// A member the digest cannot reach is rejected alone: the others get
// theirs, the run fails with ErrRejected and counts it.
func TestDigestRejectsOneMember(t *testing.T) {
	t.Parallel()
	r, _ := digestSetup(t)
	ctx := context.Background()
	if err := r.PutAudience(ctx, "default", "everyone", []relay.Recipient{
		{ID: "ada", Email: "ada@example.com"}, {ID: "cy", Phone: "+15550100"}, {ID: "ben", Email: "ben@example.com"}}); err != nil {
		t.Fatal(err)
	}
	post(t, r, "e1", "*")
	run, err := RunJob(ctx, r, r.Store(), digestJob(t, r), time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), RunOptions{})
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "for cy:") || run.New != 2 || run.Rejected != 1 {
		t.Fatalf("%+v, %v; want ada and ben accepted, cy rejected", run, err)
	}
}

func TestMissedRunOnce(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{})
	ctx := context.Background()
	sched := mustParse(t, "0 * * * *", "") // hourly, on the hour
	j := &Job{Name: "hourly", Schedule: sched, Missed: MissedRunOnce, Run: func(context.Context, model.JobRun) (Outcome, error) {
		return Outcome{}, nil
	}}
	now := time.Now()
	if _, err := RunJob(ctx, r, r.Store(), j, now.UTC().Truncate(time.Hour).Add(-5*time.Hour), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	missed, ok := lastMissed(ctx, r.Store(), j, now)
	if !ok || !missed.Equal(now.UTC().Truncate(time.Hour)) {
		t.Fatalf("last missed = %v %v, want the latest hour", missed, ok)
	}
	// Once run, nothing is missed.
	if _, err := RunJob(ctx, r, r.Store(), j, missed, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lastMissed(ctx, r.Store(), j, now); ok {
		t.Fatal("a job run at its latest time reports a missed run")
	}
	// Never-run jobs missed nothing.
	if _, ok := lastMissed(ctx, r.Store(), &Job{Name: "new", Schedule: sched}, now); ok {
		t.Fatal("a job that never ran reports a missed run")
	}
}

// A process that takes the schedules over from one that died finishes the
// run the dead one began, and runs those that fell due while the lease
// moved (within the failover bound), whatever the Missed policy: every
// scheduled time runs, and none twice.
func TestTakeoverFinishesTheLastRunAndRunsTheHandedOverOnes(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, relay.Options{SingletonTTL: 6 * time.Second}) // a failover bound of 8s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	ran := map[int64]int{}
	j := &Job{Name: "tick", Schedule: mustParse(t, "@every 1s", ""), Missed: MissedSkip,
		Run: func(_ context.Context, run model.JobRun) (Outcome, error) {
			mu.Lock()
			ran[run.ScheduledAt.Unix()]++
			mu.Unlock()
			return Outcome{}, nil
		}}
	// The dead holder began the run of 3 s ago and never finished it.
	dead := time.Now().Truncate(time.Second).Add(-3 * time.Second)
	if _, err := r.Store().BeginJobRun(ctx, j.Name, "default", dead, r.Now()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan struct{})
	go func() { RunSchedules(ctx, r, r.Store(), []*Job{j}); close(done) }()
	until := start.Truncate(time.Second).Add(time.Second).Unix() // the first run after the takeover
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := ran[until]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run of %s did not run", time.Unix(until, 0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for at := dead.Unix(); at <= until; at++ {
		if ran[at] != 1 {
			t.Errorf("the run of %s ran %d times, want once (runs: %v)", time.Unix(at, 0).UTC().Format(time.TimeOnly), ran[at], ran)
		}
	}
	if last, _, _ := r.Store().LastJobRun(context.Background(), j.Name); last.Unix() < until {
		t.Errorf("last run %s, want at least %s", last, time.Unix(until, 0))
	}
}

// Runs that fall due while the one before them still runs are run next,
// late, in order, not skipped (a takeover's catch-up runs, or one slow run
// on a loaded box, would otherwise make the schedule lose the runs due
// meanwhile): here two fall due during the slow run. Only runs older than
// twice the failover bound are skipped (TestALongStallSkipsToTheLatestRun).
func TestARunDueWhileAnotherRunsIsRunNext(t *testing.T) {
	t.Parallel()
	ran := stalledSchedule(t, relay.Options{}, 4)
	for i := 1; i < len(ran); i++ {
		if ran[i] != ran[i-1]+1 {
			t.Fatalf("runs %v: want consecutive seconds (the one due during the slow run run next)", ran)
		}
	}
}

// A run that stalls for longer than twice the failover bound does not
// leave a pile of old runs behind it: the ones older than the bound are
// skipped, the latest due runs next (here the bound is 2 x 667 ms and the
// stall 2.5 s: the second after the slow run is skipped, the one after it
// runs).
func TestALongStallSkipsToTheLatestRun(t *testing.T) {
	t.Parallel()
	ran := stalledSchedule(t, relay.Options{SingletonTTL: 500 * time.Millisecond}, 2)
	if ran[1] < ran[0]+2 { // +3 too if the box is slow to get back to the schedule
		t.Fatalf("runs %v: want the second after the stalled run skipped", ran)
	}
}

// stalledSchedule runs an @every 1s job whose first run lasts until 2.5 s
// past its scheduled time (two more seconds fall due meanwhile) until it
// has run want times, and returns the scheduled seconds it ran, in order.
func stalledSchedule(t *testing.T, opts relay.Options, want int) []int64 {
	t.Helper()
	r := setupRelay(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var ran []int64
	j := &Job{Name: "stall", Schedule: mustParse(t, "@every 1s", ""),
		Run: func(_ context.Context, run model.JobRun) (Outcome, error) {
			mu.Lock()
			first := len(ran) == 0
			ran = append(ran, run.ScheduledAt.Unix())
			mu.Unlock()
			if first {
				for time.Now().Before(run.ScheduledAt.Add(2500 * time.Millisecond)) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			return Outcome{}, nil
		}}
	done := make(chan struct{})
	go func() { RunSchedules(ctx, r, r.Store(), []*Job{j}); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs %v: want %d within 10s", ran, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(ran)
}

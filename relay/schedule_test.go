package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"edgerelay/providers"
	"edgerelay/store"
	"edgerelay/store/sqlite"
)

// digestSetup is a relay whose email channel goes to a log buffer, with an
// audience of ada and ben.
func digestSetup(t *testing.T) (*Relay, *syncBuffer) {
	t.Helper()
	var out syncBuffer
	r := setupRelay(t, Options{Routes: Routes{"*": {providers.NewLog(&out, "log://digest")}}})
	if err := r.PutAudience(context.Background(), "default", "everyone", []Recipient{
		{ID: "ada", Email: "ada@example.com"}, {ID: "ben", Email: "ben@example.com"}}); err != nil {
		t.Fatal(err)
	}
	return r, &out
}

func post(t *testing.T, r *Relay, id string, feeds ...string) {
	t.Helper()
	if _, err := r.Accept(context.Background(), Event{ID: id, Type: "activity", Feeds: feeds, Subject: id}); err != nil {
		t.Fatal(err)
	}
}

// digested delivers what is due and returns, per user, the feed item
// seqs their digests listed (the test template writes the seqs).
func digested(t *testing.T, r *Relay, out *syncBuffer) map[string][]int {
	t.Helper()
	runIdle(t, r, time.Second)
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

func digestJob(t *testing.T, r *Relay) *Job {
	t.Helper()
	run, err := r.Digest("weekly", DigestConfig{Audience: "everyone", Channel: "email", Template: "{{range .Items}}{{.Seq}} {{end}}"})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := ParseSchedule("@every 1h", "")
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Name: "weekly", Schedule: sched, Run: run}
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.RunJob(ctx, j, t1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := r.RunJob(ctx, j, t1); err != nil { // repeated after it finished
		t.Fatal(err)
	}
	got := digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2]" || fmt.Sprint(got["ben"]) != "[1]" {
		t.Fatalf("after run 1: %v", got)
	}
	// A late event (its payment happened before t1, it arrives after) and
	// a new one: both in the next digest, nothing from the first again.
	post(t, r, "e3-late", "*")
	post(t, r, "e4", "@ben")
	if err := r.RunJob(ctx, j, t1.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got = digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2 3]" || fmt.Sprint(got["ben"]) != "[1 3 4]" {
		t.Fatalf("after run 2: %v", got)
	}
	// Read items are left out.
	post(t, r, "e5", "*")
	if _, err := r.store.MarkAll(ctx, "default", "ben", store.MarkRead, -1); err != nil {
		t.Fatal(err)
	}
	if err := r.RunJob(ctx, j, t1.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got = digested(t, r, out)
	if fmt.Sprint(got["ada"]) != "[1 2 3 5]" || fmt.Sprint(got["ben"]) != "[1 3 4]" {
		t.Fatalf("after run 3: %v", got)
	}
}

func TestMissedRunOnce(t *testing.T) {
	t.Parallel()
	c := &clock{}
	r := setupRelay(t, Options{Now: c.now})
	sched, _ := ParseSchedule("0 * * * *", "") // hourly, on the hour
	var runs []time.Time
	var mu sync.Mutex
	j := &Job{Name: "hourly", Schedule: sched, Missed: MissedRunOnce, Run: func(_ context.Context, run store.JobRun) error {
		mu.Lock()
		runs = append(runs, run.ScheduledAt)
		mu.Unlock()
		return nil
	}}
	first := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	if err := r.RunJob(context.Background(), j, first); err != nil {
		t.Fatal(err)
	}
	missed, ok := r.lastMissed(context.Background(), j, time.Now())
	if !ok || !missed.Equal(time.Now().UTC().Truncate(time.Hour)) {
		t.Fatalf("last missed = %v %v, want the latest hour", missed, ok)
	}
	// Never-run jobs missed nothing.
	if _, ok := r.lastMissed(context.Background(), &Job{Name: "new", Schedule: sched}, time.Now()); ok {
		t.Fatal("a job that never ran reports a missed run")
	}
}

func TestParseScheduleAndAge(t *testing.T) {
	t.Parallel()
	s, err := ParseSchedule("30 0 9 * * MON", "Europe/Berlin") // with seconds
	if err != nil {
		t.Fatal(err)
	}
	next := s.Next(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) // a Sunday
	if next.UTC().Format(time.RFC3339) != "2026-11-30T08:00:30Z" {
		t.Fatalf("next = %v", next.UTC())
	}
	for _, bad := range [][2]string{{"61 * * * *", ""}, {"* * *", ""}, {"@daily", "Mars/Olympus"}} {
		if _, err := ParseSchedule(bad[0], bad[1]); err == nil {
			t.Errorf("ParseSchedule(%q, %q) accepted", bad[0], bad[1])
		}
	}
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"30x", "-1d", "d", "1.5d"} {
		if _, err := ParseAge(bad); err == nil {
			t.Errorf("ParseAge(%q) accepted", bad)
		}
	}
}

// Prune deletes what finished before the cutoff and keeps the rest; it
// never goes below the longest retry window.
func TestPrune(t *testing.T) {
	t.Parallel()
	c := &clock{}
	var out syncBuffer
	r := setupRelay(t, Options{Now: c.now, Routes: Routes{"*": {providers.NewLog(&out, "log://p")}}})
	ctx := context.Background()
	accept(t, r, receipt("old", Recipient{ID: "ada", Email: "ada@example.com"}))
	runIdle(t, r, time.Second)
	c.advance(40 * 24 * time.Hour)
	acc := accept(t, r, receipt("new", Recipient{ID: "ben", Email: "ben@example.com"}))
	res, err := r.Prune(ctx, 50*24*time.Hour)
	if err != nil || res.Notifications != 0 || res.Raised {
		t.Fatalf("nothing is 50 days old: %+v %v", res, err)
	}
	res, err = r.Prune(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Raised || res.OlderThan != DefaultPolicy.MaxAge {
		t.Fatalf("an age below the retry window was not raised: %+v", res)
	}
	if res.Notifications != 1 || res.Attempts != 1 || res.Events != 1 {
		t.Fatalf("prune: %+v", res)
	}
	if _, err := r.Notification(ctx, strconv.FormatInt(acc.Notifications[0].ID, 10)); err != nil {
		t.Fatalf("the pending notification was pruned: %v", err)
	}
	// The old event is gone: sending it again is new (why the floor exists).
	again := accept(t, r, receipt("old", Recipient{ID: "ada", Email: "ada@example.com"}))
	if again.Duplicate {
		t.Fatal("a pruned event is still a duplicate")
	}
}

func TestBackupWhileWriting(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := context.Background()
	for i := range 50 {
		accept(t, r, receipt(fmt.Sprint("e", i), Recipient{ID: "u", Email: "u@example.com"}))
	}
	done := make(chan struct{})
	go func() { // writes go on during the backup
		defer close(done)
		for i := range 50 {
			r.Accept(ctx, receipt(fmt.Sprint("more", i), Recipient{ID: "u", Email: "u@example.com"}))
		}
	}()
	dest := filepath.Join(t.TempDir(), "backup.db")
	if err := r.Backup(ctx, dest); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := r.Backup(ctx, dest); err == nil {
		t.Fatal("backup over an existing file")
	}
	b, err := sqlite.Open(ctx, dest, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, _ := b.Status(ctx, time.Now())
	if n := st.Counts[store.StatusPending]; n < 50 || n > 100 {
		t.Fatalf("backup holds %d notifications", n)
	}
}

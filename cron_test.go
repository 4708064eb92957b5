package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cronOut decodes what cron run --json prints.
func cronOut(t *testing.T, r cliResult) cronRunSummary {
	t.Helper()
	var s cronRunSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("cron run --json printed %q (exit %d, stderr %q): %v", r.stdout, r.code, r.stderr, err)
	}
	return s
}

// cronConfig writes a config with one batch job of the example file.
func cronConfig(t *testing.T, dir, sched string) string {
	t.Helper()
	abs, err := filepath.Abs("testdata/batch_example.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("jobs:\n  nightly:\n    schedule: \""+sched+"\"\n    batch:\n      file: "+abs+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// nextSecond waits until the wall clock is in another second than t: a
// run's identity is a whole second, so two runs in the same second could
// not tell "the same run" from "a new run each time".
func nextSecond(t time.Time) {
	for time.Now().Unix() == t.Unix() {
		time.Sleep(10 * time.Millisecond)
	}
}

// cron run without --at is the latest run that was due: run twice,
// seconds apart, it is the same run, and the second accepts nothing new
// (its counts say duplicate). It says that delivery follows elsewhere, and
// with --dispatch delivers.
func TestCronRunRepeatsTheLatestDueRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, sent := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log")
	cfg := cronConfig(t, dir, "0 0 1 1 *") // New Year, UTC: far from any boundary
	now := time.Now().UTC()
	due := time.Date(now.Year(), 1, 1, 0, 0, 0, 0, time.UTC)

	first := runCLI(t, "", "cron", "run", "nightly", "--config", cfg, "--db", db, "--json", "--log-level", "warn")
	s := cronOut(t, first)
	if first.code != 0 || !s.ScheduledAt.Equal(due) || s.Repeat || s.New != 4 || s.Notifications != 5 || s.Duplicate != 0 {
		t.Fatalf("first run: exit %d %+v\n%s", first.code, s, first.stderr)
	}
	if !strings.Contains(first.stderr, "accepted 4 events (4 new, 0 duplicate)") || !strings.Contains(first.stderr, "delivery follows in edgerelay serve or dispatch") ||
		strings.Contains(first.stderr, "sent=") {
		t.Fatalf("first run says:\n%s", first.stderr)
	}
	nextSecond(now)
	second := runCLI(t, "", "cron", "run", "nightly", "--config", cfg, "--db", db, "--json", "--log-level", "warn",
		"--dispatch", "--route", "*=log://"+sent)
	s = cronOut(t, second)
	if second.code != 0 || !s.ScheduledAt.Equal(due) || !s.Repeat || s.New != 0 || s.Duplicate != 4 {
		t.Fatalf("second run: exit %d %+v\n%s", second.code, s, second.stderr)
	}
	if n := countRows(t, db, "events"); n != 4 {
		t.Fatalf("%d events after two runs of the same run, want 4", n)
	}
	if s.Dispatch == nil || s.Dispatch.Sent != 5 {
		t.Fatalf("--dispatch: %+v\n%s", s.Dispatch, second.stderr)
	}
	if b, _ := os.ReadFile(sent); bytes.Count(b, []byte("\n")) != 5 {
		t.Fatalf("log provider got %d lines, want 5", bytes.Count(b, []byte("\n")))
	}
}

// --at must be one of the job's scheduled times, and due: otherwise a
// usage error naming the nearest scheduled times, and nothing runs. A job
// that has never come due says so and runs nothing.
func TestCronRunAtRefusesOffSchedule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	cfg := cronConfig(t, dir, "0 2 * * *")
	for _, tc := range []struct{ at, want string }{
		{"2026-11-30T02:30:00Z", "--at 2026-11-30T02:30:00Z: not a scheduled time of job nightly (schedule \"0 2 * * *\" in UTC); the nearest are 2026-11-30T02:00:00Z before and 2026-12-01T02:00:00Z after"},
		{"2026-11-30T02:00:01Z", "the nearest are 2026-11-30T02:00:00Z before and 2026-12-01T02:00:00Z after"},
		{time.Now().Add(48 * time.Hour).UTC().Truncate(24 * time.Hour).Add(2 * time.Hour).Format(time.RFC3339), "in the future, not due yet"},
	} {
		r := runCLI(t, "", "cron", "run", "nightly", "--config", cfg, "--db", db, "--at", tc.at)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--at %s: exit %d %q; want %d and %q", tc.at, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	// On the schedule, in another zone's notation: accepted.
	if r := runCLI(t, "", "cron", "run", "nightly", "--config", cfg, "--db", db, "--at", "2026-11-30T03:00:00+01:00", "--log-level", "warn"); r.code != 0 {
		t.Fatalf("--at on the schedule: exit %d %s", r.code, r.stderr)
	}
	if n := countRows(t, db, "job_runs"); n != 1 {
		t.Fatalf("%d job runs recorded, want only the one on the schedule", n)
	}

	never := cronConfig(t, t.TempDir(), "0 0 30 2 *") // 30 February
	r := runCLI(t, "", "cron", "run", "nightly", "--config", never, "--db", db)
	if r.code != 0 || !strings.Contains(r.stderr, "no run is due yet") || countRows(t, db, "job_runs") != 1 {
		t.Fatalf("a job never due: exit %d %q", r.code, r.stderr)
	}
}

// "@every 1h" has the same run times in every process, whenever it
// started: two processes started seconds apart run the same run, and list
// the same next runs, on the hour.
func TestCronEveryIsStableAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	cfg := cronConfig(t, dir, "@every 1h")
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--config", cfg, "--db", db, "--log-level", "warn")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	for attempt := 0; ; attempt++ {
		start := time.Now()
		var sums [2]cronRunSummary
		var lists [2]string
		for i := range sums {
			if i > 0 {
				nextSecond(start)
			}
			if err := json.Unmarshal(run("cron", "run", "nightly", "--json"), &sums[i]); err != nil {
				t.Fatal(err)
			}
			lists[i] = string(run("cron", "list"))
		}
		if !sums[0].ScheduledAt.Equal(sums[1].ScheduledAt) && attempt == 0 {
			continue // the hour turned between the two: a new run is right; try again
		}
		at := sums[0].ScheduledAt
		if at.Unix()%3600 != 0 || !sums[1].ScheduledAt.Equal(at) || !sums[1].Repeat || sums[1].New != 0 || sums[1].Duplicate != 4 {
			t.Fatalf("two processes ran %+v and %+v: want the same run, on the hour", sums[0], sums[1])
		}
		next := at.Add(time.Hour).Format(time.RFC3339)
		if lists[0] != lists[1] || !strings.Contains(lists[0], "  "+next+"\n") {
			t.Fatalf("cron list in two processes:\n%s\n%s\nwant both to list %s", lists[0], lists[1], next)
		}
		return
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// everyProblem has one of each kind of problem a config can have, each
// on a line of its own (the line numbers below count from 1).
const everyProblem = `rotues:
  email: log://stdout
providers:
  hooks:
    url: webhook+https://hooks.example.com/notify
    concurency: 4
  bad:
    url: ftp://x
routes:
  email: hooks
retry:
  max_attempts: ten
channels:
  sms:
    max_attempts: -3
dispatch:
  workers: 0
api:
  max_body: -1
jobs:
  weekly:
    schedule: "0 9 * * MON"
    timezone: Mars/Olympus
    digest:
      audience: everyone
      channel: pigeon
      template: "{{.Items"
  nightly:
    schedule: "@daily"
    batch:
      file: /nonexistent/edgerelay-test/batch.jsonl
  both:
    schedule: "@hourly"
    prune: {older_than: 30d}
    batch: {file: testdata/batch_example.jsonl}
tail:
  - source: oracle://db.example.com/app
`

// everyProblemWant is what config check says of everyProblem, in order.
var everyProblemWant = []string{
	"line 1: unknown key `rotues` (did you mean `routes`?)",
	"line 6 (providers.hooks): unknown key `concurency` (did you mean `concurrency`?)",
	`line 7 (providers.bad): provider URL "ftp://x?name=bad": unknown scheme "ftp"`,
	`line 12 (retry.max_attempts): want a whole number, got "ten"`,
	"line 15 (channels.sms.max_attempts): max_attempts must be positive, got -3 (leave it out for the default, 10)",
	"line 17 (dispatch.workers): workers must be positive, got 0 (leave it out for the default, 2048)",
	"line 19 (api.max_body): max_body must be positive, got -1 (leave it out for the default, 1048576)",
	`line 23 (jobs.weekly.timezone): time zone "Mars/Olympus": unknown time zone Mars/Olympus`,
	`line 26 (jobs.weekly.digest.channel): channel "pigeon" has no route (routes: email; add one under routes:, or a "*" route)`,
	`line 27 (jobs.weekly.digest.template): template: `,
	"line 31 (jobs.nightly.batch.file): open /nonexistent/edgerelay-test/batch.jsonl: no such file or directory",
	"line 32 (jobs.both): a job does exactly one of digest, prune or batch; this one has prune and batch",
	`line 37 (tail[0].source): bad source URL: oracle://db.example.com/app: unknown scheme "oracle" (supported: mariadb, mysql, postgres, postgresql, sqlite)`,
}

// problemLines returns the problems of a config error as printed: the
// lines after "N problems:", or the one problem after "config FILE: ";
// nil if stderr is not a config error.
func problemLines(stderr, path string) []string {
	head, rest, ok := strings.Cut(stderr, "problems:\n")
	if !ok {
		if one, ok := strings.CutPrefix(strings.TrimSpace(stderr), "edgerelay: config "+path+": "); ok {
			return []string{one}
		}
		return nil
	}
	if !strings.HasPrefix(head, "edgerelay: config "+path+": ") {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(rest, "\n"), "\n") {
		out = append(out, strings.TrimPrefix(l, "  "))
	}
	return out
}

// One run of config check shows every problem of the file, each with its
// line and key path, in the file's terms; serve, dispatch, cron, batch
// send, tail and status refuse the same file with the same list, before
// creating a database.
func TestConfigCheckReportsEveryProblem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "every.yaml")
	if err := os.WriteFile(path, []byte(everyProblem), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "config", "check", path)
	if r.code != exitError {
		t.Errorf("config check: exit %d, want %d", r.code, exitError)
	}
	got := problemLines(r.stderr, path)
	if len(got) != len(everyProblemWant) {
		t.Errorf("config check gave %d problems, want %d", len(got), len(everyProblemWant))
	}
	for i, want := range everyProblemWant {
		if i >= len(got) || !strings.HasPrefix(got[i], want) {
			t.Errorf("problem %d: want %q", i+1, want)
		}
	}
	if t.Failed() {
		t.Logf("config check said:\n%s%s", r.stdout, r.stderr)
	}
	for _, goSpeak := range []string{"main.", "config.Config", "!!str", "unmarshal", "not found in type"} {
		if strings.Contains(r.stderr, goSpeak) {
			t.Errorf("config check speaks Go (%q):\n%s", goSpeak, r.stderr)
		}
	}
	for _, tc := range []struct{ cmd, args []string }{
		{[]string{"serve"}, []string{"--listen", "127.0.0.1:0"}},
		{[]string{"dispatch"}, []string{"--until-idle"}},
		{[]string{"cron", "list"}, nil},
		{[]string{"cron", "run"}, []string{"nightly"}},
		{[]string{"batch", "send"}, []string{"testdata/batch_example.jsonl"}},
		{[]string{"tail"}, []string{"--source", "sqlite:///nonexistent/edgerelay-test/app.db"}},
		{[]string{"status"}, nil},
	} {
		args := strings.Join(tc.cmd, "-")
		db := filepath.Join(dir, args+".db")
		rr := runCLI(t, "", slices.Concat(tc.cmd, []string{"--config", path, "--db", db}, tc.args)...)
		if rr.code != exitError {
			t.Errorf("%v: exit %d, want %d\n%s", args, rr.code, exitError, rr.stderr)
		}
		if other := problemLines(rr.stderr, path); !slices.Equal(other, got) {
			t.Errorf("%v refuses with another list:\n%s\nconfig check:\n%s", args, strings.Join(other, "\n"), strings.Join(got, "\n"))
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%v created its database for a config it refuses (%v)", args, err)
		}
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The application's database is down (its tail: sources point at a
// loopback port nobody listens on): the commands that tail nothing work
// as ever, since loading the config checks a source's URL without
// reaching its database; status shows the sources unreachable; config
// check, which does reach them, names each; serve starts, delivers, and
// logs the tailer's retries with their growing wait. A malformed tail:
// entry is still refused by every command, at its line.
func TestAppDatabaseDownLeavesOtherCommandsWorking(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	logFile := filepath.Join(dir, "sent.log")
	down := freeAddr(t) // closed: connections are refused at once
	cfg := filepath.Join(dir, "down.yaml")
	yaml := `tail:
  - source: 'postgres://tailer:s3cret-pw@` + down + `/app?table=edgerelay_outbox'
    poll: 50ms
  - source: 'mysql://tailer:s3cret-pw@` + down + `/app?table=edgerelay_outbox'
    poll: 50ms
routes:
  "*": log://` + logFile + `
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, adaEvent, "--db", db, "--config", cfg, "send"); r.code != 0 {
		t.Fatalf("send with the app database down: exit %d\n%s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"show", "1"},
		{"dispatch", "--until-idle", "--log-level", "warn"},
		{"retry", "1"}, // sent: refused for that reason, not the config's
		{"template", "list"},
	} {
		start := time.Now()
		words := 1
		if args[0] == "template" {
			words = 2
		}
		r := runCLI(t, "", slices.Concat(args[:words], []string{"--db", db, "--config", cfg}, args[words:])...)
		ok := r.code == 0
		if args[0] == "retry" {
			ok = r.code == exitError && strings.Contains(r.stderr, "is sent")
		}
		if !ok || strings.Contains(r.stderr, "tail[") || strings.Contains(r.stdout+r.stderr, "s3cret-pw") {
			t.Errorf("%v with the app database down: exit %d in %s\n%s%s", args, r.code, time.Since(start), r.stdout, r.stderr)
		}
	}
	if b, _ := os.ReadFile(logFile); strings.Count(string(b), "\n") != 3 {
		t.Errorf("dispatch delivered:\n%s\nwant 3 lines", b)
	}

	// status reaches the sources, and shows both unreachable, by name.
	r := runCLI(t, "", "status", "--db", db, "--config", cfg, "--json")
	var st struct {
		Sources []struct {
			Source      string `json:"source"`
			Configured  bool   `json:"configured"`
			Unreachable string `json:"unreachable"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || len(st.Sources) != 2 {
		t.Fatalf("status: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	for _, s := range st.Sources {
		if !s.Configured || s.Unreachable == "" || !strings.Contains(s.Source, down) || strings.Contains(s.Source+s.Unreachable, "s3cret-pw") {
			t.Errorf("status of a source whose database is down: %+v, want it named and unreachable", s)
		}
	}

	// config check does open them: each is a problem at its line.
	r = runCLI(t, "", "config", "check", cfg)
	if got := problemLines(r.stderr, cfg); r.code != exitError || len(got) != 2 ||
		!strings.HasPrefix(got[0], "line 2 (tail[0].source): source postgres://") || !strings.HasPrefix(got[1], "line 4 (tail[1].source): source mysql://") ||
		strings.Contains(r.stderr, "s3cret-pw") {
		t.Errorf("config check: exit %d, want both sources named as unreachable:\n%s", r.code, r.stderr)
	}

	// A malformed entry is refused at load, by a command that tails
	// nothing too, naming the entry; before any database is touched.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(yaml, "routes:", "  - source: 'postgres://tailer@"+down+"/app?tabel=outbox'\nroutes:", 1)), 0o600)
	for _, args := range [][]string{{"show", "1"}, {"dispatch", "--until-idle"}, {"status"}, {"config", "check", bad}} {
		r := runCLI(t, "", append(args, "--db", db, "--config", bad)...)
		if r.code != exitError || !strings.Contains(r.stderr, "(tail[2].source): bad source URL: ") || !strings.Contains(r.stderr, `unknown parameter "tabel"`) {
			t.Errorf("%v with a malformed tail: entry: exit %d\n%s", args, r.code, r.stderr)
		}
	}

	// serve starts, delivers what comes in, and retries each source with a
	// growing wait, logged.
	p := startAPIServe(t, bin, "--db", db, "--config", cfg)
	if code, body := call(t, "POST", p.base+"/v1/events", "", strings.Replace(adaEvent, "evt_501", "evt_502", 1)); code != 202 && code != 200 {
		t.Fatalf("POST /v1/events: %d %s", code, body)
	}
	retry := regexp.MustCompile(`tail: opening the source failed; retrying.*? in=(\S+) `)
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(logFile)
		waits := map[string]bool{}
		for _, m := range retry.FindAllStringSubmatch(p.stderr.String(), -1) {
			waits[m[1]] = true
		}
		if strings.Count(string(b), "\n") == 6 && waits["50ms"] && waits["100ms"] && waits["200ms"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve with the app database down: delivered\n%s\nwaits %v; stderr:\n%s", b, waits, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(p.stderr.String(), "s3cret-pw") {
		t.Errorf("serve logged the password:\n%s", p.stderr)
	}
}

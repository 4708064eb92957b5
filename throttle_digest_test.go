package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
)

// throttleDigestConfig: marketing is throttled to 2 a day per recipient,
// the excess folded into the hourly digest of audience team.
const throttleDigestConfig = `categories:
  marketing: {throttle: {max: 2, per: 24h, excess: digest, digest: weekly}}
types:
  newsletter: {category: marketing}
retry: {base_delay: 10ms, max_delay: 50ms}
jobs:
  weekly:
    schedule: "@every 1h"
    digest:
      audience: team
      channel: email
      subject: Your digest
      template: "{{range .Items}}[{{.Subject}}]{{end}}"
`

// logged is one message the log provider wrote.
type logged struct {
	Type        string `json:"type"`
	EventID     string `json:"event_id"`
	RecipientID string `json:"recipient_id"`
	Subject     string `json:"subject"`
	Body        string `json:"body"`
}

func readLogged(t *testing.T, path string) []logged {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logged
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m logged
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// listed is `list --json`'s view of a notification.
type listed struct {
	Key     string `json:"key"`
	EventID string `json:"event_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
}

func listStatus(t *testing.T, db, status string) []listed {
	t.Helper()
	r := runCLI(t, "", "list", "--db", db, "--status", status, "--json", "--limit", "0")
	if r.code != 0 {
		t.Fatalf("list --status %s: exit %d %s", status, r.code, r.stderr)
	}
	var v struct{ Notifications []listed }
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("list: %v\n%s", err, r.stdout)
	}
	return v.Notifications
}

// A throttle's excess folded into the next digest, through the
// CLI: five newsletters to ada with at most 2 a day: 2 are sent, 3 end
// skipped as folded into digest weekly (show, status and list say so);
// the digest's run sends ada one message with exactly those 3; the same
// run again and the next run send nothing more.
func TestThrottleExcessFoldsIntoTheNextDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, logFile, cfg := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log"), filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(throttleDigestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	setTeam(t, dir, db, `{"id": "ada", "email": "ada@example.com"}`)
	for i := 1; i <= 5; i++ {
		sendNewsletter(t, db, i)
	}
	route := "*=log://" + logFile
	r := runCLI(t, "", "dispatch", "--config", cfg, "--db", db, "--until-idle", "--route", route, "--json", "--log-level", "warn")
	if r.code != 0 || !strings.Contains(r.stdout, `"sent":2`) || !strings.Contains(r.stdout, `"skipped":3`) {
		t.Fatalf("dispatch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkFolded(t, db, cfg, logFile, route, true)
}

func setTeam(t *testing.T, dir, db string, members ...string) {
	t.Helper()
	path := filepath.Join(dir, "team.json")
	if err := os.WriteFile(path, []byte(`{"members": [`+strings.Join(members, ", ")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "audience", "set", "--db", db, "team", path); r.code != 0 {
		t.Fatalf("audience set: exit %d %s", r.code, r.stderr)
	}
}

func sendNewsletter(t *testing.T, db string, i int) {
	t.Helper()
	ev := fmt.Sprintf(`{"id": "n%d", "type": "newsletter", "recipients": [{"id": "ada", "email": "ada@example.com"}], "subject": "promo %d", "body": "b"}`, i, i)
	if r := runCLI(t, ev, "--db", db, "send", "--log-level", "warn"); r.code != 0 {
		t.Fatalf("send %d: exit %d %s", i, r.code, r.stderr)
	}
}

// checkFolded checks, after the five newsletters were dispatched, what
// the audit trail says and what the digest runs send; resent: a
// newsletter may have reached the provider twice (a call a crash cut
// short, resent at least once).
func checkFolded(t *testing.T, db, cfg, logFile, route string, resent bool) {
	t.Helper()
	var sentSubjects []string
	for _, m := range readLogged(t, logFile) {
		if m.Type != "newsletter" || m.RecipientID != "ada" {
			t.Fatalf("the provider got %+v before any digest", m)
		}
		if !resent || !slices.Contains(sentSubjects, m.Subject) {
			sentSubjects = append(sentSubjects, m.Subject)
		}
	}
	if len(sentSubjects) != 2 {
		t.Fatalf("sent %q, want 2 newsletters", sentSubjects)
	}
	folded := listStatus(t, db, "skipped")
	var want []string
	for _, n := range folded {
		if !strings.Contains(n.Reason, "skipped (throttled), folded into digest weekly") {
			t.Fatalf("%s: reason %q, want folded into digest weekly", n.Key, n.Reason)
		}
		want = append(want, "promo "+strings.TrimPrefix(n.EventID, "n"))
	}
	if len(folded) != 3 || len(listStatus(t, db, "sent")) != 2 {
		t.Fatalf("skipped %+v, want 3 folded and 2 sent", folded)
	}
	for _, s := range want {
		if slices.Contains(sentSubjects, s) {
			t.Fatalf("%s was sent and folded", s)
		}
	}
	r := runCLI(t, "", "show", "--db", db, folded[0].Key)
	if r.code != 0 || !strings.Contains(r.stdout, "skipped") || !strings.Contains(r.stdout, "folded into digest weekly") {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "status", "--db", db, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"skipped":3`) || !strings.Contains(r.stdout, `"sent":2`) {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// The digest's runs, on the hour (cron run refuses a time not yet
	// due): the one before the latest, again, and the latest.
	latest := time.Now().UTC().Truncate(time.Hour)
	runDigest := func(at time.Time) {
		t.Helper()
		r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--route", route, "--dispatch",
			"--at", at.Format(time.RFC3339), "--log-level", "warn", "weekly")
		if r.code != 0 {
			t.Fatalf("cron run --at %s: exit %d\n%s%s", at, r.code, r.stdout, r.stderr)
		}
	}
	digests := func() []logged {
		t.Helper()
		var out []logged
		for _, m := range readLogged(t, logFile) {
			if m.Type == "digest" {
				out = append(out, m)
			}
		}
		return out
	}
	runDigest(latest.Add(-time.Hour))
	ds := digests()
	if len(ds) != 1 || ds[0].RecipientID != "ada" {
		t.Fatalf("digests %+v, want one to ada", ds)
	}
	got := strings.Split(strings.TrimSuffix(strings.TrimPrefix(ds[0].Body, "["), "]"), "][")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ada's digest holds %q, want exactly the folded %q", got, want)
	}
	runDigest(latest.Add(-time.Hour)) // the same run: a duplicate
	runDigest(latest)                 // the next: nothing new for ada
	if ds := digests(); len(ds) != 1 {
		t.Fatalf("after the same run again and the next run: %d digests, want still 1:\n%+v", len(ds), ds)
	}
}

// The same through a crash: the dispatcher process is killed (SIGKILL)
// at its first call, after claiming all five and taking the throttle's
// slots, before the folded ones' settlement was written or after; a
// second dispatcher recovers the leases, and the end is the same: 2 sent,
// 3 folded, each once into ada's next digest.
func TestThrottleFoldSurvivesACrash(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db, logFile, cfg := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log"), filepath.Join(dir, "c.yaml")
	// A short lease: the second dispatcher recovers the dead one's claims
	// a second and a quarter after they were made.
	if err := os.WriteFile(cfg, []byte(throttleDigestConfig+"dispatch: {lease: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	setTeam(t, dir, db, `{"id": "ada", "email": "ada@example.com"}`)
	for i := 1; i <= 5; i++ {
		sendNewsletter(t, db, i)
	}
	route := "*=log://" + logFile
	cmd := exec.Command(bin, "dispatch", "--config", cfg, "--db", db, "--until-idle", "--route", route, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "EDGERELAY_CRASH_AT=claimed:1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "crash point claimed:1 reached") {
		t.Fatalf("the first dispatcher was not killed at its first call: %v\n%s", err, out)
	}
	r := runCLI(t, "", "status", "--db", db, "--json")
	t.Logf("after the crash: %s", r.stdout)
	start := time.Now()
	r = runCLI(t, "", "dispatch", "--config", cfg, "--db", db, "--until-idle", "--route", route, "--json", "--log-level", "error")
	t.Logf("the second dispatcher took %s: %s", time.Since(start).Round(time.Millisecond), r.stdout)
	if r.code != 0 {
		t.Fatalf("the second dispatcher: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The first dispatcher's second call may have reached the provider
	// before the kill: at-least-once resends it after recovery, under the
	// same key (a duplicate the log provider cannot refuse).
	checkFolded(t, db, cfg, logFile, route, true)
}

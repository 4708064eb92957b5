package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Through the CLI: a recipient turned off marketing (preferences set), so
// dispatch skips their newsletter without an attempt while the other
// recipient gets theirs; show says why, status counts it; a required
// category cannot be turned off.
func TestPreferencesCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, logFile, cfg := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log"), filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(`categories:
  security: {required: true}
  marketing: {}
types:
  otp: {category: security}
  newsletter: {category: marketing}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "preferences", "set", "--config", cfg, "--db", db, "--off", "marketing", "ada"); r.code != 0 ||
		!strings.Contains(r.stdout, "marketing") {
		t.Fatalf("set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "preferences", "set", "--config", cfg, "--db", db, "--off", "security", "ada"); r.code != exitUsage ||
		!strings.Contains(r.stderr, `category "security" is required`) {
		t.Fatalf("turning a required category off: exit %d\n%s", r.code, r.stderr)
	}
	ev := `{"id": "n1", "type": "newsletter", "recipients": [{"id": "ada", "email": "ada@example.com"}, {"id": "ben", "email": "ben@example.com"}], "subject": "News", "body": "b"}`
	if r := runCLI(t, ev, "--db", db, "send"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := runCLI(t, "", "dispatch", "--config", cfg, "--db", db, "--until-idle", "--route", "*=log://"+logFile, "--json", "--log-level", "warn")
	if r.code != 0 || !strings.Contains(r.stdout, `"skipped":1`) || !strings.Contains(r.stdout, `"sent":1`) {
		t.Fatalf("dispatch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b, _ := os.ReadFile(logFile)
	if strings.Contains(string(b), "ada@example.com") || !strings.Contains(string(b), "ben@example.com") {
		t.Fatalf("the log provider got:\n%s", b)
	}
	r = runCLI(t, "", "show", "--db", db, "1")
	if r.code != 0 || !strings.Contains(r.stdout, "skipped") || !strings.Contains(r.stdout, `turned category "marketing" off`) {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "status", "--db", db, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"skipped":1`) {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A digest job of a tenant covers that tenant's feed items: its run's range
// is in the tenant's own item sequence, which another tenant's volume
// neither widens nor shifts. Run through the CLI with
// the config's `tenant:`.
func TestCronDigestCoversItsTenant(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(`jobs:
  weekly:
    schedule: "0 9 * * 1"
    digest:
      tenant: acme
      audience: team
      channel: email
      template: "{{range .Items}}{{.Subject}} {{end}}"
`), 0o644)
	members := filepath.Join(dir, "team.json")
	os.WriteFile(members, []byte(`{"members": [{"id": "ada", "email": "ada@example.com"}]}`), 0o644)
	if r := runCLI(t, "", "audience", "set", "--db", db, "--tenant", "acme", "team", members); r.code != 0 {
		t.Fatalf("audience set: exit %d %s", r.code, r.stderr)
	}
	send := func(tenant, id string) {
		t.Helper()
		ev := `{"id": "` + id + `", "type": "note", "tenant": "` + tenant + `", "feeds": ["*"], "subject": "` + id + `"}`
		if r := runCLI(t, ev, "send", "--db", db, "--log-level", "warn"); r.code != 0 {
			t.Fatalf("send %s: exit %d %s", id, r.code, r.stderr)
		}
	}
	digests := func() []string {
		t.Helper()
		sdb, err := sql.Open("sqlite", db)
		if err != nil {
			t.Fatal(err)
		}
		defer sdb.Close()
		rows, err := sdb.Query(`SELECT json_extract(payload, '$.body') FROM events WHERE event_id LIKE 'digest:weekly:%' ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var body string
			if err := rows.Scan(&body); err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.TrimSpace(body))
		}
		return out
	}
	run := func(at string) {
		t.Helper()
		if r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--route", "email=log:///dev/null",
			"--at", at, "--log-level", "warn", "weekly"); r.code != 0 {
			t.Fatalf("cron run --at %s: exit %d %s", at, r.code, r.stderr)
		}
	}
	// acme has more items than the default tenant, then fewer: a range in
	// the wrong sequence would drop acme's items or take none.
	// Two past runs of the schedule (cron run refuses a time not yet due):
	// the latest Monday 09:00 UTC, and the one before.
	last := time.Now().UTC().Truncate(time.Hour)
	for last.Weekday() != time.Monday || last.Hour() != 9 {
		last = last.Add(-time.Hour)
	}
	send("acme", "a1")
	send("acme", "a2")
	send("default", "d1")
	run(last.AddDate(0, 0, -7).Format(time.RFC3339))
	for i := range 4 {
		send("default", "d"+string(rune('2'+i)))
	}
	send("acme", "a3")
	run(last.Format(time.RFC3339))
	if got := digests(); !slices.Equal(got, []string{"a2 a1", "a3"}) {
		t.Fatalf("acme's digests %q, want [a2 a1] then [a3]", got)
	}
}

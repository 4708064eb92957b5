package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
)

// The suppression list through the commands: a DSN dropped in a
// Maildir is taken by suppressions bounce (matched by Message-ID, the file
// moved to cur/), the next email ends suppressed without an SMTP delivery;
// export, import (all or none, the line named), add and remove.
func TestSuppressionsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	sink := startSMTPSink(t, nil, nil)
	route := fmt.Sprintf("email=smtp://%s?from=news%%40example.com&starttls=none&timeout=5s&name=smtp", sink.addr)
	dispatch := func() cliResult {
		return runCLI(t, "", "dispatch", "--db", db, "--route", route, "--until-idle", "--log-level", "error")
	}
	// bounce/testdata's DSN returns the Message-ID of this notification:
	// tenant acme, event evt_dsn, recipient ada, by email.
	welcome := func(id string) string {
		return fmt.Sprintf(`{"id": %q, "tenant": "acme", "type": "welcome", "subject": "Welcome", "body": "Hello.",
			"recipients": [{"id": "ada", "email": "Ada@Example.com"}]}`, id)
	}
	if r := runCLI(t, welcome("evt_dsn"), "--db", db, "send"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := dispatch(); r.code != 0 || sink.snapshot().rcpt["Ada@Example.com"] != 1 {
		t.Fatalf("dispatch: %d %s; sink %+v", r.code, r.stderr, sink.snapshot().rcpt)
	}
	mdir := filepath.Join(dir, "bounces")
	for _, d := range []string{"new", "cur", "tmp"} {
		if err := os.MkdirAll(filepath.Join(mdir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dsn, err := os.ReadFile("bounce/testdata/dsn-hard-5.1.1.eml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mdir, "new", "1764590405.M1.mx"), dsn, 0o644)
	os.WriteFile(filepath.Join(mdir, "new", "1764590406.M2.mx"), []byte("Subject: not a report\r\n\r\nhi\r\n"), 0o644)
	r := runCLI(t, "", "suppressions", "bounce", "--db", db, mdir)
	if r.code != exitError || !strings.Contains(r.stdout, "dsn bounced of notification 1 (email \"Ada@Example.com\" of acme): suppressed, hard_bounce") ||
		!strings.Contains(r.stderr, "1764590406.M2.mx: unreadable bounce report") {
		t.Fatalf("bounce: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if left, _ := os.ReadDir(filepath.Join(mdir, "new")); len(left) != 0 {
		t.Errorf("new/ still holds %d messages, want them moved to cur/", len(left))
	}
	if r := runCLI(t, welcome("evt_dsn_2"), "--db", db, "send"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	dispatch()
	if n := sink.snapshot().rcpt["Ada@Example.com"]; n != 1 {
		t.Errorf("the SMTP server saw %d deliveries to ada, want 1: the second is suppressed", n)
	}
	if sh := runCLI(t, "", "show", "--db", db, "2"); !strings.Contains(sh.stdout, "suppressed after 0 attempts") {
		t.Errorf("show 2:\n%s", sh.stdout)
	}

	exp := runCLI(t, "", "suppressions", "export", "--db", db)
	lines := strings.Split(strings.TrimSpace(exp.stdout), "\n")
	if exp.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "acme,email,ada@example.com,hard_bounce,dsn,smtp,1,") {
		t.Fatalf("export: %d\n%s", exp.code, exp.stdout)
	}
	// A bad line refuses the whole import, naming the line.
	bad := "channel,address,reason\nsms,+15550100,manual\nsms,+15550101,whatever\n"
	if r := runCLI(t, bad, "suppressions", "import", "--db", db, "--tenant", "beta", "-"); r.code != exitError ||
		!strings.Contains(r.stderr, "line 3, column reason") || !strings.Contains(r.stderr, "nothing imported") {
		t.Fatalf("bad import: %d %s", r.code, r.stderr)
	}
	// acme's export, imported for beta (the tenant column is rewritten),
	// and one line of beta's own.
	in := strings.ReplaceAll(exp.stdout, "acme,", "beta,") + "beta,sms,+15550100,manual,,,,,,\n"
	if r := runCLI(t, in, "suppressions", "import", "--db", db, "-"); r.code != 0 || !strings.Contains(r.stdout, "imported 2 entries") {
		t.Fatalf("import: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "suppressions", "add", "--db", db, "--tenant", "beta", "--reason", "soft_bounce", "--ttl", "1h", "push", "tok-9"); r.code != 0 {
		t.Fatalf("add: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "suppressions", "add", "--db", db, "--tenant", "beta", "email", "not an address"); r.code != exitUsage || !strings.Contains(r.stderr, "address:") {
		t.Errorf("add of a bad address: %d %s", r.code, r.stderr)
	}
	var es []model.Suppression
	if err := json.Unmarshal([]byte(runCLI(t, "", "suppressions", "list", "--db", db, "--tenant", "beta", "--json").stdout), &es); err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].Address != "ada@example.com" || es[0].Source != model.SourceImport || es[0].Reason != model.ReasonHardBounce ||
		es[1].Channel != "push" || es[1].ExpiresAt == nil || es[2].Address != "+15550100" {
		t.Fatalf("beta's list: %+v", es)
	}
	if r := runCLI(t, "", "suppressions", "remove", "--db", db, "--tenant", "beta", "email", "ADA@example.com"); r.code != 0 {
		t.Fatalf("remove: %d %s", r.code, r.stderr)
	}
	if st := runCLI(t, "", "status", "--db", db); !regexp.MustCompile(`(?m)^addresses suppressed +3 `).MatchString(st.stdout) ||
		!regexp.MustCompile(`(?m)^  suppressed +1$`).MatchString(st.stdout) {
		t.Errorf("status:\n%s", st.stdout)
	}
	// In bulk: without --lift each suppressed one is named and kept; with
	// it, acme's entry goes and the notification is pending again.
	if r := runCLI(t, "", "retry", "--db", db, "--status", "suppressed"); r.code != exitError || !strings.Contains(r.stderr, "suppression list") {
		t.Errorf("retry --status suppressed: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "retry", "--db", db, "--status", "suppressed", "--lift"); r.code != 0 || !strings.Contains(r.stdout, "retried 1 notification") {
		t.Errorf("retry --status suppressed --lift: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "suppressions", "list", "--db", db, "--tenant", "acme"); strings.Contains(r.stdout, "ada@example.com") {
		t.Errorf("acme's entry after retry --lift:\n%s", r.stdout)
	}
}

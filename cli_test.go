package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/urfave/cli/v2"
	_ "modernc.org/sqlite"

	"github.com/edgerelay/edgerelay/config"
)

// cli runs the app in-process with buffers, as main would.
type cliResult struct {
	code           int
	stdout, stderr string
}

// parseMu lets one in-process app at a time set up and parse its flags:
// urfave/cli v2 writes into its shared help command while an app sets up
// (the binary runs one app per process). It is released when the
// command's action starts, so long runs (dispatch --until-idle) overlap.
var parseMu sync.Mutex

func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	app := newApp(strings.NewReader(stdin), &out, &errb)
	parseMu.Lock()
	var once sync.Once
	parsed := func() { once.Do(parseMu.Unlock) }
	defer parsed()
	onAction(app, parsed)
	code := runApp(app, append([]string{"edgerelay"}, args...), &errb)
	return cliResult{code, out.String(), errb.String()}
}

// onAction has every action of app call f before it runs.
func onAction(app *cli.App, f func()) {
	wrap := func(a cli.ActionFunc) cli.ActionFunc {
		if a == nil {
			return nil
		}
		return func(c *cli.Context) error { f(); return a(c) }
	}
	app.Action = wrap(app.Action)
	var walk func([]*cli.Command)
	walk = func(cs []*cli.Command) {
		for _, c := range cs {
			c.Action = wrap(c.Action)
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
}

const adaEvent = `{"id": "evt_501", "type": "payment.succeeded", "purpose": "receipt",
  "recipients": [{"id": "ada", "email": "ada@example.com"}, {"id": "ben", "email": "ben@example.com", "phone": "+15550100"}],
  "subject": "Your receipt", "body": "Thanks."}`

func decodeLines(t *testing.T, s string) []acceptedLine {
	t.Helper()
	var out []acceptedLine
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var l acceptedLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("output is not JSON lines: %v\n%s", err, s)
		}
		out = append(out, l)
	}
	return out
}

func TestSendPrintsOneLinePerNotificationAndDedupes(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	r := runCLI(t, adaEvent, "--db", db, "send")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	first := decodeLines(t, r.stdout)
	// ada: email; ben: email and sms (no channels listed: every address).
	if len(first) != 3 || first[0].Recipient != "ada" || first[2].Channel != "sms" {
		t.Fatalf("lines %+v", first)
	}
	for _, l := range first {
		if l.Result != "new" || l.Status != "pending" || !strings.HasPrefix(l.Key, "er1_") || l.ID == 0 {
			t.Fatalf("line %+v", l)
		}
	}
	// The same event again, from a file and with the flag after the command.
	f := filepath.Join(t.TempDir(), "event.json")
	os.WriteFile(f, []byte(adaEvent), 0o644)
	r = runCLI(t, "", "send", "--db", db, "--file", f)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	again := decodeLines(t, r.stdout)
	for i, l := range again {
		if l.Result != "duplicate" || l.ID != first[i].ID || l.Key != first[i].Key {
			t.Fatalf("resend line %d = %+v, want duplicate of %+v", i, l, first[i])
		}
	}
	if n := countRows(t, db, "notifications"); n != 3 {
		t.Fatalf("%d notifications after a resend, want 3", n)
	}
}

func TestSendRejectsBadEventsAndWritesNothing(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	for _, tc := range []struct{ name, in, field string }{
		{"missing id", `{"type": "x", "recipients": [{"id": "a", "email": "a@x"}]}`, "id: required"},
		{"unknown field", `{"id": "1", "type": "x", "recipents": []}`, "recipents: unknown field"},
		{"no address", `{"id": "1", "type": "x", "channels": ["sms"], "recipients": [{"id": "a", "email": "a@x"}]}`, `no address for channel "sms"`},
		{"second recipient bad", `{"id": "1", "type": "x", "recipients": [{"id": "a", "email": "a@x"}, {"email": "b@x"}]}`, "recipients[1].id: required"},
		{"not JSON", `{"id": "1", `, "truncated JSON"},
	} {
		r := runCLI(t, tc.in, "--db", db, "send")
		if r.code != exitRejected || !strings.Contains(r.stderr, tc.field) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line naming %q", tc.name, r.code, r.stderr, exitRejected, tc.field)
		}
		if r.stdout != "" {
			t.Errorf("%s: printed %q for a rejected event", tc.name, r.stdout)
		}
	}
	if _, err := os.Stat(db); err == nil {
		if n := countRows(t, db, "events") + countRows(t, db, "notifications"); n != 0 {
			t.Fatalf("%d rows written by rejected events", n)
		}
	}
	// Same id, different content: rejected, the first stays as it was.
	runCLI(t, adaEvent, "--db", db, "send")
	r := runCLI(t, strings.Replace(adaEvent, "Thanks.", "Thanks!", 1), "--db", db, "send")
	if r.code != exitRejected || !strings.Contains(r.stderr, "different content") {
		t.Fatalf("conflicting resend: exit %d %q", r.code, r.stderr)
	}
	if n := countRows(t, db, "notifications"); n != 3 {
		t.Fatalf("%d notifications, want 3", n)
	}
}

func TestDispatchShowStatusAndExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	logFile := filepath.Join(dir, "sent.log")
	if r := runCLI(t, adaEvent, "--db", db, "send"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	// Everything through the log provider: all sent, exit 0.
	r := runCLI(t, "", "dispatch", "--db", db, "--until-idle", "--route", "*=log://"+logFile, "--json", "--log-level", "warn")
	if r.code != 0 {
		t.Fatalf("dispatch exit %d: %s", r.code, r.stderr)
	}
	var sum struct{ Attempts, Sent int }
	json.Unmarshal([]byte(r.stdout), &sum)
	if sum.Sent != 3 || sum.Attempts != 3 {
		t.Fatalf("summary %q", r.stdout)
	}
	b, _ := os.ReadFile(logFile)
	if strings.Count(string(b), "\n") != 3 || !strings.Contains(string(b), "ada@example.com") {
		t.Fatalf("log provider wrote:\n%s", b)
	}
	// show by id and by key; status.
	r = runCLI(t, "", "show", "--db", db, "1")
	if r.code != 0 || !strings.Contains(r.stdout, "status     sent after 1 attempt") || !strings.Contains(r.stdout, "attempt 1  log://") {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var n struct {
		Key        string
		AttemptLog []struct{ Outcome string } `json:"attempt_log"`
	}
	json.Unmarshal([]byte(runCLI(t, "", "show", "--db", db, "--json", "1").stdout), &n)
	if len(n.AttemptLog) != 1 || n.AttemptLog[0].Outcome != "sent" {
		t.Fatalf("show --json: %+v", n)
	}
	if r := runCLI(t, "", "show", "--db", db, n.Key); r.code != 0 || !strings.Contains(r.stdout, n.Key) {
		t.Fatalf("show by key: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "show", "--db", db, "999"); r.code != exitError || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show missing: %d %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "status", "--db", db, "--json")
	var st struct {
		Counts    map[string]int
		Providers map[string]map[string]int
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Counts["sent"] != 3 || st.Counts["pending"] != 0 {
		t.Fatalf("status --json: %v %q", err, r.stdout)
	}
	if st.Providers["log://"+logFile]["sent"] != 3 {
		t.Fatalf("provider counts %v", st.Providers)
	}
	if r := runCLI(t, "", "status", "--db", db); r.code != 0 || !strings.Contains(r.stdout, "  sent        3\n") {
		t.Fatalf("status: %q", r.stdout)
	}

	// A provider that refuses for good: exit 3; retry puts it back.
	var calls atomic.Int32
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"error":"invalid recipient"}`, http.StatusUnprocessableEntity)
	}))
	defer bad.Close()
	db2 := filepath.Join(dir, "r2.db")
	runCLI(t, adaEvent, "--db", db2, "send")
	r = runCLI(t, "", "dispatch", "--db", db2, "--until-idle", "--log-level", "warn", "--route", "email=webhook+"+bad.URL, "--route", "sms=log://"+logFile)
	if r.code != exitFailed || !strings.Contains(r.stderr, "failed 2") {
		t.Fatalf("dispatch against a 422: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "retry", "--db", db2, "1"); r.code != 0 {
		t.Fatalf("retry: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "retry", "--db", db2, "3"); r.code != exitError || !strings.Contains(r.stderr, "is sent") {
		t.Fatalf("retry of a sent notification: %d %q", r.code, r.stderr)
	}

	// A provider that refuses for now: the retry is further off than
	// --max-wait, so dispatch exits 4 (waiting).
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	db3 := filepath.Join(dir, "r3.db")
	runCLI(t, adaEvent, "--db", db3, "send")
	r = runCLI(t, "", "dispatch", "--db", db3, "--until-idle", "--max-wait", "1s", "--log-level", "warn", "--route", "*=webhook+"+busy.URL)
	if r.code != exitWaiting || !strings.Contains(r.stderr, "3 waiting") {
		t.Fatalf("dispatch against a 503: exit %d %q", r.code, r.stderr)
	}
}

func TestCannotWorkIsOneLineAndExit1(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"db in a missing directory", []string{"dispatch", "--until-idle", "--db", filepath.Join(dir, "no", "such", "r.db")}, exitError,
			"directory " + filepath.Join(dir, "no", "such") + " does not exist"},
		{"status of a missing db", []string{"status", "--db", filepath.Join(dir, "typo.db")}, exitError, "typo.db: no such file"},
		{"bad route", []string{"dispatch", "--db", filepath.Join(dir, "a.db"), "--route", "email=ftp://x"}, exitUsage, `unknown scheme "ftp"`},
		{"route without =", []string{"dispatch", "--db", filepath.Join(dir, "a.db"), "--route", "email"}, exitUsage, "want CHANNEL=URL"},
		{"missing config file", []string{"status", "--config", filepath.Join(dir, "none.yaml")}, exitError, "config"},
		{"unknown flag", []string{"send", "--nope"}, exitUsage, "flag provided but not defined"},
		{"bad delivery", []string{"dispatch", "--db", filepath.Join(dir, "a.db"), "--delivery", "otp=twice"}, exitUsage, "at-most-once"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
	}
	// A database from a newer edgerelay is refused, untouched.
	newer := filepath.Join(dir, "newer.db")
	sdb, _ := sql.Open("sqlite", newer)
	sdb.Exec(`PRAGMA user_version = 42`)
	sdb.Close()
	if r := runCLI(t, "", "status", "--db", newer); r.code != exitError || !strings.Contains(r.stderr, "newer than this binary") {
		t.Fatalf("newer database: %d %q", r.code, r.stderr)
	}
	// A config file with a typo is refused, naming it.
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("rotues:\n  email: log://stdout\n"), 0o644)
	if r := runCLI(t, "", "dispatch", "--config", cfg, "--db", filepath.Join(dir, "b.db")); r.code != exitError || !strings.Contains(r.stderr, "rotues") {
		t.Fatalf("config typo: %d %q", r.code, r.stderr)
	}
}

func countRows(t *testing.T, db, table string) int {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var n int
	if err := sdb.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// exampleEnv sets what the example config's ${VAR}s need, and makes the
// application database its tail source reads (the config check opens it).
func exampleEnv(t *testing.T) {
	app := filepath.Join(t.TempDir(), "app.db")
	tailApp(t, app)
	t.Setenv("APP_DB", app)
	for k, v := range map[string]string{"RESEND_TOKEN": "re_test_123", "SMTP_PASSWORD": "pw",
		"WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "ACME_API_TOKEN": "acme-token-0123456789",
		"TWILIO_ACCOUNT_SID": "AC0123", "TWILIO_AUTH_TOKEN": "twilio-token",
		"DISCORD_WEBHOOK_TOKEN": "discord-webhook-token", "TELEGRAM_BOT_TOKEN": "123456:telegram-bot-token",
		"TEAMS_WORKFLOW_SIG": "teams-workflow-sig", "MAILGUN_API_KEY": "mailgun-api-key",
		"MAILGUN_WEBHOOK_SIGNING_KEY": "mailgun-signing-key", "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
		"AWS_SECRET_ACCESS_KEY": "aws-secret-key"} {
		t.Setenv(k, v)
	}
	// A P-256 key in PKCS #8 PEM is both a VAPID key and an APNs .p8.
	for _, env := range []string{"VAPID_KEY_FILE", "APNS_KEY_FILE"} {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), env+".pem")
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv(env, f)
	}
}

// The example config in testdata loads, builds every provider and resolves
// (so it cannot rot).
func TestExampleConfigLoads(t *testing.T) { // not parallel: it sets environment variables
	exampleEnv(t)
	if r := runCLI(t, "", "config", "check", "testdata/edgerelay.yaml"); r.code != 0 ||
		!strings.Contains(r.stdout, "route email    resend -> smtp-backup") || strings.Contains(r.stdout, "re_test_123") ||
		!strings.Contains(r.stdout, "route chat") || strings.Contains(r.stdout+r.stderr, "discord-webhook-token") ||
		!strings.Contains(r.stdout, "route telegram") || strings.Contains(r.stdout+r.stderr, "telegram-bot-token") ||
		!strings.Contains(r.stdout, "route teams") || strings.Contains(r.stdout+r.stderr, "teams-workflow-sig") ||
		!strings.Contains(r.stdout, "resend -> smtp-backup -> mailgun-eu") || strings.Contains(r.stdout+r.stderr, "mailgun-api-key") ||
		strings.Contains(r.stdout+r.stderr, "mailgun-signing-key") ||
		!strings.Contains(r.stdout, "-> mailgun-eu -> ses") || strings.Contains(r.stdout+r.stderr, "aws-secret-key") ||
		!strings.Contains(r.stdout, "route webpush") || !strings.Contains(r.stdout, "route push") {
		t.Fatalf("config check: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := runCLI(t, "", "dispatch", "--until-idle", "--config", "testdata/edgerelay.yaml", "--db", filepath.Join(t.TempDir(), "c.db"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	cfg, err := config.Load("testdata/edgerelay.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Types["otp.requested"].Delivery != "at-most-once" || cfg.Channels["sms"].MaxAttempts != 5 || len(cfg.Routes) != 8 {
		t.Fatalf("config %+v", cfg)
	}
}

// config check prints every problem with its line, and the routes of a
// good file.
func TestConfigCheck(t *testing.T) { // not parallel: it sets an environment variable
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`providers:
  resend:
    url: email-http+https://api.example.com/emails?from=billing%40example.com&preset=resend
    options:
      token: ${EDGERELAY_TEST_UNSET_TOKEN}
  backup:
    url: email-http+https://mail.example.com/send?from=billing%40example.com&fromm=x
routes:
  email: [resend, backup, nosuch]
types:
  otp:
    delivery: twice
`), 0o644)
	r := runCLI(t, "", "config", "check", bad)
	for _, want := range []string{"4 problems", "line 2 (providers.resend)", "EDGERELAY_TEST_UNSET_TOKEN is not set",
		`line 9 (routes.email): route "email": no provider named "nosuch"`, "line 12 (types.otp.delivery)", `unknown parameter "fromm"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check output lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.code != exitError {
		t.Errorf("exit %d", r.code)
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(`providers:
  primary:
    url: webhook+https://hooks.example.com/a
    options:
      token: ${EDGERELAY_TEST_SET_TOKEN}
    concurrency: 4
  backup:
    url: webhook+https://hooks.example.com/b
routes:
  webhook: [primary, backup]
  emial: backup
  chat: primary
tenants:
  acme:
    routes:
      webhook: backup
`), 0o644)
	t.Setenv("EDGERELAY_TEST_SET_TOKEN", "secret-value-123")
	r = runCLI(t, "", "config", "check", good)
	if r.code != 0 || !strings.Contains(r.stdout, "route webhook  primary -> backup") || !strings.Contains(r.stdout, "tenant acme: route webhook backup") ||
		strings.Contains(r.stdout+r.stderr, "secret-value-123") {
		t.Fatalf("good config: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A route for a channel a slip away from a standard one is named (a
	// channel of one's own may have any name, so it is not a problem).
	if !strings.Contains(r.stdout, "route emial    backup   (not a standard channel: did you mean email?") ||
		strings.Contains(r.stdout, "route chat     primary   (") {
		t.Fatalf("the near miss: %s", r.stdout)
	}
}

// A scheduled batch run is keyed by its identity: repeating the run sends
// nothing twice; the next run of the same file is a new send.
func TestCronBatchRunIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	abs, _ := filepath.Abs("testdata/batch_example.jsonl")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("jobs:\n  nightly:\n    schedule: \"0 2 * * *\"\n    batch:\n      file: "+abs+"\n"), 0o644)
	run := func(at string) {
		t.Helper()
		if r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--at", at, "--log-level", "warn", "nightly"); r.code != 0 {
			t.Fatalf("cron run --at %s: exit %d %s", at, r.code, r.stderr)
		}
	}
	run("2026-11-30T02:00:00Z")
	first := countRows(t, db, "events")
	if first == 0 {
		t.Fatal("the batch job accepted nothing")
	}
	run("2026-11-30T02:00:00Z") // the same run again
	if n := countRows(t, db, "events"); n != first {
		t.Fatalf("repeating a run added %d events", n-first)
	}
	run("2026-12-01T02:00:00Z") // the next night
	if n := countRows(t, db, "events"); n != 2*first {
		t.Fatalf("the next run made %d events, want %d", n-first, first)
	}
	r := runCLI(t, "", "cron", "list", "--config", cfg, "--db", db)
	if !strings.Contains(r.stdout, "nightly (last run 2026-12-01T02:00:00Z)") {
		t.Fatalf("cron list:\n%s%s", r.stdout, r.stderr)
	}
}

// A corrupt database file is refused with one line and exit 1 by every
// command, and nothing is written to it.
func TestCorruptDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "bad.db")
	garbage := bytes.Repeat([]byte("not a database "), 1000)
	os.WriteFile(db, garbage, 0o644)
	for _, args := range [][]string{{"status"}, {"send"}, {"dispatch", "--until-idle"}, {"serve", "--listen", "127.0.0.1:0"}} {
		r := runCLI(t, adaEvent, append(args, "--db", db)...)
		if r.code != exitError || !strings.Contains(r.stderr, "file is not a database") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if b, _ := os.ReadFile(db); !bytes.Equal(b, garbage) {
		t.Fatal("the corrupt file was changed")
	}
}

// A mistyped --db is refused, named, by every command that must not create
// a database; none leaves a file behind. send into a directory that does
// not exist says so (SQLite says "unable to open database file (14)").
func TestMistypedDBIsRefusedNotCreated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.db")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("jobs:\n  tidy:\n    schedule: \"@daily\"\n    prune:\n      older_than: 30d\n"), 0o644)
	for _, args := range [][]string{
		{"prune"}, {"cron", "list", "--config", cfg}, {"status"}, {"status", "--json"}, {"show", "1"}, {"show", "1", "--json"},
		{"backup", filepath.Join(dir, "copy.db")}, {"list"}, {"list", "--status", "dead"}, {"retry", "1"},
		{"retry", "--status", "dead", "--dry-run"}, {"retry", "--status", "dead"}, {"quarantine", "list"}, {"addresses", "list"}, {"token", "list"},
	} {
		r := runCLI(t, "", append(args, "--db", typo)...)
		if r.code != exitError || !strings.Contains(r.stderr, "database "+typo+": no such file") || !strings.Contains(r.stderr, "check --db") {
			t.Errorf("%v --db %s: exit %d, stderr %q; want exit 1 naming the file", args, typo, r.code, r.stderr)
		}
		if m, _ := filepath.Glob(typo + "*"); len(m) > 0 {
			t.Fatalf("%v created %v", args, m)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "copy.db")); err == nil {
		t.Fatal("backup of a missing database wrote a copy")
	}
	// A directory is not a database file.
	if r := runCLI(t, "", "status", "--db", dir); r.code != exitError || !strings.Contains(r.stderr, "is a directory") {
		t.Errorf("status --db DIR: exit %d %q", r.code, r.stderr)
	}
	missing := filepath.Join(dir, "x", "y")
	for _, args := range [][]string{{"send"}, {"dispatch", "--until-idle"}, {"serve", "--listen", "127.0.0.1:0"}, {"token", "create", "--tenant", "acme"}} {
		r := runCLI(t, adaEvent, append(args, "--db", filepath.Join(missing, "r.db"))...)
		want := "database " + filepath.Join(missing, "r.db") + ": directory " + missing + " does not exist"
		if r.code != exitError || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "(14)") {
			t.Errorf("%v into a missing directory: exit %d, stderr %q; want %q", args, r.code, r.stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Fatal("a command created the missing directory")
	}
}

func TestDBURLIsNotAFile(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{"postgres://u@127.0.0.1:5432/relay": true, "postgresql://h/db": true, "./edgerelay.db": false,
		"/var/lib/edgerelay/relay.db": false, "relay.db": false, "dir.v2://x/r.db": false, "C:\\x\\r.db": false} {
		if got := isDBURL(path); got != want {
			t.Errorf("isDBURL(%q) = %v, want %v", path, got, want)
		}
		if want && (dbExists(path) != nil || dbDirExists(path) != nil) {
			t.Errorf("%s was looked for as a file", path)
		}
	}
}

// A URL of a database edgerelay has no store for is refused, its scheme
// named and its password not shown; nothing is created (it was taken for
// a SQLite file name).
func TestDBURLWithoutAStoreIsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"status"}, {"send"}} {
		cmd := runCLI(t, adaEvent, append(args, "--db", "mysql://app:s3cret@127.0.0.1:3306/relay")...)
		if cmd.code != exitError || !strings.Contains(cmd.stderr, "no store for mysql:// URLs") || strings.Contains(cmd.stderr, "s3cret") {
			t.Errorf("%v --db mysql://…: exit %d, stderr %q; want exit 1 naming the scheme, no password", args, cmd.code, cmd.stderr)
		}
	}
	if m, _ := filepath.Glob("mysql*"); len(m) > 0 {
		t.Fatalf("created %v", m)
	}
}

// serve --listen bogus says the address is malformed before it opens
// anything: no database is created.
func TestServeRefusesAMalformedListenAddress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "bogus"}, `--listen "bogus": not an address to listen on`},
		{[]string{"--listen", "127.0.0.1:99999"}, `--listen "127.0.0.1:99999"`},
		{[]string{"--listen", "127.0.0.1:0", "--metrics-listen", "nope"}, `--metrics-listen "nope"`},
		{[]string{"--listen", "127.0.0.1:0", "--route", "*=log://" + filepath.Join(dir, "sent.log"), "--metrics-listen", "127.0.0.1"}, `--metrics-listen "127.0.0.1"`},
	} {
		r := runCLI(t, "", append([]string{"serve", "--db", db}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "want HOST:PORT") {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) > 0 {
		t.Fatalf("a malformed address left %v (opened before it was checked)", m)
	}
}

// An unknown command is a usage error (exit 2, not 3: that is dispatch's),
// with the commands to choose from, on stderr.
func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args             []string
		name, list, mean string // mean: the "did you mean" expected, "" for none
	}{
		{[]string{"bogus"}, "bogus", "status", ""},
		{[]string{"--db", "x.db", "stauts", "--json"}, "stauts", "dispatch", "status"},
		{[]string{"help", "bogus"}, "bogus", "status", ""},
		{[]string{"feed", "bogus"}, "bogus", "members", ""},
		{[]string{"quarantine", "lsit"}, "lsit", "drop", "list"},
		{[]string{"lst"}, "lst", "status", "list"},
		{[]string{"dispath", "--until-idle"}, "dispath", "status", "dispatch"},
		{[]string{"template", "lst"}, "lst", "list", "list"},
	} {
		r := runCLI(t, "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "`+c.name+`"`) || !strings.Contains(r.stderr, "Commands:") ||
			!strings.Contains(r.stderr, "   "+c.list+" ") || r.stdout != "" {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q", c.args, r.code, r.stdout, r.stderr)
		}
		if mean := `did you mean "` + c.mean + `"?`; (c.mean != "") != strings.Contains(r.stderr, "did you mean") ||
			c.mean != "" && !strings.Contains(r.stderr, mean) {
			t.Errorf("%v: stderr %q, want %s", c.args, r.stderr, map[bool]string{true: mean, false: "no suggestion"}[c.mean != ""])
		}
	}
	if m, _ := filepath.Glob("x.db*"); len(m) > 0 {
		t.Fatalf("an unknown command created %v", m)
	}
	// Help is not an error.
	if r := runCLI(t, "", "help", "status"); r.code != 0 || !strings.Contains(r.stdout, "edgerelay status") {
		t.Fatalf("help status: %d %q", r.code, r.stderr)
	}
}

package config

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkProblems is what config check says of the file at path: its
// problems, or nil if it has none.
func checkProblems(t *testing.T, path string) []string {
	t.Helper()
	_, err := Check(path)
	if err == nil {
		return nil
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("config check %s: %v, not a list of problems", path, err)
	}
	return ce.Problems
}

// outboxApp makes an application's SQLite database at path with the
// outbox table of ../outbox.sql, for tail: sources that must open.
func outboxApp(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ddl, err := os.ReadFile("../outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
}

// Each problem alone is found, and is the only one.
func TestConfigProblemsOneByOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	app := filepath.Join(dir, "app.db")
	outboxApp(t, app)
	if err := os.Mkdir(filepath.Join(dir, "d.csv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.csv"), []byte("id,colour\n1,blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	subst := strings.NewReplacer("$DIR", dir, "$APP", app)
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "db: ./x.db\nrotues:\n  email: log://stdout\n",
			"line 2: unknown key `rotues` (did you mean `routes`?)"},
		{"unknown key, nothing close", "colour: blue\n",
			"line 1: unknown key `colour` (known here: api, categories, channels, db, dispatch, jobs, limits, providers, retry, routes, suppression, tail, templates, tenant_categories, tenants, types, workflows)"},
		{"unknown nested key", "providers:\n  p:\n    url: log://stderr\n    concurency: 2\n",
			"line 4 (providers.p): unknown key `concurency` (did you mean `concurrency`?)"},
		{"unknown key in a job's digest", "jobs:\n  d:\n    schedule: '@daily'\n    digest: {audience: all, channel: email, max_item: 5}\n",
			"line 4 (jobs.d.digest): unknown key `max_item` (did you mean `max_items`?)"},
		{"unknown key in a list item", "tail:\n  - sorce: sqlite:///x.db\n",
			"line 2 (tail[0]): unknown key `sorce` (did you mean `source`?)"},
		{"word for a number", "retry:\n  max_attempts: ten\n",
			`line 2 (retry.max_attempts): want a whole number, got "ten"`},
		{"quoted number", "dispatch:\n  workers: \"8\"\n",
			`line 2 (dispatch.workers): want a whole number, got the string "8" (write it without quotes)`},
		{"fraction for a count", "limits:\n  max_recipients: 1.5\n",
			`line 2 (limits.max_recipients): want a whole number, got 1.5`},
		{"word for a rate", "providers:\n  p: {url: log://stderr, rate: fast}\n",
			`line 2 (providers.p.rate): want a number, got "fast"`},
		{"list for a mapping", "limits: [1, 2]\n",
			"line 1 (limits): want a mapping (keys: max_recipients), got a list"},
		{"mapping for a list", "tail:\n  source: sqlite:///x.db\n",
			"line 2 (tail): want a list, got a mapping"},
		{"mapping for a string", "db:\n  path: x.db\n",
			"line 2 (db): want a string, got a mapping"},
		{"not a duration", "retry:\n  max_age: forever\n",
			`line 2 (retry.max_age): "forever" is not a duration (write e.g. 90s, 15m, 12h)`},
		{"negative duration", "dispatch:\n  lease: -5s\n",
			`line 2 (dispatch.lease): duration "-5s" is negative`},
		{"route of a mapping", "routes:\n  email: {a: b}\n",
			"line 2 (routes.email): want a provider name or URL, or a list of them, got a mapping"},
		{"unknown key beside a merge", "retry: &r {max_attempts: 3}\nchannels:\n  sms:\n    <<: *r\n    max_attemps: 4\n",
			"line 5 (channels.sms): unknown key `max_attemps` (did you mean `max_attempts`?)"},
		{"second document", "db: a.db\n---\ndb: b.db\n",
			"line 3: a second YAML document (after ---) would be ignored: keep the config in one"},

		{"zero workers", "dispatch:\n  workers: 0\n",
			"line 2 (dispatch.workers): workers must be positive, got 0 (leave it out for the default, 2048)"},
		{"zero lease", "dispatch:\n  lease: 0s\n",
			"line 2 (dispatch.lease): lease must be positive, got 0s (leave it out for the default, 1m0s)"},
		{"zero invalid address ttl", "dispatch:\n  invalid_address_ttl: 0s\n",
			"line 2 (dispatch.invalid_address_ttl): invalid_address_ttl must be positive, got 0s (leave it out for the default, suppression.hard_bounce_ttl's)"},
		{"negative max_attempts", "retry:\n  max_attempts: -3\n",
			"line 2 (retry.max_attempts): max_attempts must be positive, got -3 (leave it out for the default, 10)"},
		{"zero base delay", "types:\n  otp:\n    retry: {base_delay: 0s}\n",
			"line 3 (types.otp.retry.base_delay): base_delay must be positive, got 0s (leave it out for the default, 2s)"},
		{"max delay below base delay", "retry:\n  base_delay: 1m\n  max_delay: 10s\n",
			"line 3 (retry.max_delay): max_delay 10s is below base_delay 1m0s"},
		{"zero max recipients", "limits:\n  max_recipients: 0\n",
			"line 2 (limits.max_recipients): max_recipients must be positive, got 0 (leave it out for the default, 10000)"},
		{"negative max body", "api:\n  max_body: -1\n",
			"line 2 (api.max_body): max_body must be positive, got -1 (leave it out for the default, 1048576)"},
		{"zero max conns", "api:\n  max_conns: 0\n",
			"line 2 (api.max_conns): max_conns must be positive, got 0 (leave it out for the default, 1024)"},
		{"zero max batch", "api:\n  max_batch: 0\n",
			"line 2 (api.max_batch): max_batch must be positive, got 0 (leave it out for the default, 100)"},
		{"zero key ttl", "api:\n  key_ttl: 0s\n",
			"line 2 (api.key_ttl): key_ttl must be positive, got 0s (leave it out for the default, 24h0m0s)"},
		{"zero body timeout", "api:\n  body_timeout: 0s\n",
			"line 2 (api.body_timeout): body_timeout must be positive, got 0s (leave it out for the default, 10s)"},
		{"listen not an address", "api:\n  listen: bogus\n",
			`line 2 (api.listen): listen "bogus": want HOST:PORT, e.g. 127.0.0.1:8025`},
		{"listen port not a number", "api:\n  listen: 127.0.0.1:http-ish\n",
			`line 2 (api.listen): listen "127.0.0.1:http-ish": the port must be a number from 0 to 65535`},
		{"console on the API's address", "api:\n  listen: 127.0.0.1:8025\n  console_listen: 127.0.0.1:8025\n",
			`line 3 (api.console_listen): console_listen "127.0.0.1:8025" is the API's address, where the console is served at /console already: give it an address of its own, or leave it out`},
		{"console address malformed", "api:\n  console_listen: localhost\n",
			`line 2 (api.console_listen): console_listen "localhost": want HOST:PORT, e.g. 127.0.0.1:8025`},
		{"a trusted proxy that is not an address", "api:\n  trusted_proxies: [10.0.0.0/8, proxy.local]\n",
			`line 2 (api.trusted_proxies): trusted_proxies: "proxy.local": want a CIDR (10.0.0.0/8) or an address (10.0.0.5)`},
		{"metrics on the API's address", "api:\n  listen: 127.0.0.1:8025\n  metrics_listen: 127.0.0.1:8025\n",
			`line 3 (api.metrics_listen): metrics_listen "127.0.0.1:8025" is the API's address: give metrics an address of their own, or use metrics_token`},
		{"negative concurrency", "providers:\n  p: {url: log://stderr, concurrency: -1}\n",
			"line 2 (providers.p.concurrency): concurrency cannot be negative (0 is the default of the provider's kind)"},
		{"burst without rate", "providers:\n  p: {url: log://stderr, burst: 5}\n",
			"line 2 (providers.p.burst): burst has no effect without rate"},
		{"provider without url", "providers:\n  p: {concurrency: 1}\n",
			`line 2 (providers.p.url): provider "p" has no url`},
		{"provider url refused", "providers:\n  p:\n    url: webhook+https://h.example.com/x?timeot=5s\n",
			`line 2 (providers.p): provider URL "webhook+https://h.example.com/x?name=p&timeot=REDACTED": unknown parameter "timeot"`},
		{"two providers with one name", "providers:\n  a: {url: log://stderr}\n  b: {url: 'log://stdout?name=a'}\n",
			`line 3 (providers.b): provider name "a" is taken by providers.a: give each its own name (name= in its URL)`},
		{"route to a misspelt provider", "providers:\n  resend: {url: log://stderr}\nroutes:\n  email: resnd\n",
			`line 4 (routes.email): route "email": no provider named "resnd" (did you mean ` + "`resend`" + `?)`},
		{"route lists nothing", "routes:\n  email: []\n",
			`line 2 (routes.email): route "email" lists no provider`},
		{"route URL refused", "routes:\n  email: ftp://x\n",
			`line 2 (routes.email): provider URL "ftp://x": unknown scheme "ftp"`},
		{"retry policy for an unrouted channel", "routes:\n  email: log://stderr\nchannels:\n  emial: {max_attempts: 3}\n",
			"line 4 (channels.emial): no route serves channel \"emial\" (did you mean `email`?)"},
		{"delivery mode", "types:\n  otp: {delivery: twice}\n",
			`line 2 (types.otp.delivery): delivery mode "twice": want at-least-once or at-most-once`},
		{"tenant name", "tenants:\n  \"bad tenant\": {}\n",
			`line 2 (tenants.bad tenant): tenant name "bad tenant": use 1 to 64 letters, digits, '.', '_' or '-'`},
		{"short token", "tenants:\n  acme: {tokens: [short]}\n",
			"line 2 (tenants.acme.tokens): tokens[0]: shorter than 16 characters"},
		{"one token for two tenants", "tenants:\n  a: {tokens: [same-token-0123456789]}\n  b: {tokens: [same-token-0123456789]}\n",
			"line 3 (tenants.b.tokens): tokens[0]: tenant a has the same token"},
		{"bad time zone", "jobs:\n  j:\n    schedule: '@daily'\n    timezone: Mars/Olympus\n    prune: {older_than: 30d}\n",
			`line 4 (jobs.j.timezone): time zone "Mars/Olympus": unknown time zone Mars/Olympus`},
		{"bad schedule", "jobs:\n  j:\n    schedule: '61 * * * *'\n    prune: {older_than: 30d}\n",
			`line 3 (jobs.j.schedule): schedule "61 * * * *": `},
		{"no schedule", "jobs:\n  j:\n    prune: {older_than: 30d}\n",
			"line 2 (jobs.j.schedule): a job needs a schedule: a cron expression, @daily, or @every 1h"},
		{"missed", "jobs:\n  j:\n    schedule: '@daily'\n    missed: always\n    prune: {older_than: 30d}\n",
			`line 4 (jobs.j.missed): missed "always": want skip or run-once`},
		{"a job with two kinds", "jobs:\n  j:\n    schedule: '@daily'\n    prune: {older_than: 30d}\n    digest: {audience: all, channel: email}\n",
			"line 2 (jobs.j): a job does exactly one of digest, prune or batch; this one has digest and prune"},
		{"a job with no kind", "jobs:\n  j:\n    schedule: '@daily'\n",
			"line 2 (jobs.j): a job does exactly one of digest, prune or batch; this one has none"},
		{"digest without audience", "jobs:\n  j:\n    schedule: '@daily'\n    digest: {channel: email}\n",
			"line 4 (jobs.j.digest.audience): a digest needs an audience"},
		{"digest channel with no route", "routes:\n  email: log://stderr\njobs:\n  j:\n    schedule: '@daily'\n    digest: {audience: all, channel: pigeon}\n",
			`line 6 (jobs.j.digest.channel): channel "pigeon" has no route (routes: email; add one under routes:, or a "*" route)`},
		{"digest template does not parse", "jobs:\n  j:\n    schedule: '@daily'\n    digest:\n      audience: all\n      channel: email\n      template: '{{range .Items}}'\n",
			"line 7 (jobs.j.digest.template): template: "},
		{"digest template names no field", "jobs:\n  j:\n    schedule: '@daily'\n    digest:\n      audience: all\n      channel: email\n      template: '{{.User.Nmae}}'\n",
			"line 7 (jobs.j.digest.template): template: "},
		{"digest max_items zero", "jobs:\n  j:\n    schedule: '@daily'\n    digest: {audience: all, channel: email, max_items: 0}\n",
			"line 4 (jobs.j.digest.max_items): max_items must be positive, got 0 (leave it out for the default, 50)"},
		{"prune age", "jobs:\n  j:\n    schedule: '@daily'\n    prune: {older_than: soon}\n",
			`line 4 (jobs.j.prune.older_than): age "soon": write e.g. 30d, 2w or 36h`},
		{"batch without file", "jobs:\n  j:\n    schedule: '@daily'\n    batch: {}\n",
			"line 4 (jobs.j.batch.file): a batch job needs a file"},
		{"missing batch file", "jobs:\n  j:\n    schedule: '@daily'\n    batch: {file: /nonexistent/edgerelay-test/b.jsonl}\n",
			"line 4 (jobs.j.batch.file): open /nonexistent/edgerelay-test/b.jsonl: no such file or directory"},
		{"batch file of no known format", "jobs:\n  j:\n    schedule: '@daily'\n    batch: {file: ../testdata/event.json}\n",
			"line 4 (jobs.j.batch.file): ../testdata/event.json: cannot tell the format from the extension (want .jsonl, .ndjson or .csv)"},
		{"batch file a directory", "jobs:\n  j:\n    schedule: '@daily'\n    batch: {file: $DIR/d.csv}\n",
			"line 4 (jobs.j.batch.file): $DIR/d.csv is not a file"},
		{"batch file with a bad header", "jobs:\n  j:\n    schedule: '@daily'\n    batch: {file: $DIR/bad.csv}\n",
			"line 4 (jobs.j.batch.file): $DIR/bad.csv: "},
		{"tail source scheme", "tail:\n  - source: oracle://db.example.com/app\n",
			`line 2 (tail[0].source): bad source URL: oracle://db.example.com/app: unknown scheme "oracle" (supported: mariadb, mysql, postgres, postgresql, sqlite)`},
		{"tail source parameter", "tail:\n  - source: sqlite:///x.db?tabel=outbox\n",
			`line 2 (tail[0].source): bad source URL: sqlite:///x.db?tabel=outbox: unknown parameter "tabel"`},
		{"tail source missing", "tail:\n  - source: sqlite:///nonexistent/edgerelay-test/app.db\n",
			"line 2 (tail[0].source): source sqlite:///nonexistent/edgerelay-test/app.db?table=edgerelay_outbox: stat /nonexistent/edgerelay-test/app.db: no such file or directory"},
		{"tail without source", "tail:\n  - poll: 1s\n",
			"line 2 (tail[0].source): source is required"},
		{"tail poll zero", "tail:\n  - {source: 'sqlite://$APP', poll: 0s}\n",
			"line 2 (tail[0].poll): poll must be positive, got 0s (leave it out for the default, 1s)"},
		{"tail table missing", "tail:\n  - source: 'sqlite://$APP?table=outbox'\n",
			`line 2 (tail[0].source): source sqlite://$APP?table=outbox: no table "outbox" in $APP`},
		{"workflow on a channel without a route", "routes: {email: log://stdout}\nworkflows:\n  - type: t\n    steps:\n      - {id: a, channels: [email]}\n      - {id: b, channels: [sms]}\n",
			`line 6 (workflows[0].steps[1].channels[0]): "sms" is not a channel of this relay`},
		{"workflow delay not a duration", "workflows:\n  - type: t\n    steps:\n      - {id: a, delay: {for: soon}}\n      - {id: b, channels: [email]}\n",
			`line 4 (workflows[0].steps[0].delay.for): not a duration such as 30s, 15m or 72h: "soon"`},
		{"workflow condition on a later step", "workflows:\n  - type: t\n    steps:\n      - {id: a, channels: [email], if: steps.b.failed}\n      - {id: b, channels: [email]}\n",
			"line 4 (workflows[0].steps[0].if): steps.b is this step or a later one"},
		{"workflow throttle of none", "workflows:\n  - type: t\n    steps:\n      - {id: a, throttle: {max: 0, per: 1h}}\n      - {id: b, channels: [email]}\n",
			"line 4 (workflows[0].steps[0].throttle.max): 0: at least 1 run must pass in each window"},
		{"workflow throttled read of an ending throttle", "workflows:\n  - type: t\n    steps:\n      - {id: a, throttle: {max: 2, per: 1h}}\n      - {id: b, channels: [email], if: steps.a.throttled}\n",
			"line 5 (workflows[0].steps[1].if): steps.a ends the runs it throttles (excess: end)"},
		{"workflow batch schedule", "workflows:\n  - type: t\n    steps:\n      - {id: a, batch: {schedule: '0 8 * *'}}\n      - {id: b, channels: [email]}\n",
			`line 4 (workflows[0].steps[0].batch.schedule): "0 8 * *": not a cron schedule`},
		{"workflow type twice", "workflows:\n  - {type: t, steps: [{id: a, channels: [email]}]}\n  - {type: t, steps: [{id: b, channels: [email]}]}\n",
			`line 3 (workflows[1].type): "t" is defined for tenant default by workflows[0] already`},
		{"unset variable", "api:\n  metrics_token: ${EDGERELAY_TEST_SURELY_UNSET}\n",
			"line 2 (api.metrics_token): metrics_token: environment variable EDGERELAY_TEST_SURELY_UNSET is not set"},
	} {
		tc.yaml, tc.want = subst.Replace(tc.yaml), subst.Replace(tc.want)
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		got := checkProblems(t, path)
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
			t.Errorf("%s: problems %q, want one: %s", tc.name, got, tc.want)
		}
	}
}

// Anchors, aliases and merge keys are read as yaml.v3 reads them: a merged
// key is known, and its value is checked and applied.
func TestConfigAnchorsAndMerges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`retry: &policy
  max_attempts: 4
  max_age: 2h
channels:
  sms:
    <<: *policy
    max_age: 30m
  push: *policy
routes:
  "*": &log log://stderr
  sms: *log
`), 0o644)
	if got := checkProblems(t, path); got != nil {
		t.Fatalf("config check: %q", got)
	}
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sms, push := cfg.Channels["sms"], cfg.Channels["push"]; sms.MaxAttempts != 4 || time.Duration(sms.MaxAge) != 30*time.Minute ||
		push.MaxAttempts != 4 || time.Duration(push.MaxAge) != 2*time.Hour {
		t.Fatalf("channels %+v", cfg.Channels)
	}
}

// The workflow example of docs/workflows.md is a config file that checks.
func TestWorkflowsDocExampleChecks(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(block, "workflows:") {
		t.Fatal("docs/workflows.md has no yaml example with workflows:")
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := checkProblems(t, path); got != nil {
		t.Fatalf("the example: %q", got)
	}
	cfg, err := Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if ws := cfg.RelayOptions().Workflows; len(ws) != 1 || ws[0].Tenant != "acme" || len(ws[0].Definition.Steps) != 4 {
		t.Fatalf("the example's workflows = %+v", ws)
	}
}

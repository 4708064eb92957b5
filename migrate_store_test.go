package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"

	"github.com/jackc/pgx/v5"
)

type migrateOut struct {
	Tables []struct {
		Table                            string
		Source, Copied, Updated, Present int64
		Skipped                          string
	}
	NextID map[string]int64 `json:"next_id"`
}

// A box on SQLite with every kind of row (delivered, pending and
// left-sending notifications, attempts, a receipt, feeds read in part,
// feed members, a token, an audience, a cron run, a tail position, a
// stored request key, a quarantined event, a suppressed address, a lapsed
// lease, a recipient's preferences, a tenant's link key, a throttle slot)
// is moved to PostgreSQL by the command: every moved table has the
// source's rows; show and the feeds' unread counts read the same; a
// rerun changes nothing; dispatch on PostgreSQL delivers the pending and
// the abandoned claim, each email key once; a new event gets ids past the
// source's; a rerun after that is refused and changes nothing; no output
// shows the password.
func TestMigrateStoreMovesABox(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	t.Parallel()
	ctx := t.Context()
	bin := binary(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "box.db")
	pg := pgtest.Start(t)
	u, _ := url.Parse(pg)
	password, _ := u.User.Password()
	server := sim.New(sim.Options{HonourKeys: true})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })
	route := "email=email-http+" + hs.URL + "/v1/emails?from=relay@example.com&idempotency=honoured&timeout=2s"
	var outputs []string
	cli := func(stdin string, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, stdin, args...)
		outputs = append(outputs, r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", strings.ReplaceAll(strings.Join(args, " "), password, "xxxxx"), r.code, r.stdout, r.stderr)
		}
		return r
	}
	event := func(id, rcpt string) string {
		return `{"id": "` + id + `", "type": "payment.succeeded", "purpose": "receipt", "recipients": [{"id": "` + rcpt + `", "email": "` + rcpt + `@example.com"}], "subject": "s", "body": "b"}`
	}
	dispatch := func(db string) {
		t.Helper()
		cli("", "dispatch", "--db", db, "--route", route, "--route", "sms=log:///dev/null", "--route", "chat=log:///dev/null", "--lease", "1s", "--until-idle", "--max-wait", "20s", "--log-level", "warn")
	}

	// Delivered: ada's and ben's email, ben's sms.
	cli(adaEvent, "send", "--db", src)
	dispatch(src)
	// Claimed by a dispatcher killed right after its claim: left sending.
	cli(event("evt_503", "cy"), "send", "--db", src)
	crash := exec.Command(bin, "dispatch", "--db", src, "--route", route, "--lease", "1s", "--log-level", "warn", "--until-idle", "--max-wait", "20s")
	crash.Env = append(os.Environ(), "EDGERELAY_CRASH_AT=claimed:1")
	crash.Run()
	if ws, ok := crash.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the dispatcher was not killed at its crash point: %v", crash.ProcessState)
	}
	// Pending.
	cli(event("evt_502", "dan"), "send", "--db", src)
	// Feeds, a token, an audience, a cron run.
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		cli(`{"id": "`+id+`", "type": "note", "tenant": "acme", "feeds": ["*"], "subject": "`+id+`"}`, "send", "--db", src, "--log-level", "warn")
	}
	cli(`{"id": "t1", "type": "note", "tenant": "acme", "feeds": ["team"], "subject": "t1"}`, "send", "--db", src, "--log-level", "warn")
	cli("", "token", "create", "--db", src, "--tenant", "acme", "--name", "billing")
	members := filepath.Join(dir, "team.json")
	os.WriteFile(members, []byte(`{"members": [{"id": "ada", "email": "ada@example.com"}, {"id": "ben", "email": "ben@example.com"}]}`), 0o644)
	cli("", "audience", "set", "--db", src, "--tenant", "acme", "team", members)
	// A template stored in two versions.
	for i, subject := range []string{"Receipt", "Your receipt"} {
		sub, text := filepath.Join(dir, fmt.Sprint(i), "email.subject.tmpl"), filepath.Join(dir, fmt.Sprint(i), "email.text.tmpl")
		os.MkdirAll(filepath.Dir(sub), 0o755)
		os.WriteFile(sub, []byte(subject), 0o644)
		os.WriteFile(text, []byte("Thanks, {{.data.name}}."), 0o644)
		cli("", "template", "set", "--db", src, "--tenant", "acme", "--channel", "email", "--file", sub, "--file", text, "receipt")
	}
	abs, _ := filepath.Abs("testdata/batch_example.jsonl")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("jobs:\n  nightly:\n    schedule: \"0 2 * * *\"\n    batch:\n      file: "+abs+"\n"), 0o644)
	cli("", "cron", "run", "--config", cfg, "--db", src, "--at", "2026-11-30T02:00:00Z", "--log-level", "warn", "nightly")

	// What the API and the tail write, through the relay's Go API.
	r, err := relaytest.Open(ctx, src, relay.Options{Categories: map[string]relay.Category{"marketing": {}}})
	if err != nil {
		t.Fatal(err)
	}
	// A recipient's preferences and the tenant's link key.
	off := false
	if _, err := r.PutPreferences(ctx, "acme", "ada", relay.PreferencesInput{TimeZone: "Europe/Berlin",
		Switches:   []relay.SwitchInput{{Category: "marketing", Enabled: &off}},
		QuietHours: []relay.QuietPreference{{Window: "21:00-08:00"}}}, model.SetByAPI); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UnsubscribeToken(ctx, relay.UnsubscribeLink{Tenant: "acme", Recipient: "ada", Category: "marketing", Channel: "email"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetFeedMembers(ctx, "acme", "team", []string{"ada", "ben"}, true); err != nil {
		t.Fatal(err)
	}
	items, _, err := r.FeedPage(ctx, "acme", "ada", 0, 10)
	if err != nil || len(items) < 4 {
		t.Fatalf("ada's feed: %v %v", items, err)
	}
	if _, err := r.MarkAll(ctx, "acme", "ada", "read", items[len(items)-2].Seq); err != nil { // the two oldest
		t.Fatal(err)
	}
	if err := r.MarkItem(ctx, "acme", "ada", "read", items[0].Seq); err != nil { // and the newest
		t.Fatal(err)
	}
	if err := r.SettleSource(ctx, "sqlite:/srv/app/app.db", model.SourceSettle{State: model.SourceState{Position: 42,
		Gaps: []model.SourceGap{{First: 40, Last: 41, Since: time.UnixMilli(1_700_000_000_000).UTC(), Mark: 7}}},
		Rejects: []model.SourceReject{{Row: 39, EventID: "ord_39", Reason: "invalid event: type: required"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddReceipts(ctx, "email", []providers.Receipt{{ID: "rcpt-1", MessageID: "msg-unknown", Status: providers.ReceiptDelivered, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	k := model.RequestKey{Tenant: "acme", Key: "req-1", Fingerprint: "fp"}
	if _, err := r.ClaimRequest(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := r.SaveResponse(ctx, k, model.StoredResponse{Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A workflow run part way: its in-app step and its delay decided, its
	// last step waiting for the delay to end.
	if _, _, err := r.PutWorkflow(ctx, "acme", "welcome", []byte(`{"steps": [{"id": "inbox", "channels": ["in_app"]},
		{"id": "wait", "delay": {"for": "72h"}}, {"id": "again", "channels": ["in_app"]}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(ctx, relay.Event{ID: "w-1", Type: "welcome", Tenant: "acme", Body: "Welcome", Recipients: []relay.Recipient{{ID: "ada", Email: "ada@example.com"}}}); err != nil {
		t.Fatal(err)
	}
	// And a batch open on the box: two events for ada, the first leading.
	if _, _, err := r.PutWorkflow(ctx, "acme", "digest", []byte(`{"steps": [{"id": "batch", "batch": {"window": "1h"}},
		{"id": "inbox", "channels": ["in_app"]}]}`)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d-1", "d-2"} {
		if _, err := r.Accept(ctx, relay.Event{ID: id, Type: "digest", Tenant: "acme", Body: "News", Recipients: []relay.Recipient{{ID: "ada", Email: "ada@example.com"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.StepWorkflows(ctx); err != nil || n != 4 {
		t.Fatalf("stepped %d, %v; want the in-app post, the delay, the batch opened and joined", n, err)
	}
	srcIDs, err := r.IDs(ctx) // the key of the API's ids, as serve makes it
	if err != nil {
		t.Fatal(err)
	}
	unread := map[string]int64{}
	for _, user := range []string{"ada", "ben"} {
		if unread[user], err = r.UnreadCount(ctx, "acme", user); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	if unread["ada"] == unread["ben"] {
		t.Fatalf("unread %v: ada's marks made no difference", unread)
	}

	// Rare states, written by hand: a quarantined event, an address a
	// provider refused, a lease its process left to lapse, a console
	// sign-in (not moved: people sign in again), a retry from the console.
	lite, err := sql.Open("sqlite", "file:"+src+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	now := time.Now().UnixMilli()
	for _, q := range []string{
		`UPDATE events SET quarantined_at = ` + jsonInt(now) + `, quarantine_reason = 'by hand' WHERE event_id = 'a4'`,
		`INSERT INTO suppressions (tenant, channel, address, reason, source, provider, detail, created_at) VALUES ('default', 'email', 'gone@example.com', 'hard_bounce', 'provider', 'email', '550 5.1.1', ` + jsonInt(now) + `)`,
		`INSERT INTO suppressions (tenant, channel, address, reason, source, notification, created_at, expires_at) VALUES ('default', 'sms', '+15550100', 'soft_bounce', 'dsn', 1, ` + jsonInt(now) + `, ` + jsonInt(now+86400000) + `)`,
		`INSERT INTO leases VALUES ('schedules', 'box/1/ab', ` + jsonInt(now-60000) + `)`,
		`INSERT INTO console_sessions VALUES ('` + strings.Repeat("ab", 32) + `', 'default', '', 'open console', ` + jsonInt(now) + `, ` + jsonInt(now+3600000) + `)`,
		`INSERT INTO throttle_slots VALUES ('n1', 'default', 'ada', 'marketing', ` + jsonInt(now) + `, ` + jsonInt(now+86400000) + `)`,
		`INSERT INTO throttle_slots VALUES ('r1.0', 'default', 'ada', 'nudge/daily', ` + jsonInt(now) + `, ` + jsonInt(now+86400000) + `)`,
		`INSERT INTO provider_pauses VALUES ('resend', ` + jsonInt(now+3600000) + `)`,
		`INSERT INTO link_clicks VALUES ((SELECT min(id) FROM notifications), 'https://shop.example/x', 2, ` + jsonInt(now) + `, ` + jsonInt(now) + `)`,
		`INSERT INTO user_token_keys VALUES ('acme', 'k1', 'secret-k1', ` + jsonInt(now) + `, NULL)`,
		`INSERT INTO feed_origins (tenant, origin, created_at) VALUES ('acme', 'https://app.example.com', ` + jsonInt(now) + `)`,
		`INSERT INTO notification_audit (notification, at, actor, action, detail) VALUES ((SELECT min(id) FROM notifications), ` +
			jsonInt(now) + `, 'console, token 1 (support) of tenant default', 'retry', 'was dead')`,
		// A workflow in two versions, the first retired (no command
		// saves one yet: the store's rows as a save would write them).
		`INSERT INTO workflows (tenant, type, version, definition, created_at, retired_at) VALUES
			('acme', 'invoice.due', 1, '{"type":"invoice.due","steps":[{"id":"email","channels":["email"]}]}', ` + jsonInt(now) + `, ` + jsonInt(now) + `),
			('acme', 'invoice.due', 2, '{"type":"invoice.due","steps":[{"id":"sms","channels":["sms"]}]}', ` + jsonInt(now) + `, NULL)`,
	} {
		if _, err := lite.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The killed claim's lease lapses 1s after it was taken.
	var leaseUntil int64
	if err := lite.QueryRow(`SELECT lease_until FROM notifications WHERE status = 'sending'`).Scan(&leaseUntil); err != nil {
		t.Fatalf("no notification left sending: %v", err)
	}
	time.Sleep(time.Until(time.UnixMilli(leaseUntil + 1)))

	count := func(q func(string) int64) map[string]int64 {
		out := map[string]int64{}
		for n := range relayTables(t, lite) {
			out[n] = q(n)
		}
		return out
	}
	srcCount := count(func(n string) int64 {
		var c int64
		lite.QueryRow(`SELECT count(*) FROM "` + n + `"`).Scan(&c)
		return c
	})
	for n, c := range srcCount {
		if c == 0 {
			t.Errorf("the source has no %s: the test does not cover them", n)
		}
	}
	var lastEvent, lastNote int64
	lite.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'events'`).Scan(&lastEvent)
	lite.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'notifications'`).Scan(&lastNote)
	var ids []int64
	rows, _ := lite.Query(`SELECT id FROM notifications ORDER BY id`)
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	shows := map[int64]string{}
	for _, id := range ids {
		shows[id] = cli("", "show", "--db", src, "--json", jsonInt(id)).stdout
	}
	quarantined := cli("", "quarantine", "list", "--db", src, "--tenant", "acme", "--json").stdout

	// A command run on the target first makes it a key of its own.
	pr, err := relaytest.Open(ctx, pg, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if own, err := pr.IDs(ctx); err != nil || own.Notification(ids[0]) == srcIDs.Notification(ids[0]) {
		t.Fatalf("the target's own id key: %v", err)
	}
	pr.Close()

	// The move, in batches of 2.
	var first, again migrateOut
	res := cli("", "migrate-store", "--from", src, "--to", pg, "--batch", "2", "--json")
	if err := json.Unmarshal([]byte(res.stdout), &first); err != nil {
		t.Fatalf("migrate-store --json: %v\n%s", err, res.stdout)
	}
	if !strings.Contains(res.stderr, "notifications: ") || !strings.Contains(res.stderr, "done") {
		t.Errorf("no progress on stderr:\n%s", res.stderr)
	}
	pgc, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer pgc.Close(context.Background())
	pgCount := func() map[string]int64 {
		return count(func(n string) int64 {
			var c int64
			if err := pgc.QueryRow(ctx, `SELECT count(*) FROM "`+n+`"`).Scan(&c); err != nil {
				t.Fatal(err)
			}
			return c
		})
	}
	moved := pgCount()
	for _, tc := range first.Tables {
		switch {
		case tc.Skipped != "":
			if moved[tc.Table] != 0 {
				t.Errorf("%s: not moved, but the target has %d", tc.Table, moved[tc.Table])
			}
		// settings: the key the target made first is replaced (updated).
		case tc.Source != srcCount[tc.Table] || tc.Copied+tc.Updated != tc.Source || moved[tc.Table] != tc.Source:
			t.Errorf("%s: %d in the source, %+v reported, %d in the target", tc.Table, srcCount[tc.Table], tc, moved[tc.Table])
		}
	}
	if len(first.Tables) != len(srcCount) {
		t.Errorf("counts for %d tables, the source has %d", len(first.Tables), len(srcCount))
	}
	fp := dumpPG(t, pgc, srcCount)

	// Again: nothing changes.
	res = cli("", "migrate-store", "--from", src, "--to", pg, "--json")
	json.Unmarshal([]byte(res.stdout), &again)
	for _, tc := range again.Tables {
		if tc.Copied != 0 || tc.Updated != 0 || (tc.Skipped == "" && tc.Present != tc.Source) {
			t.Errorf("rerun: %+v", tc)
		}
	}
	human := cli("", "migrate-store", "--from", src, "--to", pg).stdout
	if !strings.Contains(human, "already there") || !strings.Contains(human, "next ids: events ") || !strings.Contains(human, "postgres://") {
		t.Errorf("the counts as text:\n%s", human)
	}
	if dumpPG(t, pgc, srcCount) != fp {
		t.Fatal("a rerun changed the target")
	}

	// The same audit and unread counts on PostgreSQL.
	for _, id := range ids {
		if got := cli("", "show", "--db", pg, "--json", jsonInt(id)).stdout; got != shows[id] {
			t.Errorf("show %d on PostgreSQL:\n%s\non SQLite:\n%s", id, got, shows[id])
		}
	}
	if got := cli("", "quarantine", "list", "--db", pg, "--tenant", "acme", "--json").stdout; got != quarantined {
		t.Errorf("quarantine list on PostgreSQL:\n%s\non SQLite:\n%s", got, quarantined)
	}
	r, err = relaytest.Open(ctx, pg, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pgIDs, err := r.IDs(ctx); err != nil || pgIDs.Notification(ids[0]) != srcIDs.Notification(ids[0]) {
		t.Errorf("the API's ids differ after the move (%v): a client's n_… would name nothing", err)
	}
	if got := cli("", "show", "--db", pg, "--json", srcIDs.Notification(ids[0])).stdout; got != shows[ids[0]] {
		t.Errorf("show %s (the API's id) on PostgreSQL:\n%s", srcIDs.Notification(ids[0]), got)
	}
	for user, want := range unread {
		if got, err := r.UnreadCount(ctx, "acme", user); err != nil || got != want {
			t.Errorf("%s's unread count on PostgreSQL %d (%v), on SQLite %d", user, got, err, want)
		}
	}
	if st, err := r.Store().SourceState(ctx, "sqlite:/srv/app/app.db"); err != nil || st.Position != 42 || len(st.Gaps) != 1 || st.Gaps[0].First != 40 || st.Gaps[0].Last != 41 || st.Gaps[0].Mark != 7 {
		t.Errorf("tail state %+v (%v), want position 42 and the gap 40..41", st, err)
	}
	if c, err := r.ClaimRequest(ctx, k); err != nil || c.Stored == nil || string(c.Stored.Body) != `{"ok":true}` {
		t.Errorf("the stored response of req-1: %+v %v", c, err)
	}
	// The stored template's versions, and the next is 3.
	tk := model.TemplateKey{Tenant: "acme", Name: "receipt", Channel: "email", Locale: "en"}
	if vs, err := r.Store().TemplateVersions(ctx, tk); err != nil || len(vs) != 2 || vs[0].Parts["subject"] != "Receipt" {
		t.Errorf("the template's versions on PostgreSQL: %+v %v", vs, err)
	}
	if st, created, err := r.PutTemplate(ctx, tk, map[string]string{"subject": "Moved", "text": "x"}); err != nil || !created || st.Version != 3 {
		t.Errorf("a PUT after the move: %+v %v %v, want version 3", st, created, err)
	}
	// The workflow run waits at its last step, due when it was on the box.
	if runs, err := r.Runs(ctx, model.RunFilter{Tenant: "acme", State: model.RunWaiting, EventID: "w-1"}); err != nil || len(runs) != 1 || runs[0].Step != 2 ||
		len(runs[0].Steps) != 2 || runs[0].DueAt.Sub(runs[0].CreatedAt) < 72*time.Hour-time.Minute {
		t.Errorf("the workflow run on PostgreSQL: %+v %v", runs, err)
	}
	// The workflow's versions, the retired one still retired, and the next is 3.
	if vs, err := r.Store().WorkflowVersions(ctx, "acme", "invoice.due"); err != nil || len(vs) != 2 || vs[0].RetiredAt == nil || vs[1].RetiredAt != nil ||
		!strings.Contains(string(vs[1].Definition), `"sms"`) {
		t.Errorf("the workflow's versions on PostgreSQL: %+v %v", vs, err)
	}
	if w, created, err := r.Store().PutWorkflow(ctx, "acme", "invoice.due", []byte(`{"type":"invoice.due"}`), time.Now()); err != nil || !created || w.Version != 3 {
		t.Errorf("a workflow put after the move: %+v %v %v, want version 3", w, created, err)
	}
	r.Close()
	// A repeat of the moved cron run adds nothing.
	batchEvents := moved["events"]
	cli("", "cron", "run", "--config", cfg, "--db", pg, "--at", "2026-11-30T02:00:00Z", "--log-level", "warn", "nightly")

	// dispatch on PostgreSQL finishes what was pending and the abandoned
	// claim (settled unknown, retried under its key): each email key once.
	dispatch(pg)
	var st struct{ Counts map[string]int64 }
	json.Unmarshal([]byte(cli("", "status", "--db", pg, "--json").stdout), &st)
	if st.Counts["pending"] != 0 || st.Counts["sending"] != 0 {
		t.Errorf("after dispatch on PostgreSQL: %v", st.Counts)
	}
	perKey := map[string]int{}
	for _, d := range server.Deliveries() {
		perKey[d.Key]++
	}
	for k, n := range perKey {
		if n != 1 {
			t.Errorf("key %s delivered %d times", k, n)
		}
	}
	for who, ev := range map[string]string{"ada": "evt_501", "ben": "evt_501", "cy": "evt_503", "dan": "evt_502"} {
		if perKey[relay.Key("default", ev, "receipt", who, "email")] != 1 {
			t.Errorf("%s's email was not delivered once: %v", who, perKey)
		}
	}
	var recovered bool
	var cyID int64
	pgc.QueryRow(ctx, `SELECT id FROM notifications WHERE recipient = 'cy'`).Scan(&cyID)
	if out := cli("", "show", "--db", pg, jsonInt(cyID)).stdout; strings.Contains(out, "lease expired") {
		recovered = true
	}
	if !recovered {
		t.Error("cy's abandoned claim does not show a recovered lease on PostgreSQL")
	}
	var after int64
	pgc.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&after)
	if after != batchEvents {
		t.Errorf("the moved cron run ran again: %d events, were %d", after, batchEvents)
	}

	// A new event gets ids past every id the source gave (PostgreSQL may
	// skip some: an INSERT that meets a conflict still draws its id).
	line := decodeLines(t, cli(event("evt_504", "eve"), "send", "--db", pg).stdout)
	var row int64
	pgc.QueryRow(ctx, `SELECT event FROM notifications WHERE id = $1`, line[0].ID).Scan(&row)
	if line[0].ID <= lastNote || row <= lastEvent {
		t.Errorf("the new event got row %d, its notification %d; the source's last were %d and %d", row, line[0].ID, lastEvent, lastNote)
	}

	// The target is in service now: a rerun is refused and changes nothing.
	fp = dumpPG(t, pgc, srcCount)
	rr := runCLI(t, "", "migrate-store", "--from", src, "--to", pg)
	outputs = append(outputs, rr.stdout, rr.stderr)
	if rr.code == 0 || !strings.Contains(rr.stderr, "in service") {
		t.Errorf("rerun into a target in service: exit %d\n%s", rr.code, rr.stderr)
	}
	if dumpPG(t, pgc, srcCount) != fp {
		t.Error("the refused rerun changed the target")
	}
	for _, o := range outputs {
		if strings.Contains(o, password) {
			t.Fatalf("an output shows the password:\n%s", o)
		}
	}
}

// relayTables are the source's tables, without SQLite's own.
func relayTables(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		out[n] = true
	}
	return out
}

// dumpPG is a digest of every row of the tables.
func dumpPG(t *testing.T, c *pgx.Conn, tables map[string]int64) string {
	t.Helper()
	var all strings.Builder
	for _, n := range slices.Sorted(maps.Keys(tables)) {
		var d string
		if err := c.QueryRow(t.Context(), `SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY x::text)), '') FROM "`+n+`" x`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		all.WriteString(n + "=" + d + ";")
	}
	var seqs string
	c.QueryRow(t.Context(), `SELECT string_agg(sequencename || ':' || coalesce(last_value, 0), ',' ORDER BY sequencename) FROM pg_sequences WHERE schemaname = current_schema()`).Scan(&seqs)
	return all.String() + seqs
}

// Usage errors exit 2 before anything is opened.
func TestMigrateStoreUsage(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "box.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "postgres://x@127.0.0.1/db"}, "needs --from FILE"},
		{[]string{"--from", src}, "needs --from FILE"},
		{[]string{"--from", src, "--to", "other.db"}, "want a postgres:// URL"},
		{[]string{"--from", src, "--to", "postgres://x@127.0.0.1/db", "--batch", "0"}, "--batch"},
	} {
		r := runCLI(t, "", append([]string{"migrate-store"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d %s", tc.args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(src); err == nil {
		t.Error("a usage error created the source")
	}
}

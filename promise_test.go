package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgerelay/edgerelay/model"
)

// The ways the once-in-effect promise was found to break, each through
// the CLI: what an operator would run and see.

// execDB runs statements on a database file as another program would.
func execDB(t *testing.T, db string, stmts ...string) {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	for _, s := range stmts {
		if _, err := sdb.ExecContext(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func queryInt(t *testing.T, db, q string, args ...any) int {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var n int
	if err := sdb.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func threeRecipients(id string) string {
	return fmt.Sprintf(`{"id": %q, "type": "notice", "channels": ["email"], "subject": "s", "body": "b",
		"recipients": [{"id": "a", "email": "a@example.com"}, {"id": "b", "email": "b@example.com"}, {"id": "c", "email": "c@example.com"}]}`, id)
}

// Hole 1: one event whose stored payload no longer decodes (written by
// another version, or damaged) used to stop all delivery: the dispatcher
// claimed nothing, for ever. Now it is quarantined, everything else flows,
// and the operator sees it and acts.
func TestBadStoredEventIsQuarantinedAndTheRestFlows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, sent := filepath.Join(dir, "r.db"), filepath.Join(dir, "sent.log")
	for _, ev := range []string{threeRecipients("evt_bad"), threeRecipients("evt_drop"), threeRecipients("evt_good")} {
		if r := runCLI(t, ev, "--db", db, "send"); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	// Make evt_bad and evt_drop look like fan-outs cut short by a crash after
	// their first notification, whose stored payloads no longer decode.
	var payload string
	sdb, _ := sql.Open("sqlite", "file:"+db)
	sdb.QueryRow(`SELECT payload FROM events WHERE event_id = 'evt_bad'`).Scan(&payload)
	sdb.Close()
	for _, id := range []string{"evt_bad", "evt_drop"} {
		execDB(t, db,
			`DELETE FROM notifications WHERE seq > 0 AND event = (SELECT id FROM events WHERE event_id = '`+id+`')`,
			`UPDATE events SET expanded = 1, payload = '{"id": "`+id+`", "recipients": [' WHERE event_id = '`+id+`'`)
	}

	r := runCLI(t, "", "dispatch", "--db", db, "--until-idle", "--route", "*=log://"+sent, "--json", "--log-level", "error")
	var sum struct{ Sent int }
	json.Unmarshal([]byte(r.stdout), &sum)
	if r.code != 0 || sum.Sent != 5 {
		t.Fatalf("dispatch: exit %d, %q %s; want the 5 notifications that exist sent", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "2 events quarantined") {
		t.Errorf("dispatch did not say that events are quarantined: %q", r.stderr)
	}

	// status, show and quarantine list say so, and why.
	st := runCLI(t, "", "status", "--db", db)
	if !strings.Contains(st.stdout, "quarantined events  2  newest 2 1") {
		t.Errorf("status:\n%s", st.stdout)
	}
	var status model.Status
	json.Unmarshal([]byte(runCLI(t, "", "status", "--db", db, "--json").stdout), &status)
	if status.Quarantined != 2 || len(status.QuarantinedIDs) != 2 {
		t.Errorf("status --json: %+v", status)
	}
	if sh := runCLI(t, "", "show", "--db", db, "1"); !strings.Contains(sh.stdout, "fan-out quarantined") ||
		!strings.Contains(sh.stdout, "no longer decodes") || !strings.Contains(sh.stdout, "1 of 3") {
		t.Errorf("show 1:\n%s", sh.stdout)
	}
	var qs []model.QuarantinedEvent
	if err := json.Unmarshal([]byte(runCLI(t, "", "quarantine", "list", "--db", db, "--json").stdout), &qs); err != nil || len(qs) != 2 {
		t.Fatalf("quarantine list: %v %+v", err, qs)
	}
	rows := map[string]int64{}
	for _, q := range qs {
		rows[q.EventID] = q.EventRow
		if q.Expanded != 1 || q.Targets != 3 || !strings.Contains(q.Reason, "stored payload no longer decodes") {
			t.Errorf("quarantined %+v", q)
		}
	}

	// A resend of the bad event is a duplicate: accepted, not an error.
	if r := runCLI(t, threeRecipients("evt_bad"), "--db", db, "send"); r.code != 0 {
		t.Errorf("resend of the quarantined event: exit %d %s", r.code, r.stderr)
	}

	// Retry before a fix: quarantined again. After the fix (the payload
	// repaired, as an upgrade would read it): the fan-out finishes.
	if r := runCLI(t, "", "quarantine", "retry", "--db", db, fmt.Sprint(rows["evt_bad"])); r.code != exitError || !strings.Contains(r.stderr, "quarantined again") {
		t.Errorf("retry before a fix: exit %d %q", r.code, r.stderr)
	}
	sdb, _ = sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if _, err := sdb.Exec(`UPDATE events SET payload = ? WHERE event_id = 'evt_bad'`, payload); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	if r := runCLI(t, "", "quarantine", "retry", "--db", db, fmt.Sprint(rows["evt_bad"])); r.code != 0 || !strings.Contains(r.stdout, "fan-out finished") {
		t.Fatalf("retry after the fix: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Drop gives up the rest of the other one: 2 never created.
	if r := runCLI(t, "", "quarantine", "drop", "--db", db, fmt.Sprint(rows["evt_drop"])); r.code != 0 || !strings.Contains(r.stdout, "2 notifications dropped") {
		t.Fatalf("drop: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "dispatch", "--db", db, "--until-idle", "--route", "*=log://"+sent, "--json", "--log-level", "error")
	json.Unmarshal([]byte(r.stdout), &sum)
	if r.code != 0 || sum.Sent != 2 || strings.Contains(r.stderr, "quarantined") {
		t.Fatalf("dispatch after retry and drop: exit %d %q %s; want evt_bad's 2 others sent, nothing quarantined", r.code, r.stdout, r.stderr)
	}
	b, _ := os.ReadFile(sent)
	if n := strings.Count(string(b), "\n"); n != 7 {
		t.Errorf("%d messages went out, want 7 (3 + 3 + 1 of the dropped event)", n)
	}
	if r := runCLI(t, "", "quarantine", "list", "--db", db); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("quarantine list after retry and drop: %q", r.stdout)
	}
}

// twilioLike answers every message like Twilio: sent (201 with a sid), or
// refused with error code (400 with a Twilio error body).
func twilioLike(t *testing.T, code int) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if code != 0 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code": %d, "message": "The 'To' number is not a valid phone number.", "status": 400}`, code)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"sid": "SM%030d", "status": "queued"}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return calls }
}

// Hole 6: one tenant's provider declaring an address dead blocked it for
// every tenant, for ever. Now the address goes on that tenant's suppression
// list, which says who put it there and when, is listed and removed; a
// retry says why it will not send and lifts the entry when told to.
func TestDeadAddressMarkIsTheTenantsOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, cfg := filepath.Join(dir, "r.db"), filepath.Join(dir, "c.yaml")
	dead, deadCalls := twilioLike(t, 21211)
	good, goodCalls := twilioLike(t, 0)
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
routes:
  sms: "twilio+%s?from=%%2B15550100"
tenants:
  mallory:
    routes:
      sms: "twilio+%s?from=%%2B15550199"
`, strings.Replace(good.URL, "http://", "http://AC1:tok@", 1), strings.Replace(dead.URL, "http://", "http://AC2:tok@", 1))), 0o644)
	sms := func(tenant, id string) string {
		return fmt.Sprintf(`{"id": %q, "tenant": %q, "type": "otp", "body": "123456", "recipients": [{"id": "u", "phone": "+15550123"}]}`, id, tenant)
	}
	dispatch := func() cliResult {
		return runCLI(t, "", "dispatch", "--db", db, "--config", cfg, "--until-idle", "--json", "--log-level", "error")
	}
	runCLI(t, sms("mallory", "m1"), "--db", db, "send")
	if r := dispatch(); r.code != exitFailed {
		t.Fatalf("mallory's dispatch: exit %d %s", r.code, r.stderr)
	}
	// Another tenant's message to the same number goes out.
	runCLI(t, sms("default", "d1"), "--db", db, "send")
	if r := dispatch(); r.code != 0 || goodCalls() != 1 {
		t.Fatalf("the other tenant's message to the number mallory's provider refused: exit %d, %d calls; %s", r.code, goodCalls(), r.stderr)
	}
	// Mallory's next message to it ends suppressed without a call.
	runCLI(t, sms("mallory", "m2"), "--db", db, "send")
	dispatch()
	if deadCalls() != 1 {
		t.Fatalf("mallory's provider was called %d times, want once (the suppression stops the second)", deadCalls())
	}
	if sh := runCLI(t, "", "show", "--db", db, "3"); !strings.Contains(sh.stdout, "suppressed") || !strings.Contains(sh.stdout, "suppression list: hard_bounce") ||
		!strings.Contains(sh.stdout, "after 0 attempts") {
		t.Errorf("show 3:\n%s", sh.stdout)
	}
	var marks []model.Suppression
	json.Unmarshal([]byte(runCLI(t, "", "suppressions", "list", "--db", db, "--json").stdout), &marks)
	if len(marks) != 1 || marks[0].Tenant != "mallory" || marks[0].Channel != "sms" || marks[0].Address != "+15550123" ||
		marks[0].Reason != model.ReasonHardBounce || marks[0].Source != model.SourceProvider || marks[0].Notification != 1 ||
		!strings.HasPrefix(marks[0].Provider, "twilio://") || !strings.Contains(marks[0].Detail, "21211") || marks[0].ExpiresAt != nil {
		t.Fatalf("suppressions %+v", marks)
	}
	// retry says why it will not send, and lifts the entry with --lift.
	if r := runCLI(t, "", "retry", "--db", db, "3"); r.code != exitError || !strings.Contains(r.stderr, "suppression list (hard_bounce") || !strings.Contains(r.stderr, "--lift") {
		t.Fatalf("retry without --lift: exit %d, %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "retry", "--db", db, "3", "--lift"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if n := queryInt(t, db, `SELECT count(*) FROM suppressions`); n != 0 {
		t.Errorf("%d entries after retry --lift, want 0", n)
	}
	dispatch()
	if deadCalls() != 2 {
		t.Errorf("after retry, mallory's provider was called %d times in all, want 2", deadCalls())
	}
	// The new refusal lists it again; suppressions remove takes it off.
	if r := runCLI(t, "", "suppressions", "remove", "--db", db, "--tenant", "mallory", "sms", "+15550123"); r.code != 0 {
		t.Fatalf("remove: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "suppressions", "remove", "--db", db, "--tenant", "mallory", "sms", "+15550123"); r.code != exitError || !strings.Contains(r.stderr, "not on tenant") {
		t.Errorf("remove again: %d %q", r.code, r.stderr)
	}
}

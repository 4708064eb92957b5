package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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
	"github.com/edgerelay/edgerelay/sim"

	"github.com/jackc/pgx/v5"
)

// The acceptance case (edgerelay demo: lost answers, a
// 503, a redelivered event) with the relay on PostgreSQL gives the same
// deliveries as on SQLite.
func TestPostgresAcceptanceAdaBenCy(t *testing.T) {
	t.Parallel()
	want := []map[string]int{
		{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 2},
		{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 2},
		{"ada@example.com": 3, "ben@example.com": 1, "cy@example.com": 2},
	}
	wantAda := []string{"sent", "unknown", "sent"}
	for i, v := range demoVariants {
		t.Run(v.Title, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			res, err := runDemo(context.Background(), pgtest.Start(t), v, &out)
			if err != nil {
				t.Fatal(err)
			}
			for addr, n := range want[i] {
				if res.Received[addr] != n {
					t.Errorf("%s received %d, want %d\n%s", addr, res.Received[addr], n, out.String())
				}
			}
			if first, again := res.Accepted[0], res.Accepted[4]; first.Duplicate || !again.Duplicate || first.Notifications[0].ID != again.Notifications[0].ID {
				t.Errorf("evt_501 twice: %+v then %+v", first, again)
			}
			if got := res.Status["evt_501/ada"]; got != wantAda[i] {
				t.Errorf("ada's notification is %s, want %s", got, wantAda[i])
			}
		})
	}
}

// The commands that take --db work against a postgres:// URL (and
// EDGERELAY_DB), and none prints the URL's password: send and its
// duplicate, status, show, token, audience, feed, batch, quarantine,
// addresses, prune, retry; backup says it cannot.
func TestPostgresThroughTheCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.Start(t)
	u, _ := url.Parse(db)
	password, _ := u.User.Password()
	var outputs []string
	cli := func(stdin string, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, stdin, append([]string{"--db", db}, args...)...)
		outputs = append(outputs, r.stdout, r.stderr)
		return r
	}
	r := cli(adaEvent, "send")
	if r.code != 0 || len(decodeLines(t, r.stdout)) != 3 || decodeLines(t, r.stdout)[0].Result != "new" {
		t.Fatalf("send: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli(adaEvent, "send"); r.code != 0 || decodeLines(t, r.stdout)[0].Result != "duplicate" {
		t.Fatalf("send again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := decodeLines(t, r.stdout)[0].ID
	var st struct{ Counts map[string]int64 }
	if r = cli("", "status", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Counts["pending"] != 3 {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var n struct{ Recipient string }
	if r = cli("", "show", "--json", jsonInt(id)); r.code != 0 || json.Unmarshal([]byte(r.stdout), &n) != nil || n.Recipient != "ada" {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli("", "show", "99999"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show of a missing notification: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli("", "retry", jsonInt(id)); r.code == 0 || !strings.Contains(r.stderr, "pending") {
		t.Fatalf("retry of a pending notification: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli("", "token", "create", "--tenant", "acme", "--name", "ops"); r.code != 0 {
		t.Fatalf("token create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli("", "token", "list"); r.code != 0 || !strings.Contains(r.stdout, "ops") {
		t.Fatalf("token list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	members := filepath.Join(t.TempDir(), "staff.json")
	os.WriteFile(members, []byte(`{"members": [{"id": "cy", "email": "cy@example.com"}]}`), 0o644)
	if r = cli("", "audience", "set", "staff", members); r.code != 0 {
		t.Fatalf("audience set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = cli("", "feed", "members", "team", "ada", "ben"); r.code != 0 {
		t.Fatalf("feed members: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	batch := filepath.Join(t.TempDir(), "events.jsonl")
	os.WriteFile(batch, []byte(`{"id": "b1", "type": "notice", "recipients": [{"id": "dee", "email": "dee@example.com"}], "subject": "s", "body": "b"}`+"\n"), 0o644)
	if r = cli("", "batch", "send", batch); r.code != 0 {
		t.Fatalf("batch send: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"quarantine", "list"}, {"addresses", "list"}, {"prune", "--older-than", "30d"}} {
		if r = cli("", args...); r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r = cli("", "backup", filepath.Join(t.TempDir(), "copy.db")); r.code == 0 || !strings.Contains(r.stderr, "backup") {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	status := exec.Command(binary(t), "status")
	status.Env = append(os.Environ(), "EDGERELAY_DB="+db)
	out, err := status.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pending") {
		t.Fatalf("status with EDGERELAY_DB: %v\n%s", err, out)
	}
	outputs = append(outputs, string(out))
	for _, o := range outputs {
		if strings.Contains(o, password) {
			t.Fatalf("a command printed the database password:\n%s", o)
		}
	}
}

func jsonInt(id int64) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// A dispatcher process killed right after its claim committed (the crash
// point claimed:1) leaves the notification in sending; a later dispatch
// finds the lease expired, records the attempt as unknown and retries it
// with the same key, so a provider that honours keys delivers it once.
// The processes are the real binary with --db postgres://.
func TestPostgresCrashAfterClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	longtest.Require(t)
	t.Parallel()
	bin := binary(t)
	db := pgtest.Start(t)
	server := sim.New(sim.Options{HonourKeys: true})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	sent := runCLI(t, adaEvent, "--db", db, "send")
	if sent.code != 0 {
		t.Fatalf("send: exit %d\n%s", sent.code, sent.stderr)
	}
	route := "email=email-http+" + hs.URL + "/v1/emails?from=relay@example.com&idempotency=honoured&timeout=2s"
	args := []string{"dispatch", "--db", db, "--route", route, "--route", "sms=" + "log://stderr", "--lease", "1s", "--log-level", "warn", "--until-idle", "--max-wait", "20s"}
	crash := exec.Command(bin, args...)
	crash.Env = append(os.Environ(), "EDGERELAY_CRASH_AT=claimed:1")
	var stderr bytes.Buffer
	crash.Stderr = &stderr
	crash.Run()
	if ws, ok := crash.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the dispatcher was not killed at its crash point: %v\n%s", crash.ProcessState, stderr.String())
	}
	before := server.Requests() // workers given other claims may have called before the kill landed
	start := time.Now()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dispatch after the crash: %v\n%s", err, out)
	}
	r := runCLI(t, "", "--db", db, "status", "--json")
	var st struct{ Counts map[string]int64 }
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Counts["sent"] != 3 || st.Counts["sending"] != 0 || st.Counts["pending"] != 0 {
		t.Fatalf("status after recovery: %s %v", r.stdout, err)
	}
	perKey := map[string]int{}
	for _, d := range server.Deliveries() {
		perKey[d.Key]++
	}
	if len(perKey) != 2 {
		t.Fatalf("emails to %d keys, want ada's and ben's: %v", len(perKey), perKey)
	}
	for k, n := range perKey {
		if n != 1 {
			t.Fatalf("key %s delivered %d times", k, n)
		}
	}
	recovered := 0
	for _, l := range decodeLines(t, sent.stdout) {
		r := runCLI(t, "", "--db", db, "show", jsonInt(l.ID))
		if strings.Contains(r.stdout, "lease expired") {
			recovered++
		}
	}
	if recovered == 0 {
		t.Fatalf("no notification shows a recovered lease: the crash left nothing claimed")
	}
	t.Logf("after the crash (%d requests before it): %d notification(s) recovered from an expired lease, all 3 sent, each email once, in %s",
		before, recovered, time.Since(start).Round(time.Millisecond))
}

// serve on PostgreSQL answers /readyz (its Ping commits a write) and
// accepts over HTTP; what it prints names the database without the
// password (it printed the --db value as given before).
func TestPostgresServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := binary(t)
	db := pgtest.Start(t)
	u, _ := url.Parse(db)
	password, _ := u.User.Password()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--db", db, "--listen", addr, "--log-level", "info")
	p := &serveProc{cmd: cmd, base: "http://" + addr, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	if !p.ready() {
		t.Fatalf("serve not ready:\n%s", p.stderr.String())
	}
	body, _ := os.ReadFile("testdata/event.json")
	resp, err := http.Post(p.base+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/events: %s", resp.Status)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	if out := p.stderr.String(); strings.Contains(out, password) || !strings.Contains(out, "postgres://"+u.User.Username()+"@"+u.Host) {
		t.Fatalf("serve's output shows the password, or does not name the database:\n%s", out)
	}
}

// tail relays an outbox into PostgreSQL, and cron runs a batch job into
// it, keyed by the run: repeating the run adds nothing.
func TestPostgresTailAndCron(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and signals a real process")
	}
	t.Parallel()
	db := pgtest.Start(t)
	events := func() int64 {
		t.Helper()
		r := runCLI(t, "", "--db", db, "status", "--json")
		var st struct{ Counts map[string]int64 }
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status: %v\n%s%s", err, r.stdout, r.stderr)
		}
		return st.Counts["pending"]
	}

	dir := t.TempDir()
	abs, _ := filepath.Abs("testdata/batch_example.jsonl")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("jobs:\n  nightly:\n    schedule: \"0 2 * * *\"\n    batch:\n      file: "+abs+"\n"), 0o644)
	for range 2 {
		if r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--at", "2026-11-30T02:00:00Z", "--log-level", "warn", "nightly"); r.code != 0 {
			t.Fatalf("cron run: exit %d %s", r.code, r.stderr)
		}
	}
	batch := events()
	if batch == 0 {
		t.Fatal("the batch job accepted nothing")
	}
	if r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--at", "2026-11-30T02:00:00Z", "--log-level", "warn", "nightly"); r.code != 0 || events() != batch {
		t.Fatalf("repeating the run: exit %d, %d pending, want %d", r.code, events(), batch)
	}

	app := tailApp(t, filepath.Join(dir, "app.db"))
	for i := 1; i <= 3; i++ {
		if _, err := placeOrder(app, i); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(binary(t), "tail", "--db", db, "--source", "sqlite:"+filepath.Join(dir, "app.db"), "--poll", "5ms", "--json", "--log-level", "warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); events() < batch+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the outbox was not relayed within 30s:\n%s", &stderr)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail after SIGTERM: %v\n%s", err, &stderr)
	}
	u, _ := url.Parse(db)
	if password, _ := u.User.Password(); strings.Contains(stderr.String(), password) || !strings.Contains(stderr.String(), "into postgres://") {
		t.Fatalf("tail's output shows the password or does not name the database:\n%s", &stderr)
	}
}

// A digest job covers its tenant's feed items on PostgreSQL too: consecutive
// runs cover adjacent ranges of the tenant's own sequence (as
// TestCronDigestCoversItsTenant on SQLite).
func TestPostgresCronDigest(t *testing.T) {
	longtest.Require(t)
	t.Parallel()
	db, dir := pgtest.Start(t), t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("jobs:\n  weekly:\n    schedule: \"0 9 * * 1\"\n    digest:\n      tenant: acme\n      audience: team\n"+
		"      channel: email\n      template: \"{{range .Items}}{{.Subject}} {{end}}\"\n"), 0o644)
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
	run := func(at time.Time) {
		t.Helper()
		if r := runCLI(t, "", "cron", "run", "--config", cfg, "--db", db, "--route", "email=log:///dev/null",
			"--at", at.Format(time.RFC3339), "--log-level", "warn", "weekly"); r.code != 0 {
			t.Fatalf("cron run: exit %d %s", r.code, r.stderr)
		}
	}
	last := time.Now().UTC().Truncate(time.Hour)
	for last.Weekday() != time.Monday || last.Hour() != 9 {
		last = last.Add(-time.Hour)
	}
	send("acme", "a1")
	send("acme", "a2")
	send("default", "d1")
	run(last.AddDate(0, 0, -7))
	for i := range 4 {
		send("default", fmt.Sprint("d", i+2))
	}
	send("acme", "a3")
	run(last)
	run(last) // the same run again: nothing new
	c, err := pgx.Connect(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(t.Context(), `SELECT btrim(convert_from(payload, 'UTF8')::json->>'body') FROM events
		WHERE event_id LIKE 'digest:weekly:%' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(got, []string{"a2 a1", "a3"}) {
		t.Fatalf("acme's digests %q, %v; want [a2 a1] then [a3]", got, err)
	}
}

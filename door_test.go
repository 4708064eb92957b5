package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An address that can only fail later is refused by send: exit 5, one line
// naming the field as the event wrote it, nothing written.
func TestSendRefusesBadAddresses(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	for i, tc := range []struct{ in, want string }{
		{`{"id": "1", "type": "x", "recipients": [{"id": "a", "email": "a@example.com"}, {"id": "b", "email": "b@example.com"}, {"id": "c", "email": "not-an-email"}]}`,
			"invalid event: recipients[2].email: not an email address"},
		{`{"id": "1", "type": "x", "recipients": [{"id": "a", "email": "bad@@example"}]}`, "recipients[0].email: not an email address"},
		{`{"id": "1", "type": "x", "recipients": [{"id": "a", "phone": "12345"}]}`, "recipients[0].phone: not an E.164 phone number"},
		{`{"id": "1", "type": "x", "recipients": [{"id": "a", "url": "ftp:/nope"}]}`, "recipients[0].url: not an http(s) URL"},
		{`{"id": "1", "type": "x", "recipients": [{"id": "a", "email": "a@example.com"}, {"id": "b", "url": "ops"}]}`,
			"recipients[1].url: not an http(s) URL"},
	} {
		in := strings.Replace(tc.in, `"id": "1"`, fmt.Sprintf(`"id": "evt_%d"`, i), 1) // each its own event
		r := runCLI(t, in, "--db", db, "send")
		if r.code != exitRejected || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q", tc.in, r.code, r.stderr, exitRejected, tc.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		if n := countRows(t, db, "events"); n != 0 {
			t.Fatalf("%d events written by rejected sends", n)
		}
	}
}

// batch send rejects the line with a bad address and accepts the others.
func TestBatchSendRejectsBadAddressLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 5, map[int]string{
		3: `{"id": "evt_bad", "type": "notice", "recipients": [{"id": "u", "phone": "12345"}]}`,
	})
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--json", "--log-level", "warn")
	s := batchOut(t, r)
	if r.code != exitRejected || s.Batch.New != 4 || s.Batch.Rejected != 1 ||
		!strings.Contains(r.stderr, "line 3: invalid event: recipients[0].phone: not an E.164 phone number") {
		t.Fatalf("exit %d %+v: %s", r.code, s, r.stderr)
	}
}

// With --route email=… only, a line with an sms recipient is rejected at
// once, naming the channel and the routes, instead of being retried while
// --dispatch waits its whole --max-wait; the other lines are delivered.
func TestBatchSendRefusesChannelWithoutRoute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file, sent := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "sent.log")
	writeLines(t, file, 3, map[int]string{
		2: `{"id": "evt_sms", "type": "notice", "recipients": [{"id": "u", "email": "u@example.com", "phone": "+15550100"}]}`,
	})
	start := time.Now()
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--dispatch", "--max-wait", "1m", "--json",
		"--route", "email=log://"+sent, "--log-level", "warn")
	took := time.Since(start)
	s := batchOut(t, r)
	if r.code != exitRejected || s.Batch.Rejected != 1 || s.Dispatch == nil || s.Dispatch.Sent != 2 ||
		!strings.Contains(r.stderr, `line 2: invalid event: recipients[0]: channel "sms" has no route (routes: email)`) {
		t.Fatalf("exit %d %+v %+v: %s", r.code, s, s.Dispatch, r.stderr)
	}
	if took > 30*time.Second {
		t.Errorf("took %s: waited for a notification no route serves", took)
	}
	// Nothing of the rejected line was written, its email included.
	if n := countRows(t, db, "notifications"); n != 2 {
		t.Errorf("%d notifications, want 2", n)
	}
}

// send reads the routes of --config: a channel none of them serves is
// refused (exit 5) instead of waiting in the database for a route.
func TestSendRefusesChannelWithoutRoute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, cfg := filepath.Join(dir, "r.db"), filepath.Join(dir, "edgerelay.yaml")
	if err := os.WriteFile(cfg, []byte("routes:\n  email: log://"+filepath.Join(dir, "sent.log")+"\ntenants:\n  acme:\n    routes:\n      chat: log://stdout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, `{"id": "1", "type": "x", "tenant": "acme", "recipients": [{"id": "a", "email": "a@example.com"}, {"id": "b", "phone": "+15550100"}]}`,
		"--db", db, "--config", cfg, "send")
	if r.code != exitRejected || !strings.Contains(r.stderr, `recipients[1]: channel "sms" has no route (routes: chat, email)`) {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, `{"id": "2", "type": "x", "recipients": [{"id": "a", "email": "a@example.com"}]}`, "--db", db, "--config", cfg, "send")
	if r.code != 0 || len(decodeLines(t, r.stdout)) != 1 {
		t.Fatalf("routed event: exit %d: %s", r.code, r.stderr)
	}
}

// --strict checks what an accept checks, routes included: a line whose
// channel no route serves makes it accept nothing.
func TestBatchSendStrictChecksRoutes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl")
	writeLines(t, file, 3, map[int]string{
		3: `{"id": "evt_sms", "type": "notice", "recipients": [{"id": "u", "phone": "+15550100"}]}`,
	})
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--strict", "--route", "email=log://"+filepath.Join(dir, "sent.log"))
	if r.code != exitRejected || !strings.Contains(r.stderr, `line 3: invalid event: recipients[0]: channel "sms" has no route (routes: email)`) ||
		!strings.Contains(r.stderr, "nothing accepted (--strict)") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := countRows(t, db, "events"); n != 0 {
		t.Fatalf("--strict with a line no route serves wrote %d events", n)
	}
}

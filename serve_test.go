package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeRefusesOpenAPIOffLoopback(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "serve", "--db", filepath.Join(t.TempDir(), "r.db"), "--listen", "0.0.0.0:0")
	if r.code != exitError || !strings.Contains(r.stderr, "refusing to serve 0.0.0.0:0 without API tokens") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// The README's first command, for real: serve on loopback, one POST, the
// log provider delivers it, SIGTERM exits cleanly.
func TestServeProcessAcceptsDeliversAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logFile := filepath.Join(dir, "sent.log")
	cmd := exec.Command(bin, "serve", "--db", filepath.Join(dir, "r.db"), "--listen", addr, "--route", "*=log://"+logFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ev, _ := os.ReadFile("testdata/event.json")
	resp, err := http.Post(base+"/v1/events", "application/json", bytes.NewReader(ev))
	if err != nil {
		t.Fatal(err)
	}
	var acc struct {
		Duplicate     bool
		Notifications []struct{ ID int64 }
	}
	json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(acc.Notifications) != 1 {
		t.Fatalf("POST /v1/events: %d %+v", resp.StatusCode, acc)
	}
	for {
		b, _ := os.ReadFile(logFile)
		if bytes.Contains(b, []byte("ada@example.com")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "API is open") {
		t.Fatalf("serve did not say the API is open:\n%s", stderr.String())
	}
}

func TestTokenCreateListRevoke(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	r := runCLI(t, "", "token", "create", "--db", db, "--tenant", "acme", "--name", "ci")
	tok := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(tok, "ert_") || len(tok) < 40 {
		t.Fatalf("token create: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "token", "list", "--db", db)
	if r.code != 0 || !strings.Contains(r.stdout, "acme\tci") || strings.Contains(r.stdout, tok) {
		t.Fatalf("token list: %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, "", "token", "revoke", "--db", db, "1"); r.code != 0 {
		t.Fatalf("revoke: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "token", "list", "--db", db); r.stdout != "" {
		t.Fatalf("after revoke: %q", r.stdout)
	}
	if r := runCLI(t, "", "token", "create", "--db", db, "--tenant", "bad tenant"); r.code != exitUsage {
		t.Fatalf("bad tenant: %d", r.code)
	}
	// The name is kept with the token: bounded like every stored name.
	if r := runCLI(t, "", "token", "create", "--db", db, "--tenant", "acme", "--name", strings.Repeat("n", 65)); r.code != exitUsage ||
		!strings.Contains(r.stderr, "--name: longer than 64 bytes") {
		t.Fatalf("long name: %d %q", r.code, r.stderr)
	}
}

func TestAudienceSet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	f := filepath.Join(dir, "team.json")
	os.WriteFile(f, []byte(`{"members": [{"id": "ada", "email": "ada@example.com"}, {"id": "ben", "email": "ben@example.com"}]}`), 0o644)
	if r := runCLI(t, "", "audience", "set", "--db", db, "team", f); r.code != 0 || !strings.Contains(r.stdout, "2 members") {
		t.Fatalf("audience set: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r := runCLI(t, `{"id": "evt_9", "type": "notice", "audience": "team", "body": "hi"}`, "send", "--db", db)
	if r.code != 0 || len(decodeLines(t, r.stdout)) != 2 {
		t.Fatalf("send to audience: %d %q %q", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(f, []byte(`{"members": [{"id": "ada"}]}`), 0o644)
	if r := runCLI(t, "", "audience", "set", "--db", db, "team", f); r.code != exitRejected || !strings.Contains(r.stderr, "members[0]") {
		t.Fatalf("member without address: %d %q", r.code, r.stderr)
	}
}

// serve runs the config's outbox tailers: rows the app writes are
// delivered, and the default daily prune is scheduled.
func TestServeTailsConfiguredOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	app := filepath.Join(dir, "app.db")
	adb, err := sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	defer adb.Close()
	ddl, _ := os.ReadFile("outbox.sql")
	if _, err := adb.Exec(string(ddl)); err != nil {
		t.Fatalf("outbox.sql: %v", err)
	}
	for i := range 3 {
		ev := fmt.Sprintf(`{"id": "order-%d", "type": "order.placed", "recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "thanks"}`, i, i, i)
		if _, err := adb.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, ev); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(dir, "sent.log")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("tail:\n  - source: sqlite://"+app+"?table=edgerelay_outbox\n    poll: 50ms\nroutes:\n  \"*\": log://"+logFile+"\n"), 0o644)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--db", filepath.Join(dir, "r.db"), "--listen", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(logFile)
		if strings.Count(string(b), "\n") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox rows not delivered:\n%s\n%s", b, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
}

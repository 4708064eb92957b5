package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// An address already taken says so, with what to do, naming the flag or
// key that gave it; serve writes nothing and exits 1.
func TestServeOnAnAddressInUse(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, args := range [][]string{
		{"--listen", addr},
		{"--listen", "127.0.0.1:0", "--metrics-listen", addr},
		{"--listen", "127.0.0.1:0", "--console-listen", addr},
	} {
		r := runCLI(t, "", append([]string{"serve", "--db", filepath.Join(t.TempDir(), "r.db")}, args...)...)
		flag := args[len(args)-2]
		if r.code != exitError || !strings.Contains(r.stderr, flag+" "+addr+": the address is in use") || !strings.Contains(r.stderr, "port 0 picks a free one") {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
}

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
		Notifications []struct{ ID string }
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

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// apiServe is a real `edgerelay serve` process.
type apiServe struct {
	cmd    *exec.Cmd
	base   string
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer the process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startAPIServe runs serve on a free loopback address and waits until it is
// ready; it is killed when the test ends.
func startAPIServe(t *testing.T, bin string, args ...string) *apiServe {
	t.Helper()
	addr := freeAddr(t)
	p := &apiServe{base: "http://" + addr, stderr: &syncBuffer{}}
	p.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	p.cmd.Env = diskEnv(nil)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready: %v\n%s", err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call makes one request on a connection of its own; token "" sends none.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus repeats a request until it answers want (or fails the test
// after 10 s), and returns how long that took.
func waitStatus(t *testing.T, want int, method, url, token, body string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		code, got := call(t, method, url, token, body)
		if code == want {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s %s: still %d %s after 10s, want %d", method, url, code, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A token created or revoked by `edgerelay token` in another process takes
// effect on a running serve within seconds: the first token closes the
// open API (no token, a wrong one: 401; the token's tenant applies), and a
// revoked token stops working. Metrics leave the API's address with open
// mode and stay on their own (--metrics-listen).
func TestServeTokensTakeEffectWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	bin := binary(t)
	db := filepath.Join(t.TempDir(), "r.db")
	metricsAddr := freeAddr(t)
	p := startAPIServe(t, bin, "--db", db, "--route", "*=log:///dev/null", "--metrics-listen", metricsAddr)
	ev := func(id, tenant string) string {
		return fmt.Sprintf(`{"id": %q, "type": "notice", "tenant": %q, "recipients": [{"id": "ada", "email": "ada@example.com"}]}`, id, tenant)
	}
	if code, body := call(t, "POST", p.base+"/v1/events", "", ev("e0", "default")); code != http.StatusAccepted {
		t.Fatalf("open API: %d %s", code, body)
	}
	if code, _ := call(t, "GET", p.base+"/metrics", "", ""); code != http.StatusOK {
		t.Fatalf("open API's metrics: %d", code)
	}

	out, err := exec.Command(bin, "token", "create", "--db", db, "--tenant", "acme", "--name", "ci").Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	token := strings.TrimSpace(string(out))
	took := waitStatus(t, http.StatusUnauthorized, "GET", p.base+"/v1/notifications", "", "")
	t.Logf("the API closed %s after token create returned", took.Round(time.Millisecond))
	if code, _ := call(t, "POST", p.base+"/v1/events", "ert_wrong", ev("e1", "acme")); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	if code, body := call(t, "POST", p.base+"/v1/events", token, ev("e1", "beta")); code != http.StatusForbidden {
		t.Errorf("the token naming another tenant: %d %s, want 403", code, body)
	}
	if code, body := call(t, "POST", p.base+"/v1/events", token, ev("e1", "")); code != http.StatusAccepted || !strings.Contains(body, `"tenant":"acme"`) {
		t.Errorf("the token's event: %d %s, want 202 in tenant acme", code, body)
	}
	if code, _ := call(t, "GET", p.base+"/metrics", token, ""); code != http.StatusUnauthorized {
		t.Errorf("metrics on the API's address with a tenant's token: %d, want 401", code)
	}
	// A metrics token made by another process opens them on the API's
	// address at once, without a restart, and acts as no tenant.
	out, err = exec.Command(bin, "token", "create", "--db", db, "--metrics", "--name", "scraper").Output()
	if err != nil {
		t.Fatalf("token create --metrics: %v", err)
	}
	scraper := strings.TrimSpace(string(out))
	if code, body := call(t, "GET", p.base+"/metrics", scraper, ""); code != http.StatusOK || !strings.Contains(body, "edgerelay_events_accepted_total 2") {
		t.Errorf("metrics on the API's address with a metrics token: %d %.300s", code, body)
	}
	if code, _ := call(t, "GET", p.base+"/v1/notifications", scraper, ""); code != http.StatusUnauthorized {
		t.Errorf("the metrics token on /v1/notifications: %d, want 401", code)
	}
	if out, err := exec.Command(bin, "token", "list", "--db", db).Output(); err != nil || !strings.Contains(string(out), "2\t(metrics)\tscraper") {
		t.Errorf("token list: %v\n%s", err, out)
	}
	if code, body := call(t, "GET", "http://"+metricsAddr+"/metrics", "", ""); code != http.StatusOK || !strings.Contains(body, "edgerelay_events_accepted_total 2") {
		t.Errorf("metrics listener: %d %.300s", code, body)
	}

	if out, err := exec.Command(bin, "token", "revoke", "--db", db, "1").CombinedOutput(); err != nil {
		t.Fatalf("token revoke: %v %s", err, out)
	}
	waitStatus(t, http.StatusUnauthorized, "GET", p.base+"/v1/notifications", token, "")
	if code, _ := call(t, "GET", p.base+"/v1/notifications", "", ""); code != http.StatusUnauthorized {
		t.Errorf("after the last token was revoked, no token: %d, want 401 (revoking never reopens)", code)
	}
}

// openFDs counts a process's open descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(fds)
}

// Beyond --max-conns, connections wait (in the kernel's accept queue) and
// cost the process no descriptor; once some close, the waiting ones are
// served.
// stableFDs is the process's descriptor count once it has stayed the same
// for a few reads in a row (at most about 5 s).
func stableFDs(t *testing.T, pid int) int {
	t.Helper()
	n, same := openFDs(t, pid), 0
	for i := 0; i < 100 && same < 3; i++ {
		time.Sleep(50 * time.Millisecond)
		if m := openFDs(t, pid); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

func TestServeConnectionCap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	const maxConns, extra = 4, 40
	bin := binary(t)
	p := startAPIServe(t, bin, "--db", filepath.Join(t.TempDir(), "r.db"), "--route", "*=log:///dev/null", "--max-conns", strconv.Itoa(maxConns))
	call(t, "POST", p.base+"/v1/events", "", `{"id": "e0", "type": "notice", "recipients": [{"id": "ada", "email": "ada@example.com"}]}`)
	pid := p.cmd.Process.Pid
	// The descriptor count settles first: the POST's connection closes on
	// the server's side a moment after its answer, and the read pool opens
	// and closes files.
	base := stableFDs(t, pid)
	addr := strings.TrimPrefix(p.base, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The first maxConns connections hold the server with half a request
	// each (ReadHeaderTimeout is 10 s); then many more arrive.
	var held []net.Conn
	for range maxConns {
		c := dial()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\n")
		held = append(held, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for openFDs(t, pid) < base+maxConns-1 { // one of slack: a pooled file may close meanwhile
		if time.Now().After(deadline) {
			t.Fatalf("the server did not accept %d connections: %d descriptors, %d before", maxConns, openFDs(t, pid), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var waiting []net.Conn
	for range extra {
		c := dial()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
		waiting = append(waiting, c)
	}
	// A waiting connection is not answered while the cap is reached.
	waiting[0].SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := waiting[0].Read(make([]byte, 1)); n > 0 || err == nil {
		t.Errorf("a connection beyond the cap was answered at once")
	}
	// Slack for SQLite: the read pool may open a connection (a file and its
	// WAL) meanwhile; 40 connections without the cap would be far above.
	if got := openFDs(t, pid); got > base+maxConns+8 {
		t.Errorf("%d connections beyond the cap of %d grew the descriptors from %d to %d", extra, maxConns, base, got)
	} else {
		t.Logf("%d connections, cap %d: descriptors %d -> %d", maxConns+extra, maxConns, base, got)
	}
	for _, c := range held {
		c.Close()
	}
	// Freed, the cap lets the waiting ones through, a few at a time.
	for i, c := range waiting {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("waiting connection %d: %v", i, err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("waiting connection %d: %s", i, resp.Status)
		}
	}
	if code, _ := call(t, "GET", p.base+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("after: %d", code)
	}
}

// The API's limits are checked up front: a zero or negative value is an
// error naming the flag, or the config line.
func TestServeAPILimitsChecked(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	for _, args := range [][]string{
		{"--max-conns", "0"}, {"--body-timeout", "0s"}, {"--metrics-token", "short"},
	} {
		r := runCLI(t, "", append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("serve %v: exit %d %q, want a usage error naming %s", args, r.code, r.stderr, args[0])
		}
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("api:\n  max_conns: 0\n  body_timeout: 0s\n  max_body: -1\n  metrics_listen: nowhere\n  metrics_token: short\n"), 0o644)
	r := runCLI(t, "", "config", "check", cfg)
	for _, want := range []string{"5 problems", "line 2 (api.max_conns)", "line 3 (api.body_timeout)", "line 4 (api.max_body)",
		"line 5 (api.metrics_listen)", "line 6 (api.metrics_token): metrics_token: shorter than 16"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check lacks %q:\n%s", want, r.stderr)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/sim"
)

// serve with --db a PgBouncer URL (transaction pooling, the README's
// default_query_exec_mode=simple_protocol, the schema in search_path)
// accepts over HTTP and delivers, and show reads the notification back
// through the same bouncer.
func TestServeThroughPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	u, err := url.Parse(pgtest.Bouncer(t, pgtest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	db := u.String()
	bin := binary(t)
	server := sim.New(sim.Options{HonourKeys: true})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--db", db, "--listen", addr, "--log-level", "warn",
		"--route", "email=email-http+"+hs.URL+"/v1/emails?from=relay@example.com&idempotency=honoured&timeout=2s")
	p := &serveProc{cmd: cmd, base: "http://" + addr, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	if !p.ready() {
		cmd.Process.Kill()
		<-p.exited
		t.Fatalf("serve not ready:\n%s\npgbouncer log:\n%s", p.stderr.String(), pgtest.BouncerLog())
	}
	body, _ := os.ReadFile("testdata/event.json")
	resp, err := http.Post(p.base+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		Notifications []struct{ ID string }
	}
	err = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || err != nil || len(accepted.Notifications) != 1 {
		t.Fatalf("POST /v1/events: %s, %+v, %v", resp.Status, accepted, err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(server.Deliveries()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing delivered within 30s")
		}
	}
	var shown struct{ Status string }
	for deadline := time.Now().Add(30 * time.Second); shown.Status != "sent"; time.Sleep(20 * time.Millisecond) {
		r := runCLI(t, "", "--db", db, "show", "--json", accepted.Notifications[0].ID)
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &shown) != nil {
			t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("show: %s, want sent, after 30s", shown.Status)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	if d := server.Deliveries(); len(d) != 1 || d[0].To != "ada@example.com" {
		t.Fatalf("deliveries %+v, want one to ada", d)
	}
	if p.err != nil || strings.Contains(p.stderr.String(), "level=ERROR") {
		t.Fatalf("serve: %v\n%s", p.err, p.stderr.String())
	}
}

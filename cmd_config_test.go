package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config check --connect opens a session with each routed SMTP provider
// (a real server on loopback that offers no STARTTLS) and names what is
// wrong with each; without --connect nothing is dialled.
func TestConfigCheckConnect(t *testing.T) {
	t.Parallel()
	sink := startSMTPSink(t, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "edgerelay.yaml")
	body := fmt.Sprintf(`providers:
  plain:
    url: smtp://%[1]s?from=relay%%40example.com&starttls=none
  strict:
    url: smtp://%[1]s?from=relay%%40example.com
  gone:
    url: smtp://%[2]s?from=relay%%40example.com&starttls=none&timeout=5s
  hook:
    url: webhook+https://hooks.example.com/notify
routes:
  email: [strict, plain]
  sms: gone
  webhook: hook
`, sink.addr, closed)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "", "config", "check", cfg)
	if r.code != 0 || strings.Contains(r.stdout, "connect") {
		t.Fatalf("config check without --connect: exit %d, want 0 and no connection\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "", "config", "check", "--connect", cfg)
	t.Logf("config check --connect:\n%s%s", r.stdout, r.stderr)
	if r.code != exitError {
		t.Errorf("exit %d, want %d", r.code, exitError)
	}
	for _, want := range []string{
		"connect strict: FAILED: server does not offer STARTTLS, and the URL requires it",
		"connect plain: ok",
		"connect gone: FAILED: connection refused (temporary",
		"connect hook: not tried",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !strings.Contains(r.stderr, "2 of the providers tried could not be used") {
		t.Errorf("stderr lacks the count of failures: %q", r.stderr)
	}
	if st := sink.snapshot(); len(st.raw) != 0 {
		t.Errorf("config check --connect sent mail: %v", st.raw)
	}
}

package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// serve mounts the console at /console on the API's address and, with
// --console-listen, on an address of its own; the API's routes stay where
// they were. Without tokens, a console address off loopback is refused as
// the API's is.
func TestServeMountsConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	r := runCLI(t, "", "serve", "--db", filepath.Join(t.TempDir(), "r.db"), "--listen", "127.0.0.1:0", "--console-listen", "0.0.0.0:0")
	if r.code != exitError || !strings.Contains(r.stderr, "refusing to serve the console on 0.0.0.0:0 without API tokens") {
		t.Fatalf("open console off loopback: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "serve", "--db", filepath.Join(t.TempDir(), "r.db"), "--console-listen", "nowhere")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--console-listen "nowhere": not an address to listen on`) {
		t.Fatalf("a malformed console address: exit %d, stderr %q", r.code, r.stderr)
	}

	consoleAddr := freeAddr(t)
	p := startAPIServe(t, binary(t), "--db", filepath.Join(t.TempDir(), "r.db"), "--console-listen", consoleAddr)
	for _, base := range []string{p.base, "http://" + consoleAddr} {
		code, body := call(t, "GET", base+"/console/login", "", "")
		if code != http.StatusOK || !strings.Contains(body, "The API is open on loopback") {
			t.Fatalf("GET %s/console/login: %d\n%s", base, code, body)
		}
	}
	if code, _ := call(t, "GET", p.base+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("the API's /healthz beside the console: %d", code)
	}
	if code, _ := call(t, "GET", "http://"+consoleAddr+"/v1/notifications", "", ""); code != http.StatusNotFound {
		t.Fatalf("the console's own address serves the API: %d, want 404", code)
	}
	if !strings.Contains(p.stderr.String(), "console on http://"+consoleAddr+"/console/") {
		t.Fatalf("serve does not say where the console is:\n%s", p.stderr.String())
	}
}

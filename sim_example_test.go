package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
)

// testdata/edgerelay.sim.yaml routes every vendor provider to the
// simulator, over real HTTP on loopback (APNs over HTTP/2 with TLS, through
// the listener `edgerelay sim --tls-listen` makes). An event sent and
// dispatched with the CLI reaches each: Mailgun (and SES once Mailgun
// refuses an address's first attempt), Discord, Telegram, Teams, Web Push
// (decrypted by the simulator with the subscription's keys, so the
// subject arrives as sent) and APNs; a token the sim's APNs says is
// gone (410) is suppressed.
func TestSimExampleConfig(t *testing.T) { // not parallel: it sets environment variables
	const goneToken = "ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00"
	exampleEnv(t) // the VAPID and APNs keys
	script, err := sim.ParseScript([]byte(`{"rules": [{"to": "bo@example.com", "attempts": [1], "action": "refuse", "status": 503},
		{"to": "apns:` + goneToken + `", "action": "reject", "status": 410}]}`))
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(sim.Options{Script: script})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "sim-ca.pem")
	tln, err := simTLSListener("127.0.0.1:0", ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []net.Listener{ln, tln} {
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(l)
		t.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(ctx)
		})
	}
	t.Setenv("EDGERELAY_SIM", ln.Addr().String())
	t.Setenv("EDGERELAY_SIM_TLS", tln.Addr().String())
	t.Setenv("EDGERELAY_SIM_CA", ca)

	resp, err := http.Post("http://"+ln.Addr().String()+"/push-subscriptions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	subJSON, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push subscription: %s %s", resp.Status, subJSON)
	}

	const cfg = "testdata/edgerelay.sim.yaml"
	if r := runCLI(t, "", "config", "check", cfg); r.code != 0 || !strings.Contains(r.stdout, "route email    mailgun -> ses") {
		t.Fatalf("config check: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	const token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	ev := map[string]any{"id": "evt_sim_1", "type": "incident.opened", "subject": "Disk full", "body": "db-1 has 2% left.",
		"channels": []string{"email", "chat", "telegram", "teams", "webpush", "push"},
		"recipients": []map[string]any{
			{"id": "ada", "email": "ada@example.com", "device_token": token, "addresses": map[string]string{
				"chat": "#ops", "telegram": "987654321", "teams": "ops", "webpush": strings.TrimSpace(string(subJSON))}},
		}}
	bo := map[string]any{"id": "evt_sim_2", "type": "incident.opened", "subject": "Disk full", "body": "db-1 has 2% left.",
		"channels": []string{"email"}, "recipients": []map[string]any{{"id": "bo", "email": "bo@example.com"}}}
	// APNs says cy's token is gone (410 Unregistered): nothing is delivered
	// and the token is suppressed.
	cy := map[string]any{"id": "evt_sim_3", "type": "incident.opened", "subject": "Disk full", "body": "db-1 has 2% left.",
		"channels": []string{"push"}, "recipients": []map[string]any{{"id": "cy", "device_token": goneToken}}}
	db := filepath.Join(t.TempDir(), "sim.db")
	for _, e := range []map[string]any{ev, bo, cy} {
		body, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if r := runCLI(t, string(body), "--db", db, "--config", cfg, "send"); r.code != 0 {
			t.Fatalf("send: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	// Exit 3: cy's notification failed, as it should.
	if r := runCLI(t, "", "--db", db, "--config", cfg, "dispatch", "--until-idle"); r.code != exitFailed ||
		!strings.Contains(r.stderr, "sent 7, failed 1, dead 0, unknown 0") {
		t.Fatalf("dispatch: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	var got []string
	for _, d := range srv.Deliveries() {
		got = append(got, fmt.Sprintf("%s %s %q", d.Via, d.To, d.Subject))
	}
	slices.Sort(got)
	want := []string{
		`apns apns:` + token + ` "Disk full"`,
		`discord discord:123456789012345678 ""`,
		`mailgun ada@example.com "Disk full"`,
		`ses bo@example.com "Disk full"`,
		`teams teams:ops "Disk full"`,
		`telegram telegram:987654321 ""`,
		`webpush webpush:sub-1 "Disk full"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("the sim received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, d := range srv.Deliveries() {
		if (d.Via == "webpush" || d.Via == "apns" || d.Via == "teams") && d.Text != "db-1 has 2% left." ||
			(d.Via == "discord" || d.Via == "telegram") && !strings.Contains(d.Text, "Disk full") {
			t.Errorf("%s got text %q", d.Via, d.Text)
		}
	}
	if r := runCLI(t, "", "--db", db, "--config", cfg, "suppressions", "list"); r.code != 0 || !strings.Contains(r.stdout, goneToken) ||
		strings.Contains(r.stdout, token) {
		t.Errorf("suppressions: %d\n%s%s\nwant %s (and not %s)", r.code, r.stdout, r.stderr, goneToken, token)
	}
	// Mailgun's refusal of bo's first attempt sent nothing, then SES did.
	if n := srv.Counts()["bo@example.com"]; n != 1 {
		t.Errorf("bo received %d emails, want 1", n)
	}
}

// --tls-listen needs --tls-ca (where the certificate goes), and says so.
func TestSimTLSFlagsGoTogether(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "sim", "--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--tls-listen and --tls-ca go together") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
}

// The provider URLs `edgerelay sim` prints build as printed (those that
// name no key file).
func TestSimPrintedRoutesBuild(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printSimRoutes(&out, sim.New(sim.Options{HonourKeys: true}), "127.0.0.1:9099", "127.0.0.1:9443", "/tmp/ca.pem", 0, "no faults", true)
	n := 0
	for _, line := range strings.Split(out.String(), "\n") {
		u, ok := strings.CutPrefix(line, "sim:   ")
		if !ok || strings.Contains(u, "FILE") {
			continue
		}
		u, _, _ = strings.Cut(u, " ")
		if _, err := providers.New(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("%d URLs checked, want 5 (mailgun, ses, discord, telegram, teams):\n%s", n, out.String())
	}
}

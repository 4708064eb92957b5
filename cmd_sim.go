package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/sim"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:      "sim",
		Usage:     "run a simulated provider (an email API, and Mailgun, SES, Discord, Telegram, Teams, Web Push and APNs) that injects faults",
		UsageText: "edgerelay sim [--listen ADDR] [--tls-listen ADDR --tls-ca FILE] [--faults FILE] [--no-keys] [--latency D] [--quiet]",
		Description: `Runs provider APIs on loopback for trying the relay against providers that
misbehave on cue. It prints the provider URLs to route to, logs one line per
request (recipient, attempt, action, status) on stderr, and counts what each
recipient really received. Stop it with Ctrl-C.

Endpoints:
  POST /v1/emails   {"from", "to" (string or array), "subject", "text", "html"},
                    optional Idempotency-Key header; answers 200 {"id": "sim_<n>"}
  GET  /deliveries  {"total", "by_recipient", "deliveries"}: what was really sent
  GET  /requests    {"total"}: send requests received
  POST /reset       forget deliveries, keys and attempt counts

Vendors' APIs, each answering as its vendor documents (ids, error bodies,
Retry-After and the vendor's own retry_after), none honouring keys (the
vendors take none), recipients named as fault rules' "to" names them:
  POST /v3/DOMAIN/messages                 Mailgun (basic auth api:KEY); to: the address
  POST /v2/email/outbound-emails           SES v2 SendEmail (SigV4 for ses); to: the address
  POST /api/webhooks/ID/TOKEN              Discord (?wait=true); to: discord:ID
  POST /botTOKEN/sendMessage               Telegram; to: telegram:CHAT_ID
  POST /workflows/ID/triggers/manual/paths/invoke?…&sig=…   Teams Workflows (202); to: teams:ID
  POST /push-subscriptions                 make a Web Push subscription: its JSON is the address
  POST /push/v1/ID                         Web Push (VAPID, aes128gcm, decrypted with the
                                           subscription's keys); an unknown ID is 410; to: webpush:ID
  POST /3/device/TOKEN                     APNs, only over HTTP/2 with TLS (--tls-listen): a bearer
                                           token and apns-topic; answers the apns-id; to: apns:TOKEN

--tls-listen ADDR serves every endpoint over TLS too (HTTP/2 and HTTP/1.1),
with a certificate made at start for 127.0.0.1, ::1 and localhost, written
as PEM to --tls-ca FILE: an apns provider's ca= (and an ses provider's
sns_ca=) names that file.

Idempotency-Key: the first processed answer for a key (2xx, or a permanent
4xx) is kept for 24h and replayed for a repeat, which sends nothing; a repeat
while the first is still being processed gets 409. Refusals (503, 429) and
failures without delivery are not kept, so a retry is processed.
--no-keys ignores keys: every request sends.

--latency D makes every well-formed send request wait D before it is
handled, as a real provider's round trip (email and SMS APIs answer in 50 to
300 ms): a timer per request, no CPU held, so thousands can wait at once.
A slow rule waits its delay on top.

Fault script (--faults FILE), JSON:
  {"honour_keys": true,
   "rules": [
     {"to": "ada@example.com", "attempts": [1, 2], "action": "lose-answer"},
     {"to": "ben@example.com", "attempts": [1], "action": "refuse", "status": 503}]}

  "to" is an email address, a vendor API's recipient (discord:ID,
  telegram:CHAT_ID, teams:ID, webpush:ID, apns:TOKEN) or "*". "attempts" lists which attempts the rule
  matches (absent: all): attempt n is the n-th send request received for that
  address, counting every request, from 1. The first matching rule wins.
  "honour_keys" (optional) sets key honouring; --no-keys overrides it.
  "description" (optional) is free text. Unknown fields are errors.

Actions:
  ok           process normally (the default)
  lose-answer  process (send, or replay for a known key), then close the
               connection without answering: the email WAS sent
  hang         process, then answer nothing until the client gives up or
               "delay" passes (default 1m), then close the connection
  refuse       do not process; answer "status" 503 (default) or 429, with
               Retry-After from "retry_after" ("2s") if given
  fail         answer "status" 500 (default), 502 or 504; with "deliver": true
               the email is sent first and a retry with the key gets the 200
  reject       permanent error "status" 400 (default), 401, 403, 404, 410, 413
               or 422 (410: a Web Push subscription or APNs token gone);
               nothing is sent; kept for the key
  slow         wait "delay" (required, e.g. "300ms"), then process normally

Examples:
  edgerelay sim
  edgerelay sim --faults testdata/faults/acceptance.json
  edgerelay sim --listen 127.0.0.1:0 --no-keys
  edgerelay sim --latency 100ms --quiet`,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "listen",
				Value:   "127.0.0.1:9099",
				Usage:   "address to listen on (port 0 picks a free one)",
				EnvVars: []string{"EDGERELAY_SIM_LISTEN"},
			},
			&cli.StringFlag{
				Name:    "tls-listen",
				Usage:   "also serve over TLS (HTTP/2) on `ADDR`, as APNs needs (port 0 picks a free one)",
				EnvVars: []string{"EDGERELAY_SIM_TLS_LISTEN"},
			},
			&cli.StringFlag{
				Name:      "tls-ca",
				Usage:     "with --tls-listen: write the TLS certificate (PEM) to `FILE`, for a provider's ca=",
				EnvVars:   []string{"EDGERELAY_SIM_TLS_CA"},
				TakesFile: true,
			},
			&cli.StringFlag{
				Name:      "faults",
				Usage:     "fault script `FILE` (JSON, see above); none means no faults",
				EnvVars:   []string{"EDGERELAY_SIM_FAULTS"},
				TakesFile: true,
			},
			&cli.BoolFlag{
				Name:    "no-keys",
				Usage:   "ignore Idempotency-Key, so every request sends (overrides honour_keys in the script)",
				EnvVars: []string{"EDGERELAY_SIM_NO_KEYS"},
			},
			&cli.DurationFlag{
				Name:    "latency",
				Usage:   "wait `D` (e.g. 100ms) before handling each send request, as a provider's round trip",
				EnvVars: []string{"EDGERELAY_SIM_LATENCY"},
			},
			&cli.BoolFlag{
				Name:    "quiet",
				Usage:   "log only warnings, not a line per request (for load tests)",
				EnvVars: []string{"EDGERELAY_SIM_QUIET"},
			},
		},
		Action: runSim,
	}
}

func runSim(c *cli.Context) error {
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	var stderr io.Writer = os.Stderr
	if c.App != nil && c.App.ErrWriter != nil {
		stderr = c.App.ErrWriter
	}

	level := slog.LevelInfo
	if c.Bool("quiet") {
		level = slog.LevelWarn
	}
	if c.Duration("latency") < 0 {
		return cli.Exit(fmt.Sprintf("sim: --latency %s: want 0 or more (e.g. 100ms)", c.Duration("latency")), exitUsage)
	}
	opts := sim.Options{
		Latency:    c.Duration("latency"),
		HonourKeys: true,
		Logger:     slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("component", "sim"),
	}
	faults := "no faults"
	if path := c.String("faults"); path != "" {
		script, err := sim.LoadScript(path)
		if err != nil {
			return cli.Exit(fmt.Sprintf("sim: --faults: %v (see `edgerelay sim --help` for the script format)", err), exitUsage)
		}
		opts.Script = script
		faults = fmt.Sprintf("%d fault rules from %s", len(script.Rules), path)
		if len(script.Rules) == 1 {
			faults = "1 fault rule from " + path
		}
	}
	srv := sim.New(opts)
	// A flag beats the file: --no-keys wins over honour_keys in the script.
	if c.Bool("no-keys") {
		srv.SetHonourKeys(false)
	}

	if (c.String("tls-listen") == "") != (c.String("tls-ca") == "") {
		return cli.Exit("sim: --tls-listen and --tls-ca go together: the certificate of the TLS listener is written to --tls-ca for the provider's ca=", exitUsage)
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("sim: --listen: %w (try another address, or port 0 for a free one)", err)
	}
	servers := []*http.Server{{Handler: srv, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)}}
	listeners := []net.Listener{ln}
	if addr := c.String("tls-listen"); addr != "" {
		tln, err := simTLSListener(addr, c.String("tls-ca"))
		if err != nil {
			ln.Close()
			return err
		}
		servers = append(servers, &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: servers[0].ErrorLog})
		listeners = append(listeners, tln)
	}
	printSimRoutes(stderr, srv, ln.Addr().String(), listeners[len(listeners)-1].Addr().String(), c.String("tls-ca"),
		c.Duration("latency"), faults, len(listeners) > 1)

	served := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { served <- hs.Serve(listeners[i]) }()
	}
	select {
	case err := <-served:
		for _, hs := range servers {
			_ = hs.Close()
		}
		return fmt.Errorf("sim: serve: %w", err)
	case <-ctx.Done():
	}

	// End held requests first (hang, slow), so that Shutdown does not wait
	// for them; then let answered connections finish.
	srv.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range servers {
		if err := hs.Shutdown(shutdownCtx); err != nil {
			_ = hs.Close()
		}
	}
	for range servers {
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("sim: serve: %w", err)
		}
	}
	fmt.Fprintf(stderr, "sim: stopped after %d send requests, %d deliveries\n", srv.Requests(), len(srv.Deliveries()))
	return nil
}

// simTLSListener listens on addr with a certificate made now for the
// loopback names, written to caFile.
func simTLSListener(addr, caFile string) (net.Listener, error) {
	cert, certPEM, err := sim.SelfSigned()
	if err != nil {
		return nil, fmt.Errorf("sim: make the TLS certificate: %w", err)
	}
	if err := os.WriteFile(caFile, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("sim: --tls-ca: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: --tls-listen: %w (try another address, or port 0 for a free one)", err)
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}), nil
}

// printSimRoutes says where the simulator listens and how to route each
// provider to it.
func printSimRoutes(w io.Writer, srv *sim.Server, addr, tlsAddr, ca string, latency time.Duration, faults string, withTLS bool) {
	keys, idem := "keys honoured", "honoured"
	if !srv.HonoursKeys() {
		keys, idem = "keys ignored", "none"
	}
	if latency > 0 {
		keys += ", latency " + latency.String()
	}
	url := "http://" + addr + "/v1/emails"
	fmt.Fprintf(w, "sim: listening on %s (%s, %s); route with --route 'email=email-http+%s?from=relay@example.com&idempotency=%s'\n",
		url, keys, faults, url, idem)
	fmt.Fprintf(w, "sim: vendor APIs on http://%s (no keys honoured, as the vendors'):\n", addr)
	for _, u := range []string{
		"mailgun+http://" + addr + "?domain=sim.example&from=relay%40sim.example&token=key-sim",
		"ses+http://AKIDSIM:secret@" + addr + "?region=us-east-1&from=relay%40sim.example",
		"discord+http://" + addr + "/api/webhooks/1/sim",
		"telegram+http://" + addr + "?token=1:sim&chat_id=42",
		"teams+http://" + addr + "/workflows/sim/triggers/manual/paths/invoke?api-version=1&sig=sim",
		"webpush+http://sim?allow_private=true&subject=mailto:ops%40example.com&vapid_key=FILE   (address: POST http://" + addr + "/push-subscriptions)",
	} {
		fmt.Fprintf(w, "sim:   %s\n", u)
	}
	if withTLS {
		fmt.Fprintf(w, "sim: over TLS (HTTP/2) on https://%s, certificate in %s:\n", tlsAddr, ca)
		fmt.Fprintf(w, "sim:   apns://%s?key=FILE.p8&key_id=ABC123DEFG&team_id=DEF123GHIJ&topic=com.example.app&ca=%s\n", tlsAddr, ca)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/sim"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:      "sim",
		Usage:     "run a simulated email provider that honours Idempotency-Key and injects faults",
		UsageText: "edgerelay sim [--listen ADDR] [--faults FILE] [--no-keys] [--latency D] [--quiet]",
		Description: `Runs an email-style HTTP API on loopback for trying the relay against a
provider that misbehaves on cue. It prints the URL to route to, logs one line
per request (recipient, attempt, action, status) on stderr, and counts what
each recipient really received. Stop it with Ctrl-C.

Endpoints:
  POST /v1/emails   {"from", "to" (string or array), "subject", "text", "html"},
                    optional Idempotency-Key header; answers 200 {"id": "sim_<n>"}
  GET  /deliveries  {"total", "by_recipient", "deliveries"}: what was really sent
  GET  /requests    {"total"}: send requests received
  POST /reset       forget deliveries, keys and attempt counts

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

  "to" is an address or "*". "attempts" lists which attempts the rule
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
  reject       permanent error "status" 400 (default), 401, 403, 404 or 422;
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

	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("sim: --listen: %w (try another address, or port 0 for a free one)", err)
	}
	url := "http://" + ln.Addr().String() + "/v1/emails"
	keys, idem := "keys honoured", "honoured"
	if !srv.HonoursKeys() {
		keys, idem = "keys ignored", "none"
	}
	if d := c.Duration("latency"); d > 0 {
		keys += ", latency " + d.String()
	}
	fmt.Fprintf(stderr, "sim: listening on %s (%s, %s); route with --route 'email=email-http+%s?from=relay@example.com&idempotency=%s'\n",
		url, keys, faults, url, idem)

	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("sim: serve: %w", err)
	case <-ctx.Done():
	}

	// End held requests first (hang, slow), so that Shutdown does not wait
	// for them; then let answered connections finish.
	srv.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		_ = hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sim: serve: %w", err)
	}
	fmt.Fprintf(stderr, "sim: stopped after %d send requests, %d deliveries\n", srv.Requests(), len(srv.Deliveries()))
	return nil
}

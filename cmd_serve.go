package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/net/netutil"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/console"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
	"github.com/edgerelay/edgerelay/sources"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:         "serve",
		Usage:        "run the HTTP API, the dispatcher and the scheduled jobs in one process",
		ArgsUsage:    " ",
		Description:  serveDescription,
		Flags:        serveFlags(),
		OnUsageError: usageErr,
		Action:       runServe,
	}
}

const serveDescription = `Serves the JSON API on --listen (default 127.0.0.1:8025) and delivers what is
due, on the one SQLite file. With no config it delivers through the log
provider (stdout), so this works on a fresh machine:

   edgerelay serve &
   curl -s localhost:8025/v1/events -d @testdata/event.json

Access: with no tokens configured (config "tenants:" or "edgerelay token
create") the API is open to every tenant, which is allowed only on a loopback
address (the sidecar case). Bound to any other address without tokens, serve
refuses to start. The first token created while an open serve runs (by
"edgerelay token create" in another process) closes the API within 1 s: from
then on every request needs a token, until a restart. A revoked token stops
working at once.

Metrics (GET /metrics) cover every tenant, so no tenant's token opens them.
On the API's address they are served while the API is open, or to
Authorization: Bearer METRICS_TOKEN (--metrics-token, or a token made by
"edgerelay token create --metrics", taken without a restart); --metrics-listen
serves them without a token on an address of their own (a private interface
for the scraper).

Slow clients: headers must arrive within 10 s; a request is authenticated on
its headers before any body is read; a body must arrive within --body-timeout
(408 after it). At most --max-conns connections are open at once: more wait
in the kernel's accept queue, holding no descriptor, until one closes.

Overload: POST /v1/events and /v1/events:batch answer 503 overloaded with
Retry-After and store nothing, so a burst slows its sender instead of
growing the backlog without bound, while delivery through a provider the
event goes to is more than --shed-behind (default 5s) behind (the
notifications last claimed for it had been due longer; waits its pauses or
rate limit imposed do not count, so a slow provider does not get the others'
events refused), or while more than --shed-above notifications (default
100000) are due and not yet claimed (checked once a second).

Endpoints, one per route (the tenant is the token's; on an open API,
?tenant=, default "default"):
   POST   /v1/events                          accept an event
   POST   /v1/events:batch                    accept events, a result each
   GET    /v1/notifications                   a page, or one by ?key=
   GET    /v1/notifications/{id}              one audit trail
   POST   /v1/notifications/{id}/retry        retry failed, dead, unknown
   GET    /v1/audiences                       names, member counts
   GET    /v1/audiences/{name}                its members
   PUT    /v1/audiences/{name}                replace its members
   DELETE /v1/audiences/{name}                delete it
   GET    /v1/recipients/{id}/preferences     a recipient's categories on or off, quiet hours
   PUT    /v1/recipients/{id}/preferences     replace them (what is left out: the default)
   POST   /v1/recipients/{id}/links           signed links: preferences page, one-click unsubscribe
   GET    /u/{token}                          unsubscribe confirmation page (changes nothing)
   POST   /u/{token}                          one-click unsubscribe (RFC 8058), no token needed
   GET    /p/{token}                          the recipient's preferences page, no token needed
   POST   /p/{token}                          save it (its form)
   GET    /c/{token}                          a tracked link: counts the click, redirects (302)
   GET    /v1/feeds/{feed}/members            members, seq each joined at
   PUT    /v1/feeds/{feed}/members            replace them
   GET    /v1/users/{user}/feed               the user's merged feed
   GET    /v1/users/{user}/feed/unread_count  unread items
   GET    /v1/users/{user}/feed/stream        live, as Server-Sent Events (Last-Event-ID resumes)
   POST   /v1/users/{user}/feed/read-all      {"up_to": SEQ}
   POST   /v1/users/{user}/feed/dismiss-all   {"up_to": SEQ}
   POST   /v1/users/{user}/feed/{seq}/read    one item
   POST   /v1/users/{user}/feed/{seq}/dismiss one item
   OPTIONS /v1/users/{user}/feed              a browser's CORS preflight (and for
   OPTIONS /v1/users/{user}/feed/unread_count   each route a user token opens)
   OPTIONS /v1/users/{user}/feed/read-all
   OPTIONS /v1/users/{user}/feed/stream
   OPTIONS /v1/users/{user}/feed/{seq}/read
   OPTIONS /v1/users/{user}/feed/{seq}/dismiss
   POST   /v1/user-token-keys                 a new key for user tokens: kid and secret (once)
   GET    /v1/user-token-keys                 the tenant's keys, retired ones too (no secrets)
   POST   /v1/user-token-keys/{kid}/retire    tokens it signed are refused from now on
   GET    /v1/feed-origins                    the browser origins the tenant allows
   PUT    /v1/feed-origins                    replace them {"origins": [...]}
   GET    /v1/quarantine                      fan-outs stopped part way
   POST   /v1/quarantine/{id}/retry           try the fan-out again
   POST   /v1/quarantine/{id}/drop            give up its rest
   GET    /v1/sources/{name}/rejects          a tailed outbox's rejected rows (open API only)
   POST   /v1/sources/{name}/rejects/retry    read {"rows": [...]} or {"all": true} again
   POST   /v1/sources/{name}/rejects/drop     remove their records
   GET    /v1/suppressions                    the tenant's suppression list (JSON; CSV with ?format=csv)
   POST   /v1/suppressions                    add entries (JSON), or import a text/csv body
   DELETE /v1/suppressions                    take an address off (?channel=&address=)
   POST   /v1/bounces                         a DSN or ARF complaint (the whole message)
   GET    /v1/templates                       the tenant's templates: files and stored, with versions
   PUT    /v1/templates/{name}/{channel}/{locale}  save {"parts": {...}} as the next version
   GET    /v1/templates/{name}/{channel}/{locale}  the latest version (?version=N: that one)
   GET    /v1/templates/{name}/{channel}/{locale}/versions  every version
   GET    /v1/templates/{name}/{channel}/{locale}/versions/{version}  one version
   DELETE /v1/templates/{name}/{channel}/{locale}  retire it (its versions stay readable)
   POST   /v1/templates/{name}/{channel}/render    preview {"recipient", "data"}: nothing written
   PUT    /v1/workflows/{type}                save a workflow as the next version
   GET    /v1/workflows/{type}                the latest version (?version=N: that one)
   GET    /v1/workflows/{type}/versions       every version
   DELETE /v1/workflows/{type}                retire it (its versions stay readable)
   GET    /v1/workflow-runs                   runs with their steps (?state= &event_id= &after= &limit=)
   POST   /v1/workflow-runs/{cancel_key}/cancel  cancel the waiting runs of that key
   POST   /v1/receipts/{provider}             a provider's callbacks
   GET    /healthz                            the process is up
   GET    /readyz                             the database takes writes (body: each tail's lag)
   GET    /metrics                            Prometheus (see above)
   GET    /openapi.json                       this API as an OpenAPI 3.1 document, no token needed
   GET    /docs/api                           its reference page, no token needed
   GET    /inbox.js                           the <edgerelay-inbox> element for an app's pages
   GET    /inbox/demo                         the element against this server (token in the #fragment)
   GET    /inbox/demo.js                      the demo page's script
An accept answers its notifications and feed_items (feed, seq). A page of
notifications takes ?status= &recipient= &event_id= (every purpose; &purpose=
for one) &cursor= &limit=. Lists of audiences and members page with ?after=
&limit=. PUT members needs "members" ([] empties the feed).
Accepting events (one or a batch) and retrying a notification take an
Idempotency-Key header (up to 255 printable ASCII characters; the other
writes are idempotent by their own keys or ids): the first successful response is stored (--key-ttl) and
replayed for a repeat; a batch keeps each event's success and runs the
others again.

SIGHUP: read the config file again and apply its routes (with their
providers), provider limits and tenants' tokens, without a restart and
without dropping a request; a call in flight finishes on the provider it
started with. A config that fails the checks made at start is logged and
the running one stays. What a reload cannot change (listen addresses, the
database, dispatch, retry and api settings, jobs, tails) is logged as
needing a restart.

Several serve on one database (PostgreSQL, or one file): every process serves
the API and dispatches; the schedules, the pruning of request keys and each
tail run on one process at a time, under a lease that another process takes
over within --leader-ttl and a third of its holder's death. Provider limits
(concurrency, rate) are per process; a Retry-After pause reaches them all.

The console (pages for people: overview, search, a notification's audit
trail, retries) is at /console on --listen, and on --console-listen too if
set. It signs in with the API's tokens (sessions kept in the database, so a
login works on every node sharing it and a logout ends it on all); without
tokens it is open on loopback only, as the API. Behind a TLS proxy, name the
proxy with --trusted-proxy so that the session cookie is Secure.

SIGINT/SIGTERM: stop accepting, finish requests in flight, stop claiming,
wait up to --drain-timeout for provider calls, record them, exit.`

// serveFlags are serve's own flags (after the global ones); those that a
// config key sets too are merged with it by mergeFlags.
func serveFlags() []cli.Flag {
	return commonFlags(
		flagRoute(), flagDelivery(),
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8025", EnvVars: []string{"EDGERELAY_LISTEN"}, Usage: "the API's `ADDRESS`"},
		&cli.Int64Flag{Name: "max-body", Value: config.DefaultMaxBody, EnvVars: []string{"EDGERELAY_MAX_BODY"}, Usage: "largest request body in `BYTES` (413 beyond)"},
		&cli.IntFlag{Name: "max-batch", Value: config.DefaultMaxBatch, EnvVars: []string{"EDGERELAY_MAX_BATCH"}, Usage: "most events in one POST /v1/events:batch"},
		&cli.DurationFlag{Name: "key-ttl", Value: config.DefaultKeyTTL, EnvVars: []string{"EDGERELAY_KEY_TTL"}, Usage: "how long a request's Idempotency-Key and response are kept"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: []string{"EDGERELAY_DRAIN_TIMEOUT"}, Usage: "on shutdown: how long to wait for calls in flight"},
		&cli.IntFlag{Name: "max-recipients", EnvVars: []string{"EDGERELAY_MAX_RECIPIENTS"}, Usage: "most recipients per event (default 10000, or limits.max_recipients); 413 beyond"},
		&cli.DurationFlag{Name: "body-timeout", Value: config.DefaultBodyTimeout, EnvVars: []string{"EDGERELAY_BODY_TIMEOUT"}, Usage: "how long a request body may take to arrive (408 and the connection closed beyond)"},
		&cli.IntFlag{Name: "max-conns", Value: config.DefaultMaxConns, EnvVars: []string{"EDGERELAY_MAX_CONNS"}, Usage: "most connections open at once; more wait in the kernel's accept queue"},
		&cli.DurationFlag{Name: "shed-behind", Value: config.DefaultShedBehind, EnvVars: []string{"EDGERELAY_SHED_BEHIND"}, Usage: "refuse new events (503 overloaded, Retry-After) while delivery is further behind than this; 0: never"},
		&cli.Int64Flag{Name: "shed-above", Value: config.DefaultShedAbove, EnvVars: []string{"EDGERELAY_SHED_ABOVE"}, Usage: "refuse new events (503 overloaded, Retry-After) while more than this many notifications are due and unclaimed; 0: never"},
		&cli.StringFlag{Name: "metrics-listen", EnvVars: []string{"EDGERELAY_METRICS_LISTEN"}, Usage: "serve GET /metrics without a token on this `ADDRESS` of its own (a private interface)"},
		&cli.DurationFlag{Name: "leader-ttl", Value: 15 * time.Second, EnvVars: []string{"EDGERELAY_LEADER_TTL"},
			Usage: "how long a process's hold on the schedules, the key pruning and each tail lasts unrenewed: another process takes over a dead one's within this and a third"},
		&cli.StringFlag{Name: "console-listen", EnvVars: []string{"EDGERELAY_CONSOLE_LISTEN"}, Usage: "serve the console (also at /console on --listen) on this `ADDRESS` of its own too"},
		&cli.StringSliceFlag{Name: "trusted-proxy", EnvVars: []string{"EDGERELAY_TRUSTED_PROXY"},
			Usage: "the `CIDR` (or address) of a proxy in front of serve, repeatable or comma-separated: from it, X-Forwarded-Proto: https makes the console's cookie Secure and __Host-, and X-Forwarded-For names the client"},
		&cli.StringFlag{Name: "metrics-token", EnvVars: []string{"EDGERELAY_METRICS_TOKEN"}, Usage: "a bearer `TOKEN` (16+ characters) that opens GET /metrics on the API's address"},
		&cli.IntFlag{Name: "streams-per-user", Value: 5, EnvVars: []string{"EDGERELAY_STREAMS_PER_USER"}, Usage: "most feed streams (GET /v1/users/{user}/feed/stream, a tab each) one user has open on this process; 429 too-many-streams beyond"},
		&cli.IntFlag{Name: "streams-per-tenant", Value: 500, EnvVars: []string{"EDGERELAY_STREAMS_PER_TENANT"}, Usage: "most feed streams one tenant's users have open on this process; 429 too-many-streams beyond (each is a connection: see --max-conns)"},
		&cli.DurationFlag{Name: "stream-heartbeat", Value: 15 * time.Second, EnvVars: []string{"EDGERELAY_STREAM_HEARTBEAT"}, Usage: "how often an idle feed stream sends a comment, so that proxies keep it open"},
		&cli.DurationFlag{Name: "stream-sweep", Value: 10 * time.Second, EnvVars: []string{"EDGERELAY_STREAM_SWEEP"}, Usage: "how often every feed stream re-reads its feed besides the store's signals (catches a write by another process on the same file)"},
	)
}

// server is one run of serve, built step by step by runServe.
type server struct {
	c              *cli.Context
	s              *settings
	opts           api.Options
	maxConns       int
	trustedProxies []netip.Prefix
	r              *relay.Relay
	metrics        *api.Metrics
	handler        *api.Server
	hs             *http.Server // the API's, on --listen
	ln             net.Listener
	servers        []*http.Server
	listeners      []net.Listener // listeners[i] is servers[i]'s
	tailers        consoleTailers // serve's tailers, for the console, /readyz and /metrics
	jobs           []*schedule.Job
	background     sync.WaitGroup // job runs, key pruning, tailers, the reloader
}

func runServe(c *cli.Context) error {
	hup, stopReload := catchReload() // SIGHUP reloads the config (reload.go)
	defer stopReload()
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return err
	}
	sv := &server{c: c, s: s}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	c.Context = ctx
	if err := sv.check(); err != nil {
		return err
	}
	// Metrics observe the relay, so they exist before it opens.
	metrics := api.NewMetrics()
	s.opts.Observer = metrics
	r, err := openRelayWith(c, s)
	if err != nil {
		return err
	}
	defer r.Close()
	// Whatever ends serve (a signal, a listener that fails, an address
	// found taken after the background work began) ends that work and
	// waits for it before the relay closes.
	defer func() { cancel(); sv.background.Wait() }()
	metrics.Watch(r, r.Store())
	sv.r, sv.metrics, sv.opts.Metrics = r, metrics, metrics
	if err := sv.open(); err != nil {
		return err
	}
	if err := sv.listen(); err != nil {
		return err
	}
	if err := sv.start(); err != nil {
		return err
	}
	return sv.run(hup)
}

// check checks serve's own settings and builds the routes. A malformed
// address is said before anything opens (a provider's file, the
// database) and before the loopback check, which would call it "not
// loopback".
func (sv *server) check() error {
	c, s, f := sv.c, sv.s, sv.s.flags
	if err := checkListen(f.from["listen"], f.Listen); err != nil {
		return err
	}
	for _, l := range []struct{ flag, addr string }{{"metrics-listen", f.MetricsListen}, {"console-listen", f.ConsoleListen}} {
		if l.addr != "" {
			if err := checkListen(f.from[l.flag], l.addr); err != nil {
				return err
			}
		}
	}
	var err error
	if sv.trustedProxies, err = config.ParseProxies(f.TrustedProxies); err != nil {
		return cli.Exit(fmt.Sprintf("%s: %v", f.from["trusted-proxy"], err), exitUsage)
	}
	if err := s.buildRoutes(); err != nil {
		return err
	}
	sv.opts = api.Options{MaxBody: f.MaxBody, MaxBatch: f.MaxBatch, KeyTTL: f.KeyTTL, BodyTimeout: f.BodyTimeout,
		ShedAbove: f.ShedAbove, ShedBehind: f.ShedBehind, MetricsToken: f.MetricsToken,
		Logger: s.opts.Logger, TokenHashes: config.TokenHashes(s.cfg), PublicURL: s.cfg.API.PublicURL}
	sv.maxConns = f.MaxConns
	if err := streamFlags(f, &sv.opts); err != nil {
		return err
	}
	opts, maxConns := sv.opts, sv.maxConns
	switch {
	case opts.BodyTimeout <= 0:
		return cli.Exit(fmt.Sprintf("--body-timeout %s: want a positive duration, e.g. 10s", opts.BodyTimeout), exitUsage)
	case opts.ShedBehind < 0:
		return cli.Exit(fmt.Sprintf("--shed-behind %s: want 0 (never shed) or how far behind delivery may fall", opts.ShedBehind), exitUsage)
	case opts.ShedAbove < 0:
		return cli.Exit(fmt.Sprintf("--shed-above %d: want 0 (never shed) or a number of due notifications", opts.ShedAbove), exitUsage)
	case maxConns <= 0:
		return cli.Exit(fmt.Sprintf("--max-conns %d: want a positive number, e.g. 1024", maxConns), exitUsage)
	case opts.MetricsToken != "" && len(opts.MetricsToken) < 16:
		return cli.Exit("--metrics-token: shorter than 16 characters", exitUsage)
	}
	if s.opts.SingletonTTL = c.Duration("leader-ttl"); s.opts.SingletonTTL < time.Second {
		return cli.Exit(fmt.Sprintf("--leader-ttl %s: want at least 1s (renewed every third of it), e.g. 15s", s.opts.SingletonTTL), exitUsage)
	}
	return nil
}

// open readies the opened relay for serving: its stored templates
// compiled, and the API open (without tokens) only where that is safe.
func (sv *server) open() error {
	c, r, s, opts := sv.c, sv.r, sv.s, &sv.opts
	listen, consoleListen := s.flags.Listen, s.flags.ConsoleListen
	// Stored templates are compiled now, not by the first accept, and
	// one that no longer compiles is logged at start.
	if err := r.RefreshTemplates(c.Context); err != nil {
		return fmt.Errorf("read stored templates: %w", err)
	}

	stored, err := r.Store().HasTokens(c.Context)
	if err != nil {
		return err
	}
	if len(opts.TokenHashes) == 0 && !stored {
		if !isLoopback(listen) {
			return fmt.Errorf("refusing to serve %s without API tokens: anyone who can reach it could send as any tenant; "+
				"create one with `edgerelay token create --tenant NAME`, or listen on 127.0.0.1", listen)
		}
		if consoleListen != "" && !isLoopback(consoleListen) {
			return fmt.Errorf("refusing to serve the console on %s without API tokens: anyone who can reach it could act as any tenant; "+
				"create one with `edgerelay token create --tenant NAME`, or give the console a loopback address", consoleListen)
		}
		opts.Open = true
		s.opts.Logger.Warn("API is open: no tokens configured; serving every tenant on loopback only", "listen", listen)
	}
	return nil
}

// listen opens the API's listener and the metrics one, and makes the API's
// handler.
func (sv *server) listen() error {
	c, r, opts, maxConns := sv.c, sv.r, sv.opts, sv.maxConns
	listen, metricsListen := sv.s.flags.Listen, sv.s.flags.MetricsListen
	ln, err := listenOn(sv.s.flags.from["listen"], listen)
	if err != nil {
		return err
	}
	// Beyond maxConns, Accept waits: the connections queue in the
	// kernel and cost the process no descriptor until one closes.
	ln = netutil.LimitListener(ln, maxConns)
	opts.Sources = sv.tailers.tails
	handler := api.New(r, r.Store(), opts)
	// No ReadTimeout: a body's deadline is set when the handler starts
	// reading it, after authentication (--body-timeout), and lifted
	// once it is in, so a long accept is never cut off by it.
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	sv.handler, sv.hs, sv.ln = handler, hs, ln
	sv.servers, sv.listeners = []*http.Server{hs}, []net.Listener{ln}
	if metricsListen != "" {
		mln, err := listenOn(sv.s.flags.from["metrics-listen"], metricsListen)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", handler.MetricsHandler())
		sv.servers = append(sv.servers, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute})
		sv.listeners = append(sv.listeners, netutil.LimitListener(mln, metricsConns))
		fmt.Fprintf(c.App.ErrWriter, "edgerelay: metrics on http://%s/metrics\n", mln.Addr())
	}
	return nil
}

// start starts the dispatcher, the jobs, the tailers and the console.
func (sv *server) start() error {
	c, r, s, handler, metrics := sv.c, sv.r, sv.s, sv.handler, sv.metrics
	tailers, background := &sv.tailers, &sv.background
	if err := r.Start(c.Context); err != nil {
		return err
	}
	go handler.ShedLoop(c.Context, time.Second)
	// Feed streams hear the store's commits; they end when the context
	// does, before the requests are drained, so a stream never holds the
	// shutdown to its deadline.
	go handler.StreamLoop(c.Context)
	// Templates stored by another process (a PUT on another node,
	// `template set`) reach this node's accepts within this period.
	refresh := time.Duration(s.cfg.Templates.Refresh)
	if refresh <= 0 {
		refresh = time.Second
	}
	go r.WatchTemplates(c.Context, refresh)
	jobs, err := serveJobs(s.cfg, r)
	if err != nil {
		return err
	}
	sv.jobs = jobs
	// Schedules (the prune job among them), the pruning of request
	// keys and each tailed source run on one process at a time among
	// those sharing the database (several serve on one PostgreSQL, or
	// on one file): each under a lease that moves to a live process
	// within r.FailoverBound() (--leader-ttl and a third) of its
	// holder's death. A run or a row repeated by a takeover is the
	// same run or event: nothing goes out twice.
	background.Go(func() {
		r.Singly(c.Context, "prune-requests", func(ctx context.Context) { handler.PruneLoop(ctx, time.Minute) })
	})
	background.Go(func() {
		r.Singly(c.Context, "schedules", func(ctx context.Context) { schedule.RunSchedules(ctx, r, r.Store(), jobs) })
	})
	// Each source is opened by its tailer, on the process that holds
	// its lease: a database that is down delays its rows only (the
	// tailer logs and retries the open as any failure).
	for i, tc := range s.cfg.Tail {
		spec := s.cfg.TailSpecs()[i]
		t := tailers.add(r, spec, sources.TailOptions{Poll: time.Duration(tc.Poll)})
		background.Go(func() {
			r.Singly(c.Context, "tail:"+spec.Name(), func(ctx context.Context) {
				tailers.here(spec.Name(), true)
				defer tailers.here(spec.Name(), false)
				if err := t.Run(ctx); err != nil {
					s.opts.Logger.Error("tail stopped", "source", spec.Name(), "err", err)
				}
			})
		})
	}
	// /readyz and /metrics show each source's lag; only the process
	// that tails a source has its figures (consoleTailers.tails).
	metrics.WatchTails(tailers.tails, r.Now)
	return sv.console()
}

// console serves the console at /console on the API's address, and on
// --console-listen if set. It resolves tokens through the API's handler,
// so both take the same tokens and close together.
func (sv *server) console() error {
	c, r, s, handler, tailers := sv.c, sv.r, sv.s, sv.handler, &sv.tailers
	con, err := console.New(r, r.Store(), console.Options{Auth: handler, Jobs: sv.jobs, Sources: tailers.status, Logger: s.opts.Logger,
		TrustedProxies: sv.trustedProxies})
	if err != nil {
		return err
	}
	top := http.NewServeMux()
	top.Handle("/console", con)
	top.Handle("/console/", con)
	top.Handle("/", handler)
	sv.hs.Handler = top
	if consoleListen := s.flags.ConsoleListen; consoleListen != "" {
		cln, err := listenOn(s.flags.from["console-listen"], consoleListen)
		if err != nil {
			return err
		}
		cmux := http.NewServeMux()
		cmux.Handle("/console", con)
		cmux.Handle("/console/", con)
		cmux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusSeeOther))
		sv.servers = append(sv.servers, &http.Server{Handler: cmux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute})
		sv.listeners = append(sv.listeners, netutil.LimitListener(cln, sv.maxConns))
		fmt.Fprintf(c.App.ErrWriter, "edgerelay: console on http://%s/console/\n", cln.Addr())
	}
	return nil
}

// run serves until a server fails or the context ends (SIGINT, SIGTERM),
// reloading the config on each SIGHUP, then drains.
func (sv *server) run(hup <-chan os.Signal) error {
	c, r, s, ln := sv.c, sv.r, sv.s, sv.ln
	s.opts.Logger.Info("serving", "url", "http://"+ln.Addr().String(), "db", r.Store().Where(), "routes", len(s.opts.Routes))
	fmt.Fprintf(c.App.ErrWriter, "edgerelay: serving http://%s (database %s)\n", ln.Addr(), r.Store().Where())
	errc := make(chan error, len(sv.servers))
	for i, srv := range sv.servers {
		go func() { errc <- srv.Serve(sv.listeners[i]) }()
	}
	rl := &reloader{c: c, log: s.opts.Logger, r: r, api: sv.handler, cur: s}
	sv.background.Go(func() { rl.run(c.Context, hup) })
	sdNotify("READY=1")
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-c.Context.Done():
	}
	sdNotify("STOPPING=1")
	return sv.drain()
}

// drain stops serve: requests first (an accept in flight finishes and is
// answered), then the background work, then the dispatcher, each within
// --drain-timeout.
func (sv *server) drain() error {
	c, r, s := sv.c, sv.r, sv.s
	drain := c.Duration("drain-timeout")
	s.opts.Logger.Info("shutting down: no new requests; finishing those in flight, then the calls", "drain_timeout", drain)
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	var herr error
	for _, srv := range sv.servers {
		herr = errors.Join(herr, srv.Shutdown(ctx))
	}
	sv.background.Wait() // job runs and tailers end with their context
	derr := r.Stop(ctx)
	if herr != nil {
		fmt.Fprintf(c.App.ErrWriter, "edgerelay: shutdown: requests still running after the drain timeout (%s) were cut off: %v\n", drain, herr)
	}
	if derr != nil {
		fmt.Fprintf(c.App.ErrWriter, "edgerelay: shutdown: provider calls still running after the drain timeout (%s) were cancelled and recorded as unknown (the log line \"dispatcher stopped\" counts them)\n", drain)
	}
	return nil
}

// consoleTailers are serve's tailers, for the console's overview: their
// counters, and when each last settled a batch.
type consoleTailers struct {
	mu      sync.Mutex
	list    []*sources.Tailer
	last    map[string]time.Time
	running map[string]bool // this process holds the source's lease and tails it
}

func (ts *consoleTailers) here(name string, on bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.running == nil {
		ts.running = map[string]bool{}
	}
	ts.running[name] = on
}

func (ts *consoleTailers) add(r *relay.Relay, spec *sources.Spec, opts sources.TailOptions) *sources.Tailer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.last == nil {
		ts.last = map[string]time.Time{}
	}
	name := spec.Name()
	opts.OnBatch = func(sources.TailStats) {
		ts.mu.Lock()
		ts.last[name] = time.Now()
		ts.mu.Unlock()
	}
	t := sources.NewTailerFor(r, r.Store(), spec, opts)
	ts.list = append(ts.list, t)
	return t
}

func (ts *consoleTailers) status() []console.SourceStatus {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []console.SourceStatus
	for _, t := range ts.list {
		st := t.Stats()
		out = append(out, console.SourceStatus{Name: st.Source, Position: st.Position, Accepted: st.Accepted,
			Rejected: st.Rejected, Errors: st.Errors, LastBatch: ts.last[st.Source], CaughtUp: st.CaughtUp, Here: ts.running[st.Source],
			RowsBehind: st.RowsBehind, RowsBehindEstimated: st.RowsBehindEstimated, LagMeasured: st.LagMeasured,
			OldestUnrelayed: st.OldestUnrelayed, AgeUnknown: st.AgeUnknown, GapIDs: st.GapIDs, OldestGap: st.OldestGap})
	}
	return out
}

// tails are the tailers' counters for /readyz and /metrics, each with
// whether this process tails it now.
func (ts *consoleTailers) tails() []api.TailSource {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]api.TailSource, 0, len(ts.list))
	for _, t := range ts.list {
		st := t.Stats()
		out = append(out, api.TailSource{TailStats: st, Here: ts.running[st.Source]})
	}
	return out
}

// metricsConns bounds the connections of the metrics listener: it serves
// a scraper or two.
const metricsConns = 16

// checkListen says what is wrong with a listen address, naming where it
// came from: HOST:PORT (HOST may be empty: every interface), PORT a number
// up to 65535 or a service name.
// listenOn listens on addr, which from (the flag or config key) gave. An
// address in use says what to do about it.
func listenOn(from, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s %s: the address is in use: another program (another edgerelay serve?) listens there; stop it, or give %s another address (port 0 picks a free one)", from, addr, from)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", from, addr, err)
	}
	return ln, nil
}

func checkListen(from, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err == nil && strings.ContainsAny(host, " /") {
		err = fmt.Errorf("host %q", host)
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("%s %q: not an address to listen on (%v): want HOST:PORT, e.g. 127.0.0.1:8025 or :8025", from, addr, err), exitUsage)
	}
	return nil
}

// isLoopback reports whether a listen address is on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// streamFlags reads the feed streams' bounds and periods (flags, or the
// config's api: keys) into opts.
func streamFlags(f *overrides, opts *api.Options) error {
	opts.MaxStreamsPerUser, opts.MaxStreamsPerTenant = f.StreamsPerUser, f.StreamsPerTenant
	opts.StreamHeartbeat, opts.StreamSweep = f.StreamHeartbeat, f.StreamSweep
	switch {
	case opts.MaxStreamsPerUser <= 0:
		return cli.Exit(fmt.Sprintf("%s %d: want a positive number, e.g. 5 (tabs a user keeps open)", f.from["streams-per-user"], opts.MaxStreamsPerUser), exitUsage)
	case opts.MaxStreamsPerTenant <= 0:
		return cli.Exit(fmt.Sprintf("%s %d: want a positive number, e.g. 500", f.from["streams-per-tenant"], opts.MaxStreamsPerTenant), exitUsage)
	case opts.MaxStreamsPerTenant < opts.MaxStreamsPerUser:
		return cli.Exit(fmt.Sprintf("%s %d is below %s %d: one user could not open what the user bound allows", f.from["streams-per-tenant"], opts.MaxStreamsPerTenant, f.from["streams-per-user"], opts.MaxStreamsPerUser), exitUsage)
	case opts.StreamHeartbeat < 10*time.Millisecond:
		return cli.Exit(fmt.Sprintf("%s %s: want at least 10ms, e.g. 15s (under a proxy's idle timeout)", f.from["stream-heartbeat"], opts.StreamHeartbeat), exitUsage)
	case opts.StreamSweep < 10*time.Millisecond:
		return cli.Exit(fmt.Sprintf("%s %s: want at least 10ms, e.g. 10s", f.from["stream-sweep"], opts.StreamSweep), exitUsage)
	}
	return nil
}

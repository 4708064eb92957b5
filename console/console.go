package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
	"github.com/edgerelay/edgerelay/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Auth resolves tokens as the API does; api.Server implements it, so the
// console accepts exactly the API's tokens and follows its open mode.
type Auth interface {
	// TokenByHash finds the token whose hex SHA-256 is hash:
	// model.ErrNotFound if none (or revoked).
	TokenByHash(ctx context.Context, hash string) (model.Token, error)
	// Open reports whether requests are served without a token now.
	Open(ctx context.Context) (bool, error)
}

// Options configure the console.
type Options struct {
	// Auth is required.
	Auth Auth
	// Prefix is the path the console is mounted at. Default "/console".
	Prefix string
	// SessionTTL is how long a login lasts (sessions are kept in the
	// store: a restart signs nobody out). Default 12 h.
	SessionTTL time.Duration
	// TrustedProxies are the addresses of the proxies in front of the
	// console: from them, X-Forwarded-Proto: https marks the request as
	// served over HTTPS (the cookie is then Secure and __Host-), and
	// X-Forwarded-For names the client (proxy.go). Nobody else's headers
	// are believed.
	TrustedProxies []netip.Prefix
	// LoginFailures is how many failed token sign-ins a client address may
	// make before it must wait (429); it gets one more try every
	// LoginRefill. Defaults 10 and 1 minute.
	LoginFailures int
	LoginRefill   time.Duration
	// Now is the clock of sessions and the login throttle. Default: the
	// relay's.
	Now func() time.Time
	// Jobs are the scheduled jobs the process runs (the overview shows
	// their last and next runs).
	Jobs []*schedule.Job
	// Sources reports the tailed outboxes (the overview shows how far
	// each has got).
	Sources func() []SourceStatus
	Logger  *slog.Logger
}

// SourceStatus is how far one tailed outbox has been relayed.
type SourceStatus struct {
	Name                       string
	Position                   int64
	Accepted, Rejected, Errors int64
	// LastBatch is when the tailer last settled a batch (zero: none yet).
	LastBatch time.Time
	// CaughtUp is when the tailer last found nothing new in the source
	// (zero: not yet): its lag is at most the time since, while it runs.
	CaughtUp time.Time
	// Here says this process runs the tailer now; another serve sharing
	// the database may hold its lease instead (relay.Singly).
	Here bool
	// The lag, as measured at LagMeasured (zero: not yet): committed rows
	// not relayed yet (estimated past 10,000), when the oldest of them was
	// created (zero: none, or AgeUnknown), and the gap ids waited on since
	// OldestGap (sources.TailStats).
	RowsBehind          int64
	RowsBehindEstimated bool
	LagMeasured         time.Time
	OldestUnrelayed     time.Time
	AgeUnknown          bool
	GapIDs              int64
	OldestGap           time.Time
}

// Console is the console's http.Handler.
type Console struct {
	r  *relay.Relay
	st Store
	// sessions are the sign-ins, kept in the store for every process.
	sessions store.Sessions
	opts     Options
	log      *slog.Logger
	mux      *http.ServeMux
	pages    map[string]*template.Template
	// logins throttles failed sign-ins per client address.
	logins *throttle
}

// Store is what the console reads and keeps in the store itself, beside
// what it asks of the relay: sign-ins, notifications, quarantined
// fan-outs, feed memberships, the schedules' last runs, and the store's
// health and writer counters.
type Store interface {
	store.Sessions
	store.Reads
	store.Events
	store.Console
	store.Jobs
	store.Maintenance
}

// New returns the console over r and its store st.
func New(r *relay.Relay, st Store, opts Options) (*Console, error) {
	if opts.Auth == nil {
		return nil, errors.New("console: Options.Auth is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = "/console"
	}
	opts.Prefix = strings.TrimSuffix(opts.Prefix, "/")
	if opts.LoginFailures <= 0 {
		opts.LoginFailures = 10
	}
	if opts.LoginRefill <= 0 {
		opts.LoginRefill = time.Minute
	}
	if opts.Now == nil {
		opts.Now = r.Now
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Console{r: r, st: st, sessions: st, opts: opts, log: opts.Logger, mux: http.NewServeMux(), pages: map[string]*template.Template{},
		logins: newThrottle(opts.LoginFailures, opts.LoginRefill)}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "templates/")
		if base == "layout.html" {
			continue
		}
		t, err := template.New(base).Funcs(c.funcs()).ParseFS(templateFS, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", base, err)
		}
		c.pages[strings.TrimSuffix(base, ".html")] = t
	}
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	p := c.opts.Prefix
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET "+p+"/static/", http.StripPrefix(p+"/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET "+p+"/login", c.loginPage)
	c.mux.HandleFunc("POST "+p+"/login", c.login)
	c.mux.HandleFunc("POST "+p+"/logout", c.logout)
	c.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, p+"/", http.StatusSeeOther) })
	c.mux.HandleFunc("GET "+p+"/{$}", c.authed(c.overview))
	c.mux.HandleFunc("GET "+p+"/notifications", c.authed(c.search))
	c.mux.HandleFunc("GET "+p+"/notifications/{id}", c.authed(c.notification))
	c.mux.HandleFunc("GET "+p+"/retry", c.authed(c.retryConfirm))
	c.mux.HandleFunc("POST "+p+"/retry", c.authed(c.retry))
	c.mux.HandleFunc("GET "+p+"/quarantine", c.authed(c.quarantine))
	c.mux.HandleFunc("GET "+p+"/quarantine/{id}/{action}", c.authed(c.quarantineConfirm))
	c.mux.HandleFunc("POST "+p+"/quarantine/{id}/{action}", c.authed(c.quarantineAct))
	c.mux.HandleFunc("GET "+p+"/suppressions", c.authed(c.suppressions))
	c.mux.HandleFunc("GET "+p+"/suppressions/lift", c.authed(c.liftConfirm))
	c.mux.HandleFunc("POST "+p+"/suppressions/lift", c.authed(c.lift))
	c.mux.HandleFunc("GET "+p+"/audiences", c.authed(c.audiences))
	c.mux.HandleFunc("GET "+p+"/audiences/{name}", c.authed(c.audience))
	c.mux.HandleFunc("GET "+p+"/feeds", c.authed(c.feeds))
	c.mux.HandleFunc("GET "+p+"/workflows", c.authed(c.workflows))
	c.mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "No such page", "There is no console page at "+r.URL.Path+".")
	})
}

// ServeHTTP sets the security headers of every answer: no script but the
// console's own file, no framing, no sniffing, no referrer, no caching of
// pages that show a tenant's data.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, c.opts.Prefix+"/static/") {
		h.Set("Cache-Control", "no-store")
	}
	start := time.Now()
	rec := &status{ResponseWriter: w, code: http.StatusOK}
	c.mux.ServeHTTP(rec, r)
	c.log.Info("console request", "method", r.Method, "path", r.URL.Path, "status", rec.code, "took", time.Since(start).Round(time.Microsecond))
}

type status struct {
	http.ResponseWriter
	code int
}

func (s *status) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

// page is what every template gets: the session (nil on the login page),
// the CSRF token for its forms, and the page's own data.
type page struct {
	Title   string
	Prefix  string
	Session *session
	CSRF    string
	Nav     string
	Data    any
}

// render writes a page, or a 500 if its template fails (the page is
// rendered to a buffer first, so a failure never sends half a page).
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, code int, name, title string, data any) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	p := page{Title: title, Prefix: c.opts.Prefix, Session: s, Data: data, Nav: name}
	if s != nil {
		p.CSRF = s.CSRF
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console template", "page", name, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// problem is an error page's content.
type problem struct {
	Heading, Detail string
}

// fail renders an error page. An error from storage is logged and shown
// without its detail beyond what a person can act on.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, code int, heading, detail string) {
	c.render(w, r, s, code, "error", heading, problem{heading, detail})
}

// internal answers a failure of the relay or the store.
func (c *Console) internal(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if model.IsUnavailable(err) {
		c.fail(w, r, s, http.StatusServiceUnavailable, "Storage unavailable",
			"The database could not be written, so nothing was changed. Try again later.")
		return
	}
	c.log.Error("console", "path", r.URL.Path, "err", err)
	c.fail(w, r, s, http.StatusInternalServerError, "Something went wrong", "The page could not be read: "+err.Error())
}

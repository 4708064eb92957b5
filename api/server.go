package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/usertoken"
)

// Options configure the API. The zero value is usable for an open API.
type Options struct {
	// Open serves every tenant without tokens (the sidecar on loopback)
	// while no token exists: the caller (serve) decides it at start, and the
	// API closes itself, for good, once a token is created in the store
	// (within TokenCheck).
	Open bool
	// TokenCheck is how often an open API looks for tokens created since it
	// started (by `edgerelay token create`, another process). Default 1 s.
	TokenCheck time.Duration
	// TokenHashes maps the hex SHA-256 of a bearer token to its tenant
	// (tokens from the config file); tokens created with `edgerelay token
	// create` are looked up in the store.
	TokenHashes map[string]string
	// MaxBody bounds a request body. Default 1 MiB.
	MaxBody int64
	// BodyTimeout bounds the reading of a request body, from when the
	// handler starts reading it (after authentication): a client that
	// trickles its body is answered 408 and cut off. Default 10 s.
	BodyTimeout time.Duration
	// MaxBatch bounds the events of one batch request. Default 100.
	MaxBatch int
	// KeyTTL is how long a request's Idempotency-Key and response are kept.
	// Default 24 h.
	KeyTTL time.Duration
	// PageSize bounds the notifications listed inline in an accept response
	// and is the default page size. Default 100.
	PageSize int
	// PublicURL is the scheme and host providers use to reach this API
	// (https://relay.example.com), when a proxy sits in front: receipt
	// signatures cover the URL the provider called.
	PublicURL string
	Logger    *slog.Logger
	Metrics   *Metrics // nil: no /metrics
	// MetricsToken, if set, opens GET /metrics on the API's listener to
	// Authorization: Bearer MetricsToken. Metrics cover every tenant, so no
	// tenant's token opens them; without MetricsToken they are served here
	// only while the API is open (loopback, no tokens), and elsewhere
	// through MetricsHandler on a listener of their own.
	MetricsToken string
	// ShedAbove, when positive, refuses new events (503 overloaded, with
	// Retry-After) while more than this many notifications are due and
	// unclaimed, as ShedLoop last read it: a burst slows its sender
	// instead of growing the backlog without bound. 0 turns it off.
	ShedAbove int64
	// ShedBehind, when positive, refuses new events the same way while
	// delivery through a provider they go to is further behind than this:
	// the notifications last claimed for it had been due longer
	// (relay.Relay.Behind, which leaves out the waits a provider's pause
	// or rate limit imposed). It bounds the backlog by time, where
	// ShedAbove bounds it by count. 0 turns it off.
	ShedBehind time.Duration
	// Sources, if set, lists the outboxes serve tails, for /readyz's
	// detail (their lag does not make the API unready).
	Sources func() []TailSource
	// StreamHeartbeat is how often an idle feed stream sends a comment, so
	// that proxies keep it open. Default 15 s.
	StreamHeartbeat time.Duration
	// StreamSweep is how often every stream re-reads its feed besides the
	// store's signals (a write they cannot tell). Default 10 s.
	StreamSweep time.Duration
	// MaxStreamsPerUser and MaxStreamsPerTenant bound the open feed
	// streams (a tab each): more are refused 429. Defaults 5 and 500.
	MaxStreamsPerUser, MaxStreamsPerTenant int
}

// Server is the HTTP API over one Relay.
type Server struct {
	r    *relay.Relay
	st   Store
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	shed    shedState
	renders renderSlots
	hub     *hub // the open feed streams

	patterns []string // every route's pattern, in the order registered
	// tokens is opts.TokenHashes, replaced whole by SetTokenHashes.
	tokens atomic.Pointer[map[string]string]

	// Open mode, while it lasts: closed is set once a token is found, and
	// stays set; checked is when the store was last asked.
	closed  atomic.Bool
	openMu  sync.Mutex
	checked time.Time
}

// Store is what the API reads and keeps in the store itself, beside what it
// asks of the relay (which adds a clock, tenant checks and the policy):
// notifications and the status, the backlog (store.Dispatch's Live: the
// API claims nothing), stored tokens, completed requests under their
// Idempotency-Key, quarantined fan-outs, tailed rows rejected, stored
// template and workflow versions, and the store's health.
type Store interface {
	store.Reads
	store.Dispatch
	store.Tokens
	store.UserTokens
	store.Requests
	store.Events
	store.Sources
	store.Templates
	store.Workflows
	store.Maintenance
}

// New returns the API handler over r and its store st.
func New(r *relay.Relay, st Store, opts Options) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = 1 << 20
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 100
	}
	if opts.KeyTTL <= 0 {
		opts.KeyTTL = 24 * time.Hour
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 10 * time.Second
	}
	if opts.TokenCheck <= 0 {
		opts.TokenCheck = time.Second
	}
	if opts.StreamHeartbeat <= 0 {
		opts.StreamHeartbeat = 15 * time.Second
	}
	if opts.StreamSweep <= 0 {
		opts.StreamSweep = 10 * time.Second
	}
	if opts.MaxStreamsPerUser <= 0 {
		opts.MaxStreamsPerUser = 5
	}
	if opts.MaxStreamsPerTenant <= 0 {
		opts.MaxStreamsPerTenant = 500
	}
	if len(opts.TokenHashes) > 0 {
		opts.Open = false // tokens exist from the start
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{r: r, st: st, opts: opts, log: opts.Logger, mux: http.NewServeMux(), hub: newHub()}
	s.setTokens(opts.TokenHashes)
	s.handle("POST /v1/events", s.auth(s.unlessShedding(s.postEvent)))
	s.handle("POST /v1/events:batch", s.auth(s.unlessShedding(s.postBatch)))
	s.handle("GET /v1/notifications/{id}", s.auth(s.getNotification))
	s.handle("GET /v1/notifications", s.auth(s.listNotifications))
	s.handle("POST /v1/notifications/{id}/retry", s.auth(s.retryNotification))
	s.audienceRoutes()
	s.preferenceRoutes()
	s.linkRoutes()
	// Receipts come from providers, not tenants: the provider's signature
	// is their authentication.
	s.handle("POST /v1/receipts/{provider}", s.postReceipts)
	s.feedRoutes()
	s.inboxRoutes() // GET /inbox.js, GET /inbox/demo (inbox.go)
	s.userTokenRoutes()
	s.operatorRoutes()
	s.suppressionRoutes()
	s.sourceRoutes()
	s.templateRoutes()
	s.workflowRoutes()
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) response {
		return jsonResponse(http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handle("GET /readyz", s.ready)
	s.docRoutes() // GET /openapi.json, GET /docs/api (openapi.go)
	if opts.Metrics != nil {
		s.mux.HandleFunc("GET /metrics", s.metrics)
		s.patterns = append(s.patterns, "GET /metrics")
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			problem(http.StatusMethodNotAllowed, probMethod, "Method not allowed",
				r.Method+" "+r.URL.Path+": use "+strings.Join(allow, " or ")).write(w)
			return
		}
		problem(http.StatusNotFound, probNotFound, "Not found", "no route for "+r.Method+" "+r.URL.Path).write(w)
	})
	return s
}

// allowed lists the methods that have a route for r's path.
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} { // the methods routes use
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := s.mux.Handler(r2); pattern != "/" && pattern != "" {
			out = append(out, m)
		}
	}
	return out
}

// ServeHTTP logs one line per request, with its status and latency.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	if r.Body != nil && r.Body != http.NoBody {
		rec.body = &trackedBody{ReadCloser: r.Body}
		r.Body = rec.body
	}
	s.mux.ServeHTTP(rec, r)
	took := time.Since(start)
	_, pattern := s.mux.Handler(r)
	if s.opts.Metrics != nil {
		s.opts.Metrics.request(pattern, rec.status, took)
	}
	s.log.Info("request", "method", r.Method, "path", r.URL.Path, "route", pattern, "status", rec.status,
		"bytes", rec.bytes, "took", took.Round(time.Microsecond), "tenant", rec.Header().Get("X-Edgerelay-Tenant"), "remote", r.RemoteAddr)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int
	body   *trackedBody // nil without a request body
}

// WriteHeader closes the connection after a response sent before the
// request's body was read to its end (a 401, a 404, a body cut off): else
// net/http would read what is left of the body first, as slowly as the
// client sends it, to keep the connection.
func (r *statusRecorder) WriteHeader(code int) {
	if r.body != nil && !r.body.done {
		r.Header().Set("Connection", "close")
	}
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (read deadlines).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// trackedBody notes when a request body has been read to its end.
type trackedBody struct {
	io.ReadCloser
	done bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

// handler returns its response instead of writing it, so that responses
// can be stored and replayed byte for byte.
type handler func(w http.ResponseWriter, r *http.Request) response

func (s *Server) handle(pattern string, h handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		h(w, r).write(w)
	})
}

// Routes lists the patterns the API serves ("POST /v1/events", …), so that
// help texts can be checked against them.
func (s *Server) Routes() []string { return slices.Clone(s.patterns) }

// SetTokenHashes replaces the config's tokens (Options.TokenHashes) for the
// requests that start from now on (a config reload). A token left out stops
// working at once. Tokens close an open API for good, as a token created
// in the store does; an empty set never reopens it.
func (s *Server) SetTokenHashes(hashes map[string]string) {
	s.setTokens(hashes)
	if len(hashes) > 0 && s.opts.Open && !s.closed.Swap(true) {
		s.log.Warn("API closed: the config has tokens now; every request needs one")
	}
}

func (s *Server) setTokens(hashes map[string]string) {
	m := maps.Clone(hashes)
	if m == nil {
		m = map[string]string{}
	}
	s.tokens.Store(&m)
}

// caller is who is asking: a tenant, any tenant on an open API, or one
// user of a tenant (a user token: that user's feed only).
type caller struct {
	tenant string // "" with any
	any    bool
	user   string // set for a user token
}

// tenantFor resolves the tenant a request acts as: its own, or, on an open
// API, the one it names (default "default").
func (c caller) tenantFor(named string) (string, bool) {
	if c.any {
		if named == "" {
			named = "default"
		}
		return named, true
	}
	if named == "" || named == c.tenant {
		return c.tenant, true
	}
	return "", false
}

type authedHandler func(w http.ResponseWriter, r *http.Request, c caller) response

// auth resolves the bearer token to a tenant, from the headers alone: no
// body is read before the caller is known. A missing or unknown token is
// 401 on an API with tokens.
func (s *Server) auth(h authedHandler) handler {
	return func(w http.ResponseWriter, r *http.Request) response {
		open, err := s.open(r.Context())
		if err != nil {
			return s.internal(err)
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if open && ok && usertoken.Shaped(token) {
			// Even an open API gives a user token no more than its user's
			// feed: whoever holds one in a browser is that user, not the
			// operator on loopback.
			return userTokenRefused(w)
		}
		if open {
			return h(w, r, caller{any: true})
		}
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay"`)
			return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", "send Authorization: Bearer TOKEN")
		}
		// Looked up on every request: a revoked token stops working at once.
		t, err := s.TokenByHash(r.Context(), HashToken(token))
		if errors.Is(err, model.ErrNotFound) && usertoken.Shaped(token) {
			return userTokenRefused(w)
		}
		if errors.Is(err, model.ErrNotFound) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay", error="invalid_token"`)
			return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", "unknown token")
		}
		if err != nil {
			return s.internal(err)
		}
		tenant := t.Tenant
		w.Header().Set("X-Edgerelay-Tenant", tenant)
		return h(w, r, caller{tenant: tenant})
	}
}

// open reports whether the API serves this request without a token: it was
// started open and no token has been created since. The store is asked at
// most once per TokenCheck, so a token created by another process closes
// the API within that time; once closed, it stays closed (revoking every
// token does not reopen it: revoking must never widen access) until a
// restart decides again.
func (s *Server) open(ctx context.Context) (bool, error) {
	if !s.opts.Open || s.closed.Load() {
		return false, nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.closed.Load() {
		return false, nil
	}
	if !s.checked.IsZero() && time.Since(s.checked) < s.opts.TokenCheck {
		return true, nil
	}
	has, err := s.st.HasTokens(ctx)
	if err != nil {
		return false, fmt.Errorf("look for API tokens: %w", err)
	}
	s.checked = time.Now()
	if has {
		s.closed.Store(true)
		s.log.Warn("API closed: a token exists now; every request needs one")
		return false, nil
	}
	return true, nil
}

// readBody reads a bounded JSON body within BodyTimeout.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *response) {
	// The deadline starts now, after authentication, and is lifted once the
	// body is in: a handler that then takes long must not have its
	// connection (and with it its context) cut by a read deadline.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	// Any Content-Type is taken (curl -d sends a form type): the body must
	// be JSON either way, and a clear 400 says so when it is not.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p := problem(http.StatusRequestTimeout, probBodyTimeout, "Request body too slow",
			fmt.Sprintf("the body was not received within %s; nothing was stored", s.opts.BodyTimeout))
		return nil, &p
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		p := problem(http.StatusRequestEntityTooLarge, probTooLarge, "Request body too large",
			fmt.Sprintf("the body is larger than %d bytes", s.opts.MaxBody))
		return nil, &p
	}
	if err != nil {
		p := problem(http.StatusBadRequest, probInvalidJSON, "Unreadable body", err.Error())
		return nil, &p
	}
	return body, nil
}

// readJSON reads a bounded body and decodes it strictly (relay.DecodeJSON:
// unknown fields, keys given twice, text that is not UTF-8 as sent are
// errors, named by their JSON path) into v; shape describes the expected
// body for the error. Raw values (a batch's events) are left as sent, for
// the event decoder to judge one by one.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any, shape string) ([]byte, *response) {
	body, perr := s.readBody(w, r)
	if perr != nil {
		return nil, perr
	}
	return body, decodeBody(body, v, shape)
}

// readOptionalJSON is readJSON for a body that may be left out: an empty
// one (or only white space) leaves v as it is, every default in force.
func (s *Server) readOptionalJSON(w http.ResponseWriter, r *http.Request, v any, shape string) *response {
	body, perr := s.readBody(w, r)
	if perr != nil {
		return perr
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeBody(body, v, shape)
}

// decodeBody decodes a request's body into v, or is the 400 naming what
// was wrong and the shape wanted.
func decodeBody(body []byte, v any, shape string) *response {
	if err := relay.DecodeJSON(body, v, relay.RawAsSent); err != nil {
		var field string
		if je := (*relay.JSONError)(nil); errors.As(err, &je) {
			field = je.Field
		}
		p := problemField(http.StatusBadRequest, probInvalidJSON, "Invalid JSON", "want "+shape+": "+err.Error(), field)
		return &p
	}
	return nil
}

// MaxKeyLen bounds an Idempotency-Key, as Stripe and the IETF draft's
// implementations do: the key is stored for KeyTTL, so its size is the
// client's to choose only within this.
const MaxKeyLen = 255

// idempotencyKey reads a request's Idempotency-Key ("" without one): 1 to
// 255 printable ASCII characters (what an HTTP structured-field string
// holds), else a 400 naming the header, before any body is read.
func idempotencyKey(r *http.Request) (string, *response) {
	key := r.Header.Get("Idempotency-Key")
	bad := ""
	if len(key) > MaxKeyLen {
		bad = fmt.Sprintf("%d characters, more than the limit of %d", len(key), MaxKeyLen)
	}
	for i := 0; i < len(key) && bad == ""; i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			bad = fmt.Sprintf("byte %d is not printable ASCII", i)
		}
	}
	if bad != "" {
		p := problemField(http.StatusBadRequest, probInvalidRequest, "Invalid Idempotency-Key",
			"Idempotency-Key: "+bad+"; use up to 255 printable ASCII characters (a UUID, say)", "Idempotency-Key")
		return "", &p
	}
	return key, nil
}

// requestKey is how a request under an Idempotency-Key is recognised: the
// key, within the tenant, and a fingerprint of the method, the path and
// body: the request's content as decoded (see decodeEvent), so the same
// request serialised differently is the same request.
func requestKey(r *http.Request, tenant, key string, body []byte) model.RequestKey {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.Path)
	h.Write(body)
	return model.RequestKey{Tenant: tenant, Key: key, Fingerprint: hex.EncodeToString(h.Sum(nil))}
}

// claimKey holds k for the request running now, in the store, so that a
// second request with the same key while the first runs is 409 whichever
// process (node) it reaches, and the 409 says when to come back. A key
// whose request can no longer be running is taken over at once (see
// relay's requestKeys). It returns the stored response instead, if one
// completed meanwhile.
func (s *Server) claimKey(ctx context.Context, k model.RequestKey) (*model.StoredResponse, *response) {
	claim, err := s.r.ClaimRequest(ctx, k)
	switch {
	case errors.Is(err, model.ErrKeyReused):
		p := problem(http.StatusUnprocessableEntity, probKeyReused, "Idempotency-Key reused",
			"this Idempotency-Key was used for a different request")
		return nil, &p
	case err != nil:
		p := s.internal(err)
		return nil, &p
	case !claim.Busy.IsZero():
		p := problem(http.StatusConflict, probKeyInFlight, "Request in progress",
			"a request with this Idempotency-Key is still being processed; retry later")
		p.retryAfter = strconv.Itoa(max(1, int(time.Until(claim.Busy).Seconds()+0.999)))
		return nil, &p
	}
	return claim.Stored, nil
}

// release ends a claim whose request saved no response, with a context of
// its own (the client may have gone): its retry runs at once.
func (s *Server) release(k model.RequestKey) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.r.ReleaseRequest(ctx, k); err != nil {
		s.log.Warn("release an idempotency key (a retry here takes it over; elsewhere its hold lapses)", "key", k.Key, "err", err)
	}
}

// lockOf is the key a batch's run is held under, apart from the records it
// keeps under k (a NUL no client can send keeps the two apart).
func lockOf(k model.RequestKey) model.RequestKey {
	k.Key = "\x00lock\x00" + k.Key
	return k
}

// lookup returns the response stored under k, if any; a key used for
// another request is 422.
func (s *Server) lookup(ctx context.Context, k model.RequestKey) (*model.StoredResponse, *response) {
	stored, err := s.st.LookupRequest(ctx, k, s.r.Now())
	switch {
	case errors.Is(err, model.ErrKeyReused):
		p := problem(http.StatusUnprocessableEntity, probKeyReused, "Idempotency-Key reused",
			"this Idempotency-Key was used for a different request")
		return nil, &p
	case err != nil:
		p := s.internal(err)
		return nil, &p
	}
	return stored, nil
}

// save keeps a response under k, with a context of its own: the client may
// have gone, but its retry must find the answer. If this fails, a retry
// runs again, which the effects underneath make harmless (an event is a
// duplicate).
func (s *Server) save(k model.RequestKey, resp model.StoredResponse) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.r.SaveResponse(ctx, k, resp, s.opts.KeyTTL); err != nil {
		s.log.Error("store the response for an idempotency key", "key", k.Key, "err", err)
	}
}

// idempotent runs a POST under request idempotency (the IETF
// Idempotency-Key draft, as Stripe does it): the first successful response
// for a key is stored with a fingerprint of the request and replayed for a
// repeat; a repeat with a different body is 422; one while the first is in
// flight in this process is 409.
//
// What is final is stored; a success (2xx) is final. A rejected request
// (4xx) or a failed one (5xx) leaves nothing behind (as at Stripe), so a
// retry after the audience exists, the limit was raised or the disk has
// room again runs afresh. A batch applies the same rule to each of its
// events (postBatch).
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, k model.RequestKey, run func() response) response {
	if k.Key == "" {
		return run()
	}
	// A completed request is replayed from a read; only a first run takes
	// the key.
	stored, perr := s.lookup(r.Context(), k)
	if perr == nil && stored == nil {
		stored, perr = s.claimKey(r.Context(), k)
	}
	if perr != nil {
		return *perr
	}
	if stored != nil {
		w.Header().Set("Idempotent-Replayed", "true")
		return response{status: stored.Status, ctype: stored.ContentType, body: stored.Body}
	}
	resp := run()
	if final(resp.status) {
		s.save(k, model.StoredResponse{Status: resp.status, ContentType: resp.ctype, Body: resp.body})
	} else {
		s.release(k)
	}
	return resp
}

// final reports whether an answer is kept under its Idempotency-Key and
// replayed: a success. Anything else may come out otherwise next time.
func final(status int) bool { return status >= 200 && status < 300 }

func (s *Server) internal(err error) response {
	if model.IsUnavailable(err) {
		// The database file refused the write (full, read-only, corrupt):
		// nothing was committed, and a retry later may succeed.
		s.log.Error("storage unavailable", "err", err)
		// The error stays in the log: it names rows and files, which are
		// not the client's to see (row ids count every tenant's).
		p := problem(http.StatusServiceUnavailable, probUnavailable, "Storage unavailable",
			"the database could not be written (full, read-only or unreachable), so nothing was stored; retry later (with the same Idempotency-Key, if any)")
		p.retryAfter = "30"
		return p
	}
	s.log.Error("internal error", "err", err)
	return problem(http.StatusInternalServerError, probInternal, "Internal error", "the request could not be completed; it is safe to retry with the same Idempotency-Key")
}

// acceptResponse is the 202 body of POST /v1/events.
type acceptResponse struct {
	Tenant    string `json:"tenant"`
	EventID   string `json:"event_id"`
	Purpose   string `json:"purpose"`
	Duplicate bool   `json:"duplicate"`
	// Count is the event's notifications; at most PageSize are listed
	// here, Next pages through the rest.
	Count         int                     `json:"count"`
	Notifications []eventNotificationJSON `json:"notifications"`
	Next          string                  `json:"next,omitempty"`
	// FeedItems are the items the event posted, one per feed, with their
	// seqs ([] for an event posted to no feed); a duplicate has those of
	// the first accept.
	FeedItems []model.FeedPost `json:"feed_items"`
}

func (s *Server) postEvent(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := idempotencyKey(r)
	if perr != nil {
		return *perr
	}
	body, perr := s.readBody(w, r)
	if perr != nil {
		return *perr
	}
	ev, canon, perr := s.decodeEvent(body, c)
	if perr != nil {
		return *perr
	}
	if perr := s.behind(ev); perr != nil {
		return *perr
	}
	// The codec is read before the accept: an answer that cannot be
	// written must not follow an event that was.
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	if key == "" {
		// Without a key the event's identity is the idempotency record: the
		// unique constraint on (tenant, id, purpose) makes a resend a
		// duplicate (202, "duplicate": true, the same notifications) and the
		// same id with other content a 409 event-conflict. One commit, not
		// three: no request key to claim and then fill in.
		return s.acceptTenant(r.Context(), x, ev, c)
	}
	return s.idempotent(w, r, requestKey(r, ev.Tenant, key, canon), func() response { return s.acceptTenant(r.Context(), x, ev, c) })
}

// decodeEvent decodes one event of a request and resolves its tenant. canon
// is what the request's fingerprint covers: the event as decoded, encoded
// again (the same event serialised with other key order or white space is
// the same request), or the bytes as sent when they do not decode. perr is
// the event's answer when it cannot be accepted as sent.
func (s *Server) decodeEvent(raw []byte, c caller) (ev relay.Event, canon []byte, perr *response) {
	ev, err := relay.DecodeEvent(bytes.NewReader(raw))
	if err != nil {
		p := s.eventError(err)
		return ev, bytes.TrimSpace(raw), &p
	}
	tenant, ok := c.tenantFor(ev.Tenant)
	if ok {
		ev.Tenant = tenant
	}
	if canon, err = json.Marshal(ev); err != nil {
		p := s.internal(err)
		return ev, nil, &p
	}
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch",
			fmt.Sprintf("this token belongs to tenant %q, the event names %q", c.tenant, ev.Tenant))
		return ev, canon, &p
	}
	return ev, canon, nil
}

// acceptTenant accepts an event whose tenant is resolved, answering with at
// most PageSize notifications and a link to page through the rest.
func (s *Server) acceptTenant(ctx context.Context, x *relay.IDs, ev relay.Event, c caller) response {
	rs, errs := s.r.AcceptAll(ctx, []relay.Event{ev}, s.opts.PageSize)
	return s.acceptAnswer(x, rs[0], errs[0], c)
}

// acceptAnswer is the answer for one event's accept.
func (s *Server) acceptAnswer(x *relay.IDs, res relay.AcceptResult, err error, c caller) response {
	if err != nil {
		return s.eventError(err)
	}
	// Lists are [] when empty, never null (a duplicate's are read back).
	out := acceptResponse{Tenant: res.Tenant, EventID: res.EventID, Purpose: res.Purpose, Duplicate: res.Duplicate,
		Count: res.Count, Notifications: eventNotificationViews(x, res.Notifications), FeedItems: res.FeedItems}
	if out.FeedItems == nil {
		out.FeedItems = []model.FeedPost{}
	}
	if res.Count > len(out.Notifications) && len(out.Notifications) > 0 {
		q := url.Values{"event_id": {res.EventID}, "purpose": {res.Purpose},
			"cursor": {out.Notifications[len(out.Notifications)-1].ID}}
		if c.any {
			q.Set("tenant", res.Tenant) // an open API has no token to say whose event it is
		}
		out.Next = "/v1/notifications?" + q.Encode()
	}
	return jsonResponse(http.StatusAccepted, out)
}

// eventError maps accept errors to problems.
func (s *Server) eventError(err error) response {
	var inv *relay.InvalidEventError
	if p, ok := budgetProblem(err); ok {
		return p
	}
	switch {
	case errors.Is(err, relay.ErrTooManyRecipients) && errors.As(err, &inv):
		return problemField(http.StatusRequestEntityTooLarge, probTooLarge, "Too many recipients", inv.Reason, inv.Field)
	case errors.As(err, &inv):
		return problemField(http.StatusBadRequest, probInvalidEvent, "Invalid event", inv.Reason, inv.Field)
	case errors.Is(err, model.ErrEventConflict):
		return problem(http.StatusConflict, probEventConflict, "Event already accepted with different content", err.Error())
	}
	return s.internal(err)
}

// paramError maps a relay's validation error for a value the client put in
// the path or the query (a tenant, a user, a feed, a name) to a 400
// invalid-request naming it; any other error as eventError does (a field
// of the body is invalid-event).
func (s *Server) paramError(err error, params ...string) response {
	var inv *relay.InvalidEventError
	if errors.As(err, &inv) && slices.Contains(params, inv.Field) && !errors.Is(err, relay.ErrTooManyRecipients) {
		return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid "+inv.Field, inv.Field+": "+inv.Reason, inv.Field)
	}
	return s.eventError(err)
}

// batchRequest is the body of POST /v1/events:batch.
type batchRequest struct {
	Events []json.RawMessage `json:"events"`
}

type batchResult struct {
	Index  int             `json:"index"`
	Status int             `json:"status"`
	Result json.RawMessage `json:"result"` // the accept response or the problem
}

// batchRecord is what a batch keeps under its Idempotency-Key: the results
// of one run that were final (2xx), and the name of the chain of records
// that later runs of the same batch add (the store keeps a first answer
// and never replaces it, so each run that made more events final adds a
// record of its own: at most one per event).
type batchRecord struct {
	Chain   string        `json:"chain"`
	Results []batchResult `json:"results"`
}

// chainKey names the record of a batch's run n (from 1) under key: a NUL
// keeps it apart from every key a client can send (printable ASCII).
func chainKey(k model.RequestKey, chain string, n int) model.RequestKey {
	return model.RequestKey{Tenant: k.Tenant, Key: k.Key + "\x00" + chain + "\x00" + strconv.Itoa(n), Fingerprint: k.Fingerprint}
}

// batchEvent is one event of a batch as decoded: perr is its answer when it
// cannot be accepted as sent (it does not decode, it names another tenant).
type batchEvent struct {
	ev   relay.Event
	perr *response
}

func (s *Server) postBatch(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := idempotencyKey(r)
	if perr != nil {
		return *perr
	}
	var req batchRequest
	if _, perr := s.readJSON(w, r, &req, `{"events": [EVENT, ...]}`); perr != nil {
		return *perr
	}
	if len(req.Events) == 0 {
		return problemField(http.StatusBadRequest, probInvalidEvent, "Empty batch", "at least one event", "events")
	}
	if len(req.Events) > s.opts.MaxBatch {
		return problemField(http.StatusRequestEntityTooLarge, probTooLarge, "Batch too large",
			fmt.Sprintf("%d events, more than the limit of %d per batch", len(req.Events), s.opts.MaxBatch), "events")
	}
	// The fingerprint covers each event as POST /v1/events fingerprints one
	// (decoded and encoded again), length-prefixed: the same batch
	// re-serialised is the same request, other events are another.
	evs := make([]batchEvent, len(req.Events))
	var fp bytes.Buffer
	for i, raw := range req.Events {
		ev, canon, perr := s.decodeEvent(raw, c)
		evs[i] = batchEvent{ev: ev, perr: perr}
		fmt.Fprintf(&fp, "%d\n", len(canon))
		fp.Write(canon)
		if perr == nil {
			if perr := s.behind(ev); perr != nil {
				return *perr // the whole batch, as the size rule sheds it: nothing stored
			}
		}
	}
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	results := make([]batchResult, len(evs))
	have := make([]bool, len(evs)) // results[i] is final, from a stored record
	if key == "" {
		s.runBatch(r.Context(), x, evs, results, have, c)
		return jsonResponse(http.StatusOK, map[string]any{"results": results})
	}
	// Under a key, each event is treated as a request of its own would be:
	// a final (2xx) result is kept and replayed byte for byte; any other
	// result is not kept, so a repeat runs that event again (the disk has
	// room again, the audience exists now).
	k := requestKey(r, c.tenant, key, fp.Bytes())
	if _, perr := s.claimKey(r.Context(), lockOf(k)); perr != nil {
		return *perr
	}
	defer s.release(lockOf(k))
	rec, runs, perr := s.batchRecords(r.Context(), k, results, have)
	if perr != nil {
		return *perr
	}
	if !slices.Contains(have, false) {
		w.Header().Set("Idempotent-Replayed", "true")
		return jsonResponse(http.StatusOK, map[string]any{"results": results})
	}
	fresh := s.runBatch(r.Context(), x, evs, results, have, c)
	if len(fresh) > 0 {
		if runs == 0 {
			rec = batchRecord{Chain: rand.Text()[:16], Results: fresh}
			s.saveRecord(k, rec)
		} else {
			s.saveRecord(chainKey(k, rec.Chain, runs), batchRecord{Chain: rec.Chain, Results: fresh})
		}
	}
	return jsonResponse(http.StatusOK, map[string]any{"results": results})
}

// batchRecords reads the records stored for a batch under k into results
// (setting have for each), and returns the first record and how many runs
// have left one (0: none).
func (s *Server) batchRecords(ctx context.Context, k model.RequestKey, results []batchResult, have []bool) (first batchRecord, runs int, perr *response) {
	for runs = 0; slices.Contains(have, false); runs++ {
		rk := k
		if runs > 0 {
			rk = chainKey(k, first.Chain, runs)
		}
		stored, perr := s.lookup(ctx, rk)
		if perr != nil {
			return first, runs, perr
		}
		if stored == nil {
			break
		}
		var rec batchRecord
		if err := json.Unmarshal(stored.Body, &rec); err != nil {
			p := s.internal(fmt.Errorf("stored batch answer for key %q: %w", k.Key, err))
			return first, runs, &p
		}
		if runs == 0 {
			first = rec
		}
		for _, res := range rec.Results {
			if res.Index >= 0 && res.Index < len(results) && !have[res.Index] {
				results[res.Index], have[res.Index] = res, true
			}
		}
	}
	return first, runs, nil
}

// runBatch accepts the events of a batch that have no final result yet
// (!have[i]), with one AcceptAll (one commit for them all, a result per
// event: each event all-or-nothing), and fills their results. It returns
// the results that are final.
func (s *Server) runBatch(ctx context.Context, x *relay.IDs, evs []batchEvent, results []batchResult, have []bool, c caller) []batchResult {
	var (
		in []relay.Event
		at []int
	)
	set := func(i int, resp response) {
		results[i] = batchResult{Index: i, Status: resp.status, Result: bytes.TrimSpace(resp.body)}
	}
	for i, e := range evs {
		switch {
		case have[i]:
		case e.perr != nil:
			set(i, *e.perr)
		default:
			in, at = append(in, e.ev), append(at, i)
		}
	}
	if len(in) > 0 {
		rs, errs := s.r.AcceptAll(ctx, in, s.opts.PageSize)
		for j, i := range at {
			set(i, s.acceptAnswer(x, rs[j], errs[j], c))
		}
	}
	var fresh []batchResult
	for i := range evs {
		if !have[i] && final(results[i].Status) {
			fresh = append(fresh, results[i])
		}
	}
	return fresh
}

// saveRecord stores a batch record under k.
func (s *Server) saveRecord(k model.RequestKey, rec batchRecord) {
	b, err := json.Marshal(rec)
	if err != nil {
		s.log.Error("encode a batch record", "err", err)
		return
	}
	s.save(k, model.StoredResponse{Status: http.StatusOK, ContentType: "application/json", Body: b})
}

func (s *Server) getNotification(w http.ResponseWriter, r *http.Request, c caller) response {
	x, row, perr := s.notificationPath(r)
	if perr != nil {
		return *perr
	}
	n, err := s.st.Notification(r.Context(), c.tenant, row, "")
	if errors.Is(err, model.ErrNotFound) {
		return noNotification(r.PathValue("id"))
	}
	if err != nil {
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, notificationView(x, n))
}

// notificationByKey answers one audit trail by idempotency key, 404 for
// another tenant's.
func (s *Server) notificationByKey(ctx context.Context, c caller, key string) response {
	x, perr := s.codec(ctx)
	if perr != nil {
		return *perr
	}
	n, err := s.st.Notification(ctx, c.tenant, 0, key)
	if errors.Is(err, model.ErrNotFound) {
		return problem(http.StatusNotFound, probNotFound, "Not found", "no notification with key "+strconv.Quote(key))
	}
	if err != nil {
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, notificationView(x, n))
}

// page is the body of GET /v1/notifications.
type page struct {
	Notifications []notificationJSON `json:"notifications"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	Next       string `json:"next,omitempty"`
}

func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	if key := q.Get("key"); key != "" {
		return s.notificationByKey(r.Context(), c, key)
	}
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	f := model.ListFilter{Tenant: c.tenant, Status: q.Get("status"), Recipient: q.Get("recipient"), Limit: s.opts.PageSize}
	if f.Status != "" && !validStatus(f.Status) {
		return problem(http.StatusBadRequest, probInvalidQuery, "Invalid status",
			fmt.Sprintf("status %q: want one of %s", f.Status, strings.Join(model.Statuses, ", ")))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid limit", "limit: a number from 1 to 1000")
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		// The cursor is the last notification's id: its row is where the
		// page starts, and a tenant's filter applies as on the first page,
		// so no cursor reaches another tenant's notifications.
		row, ok := x.NotificationRow(v)
		if !ok {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid cursor",
				"cursor: "+strconv.Quote(v)+": "+notAnID(v, relay.NotificationIDPrefix)+"; pass the next_cursor of the previous page")
		}
		f.After = row
	}
	if v, named := q["tenant"]; named {
		// On an open API ?tenant= picks the tenant listed; a token lists
		// its own, and naming another is refused rather than ignored.
		if err := relay.CheckTenant("tenant", v[0]); err != nil {
			return s.paramError(err, "tenant")
		}
		tenant, ok := c.tenantFor(v[0])
		if !ok {
			return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch",
				fmt.Sprintf("this token belongs to tenant %q and cannot list tenant %q", c.tenant, v[0]))
		}
		f.Tenant = tenant
	}
	var events []int64 // the events listed, when event_id names them
	if ev := q.Get("event_id"); ev != "" {
		tenant := f.Tenant
		if tenant == "" {
			tenant, _ = c.tenantFor("") // an open API's default tenant
		}
		refs, err := s.eventRefs(r.Context(), tenant, ev, q["purpose"])
		if err != nil {
			return s.paramError(err, "tenant")
		}
		if len(refs) == 0 {
			what := fmt.Sprintf("no event %q in tenant %q", ev, tenant)
			if v, ok := q["purpose"]; ok {
				what = fmt.Sprintf("no event %q with purpose %q in tenant %q", ev, v[0], tenant)
			}
			return problem(http.StatusNotFound, probNotFound, "Not found", what)
		}
		for _, e := range refs {
			events = append(events, e.Row)
		}
		f.Tenant = tenant
	}
	var ns []model.Notification
	var err error
	if events != nil {
		ns, err = s.r.ListEvents(r.Context(), f, events)
	} else {
		ns, err = s.st.ListNotifications(r.Context(), f)
	}
	if err != nil {
		return s.internal(err)
	}
	out := page{Notifications: notificationViews(x, ns)}
	if len(ns) == f.Limit {
		cur := x.Notification(ns[len(ns)-1].ID)
		out.NextCursor = cur
		q.Set("cursor", cur)
		out.Next = "/v1/notifications?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

// eventRefs finds the events an event_id names in a tenant: every purpose
// it was accepted under, or, with purpose= given, that one.
func (s *Server) eventRefs(ctx context.Context, tenant, eventID string, purpose []string) ([]model.EventRef, error) {
	if purpose == nil {
		return s.r.EventRows(ctx, tenant, eventID)
	}
	row, err := s.r.EventRow(ctx, tenant, eventID, purpose[0])
	if errors.Is(err, model.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []model.EventRef{{Row: row, Purpose: purpose[0]}}, nil
}

func validStatus(s string) bool {
	for _, v := range model.Statuses {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) retryNotification(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := idempotencyKey(r)
	if perr != nil {
		return *perr
	}
	_, row, perr := s.notificationPath(r)
	if perr != nil {
		return *perr
	}
	id := r.PathValue("id")
	lift := false
	switch v := r.URL.Query().Get("lift"); v {
	case "", "false":
	case "true":
		lift = true // remove the address's suppression entry too, in the same write
	default:
		return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid lift", "lift: true or false, not "+strconv.Quote(v), "lift")
	}
	return s.idempotent(w, r, requestKey(r, c.tenant, key, nil), func() response {
		err := s.r.RetryLifting(r.Context(), c.tenant, row, lift)
		var se *model.StateError
		var sup *model.SuppressedError
		switch {
		case errors.Is(err, model.ErrNotFound):
			return noNotification(id)
		case errors.As(err, &sup):
			return s.suppressedProblem(r, sup, id)
		case errors.As(err, &se):
			return problem(http.StatusConflict, probNotRetryable, "Not retryable",
				fmt.Sprintf("notification %s is %s; only %s notifications can be retried", id, se.Status, se.Want))
		case err != nil:
			return s.internal(err)
		}
		return jsonResponse(http.StatusOK, map[string]any{"id": id, "status": model.StatusPending})
	})
}

// postReceipts takes a provider's status callbacks in its own format.
func (s *Server) postReceipts(w http.ResponseWriter, r *http.Request) response {
	name := r.PathValue("provider")
	p := s.r.Provider(name)
	rp, ok := p.(providers.ReceiptParser)
	if p == nil || !ok {
		return problem(http.StatusNotFound, probNotFound, "Not found", fmt.Sprintf("no provider %q that takes receipts", name))
	}
	body, perr := s.readBody(w, r)
	if perr != nil {
		return *perr
	}
	rs, err := rp.ParseReceipts(r, body, s.publicURL(r))
	if errors.Is(err, providers.ErrBadSignature) {
		return problem(http.StatusUnauthorized, probBadSignature, "Bad signature", err.Error())
	}
	if err != nil {
		return problem(http.StatusBadRequest, probInvalidReceipt, "Invalid receipt", err.Error())
	}
	added, err := s.r.AddReceipts(r.Context(), name, rs)
	if inv := (*relay.InvalidReceiptError)(nil); errors.As(err, &inv) {
		return problem(http.StatusBadRequest, probInvalidReceipt, "Invalid receipt", err.Error())
	}
	if err != nil {
		return s.internal(err)
	}
	if s.opts.Metrics != nil {
		s.opts.Metrics.receipts(name, rs)
	}
	return jsonResponse(http.StatusOK, map[string]int{"received": len(rs), "new": added})
}

// publicURL is the URL the provider called, as it signed it: PublicURL's
// scheme and host when configured (behind a proxy), else the request's.
func (s *Server) publicURL(r *http.Request) string {
	if s.opts.PublicURL != "" {
		return strings.TrimSuffix(s.opts.PublicURL, "/") + r.URL.RequestURI()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

// ready is 200 when the database answers and the writer commits. Its
// body names a failing dispatcher and, per tailed source, how far behind
// it is.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) response {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.st.Ping(ctx); err != nil {
		return problem(http.StatusServiceUnavailable, probNotReady, "Not ready", err.Error())
	}
	// Accepts work, so the API is ready; a dispatcher that cannot write
	// (it keeps retrying) is named, for whoever is looking.
	body := map[string]any{"status": "ready"}
	if err := s.r.DispatchErr(); err != nil {
		body["dispatch"] = "failing, retrying: " + err.Error()
	}
	// Tailed outboxes: a lag is not unreadiness (accepts work), but an
	// operator sees it here. Their names are the app's database host and
	// table, so they are shown as metrics are: on an open API or to the
	// metrics token; a probe without it sees only the status.
	if s.opts.Sources != nil && s.operatorView(r) {
		now := s.r.Now()
		ds := []tailDetail{}
		for _, ts := range s.opts.Sources() {
			ds = append(ds, ts.detail(now))
		}
		body["sources"] = ds
	}
	return jsonResponse(http.StatusOK, body)
}

// operatorView reports whether r may see what covers every tenant: the
// metrics token, or an open API (loopback, no tokens yet).
func (s *Server) operatorView(r *http.Request) bool {
	if s.metricsTokenGiven(r) {
		return true
	}
	open, err := s.open(r.Context())
	return err == nil && open
}

// PruneLoop deletes expired request keys every interval until ctx ends,
// in small writes so the writer is never held for long.
func (s *Server) PruneLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := s.st.PruneRequests(ctx, s.r.Now(), 500)
			if err != nil || n < 500 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

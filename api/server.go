package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"edgerelay/providers"
	"edgerelay/relay"
	"edgerelay/store"
)

// Options configure the API. The zero value is usable for an open API.
type Options struct {
	// Open serves every tenant without tokens: the sidecar on loopback. The
	// caller (serve) decides it; the API only obeys.
	Open bool
	// TokenHashes maps the hex SHA-256 of a bearer token to its tenant
	// (tokens from the config file); tokens created with `edgerelay token
	// create` are looked up in the store.
	TokenHashes map[string]string
	// MaxBody bounds a request body. Default 1 MiB.
	MaxBody int64
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
}

// Server is the HTTP API over one Relay.
type Server struct {
	r    *relay.Relay
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	inFlight keyLocks // idempotency keys of requests running now
}

// New returns the API handler.
func New(r *relay.Relay, opts Options) *Server {
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
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{r: r, opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	s.handle("POST /v1/events", s.auth(s.postEvent))
	s.handle("POST /v1/events:batch", s.auth(s.postBatch))
	s.handle("GET /v1/notifications/{id}", s.auth(s.getNotification))
	s.handle("GET /v1/notifications", s.auth(s.listNotifications))
	s.handle("POST /v1/notifications/{id}/retry", s.auth(s.retryNotification))
	s.handle("PUT /v1/audiences/{name}", s.auth(s.putAudience))
	// Receipts come from providers, not tenants: the provider's signature
	// is their authentication.
	s.handle("POST /v1/receipts/{provider}", s.postReceipts)
	s.feedRoutes()
	s.operatorRoutes()
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) response {
		return jsonResponse(http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handle("GET /readyz", s.ready)
	if opts.Metrics != nil {
		h := promhttp.HandlerFor(opts.Metrics.reg, promhttp.HandlerOpts{})
		s.mux.Handle("GET /metrics", h)
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
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *statusRecorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// handler returns its response instead of writing it, so that responses
// can be stored and replayed byte for byte.
type handler func(w http.ResponseWriter, r *http.Request) response

func (s *Server) handle(pattern string, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		h(w, r).write(w)
	})
}

// caller is who is asking: a tenant, or any tenant on an open API.
type caller struct {
	tenant string // "" with any
	any    bool
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

// auth resolves the bearer token to a tenant. A missing or unknown token
// is 401 on an API with tokens.
func (s *Server) auth(h authedHandler) handler {
	return func(w http.ResponseWriter, r *http.Request) response {
		if s.opts.Open {
			return h(w, r, caller{any: true})
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay"`)
			return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", "send Authorization: Bearer TOKEN")
		}
		sum := sha256.Sum256([]byte(token))
		hash := hex.EncodeToString(sum[:])
		tenant, ok := s.opts.TokenHashes[hash]
		if !ok {
			t, err := s.r.TokenByHash(r.Context(), hash)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edgerelay", error="invalid_token"`)
				return problem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", "unknown token")
			}
			tenant = t.Tenant
		}
		w.Header().Set("X-Edgerelay-Tenant", tenant)
		return h(w, r, caller{tenant: tenant})
	}
}

// readBody reads a bounded JSON body.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *response) {
	// Any Content-Type is taken (curl -d sends a form type): the body must
	// be JSON either way, and a clear 400 says so when it is not.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
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

// readJSON reads a bounded body and decodes it strictly (unknown fields
// are errors) into v; shape describes the expected body for the error.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any, shape string) ([]byte, *response) {
	body, perr := s.readBody(w, r)
	if perr != nil {
		return nil, perr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		p := problem(http.StatusBadRequest, probInvalidJSON, "Invalid JSON", "want "+shape+": "+err.Error())
		return nil, &p
	}
	return body, nil
}

// idempotent runs a POST under request idempotency (the IETF
// Idempotency-Key draft, as Stripe does it): the first successful response
// for a key is stored with a fingerprint of the request and replayed for a
// repeat; a repeat with a different body is 422; one while the first is in
// flight in this process is 409.
//
// Only successes are stored (as Stripe does): a rejected request (4xx) or a
// failed one (5xx) leaves nothing behind, so the corrected request, or a
// retry after the audience exists, the limit was raised or the disk has
// room again, runs afresh. That a request is in flight lives in memory
// only: a crash cannot leave a lock that blocks the client's retry.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, tenant, key string, body []byte, run func() response) response {
	if key == "" {
		return run()
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.Path)
	h.Write(body)
	k := store.RequestKey{Tenant: tenant, Key: key, Fingerprint: hex.EncodeToString(h.Sum(nil))}
	if !s.inFlight.begin(k) {
		return problem(http.StatusConflict, probKeyInFlight, "Request in progress",
			"a request with this Idempotency-Key is still being processed; retry later")
	}
	defer s.inFlight.end(k)
	stored, err := s.r.LookupResponse(r.Context(), k)
	switch {
	case errors.Is(err, store.ErrKeyReused):
		return problem(http.StatusUnprocessableEntity, probKeyReused, "Idempotency-Key reused",
			"this Idempotency-Key was used for a different request")
	case err != nil:
		return s.internal(err)
	case stored != nil:
		w.Header().Set("Idempotent-Replayed", "true")
		return response{status: stored.Status, ctype: stored.ContentType, body: stored.Body}
	}
	resp := run()
	if resp.status >= 300 {
		return resp
	}
	// Store with a context of its own: the client may have gone, but its
	// retry must find the answer. If this fails, a retry runs again, which
	// the effects underneath make harmless (an event is a duplicate).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.r.SaveResponse(ctx, k, store.StoredResponse{Status: resp.status, ContentType: resp.ctype, Body: resp.body}, s.opts.KeyTTL); err != nil {
		s.log.Error("store the response for an idempotency key", "key", key, "err", err)
	}
	return resp
}

// keyLocks are the idempotency keys of requests running in this process.
type keyLocks struct {
	mu   sync.Mutex
	held map[[2]string]bool
}

func (l *keyLocks) begin(k store.RequestKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := [2]string{k.Tenant, k.Key}
	if l.held[id] {
		return false
	}
	if l.held == nil {
		l.held = map[[2]string]bool{}
	}
	l.held[id] = true
	return true
}

func (l *keyLocks) end(k store.RequestKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, [2]string{k.Tenant, k.Key})
}

func (s *Server) internal(err error) response {
	if store.IsUnavailable(err) {
		// The database file refused the write (full, read-only, corrupt):
		// nothing was committed, and a retry later may succeed.
		s.log.Error("storage unavailable", "err", err)
		p := problem(http.StatusServiceUnavailable, probUnavailable, "Storage unavailable",
			"the database could not be written, so nothing was stored; retry later (with the same Idempotency-Key, if any): "+err.Error())
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
	Count         int                       `json:"count"`
	Notifications []store.EventNotification `json:"notifications"`
	Next          string                    `json:"next,omitempty"`
}

func (s *Server) postEvent(w http.ResponseWriter, r *http.Request, c caller) response {
	body, perr := s.readBody(w, r)
	if perr != nil {
		return *perr
	}
	ev, err := relay.DecodeEvent(bytes.NewReader(body))
	if err != nil {
		return s.eventError(err)
	}
	tenant, ok := c.tenantFor(ev.Tenant)
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch",
			fmt.Sprintf("this token belongs to tenant %q, the event names %q", c.tenant, ev.Tenant))
	}
	ev.Tenant = tenant
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		// Without a key the event's identity is the idempotency record: the
		// unique constraint on (tenant, id, purpose) makes a resend a
		// duplicate (202, "duplicate": true, the same notifications) and the
		// same id with other content a 409 event-conflict. One commit, not
		// three: no request key to claim and then fill in.
		return s.acceptTenant(r.Context(), ev, c)
	}
	// Fingerprint the event as decoded, not the raw bytes: the same event
	// re-serialised (other key order, other white space) is the same request.
	canon, err := json.Marshal(ev)
	if err != nil {
		return s.internal(err)
	}
	return s.idempotent(w, r, tenant, key, canon, func() response { return s.acceptTenant(r.Context(), ev, c) })
}

// acceptTenant accepts an event whose tenant is resolved, answering with at
// most PageSize notifications and a link to page through the rest.
func (s *Server) acceptTenant(ctx context.Context, ev relay.Event, c caller) response {
	rs, errs := s.r.AcceptAll(ctx, []relay.Event{ev}, s.opts.PageSize)
	res, err := rs[0], errs[0]
	if err != nil {
		return s.eventError(err)
	}
	out := acceptResponse{Tenant: res.Tenant, EventID: res.EventID, Purpose: res.Purpose, Duplicate: res.Duplicate,
		Count: res.Count, Notifications: res.Notifications}
	if res.Count > len(out.Notifications) && len(out.Notifications) > 0 {
		q := url.Values{"event_id": {res.EventID}, "purpose": {res.Purpose},
			"cursor": {strconv.FormatInt(out.Notifications[len(out.Notifications)-1].ID, 10)}}
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
	switch {
	case errors.Is(err, relay.ErrTooManyRecipients) && errors.As(err, &inv):
		return problemField(http.StatusRequestEntityTooLarge, probTooLarge, "Too many recipients", inv.Reason, inv.Field)
	case errors.As(err, &inv):
		return problemField(http.StatusBadRequest, probInvalidEvent, "Invalid event", inv.Reason, inv.Field)
	case errors.Is(err, store.ErrEventConflict):
		return problem(http.StatusConflict, probEventConflict, "Event already accepted with different content", err.Error())
	}
	return s.internal(err)
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

func (s *Server) postBatch(w http.ResponseWriter, r *http.Request, c caller) response {
	var req batchRequest
	body, perr := s.readJSON(w, r, &req, `{"events": [EVENT, ...]}`)
	if perr != nil {
		return *perr
	}
	if len(req.Events) == 0 {
		return problemField(http.StatusBadRequest, probInvalidEvent, "Empty batch", "at least one event", "events")
	}
	if len(req.Events) > s.opts.MaxBatch {
		return problemField(http.StatusRequestEntityTooLarge, probTooLarge, "Batch too large",
			fmt.Sprintf("%d events, more than the limit of %d per batch", len(req.Events), s.opts.MaxBatch), "events")
	}
	return s.idempotent(w, r, c.tenant, r.Header.Get("Idempotency-Key"), body, func() response {
		// Each event is accepted on its own: all-or-nothing per event, a
		// result per event.
		results := make([]batchResult, len(req.Events))
		for i, raw := range req.Events {
			var resp response
			ev, err := relay.DecodeEvent(bytes.NewReader(raw))
			if err != nil {
				resp = s.eventError(err)
			} else if tenant, ok := c.tenantFor(ev.Tenant); !ok {
				resp = problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch",
					fmt.Sprintf("this token belongs to tenant %q, the event names %q", c.tenant, ev.Tenant))
			} else {
				ev.Tenant = tenant
				resp = s.acceptTenant(r.Context(), ev, c)
			}
			results[i] = batchResult{Index: i, Status: resp.status, Result: bytes.TrimSpace(resp.body)}
		}
		return jsonResponse(http.StatusOK, map[string]any{"results": results})
	})
}

func (s *Server) getNotification(w http.ResponseWriter, r *http.Request, c caller) response {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return problem(http.StatusNotFound, probNotFound, "Not found", "no notification "+strconv.Quote(r.PathValue("id")))
	}
	return s.notification(r.Context(), c, id, "")
}

// notification answers one audit trail, 404 for another tenant's.
func (s *Server) notification(ctx context.Context, c caller, id int64, key string) response {
	n, err := s.r.TenantNotification(ctx, c.tenant, id, key)
	if errors.Is(err, store.ErrNotFound) {
		return problem(http.StatusNotFound, probNotFound, "Not found", err.Error())
	}
	if err != nil {
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, n)
}

// page is the body of GET /v1/notifications.
type page struct {
	Notifications []store.Notification `json:"notifications"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	Next       string `json:"next,omitempty"`
}

func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	if key := q.Get("key"); key != "" {
		return s.notification(r.Context(), c, 0, key)
	}
	f := store.ListFilter{Tenant: c.tenant, Status: q.Get("status"), Recipient: q.Get("recipient"), Limit: s.opts.PageSize}
	if f.Status != "" && !validStatus(f.Status) {
		return problem(http.StatusBadRequest, probInvalidQuery, "Invalid status",
			fmt.Sprintf("status %q: want one of %s", f.Status, strings.Join(store.Statuses, ", ")))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid limit", "limit: a number from 1 to 1000")
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid cursor", "cursor: the next_cursor of the previous page")
		}
		f.After = n
	}
	if ev := q.Get("event_id"); ev != "" {
		tenant, _ := c.tenantFor(q.Get("tenant"))
		purpose := q.Get("purpose")
		row, err := s.r.EventRow(r.Context(), tenant, ev, purpose)
		if errors.Is(err, store.ErrNotFound) {
			return problem(http.StatusNotFound, probNotFound, "Not found", fmt.Sprintf("no event %q with purpose %q", ev, purpose))
		}
		if err != nil {
			return s.internal(err)
		}
		f.EventRow = row
	}
	ns, err := s.r.List(r.Context(), f)
	if err != nil {
		return s.internal(err)
	}
	out := page{Notifications: ns}
	if out.Notifications == nil {
		out.Notifications = []store.Notification{}
	}
	if len(ns) == f.Limit {
		cur := strconv.FormatInt(ns[len(ns)-1].ID, 10)
		out.NextCursor = cur
		q.Set("cursor", cur)
		out.Next = "/v1/notifications?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

func validStatus(s string) bool {
	for _, v := range store.Statuses {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) retryNotification(w http.ResponseWriter, r *http.Request, c caller) response {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return problem(http.StatusNotFound, probNotFound, "Not found", "no notification "+strconv.Quote(r.PathValue("id")))
	}
	return s.idempotent(w, r, c.tenant, r.Header.Get("Idempotency-Key"), nil, func() response {
		err := s.r.RetryTenant(r.Context(), c.tenant, id)
		var se *store.StateError
		switch {
		case errors.Is(err, store.ErrNotFound):
			return problem(http.StatusNotFound, probNotFound, "Not found", err.Error())
		case errors.As(err, &se):
			return problem(http.StatusConflict, probNotRetryable, "Not retryable", err.Error())
		case err != nil:
			return s.internal(err)
		}
		return jsonResponse(http.StatusOK, map[string]any{"id": id, "status": store.StatusPending})
	})
}

// audienceRequest is the body of PUT /v1/audiences/{name}.
type audienceRequest struct {
	Members []relay.Recipient `json:"members"`
}

func (s *Server) putAudience(w http.ResponseWriter, r *http.Request, c caller) response {
	var req audienceRequest
	if _, perr := s.readJSON(w, r, &req, `{"members": [RECIPIENT, ...]}`); perr != nil {
		return *perr
	}
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot write another tenant's audiences")
	}
	name := r.PathValue("name")
	if err := s.r.PutAudience(r.Context(), tenant, name, req.Members); err != nil {
		return s.eventError(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "name": name, "members": len(req.Members)})
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

// ready is 200 when the database answers and the writer commits.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) response {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.r.Ping(ctx); err != nil {
		return problem(http.StatusServiceUnavailable, probNotReady, "Not ready", err.Error())
	}
	// Accepts work, so the API is ready; a dispatcher that cannot write
	// (it keeps retrying) is named, for whoever is looking.
	body := map[string]string{"status": "ready"}
	if err := s.r.DispatchErr(); err != nil {
		body["dispatch"] = "failing, retrying: " + err.Error()
	}
	return jsonResponse(http.StatusOK, body)
}

// PruneLoop deletes expired request keys every interval until ctx ends,
// in small writes so the writer is never held for long.
func (s *Server) PruneLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := s.r.PruneRequests(ctx, 500)
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

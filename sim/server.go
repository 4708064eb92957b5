package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultKeyTTL is how long an answer is kept for its Idempotency-Key when
// Options.KeyTTL is zero: a day, as most providers do.
const DefaultKeyTTL = 24 * time.Hour

const maxBody = 1 << 20

var errClosed = errors.New("sim: closed")

// Options configure a Server.
type Options struct {
	// HonourKeys makes a repeated Idempotency-Key replay the first answer
	// instead of sending again. Script.HonourKeys overrides it.
	HonourKeys bool
	// KeyTTL is how long an answer is kept for its key; zero means
	// DefaultKeyTTL.
	KeyTTL time.Duration
	// Script injects faults; nil processes every request normally.
	Script *Script
	// Logger gets one line per send request; nil discards.
	Logger *slog.Logger
	// Latency is how long every well-formed send request waits before it
	// is handled, as a real provider's round trip (50–300 ms for email and
	// SMS APIs). It is a timer: a request waiting holds no CPU. A slow rule
	// waits its delay on top.
	Latency time.Duration
}

// Delivery is one email a recipient really received.
type Delivery struct {
	Seq int `json:"seq"`
	// Via is the API that took it: email (POST /v1/emails) or a vendor's
	// (mailgun, ses, discord, telegram, teams, webpush, apns).
	Via     string    `json:"via"`
	To      string    `json:"to"`
	Key     string    `json:"key"` // the request's Idempotency-Key, "" if none
	Subject string    `json:"subject"`
	Text    string    `json:"text"`
	At      time.Time `json:"at"`
}

// Server is the simulated provider, an http.Handler:
//
//	POST /v1/emails   send; {"from", "to" (string or array), "subject", "text", "html"}
//	GET  /deliveries  {"total", "by_recipient", "deliveries"}
//	GET  /requests    {"total"}: send requests received
//	POST /reset       forget deliveries, keys, attempt and request counts
//
// and the vendors' own APIs (shapes.go): Mailgun, SES, Discord, Telegram,
// Teams, Web Push (POST /push-subscriptions makes a subscription, kept by
// Reset) and APNs (over HTTP/2 with TLS only).
//
// Addresses are compared case-insensitively and reported in lower case.
// A malformed send (bad JSON: 400; missing from or to: 422) counts as a
// request but not as an attempt, meets no fault rule and is not stored for
// its key: like Stripe, only requests that began processing are.
type Server struct {
	log     *slog.Logger
	ttl     time.Duration
	latency time.Duration
	mux     *http.ServeMux
	stop    chan struct{}
	once    sync.Once

	// Hooks for tests in this package; set before serving.
	now    func() time.Time
	wait   func(ctx context.Context, a Action, d time.Duration) error
	onDone func(record)

	mu         sync.Mutex
	honour     bool
	script     *Script
	requests   int
	attempts   map[string]int
	deliveries []Delivery
	keys       map[string]*keyEntry
	nextPrune  time.Time
	subs       map[string]*pushSub // Web Push subscriptions, by id; kept by Reset
}

// keyEntry is a claimed key: pending while its first request is being
// processed, then the stored answer until expires.
type keyEntry struct {
	pending bool
	status  int
	header  http.Header
	body    []byte
	expires time.Time
}

// record describes one send request once it is handled; the Server logs it.
type record struct {
	To        string // recipients, comma-separated
	Attempt   int    // the first recipient's attempt number; 0 if invalid
	Action    Action // "" for a request that never reached the rules
	Status    int    // the status answered (or that would have been, when the answer is lost)
	Key       string
	Replayed  bool   // answered from the key store
	Delivered int    // emails sent by this request
	Outcome   string // "answered", "answer lost", "held then closed", "gave up while slow" ...
}

// New returns a Server. It panics if opts.Script is invalid (see
// Script.Validate): scripts from files are checked by ParseScript.
func New(opts Options) *Server {
	s := &Server{
		log:      opts.Logger,
		ttl:      opts.KeyTTL,
		latency:  max(0, opts.Latency),
		stop:     make(chan struct{}),
		now:      time.Now,
		honour:   opts.HonourKeys,
		attempts: map[string]int{},
		keys:     map[string]*keyEntry{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.ttl <= 0 {
		s.ttl = DefaultKeyTTL
	}
	s.wait = s.sleep
	s.SetScript(opts.Script)

	s.mux = http.NewServeMux()
	for _, sh := range shapes {
		s.mux.HandleFunc(sh.route, func(w http.ResponseWriter, r *http.Request) { s.handleSend(sh, w, r) })
	}
	s.mux.HandleFunc("POST /push-subscriptions", s.handleSubscribe)
	s.mux.HandleFunc("GET /deliveries", s.handleDeliveries)
	s.mux.HandleFunc("GET /requests", s.handleRequests)
	s.mux.HandleFunc("POST /reset", s.handleReset)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody("not found: "+r.Method+" "+r.URL.Path))
	})
	return s
}

// ServeHTTP serves the endpoints listed on Server; anything else is a 404
// JSON error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close ends every request held by hang or slow: each closes its
// connection without an answer (a slow one sends nothing). Later hangs and
// slows end at once. Call it before closing the HTTP server, so that its
// shutdown does not wait for held requests. The rest of the Server keeps
// working.
func (s *Server) Close() {
	s.once.Do(func() { close(s.stop) })
}

// SetHonourKeys switches key honouring on or off; the last of New,
// SetScript (with honour_keys) and SetHonourKeys wins. Keys already stored
// are kept.
func (s *Server) SetHonourKeys(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.honour = on
}

// HonoursKeys reports whether a repeated Idempotency-Key is replayed.
func (s *Server) HonoursKeys() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.honour
}

// SetScript replaces the fault script (nil removes it); a script with
// honour_keys also sets key honouring. Attempt counts are kept. It panics
// if the script is invalid.
func (s *Server) SetScript(sc *Script) {
	if sc != nil {
		if err := sc.Validate(); err != nil {
			panic(fmt.Sprintf("sim: invalid fault script: %v", err))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = sc
	if sc != nil && sc.HonourKeys != nil {
		s.honour = *sc.HonourKeys
	}
}

// Reset forgets deliveries, stored keys, attempt counts and the request
// count. Requests in flight finish, but store nothing for their keys.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = nil
	s.keys = map[string]*keyEntry{}
	s.attempts = map[string]int{}
	s.requests = 0
}

// Deliveries returns what recipients really received, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// Counts returns the number of deliveries per recipient address.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countsLocked()
}

func (s *Server) countsLocked() map[string]int {
	m := map[string]int{}
	for _, d := range s.deliveries {
		m[d.To]++
	}
	return m
}

// Requests returns the number of send requests received (every POST
// /v1/emails, malformed, refused, replayed and lost ones included).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

type sendRequest struct {
	From    string     `json:"from"`
	To      recipients `json:"to"`
	Subject string     `json:"subject"`
	Text    string     `json:"text"`
	HTML    string     `json:"html"`
	// ref is what a vendor's answer echoes (a chat id, an apns-id).
	ref string
}

// recipients accepts "to" as a string or an array of strings.
type recipients []string

func (r *recipients) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*r = recipients{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("to: want a string or an array of strings")
	}
	*r = many
	return nil
}

// answer is a response the simulator would give, before faults on the way
// back decide whether the client sees it.
type answer struct {
	status    int
	header    http.Header
	body      []byte
	replayed  bool
	delivered int
}

func (s *Server) handleSend(sh *shape, w http.ResponseWriter, r *http.Request) {
	rec := record{Key: r.Header.Get("Idempotency-Key"), Outcome: "answered"}
	finished := false
	finish := func() {
		if !finished {
			finished = true
			s.logRecord(rec)
			if s.onDone != nil {
				s.onDone(rec)
			}
		}
	}
	defer finish()

	s.mu.Lock()
	s.requests++
	s.mu.Unlock()

	req, status, err := s.decode(sh, w, r)
	if err != nil {
		rec.Status = status
		sh.writeProblem(w, status, err.Error(), 0)
		return
	}
	rcpts := req.To
	if s.latency > 0 {
		if err := s.wait(r.Context(), ActionOK, s.latency); err != nil {
			rec.Outcome = "gave up during the latency" // the client, or the simulator on Close
			finish()
			dropConnection(w)
			return
		}
	}

	s.mu.Lock()
	attempts := make([]int, len(rcpts))
	for i, a := range rcpts {
		s.attempts[a]++
		attempts[i] = s.attempts[a]
	}
	rule := s.script.match(rcpts, attempts)
	honour := s.honour && sh.keys
	s.mu.Unlock()

	rec.To, rec.Attempt = strings.Join(rcpts, ","), attempts[0]
	rec.Action = ActionOK
	if rule != nil {
		rec.Action = rule.action()
	}

	// Faults at the front door: the request is never processed, so nothing
	// is sent and nothing is stored for the key.
	switch {
	case rec.Action == ActionRefuse:
		rec.Status = rule.status()
		secs := 0
		if rule.RetryAfter > 0 {
			secs = int((rule.RetryAfter + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
		msg := "service unavailable, try again later"
		if rec.Status == http.StatusTooManyRequests {
			msg = "too many requests, slow down"
		}
		sh.writeProblem(w, rec.Status, msg, secs)
		return
	case rec.Action == ActionFail && !rule.Deliver:
		rec.Status = rule.status()
		sh.writeProblem(w, rec.Status, "internal error", 0)
		return
	}

	ans, ok := s.process(r.Context(), sh, &req, rec.Key, honour, rule)
	if !ok {
		rec.Outcome = "gave up while slow" // the client, or the simulator on Close
		finish()
		dropConnection(w)
		return
	}
	rec.Status, rec.Replayed, rec.Delivered = ans.status, ans.replayed, ans.delivered

	// Faults on the way back: the request was processed.
	switch rec.Action {
	case ActionLoseAnswer:
		rec.Outcome = "answer lost"
		finish()
		dropConnection(w)
	case ActionHang:
		d := rule.Delay
		if d == 0 {
			d = DefaultHangDelay
		}
		switch err := s.wait(r.Context(), ActionHang, d); {
		case err == nil:
			rec.Outcome = "held for " + d.String() + ", then closed"
		case errors.Is(err, errClosed):
			rec.Outcome = "held until the simulator closed, then closed"
		default:
			rec.Outcome = "held until the client gave up, then closed"
		}
		finish()
		dropConnection(w)
	case ActionFail:
		rec.Outcome = fmt.Sprintf("answered %d after processing", rule.status())
		rec.Status = rule.status()
		sh.writeProblem(w, rec.Status, "internal error", 0)
	default:
		for k, v := range ans.header {
			w.Header()[k] = v
		}
		if len(ans.body) > 0 && w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if ans.replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(ans.status)
		_, _ = w.Write(ans.body)
	}
}

// decode reads the request's body and hands it to the shape's decoder.
func (s *Server) decode(sh *shape, w http.ResponseWriter, r *http.Request) (sendRequest, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return sendRequest{}, http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", maxBody)
		}
		return sendRequest{}, http.StatusBadRequest, fmt.Errorf("read body: %w", err)
	}
	return sh.decode(s, r, body)
}

// decodeEmail reads POST /v1/emails's JSON.
func decodeEmail(_ *Server, _ *http.Request, body []byte) (sendRequest, int, error) {
	var req sendRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || len(body) == 0 {
			return req, http.StatusBadRequest, errors.New("body is not valid JSON")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return req, http.StatusUnprocessableEntity, fmt.Errorf("%s: want %s", te.Field, te.Type)
		}
		return req, http.StatusUnprocessableEntity, err
	}
	status, err := checkEmail(&req)
	return req, status, err
}

// checkEmail checks an email's sender and recipients, lower-casing these.
func checkEmail(req *sendRequest) (int, error) {
	if strings.TrimSpace(req.From) == "" {
		return http.StatusUnprocessableEntity, errors.New("from: required")
	}
	if len(req.To) == 0 {
		return http.StatusUnprocessableEntity, errors.New("to: required")
	}
	for i, a := range req.To {
		a = strings.ToLower(strings.TrimSpace(a))
		if !strings.Contains(a, "@") {
			return http.StatusUnprocessableEntity, fmt.Errorf("to: %q is not an email address", req.To[i])
		}
		req.To[i] = a
	}
	return 0, nil
}

// process claims the key, waits if the rule is slow, then sends (or
// rejects) and stores the answer for the key. It returns false if the
// client gave up, or the Server was closed, while slow: nothing was done.
func (s *Server) process(ctx context.Context, sh *shape, req *sendRequest, key string, honour bool, rule *Rule) (answer, bool) {
	var claim *keyEntry
	if honour && key != "" {
		s.mu.Lock()
		now := s.now()
		s.pruneLocked(now)
		if e, ok := s.keys[key]; ok {
			if e.pending {
				s.mu.Unlock()
				return answer{status: http.StatusConflict, body: errorBody("a request with this Idempotency-Key is in progress")}, true
			}
			if now.Before(e.expires) {
				s.mu.Unlock()
				return answer{status: e.status, header: e.header, body: e.body, replayed: true}, true
			}
		}
		claim = &keyEntry{pending: true}
		s.keys[key] = claim
		s.mu.Unlock()
	}

	if rule != nil && rule.action() == ActionSlow {
		if err := s.wait(ctx, ActionSlow, rule.Delay); err != nil {
			s.mu.Lock()
			if claim != nil && s.keys[key] == claim {
				delete(s.keys, key)
			}
			s.mu.Unlock()
			return answer{}, false
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var ans answer
	if rule != nil && rule.action() == ActionReject {
		h, body := sh.problem(rule.status(), "rejected: the provider will not send this message", 0)
		ans = answer{status: rule.status(), header: h, body: body}
	} else {
		first := len(s.deliveries) + 1
		for _, to := range req.To {
			s.deliveries = append(s.deliveries, Delivery{
				Seq: len(s.deliveries) + 1, Via: sh.name, To: to, Key: key,
				Subject: req.Subject, Text: req.Text, At: now,
			})
		}
		status, h, body := sh.ok(first, req, now)
		ans = answer{status: status, header: h, body: body, delivered: len(req.To)}
	}
	// After a Reset the claim is gone: the answer belongs to a forgotten
	// world and is not stored.
	if claim != nil && s.keys[key] == claim {
		claim.pending, claim.status, claim.header, claim.body, claim.expires = false, ans.status, ans.header, ans.body, now.Add(s.ttl)
	}
	return ans, true
}

// pruneLocked drops expired keys, at most once a minute (or once a TTL if
// shorter), so the store stays bounded without a background goroutine.
func (s *Server) pruneLocked(now time.Time) {
	if now.Before(s.nextPrune) {
		return
	}
	for k, e := range s.keys {
		if !e.pending && !now.Before(e.expires) {
			delete(s.keys, k)
		}
	}
	s.nextPrune = now.Add(min(s.ttl, time.Minute))
}

// sleep waits d, or until ctx is done or the Server is closed (an error).
func (s *Server) sleep(ctx context.Context, _ Action, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return errClosed
	}
}

// dropConnection closes the connection without writing a response. A
// handler that cannot hijack (HTTP/2) aborts instead, which resets the
// stream: the client sees no answer either way.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func (s *Server) logRecord(rec record) {
	lvl := slog.LevelInfo
	if rec.Action == "" {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "send",
		"to", rec.To, "attempt", rec.Attempt, "action", string(rec.Action), "status", rec.Status,
		"key", rec.Key, "replayed", rec.Replayed, "delivered", rec.Delivered, "outcome", rec.Outcome)
}

func (s *Server) handleDeliveries(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	body := struct {
		Total       int            `json:"total"`
		ByRecipient map[string]int `json:"by_recipient"`
		Deliveries  []Delivery     `json:"deliveries"`
	}{len(s.deliveries), s.countsLocked(), append([]Delivery{}, s.deliveries...)}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, jsonBody(body))
}

func (s *Server) handleRequests(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jsonBody(map[string]int{"total": s.Requests()}))
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func errorBody(msg string) []byte { return jsonBody(map[string]string{"error": msg}) }

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed shapes are marshalled
	}
	return append(b, '\n')
}

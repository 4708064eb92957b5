package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/open"
)

// bound is how long a test waits for something that should happen at once;
// reaching it means a bug, not a slow machine (a 10,000-recipient accept
// under the race detector on a loaded 2-core machine took 24 s).
var bound = map[bool]time.Duration{false: 20 * time.Second, true: 90 * time.Second}[raced]

// options configure setup. The zero value is an open API (the loopback
// sidecar) over a relay that delivers nowhere.
type options struct {
	// DB is the database (a fresh one under the test's TempDir if "").
	DB string
	// Store, if set, is used instead of opening DB.
	Store store.Store
	Relay relay.Options
	API   api.Options
	// Tokens, when not nil, closes the API: it becomes API.TokenHashes
	// (an empty map leaves only tokens created in the store).
	Tokens map[string]string
	// Metrics wires one api.Metrics to the relay, its store and the API.
	Metrics bool
	// Quiet discards every log (benchmarks).
	Quiet bool
	// Addr, if set, is the loopback address the API listens on (a restart
	// on the same port); else a free one.
	Addr string
}

// bundle is what a test works with: the relay, the API served on a
// loopback port, and what the API logged.
type bundle struct {
	r       *relay.Relay
	st      store.Store // r's
	srv     *httptest.Server
	api     *api.Server
	client  *http.Client
	metrics *api.Metrics
	logs    *logSink
	// closeRelay closes the relay (and its store) once; later calls, and
	// the cleanup, return the first result.
	closeRelay func() error
	// stopStreams ends StreamLoop, and with it every open feed stream.
	stopStreams func()
}

// setup opens a relay on a fresh database under tb.TempDir() and serves the
// API over it on 127.0.0.1:0; both are closed when the test ends.
func setup(tb testing.TB, o options) *bundle {
	tb.Helper()
	if o.DB == "" {
		o.DB = filepath.Join(tb.TempDir(), "relay.db")
	}
	if o.Relay.Routes == nil {
		o.Relay.Routes = relay.Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}
	}
	b := &bundle{logs: &logSink{requests: make(chan struct{}, 1024)}}
	if o.Metrics {
		b.metrics = api.NewMetrics()
		o.Relay.Observer = b.metrics
		o.API.Metrics = b.metrics
	}
	if o.Tokens != nil {
		o.API.Open = false
		o.API.TokenHashes = o.Tokens
	} else {
		o.API.Open = true
	}
	out := tb.Output()
	if o.Quiet {
		out = io.Discard
	}
	if o.Relay.Logger == nil {
		o.Relay.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.API.Logger == nil {
		if o.Quiet {
			o.API.Logger = slog.New(slog.DiscardHandler)
		} else {
			o.API.Logger = slog.New(b.logs.handler(out))
		}
	}
	st := o.Store
	if st == nil {
		var err error
		if st, err = open.Store(context.Background(), o.DB, open.Options{Logger: o.Relay.Logger}); err != nil {
			tb.Fatalf("open store: %v", err)
		}
	}
	r, err := relay.New(context.Background(), st, o.Relay)
	if err != nil {
		tb.Fatalf("open relay: %v", err)
	}
	b.r, b.st = r, st
	var once sync.Once
	var closeErr error
	b.closeRelay = func() error {
		once.Do(func() { closeErr = r.Close() })
		return closeErr
	}
	tb.Cleanup(func() {
		if err := b.closeRelay(); err != nil {
			tb.Errorf("close relay: %v", err)
		}
	})
	if b.metrics != nil {
		b.metrics.Watch(r, st)
	}
	// Cleanups run last-in first-out: the server stops (waiting for requests
	// in flight) before the relay closes.
	b.api = api.New(r, st, o.API)
	b.srv = httptest.NewUnstartedServer(b.api)
	if o.Addr != "" {
		ln, err := net.Listen("tcp", o.Addr)
		if err != nil {
			tb.Fatalf("listen on %s: %v", o.Addr, err)
		}
		b.srv.Listener.Close()
		b.srv.Listener = ln
	}
	b.srv.Start()
	tb.Cleanup(b.srv.Close)
	// Registered after the server's Close, so it runs first: the streams
	// end, and Close does not wait for them.
	streams, stopStreams := context.WithCancel(context.Background())
	streamsDone := make(chan struct{})
	go func() { defer close(streamsDone); b.api.StreamLoop(streams) }()
	b.stopStreams = func() { stopStreams(); <-streamsDone }
	tb.Cleanup(b.stopStreams)
	b.client = b.srv.Client()
	b.client.Transport = contract(tb, b.client.Transport) // every request and answer held to the OpenAPI document
	return b
}

// logSink keeps the API's JSON log and signals each "request" line, so a
// test can wait for a line written after the response went out.
type logSink struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	requests chan struct{}
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *logSink) handler(tee io.Writer) slog.Handler {
	return hookHandler{Handler: slog.NewJSONHandler(io.MultiWriter(s, tee), nil), sink: s}
}

// waitRequests waits until n more "request" lines have been logged.
func (s *logSink) waitRequests(tb testing.TB, n int) {
	tb.Helper()
	timeout := time.After(bound)
	for i := 0; i < n; i++ {
		select {
		case <-s.requests:
		case <-timeout:
			tb.Fatalf("%d of %d request lines logged after %s; log:\n%s", i, n, bound, s.String())
		}
	}
}

type hookHandler struct {
	slog.Handler
	sink *logSink
}

func (h hookHandler) Handle(ctx context.Context, rec slog.Record) error {
	err := h.Handler.Handle(ctx, rec)
	if rec.Message == "request" {
		select {
		case h.sink.requests <- struct{}{}:
		default: // nobody is counting this many
		}
	}
	return err
}

func (h hookHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return hookHandler{Handler: h.Handler.WithAttrs(as), sink: h.sink}
}

func (h hookHandler) WithGroup(name string) slog.Handler {
	return hookHandler{Handler: h.Handler.WithGroup(name), sink: h.sink}
}

// reply is one HTTP answer, its body read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// send makes one request; hdr holds header name, value pairs. It does not
// touch tb, so it may run on any goroutine.
func (b *bundle) send(ctx context.Context, method, path, body string, hdr ...string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.srv.URL+path, rd)
	if err != nil {
		return reply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// do is send for the test's own goroutine.
func (b *bundle) do(tb testing.TB, method, path, body string, hdr ...string) reply {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	rep, err := b.send(ctx, method, path, body, hdr...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return rep
}

// acceptBody is the 202 body of POST /v1/events.
type acceptBody struct {
	Tenant        string              `json:"tenant"`
	EventID       string              `json:"event_id"`
	Purpose       string              `json:"purpose"`
	Duplicate     bool                `json:"duplicate"`
	Count         int                 `json:"count"`
	Notifications []eventNotification `json:"notifications"`
	Next          string              `json:"next"`
	FeedItems     []model.FeedPost    `json:"feed_items"`
}

// The API shows opaque ids (n_…, ev_…), never row ids: its bodies are the
// store's values with the id fields replaced (the outer field wins).
type (
	eventNotification struct {
		ID string `json:"id"`
		model.EventNotification
	}
	notification struct {
		ID string `json:"id"`
		model.Notification
		Quarantine *quarantined `json:"event_quarantined,omitempty"`
	}
	quarantined struct {
		ID string `json:"id"`
		model.QuarantinedEvent
	}
)

// pageBody is the body of GET /v1/notifications.
type pageBody struct {
	Notifications []notification `json:"notifications"`
	NextCursor    string         `json:"next_cursor"`
	Next          string         `json:"next"`
}

// decode unmarshals a JSON body strictly: a field the test does not know
// of is a change to the API it should hear about.
func decode[T any](tb testing.TB, rep reply) T {
	tb.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(rep.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		tb.Fatalf("decode %T from %s: %v", v, rep, err)
	}
	return v
}

// accepted checks a 202 and returns its body.
func accepted(tb testing.TB, rep reply) acceptBody {
	tb.Helper()
	if rep.status != http.StatusAccepted {
		tb.Fatalf("got %s, want 202", rep)
	}
	if ct := rep.header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("Content-Type %q, want application/json", ct)
	}
	return decode[acceptBody](tb, rep)
}

// wantProblem checks an RFC 9457 answer: the status, the problem+json
// content type, and a body with a type ending in /kind, a title and the
// same status. An empty kind accepts any type.
func wantProblem(tb testing.TB, rep reply, status int, kind string) api.Problem {
	tb.Helper()
	if rep.status != status {
		tb.Fatalf("got %s, want %d %s", rep, status, kind)
	}
	if ct := rep.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	p := decode[api.Problem](tb, rep)
	if !strings.HasPrefix(p.Type, "https://") || kind != "" && !strings.HasSuffix(p.Type, "/"+kind) {
		tb.Errorf("problem type %q, want one ending in /%s", p.Type, kind)
	}
	if p.Title == "" || p.Status != status {
		tb.Errorf("problem %+v: want a title and status %d", p, status)
	}
	return p
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// people returns n recipients u00000, u00001 … with an email address each.
func people(n int) []relay.Recipient {
	rs := make([]relay.Recipient, n)
	for i := range rs {
		id := fmt.Sprintf("u%05d", i)
		rs[i] = relay.Recipient{ID: id, Email: id + "@example.com"}
	}
	return rs
}

// receipt is an email event to n people.
func receipt(id string, n int) relay.Event {
	return relay.Event{ID: id, Type: "payment.succeeded", Purpose: "receipt", Channels: []string{"email"},
		Recipients: people(n), Subject: "Your receipt", Body: "We received your payment."}
}

func jsonOf(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func ids(ns []eventNotification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// listAll returns every notification the caller can see, by id.
func (b *bundle) listAll(tb testing.TB, hdr ...string) map[string]notification {
	tb.Helper()
	rep := b.do(tb, "GET", "/v1/notifications?limit=1000", "", hdr...)
	if rep.status != http.StatusOK {
		tb.Fatalf("list: %s", rep)
	}
	p := decode[pageBody](tb, rep)
	if p.NextCursor != "" {
		tb.Fatalf("list: more than 1000 notifications")
	}
	out := map[string]notification{}
	for _, n := range p.Notifications {
		out[n.ID] = n
	}
	return out
}

// row is the row of an id the API showed (the relay reads both).
func (b *bundle) row(tb testing.TB, id string) int64 {
	tb.Helper()
	row, err := b.r.NotificationRow(context.Background(), id)
	if err != nil {
		tb.Fatalf("row of %q: %v", id, err)
	}
	return row
}

func fixture(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestPostEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := fixture(t, "api_event.json")

	first := b.do(t, "POST", "/v1/events", body)
	res := accepted(t, first)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer has Idempotent-Replayed: %q", first.header.Get("Idempotent-Replayed"))
	}
	if res.Tenant != "default" || res.EventID != "evt_api_1" || res.Purpose != "receipt" || res.Duplicate || res.Next != "" {
		t.Errorf("accept %+v", res)
	}
	// No channels: each recipient gets every channel it has an address for.
	want := []struct{ recipient, channel string }{{"ada", "email"}, {"ada", "sms"}, {"ben", "email"}, {"cy", "sms"}}
	if res.Count != len(want) || len(res.Notifications) != len(want) {
		t.Fatalf("count %d with %d notifications, want %d", res.Count, len(res.Notifications), len(want))
	}
	for i, n := range res.Notifications {
		k := relay.Key("default", "evt_api_1", "receipt", want[i].recipient, want[i].channel)
		if !strings.HasPrefix(n.ID, "n_") || len(n.ID) != 15 || n.Key != k || n.Recipient != want[i].recipient || n.Channel != want[i].channel || n.Status != model.StatusPending {
			t.Errorf("notification %d: %+v, want %s/%s key %s pending", i, n, want[i].recipient, want[i].channel, k)
		}
	}

	// The same body again, without a key: the event's identity dedupes it,
	// a 202 naming the same notifications, marked as a duplicate.
	again := b.do(t, "POST", "/v1/events", body)
	if dup := accepted(t, again); !dup.Duplicate || dup.Count != res.Count || !slices.Equal(ids(dup.Notifications), ids(res.Notifications)) {
		t.Errorf("repeat: %s, want a duplicate naming %v", again, ids(res.Notifications))
	}
	if again.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("repeat without a key: Idempotent-Replayed %q, want none", again.header.Get("Idempotent-Replayed"))
	}
	// Under an Idempotency-Key, a repeat is the stored answer, byte for
	// byte, and the same event re-serialised (other order, no white space)
	// is the same request.
	keyed := b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "client-key-1")
	if rep := b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "client-key-1"); !bytes.Equal(rep.body, keyed.body) || rep.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("keyed repeat: %s, want %s replayed", rep, keyed)
	}
	var ev relay.Event
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	if rep := b.do(t, "POST", "/v1/events", jsonOf(t, ev), "Idempotency-Key", "client-key-1"); !bytes.Equal(rep.body, keyed.body) || rep.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-serialised: %s, want the first answer replayed", rep)
	}

	// A new Idempotency-Key runs the request again: the relay recognises
	// the event and creates nothing.
	dup := accepted(t, b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "client-key-2"))
	if !dup.Duplicate || dup.Count != res.Count || !slices.Equal(ids(dup.Notifications), ids(res.Notifications)) {
		t.Errorf("other key: %+v, want a duplicate with ids %v", dup, ids(res.Notifications))
	}
	if all := b.listAll(t); len(all) != len(want) {
		t.Errorf("%d notifications stored, want %d", len(all), len(want))
	}

	// Each notification is readable by id and by key.
	n0 := res.Notifications[0]
	got := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+n0.ID, ""))
	if got.ID != n0.ID || got.Key != n0.Key || got.EventID != "evt_api_1" || got.Address != "ada@example.com" || got.AttemptLog == nil {
		t.Errorf("GET by id: %+v", got)
	}
	byKey := decode[notification](t, b.do(t, "GET", "/v1/notifications?key="+n0.Key, ""))
	if byKey.ID != n0.ID {
		t.Errorf("GET by key: id %s, want %s", byKey.ID, n0.ID)
	}
}

func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1)), "Idempotency-Key", "k1"))
	rep := b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_2", 1)), "Idempotency-Key", "k1")
	wantProblem(t, rep, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if rep := b.do(t, "GET", "/v1/notifications?event_id=evt_2&purpose=receipt", ""); rep.status != http.StatusNotFound {
		t.Errorf("the refused request wrote its event: %s", rep)
	}
}

func TestIdempotencyKeyInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := jsonOf(t, receipt("evt_1", 2))
	// Another request holds the key (in the store, as a request running on
	// any node would). On the open API an event without a tenant acts as
	// "default", and the key is kept under that tenant.
	release := b.api.HoldEvent("k1", body)
	rep := b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "k1")
	wantProblem(t, rep, http.StatusConflict, "request-in-progress")
	if ra, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("409 Retry-After %q, want the seconds left of the hold", rep.header.Get("Retry-After"))
	}
	// The hold is in the store: another server on it (another node) sees it.
	other := httptest.NewServer(api.New(b.r, b.st, api.Options{Open: true}))
	defer other.Close()
	oreq, _ := http.NewRequest("POST", other.URL+"/v1/events", strings.NewReader(body))
	oreq.Header.Set("Idempotency-Key", "k1")
	orep, err := other.Client().Do(oreq)
	if err != nil {
		t.Fatal(err)
	}
	orep.Body.Close()
	if orep.StatusCode != http.StatusConflict {
		t.Errorf("another server while the key is held: %s, want 409", orep.Status)
	}
	if all := b.listAll(t); len(all) != 0 {
		t.Errorf("%d notifications written while the key was in flight", len(all))
	}
	// Once the holder is done, the request runs.
	release()
	if res := accepted(t, b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "k1")); res.Count != 2 {
		t.Errorf("after release: %+v", res)
	}
	// A new process (a new server on the same database) replays the answer:
	// only the completed response is durable, and it is.
	again := httptest.NewServer(api.New(b.r, b.st, api.Options{Open: true}))
	defer again.Close()
	req, _ := http.NewRequest("POST", again.URL+"/v1/events", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "k1")
	arep, err := again.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	arep.Body.Close()
	if arep.StatusCode != http.StatusAccepted || arep.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("another server: %s, Idempotent-Replayed %q; want the stored answer", arep.Status, arep.Header.Get("Idempotent-Replayed"))
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Relay: relay.Options{MaxRecipients: 3}, API: api.Options{MaxBody: 4096, MaxBatch: 2}})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1)), "Idempotency-Key", "first"))
	changed := receipt("evt_1", 1)
	changed.Body = "Another body."
	ok := jsonOf(t, receipt("evt_ok", 1))

	tests := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		kind, field              string
	}{
		{"malformed JSON", "POST", "/v1/events", `{"id": "e", "type":`, nil, 400, "", ""},
		{"unknown field", "POST", "/v1/events", `{"id": "e", "type": "t", "recipents": [{"id": "a", "email": "a@x"}]}`, nil, 400, "invalid-event", "recipents"},
		{"invalid recipient", "POST", "/v1/events", `{"id": "e", "type": "t", "recipients": [{"id": "a"}]}`, nil, 400, "invalid-event", "recipients[0]"},
		{"malformed batch", "POST", "/v1/events:batch", `{"events": [`, nil, 400, "invalid-json", ""},
		{"unknown notification", "GET", "/v1/notifications/999999", "", nil, 404, "not-found", ""},
		{"notification id not a number", "GET", "/v1/notifications/abc", "", nil, 404, "not-found", ""},
		{"unknown key", "GET", "/v1/notifications?key=er1_nothing", "", nil, 404, "not-found", ""},
		{"unknown event", "GET", "/v1/notifications?event_id=nope&purpose=receipt", "", nil, 404, "not-found", ""},
		{"retry unknown notification", "POST", "/v1/notifications/999999/retry", "", nil, 404, "not-found", ""},
		{"unknown route", "GET", "/v1/nothing", "", nil, 404, "not-found", ""},
		{"root", "GET", "/", "", nil, 404, "not-found", ""},
		{"event conflict", "POST", "/v1/events", jsonOf(t, changed), []string{"Idempotency-Key", "second"}, 409, "event-conflict", ""},
		{"event conflict, derived key", "POST", "/v1/events", jsonOf(t, changed), nil, 409, "event-conflict", ""},
		{"wrong method", "GET", "/v1/events", "", nil, 405, "method-not-allowed", ""},
		{"wrong method on an item", "DELETE", "/v1/notifications/1", "", nil, 405, "method-not-allowed", ""},
		{"body too large", "POST", "/v1/events", `{"id": "e", "type": "t", "body": "` + strings.Repeat("x", 5000) + `"}`, nil, 413, "too-large", ""},
		{"too many recipients", "POST", "/v1/events", jsonOf(t, receipt("evt_big", 4)), nil, 413, "too-large", "recipients"},
		{"audience too large", "PUT", "/v1/audiences/all", jsonOf(t, map[string]any{"members": people(4)}), nil, 413, "too-large", "members"},
		{"batch too large", "POST", "/v1/events:batch", `{"events": [` + ok + "," + ok + "," + ok + `]}`, nil, 413, "too-large", "events"},
		{"empty batch", "POST", "/v1/events:batch", `{"events": []}`, nil, 400, "invalid-event", "events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := b.do(t, tt.method, tt.path, tt.body, tt.hdr...)
			if tt.kind == "" {
				// Malformed JSON: the type says invalid-event here and
				// invalid-json for a batch; either is fair.
				if p := wantProblem(t, rep, tt.status, ""); !strings.Contains(p.Type, "/invalid-") {
					t.Errorf("problem type %q", p.Type)
				}
				return
			}
			p := wantProblem(t, rep, tt.status, tt.kind)
			if p.Field != tt.field {
				t.Errorf("problem field %q, want %q", p.Field, tt.field)
			}
		})
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex("tok-acme-0123456789"): "acme"}})
	body := jsonOf(t, receipt("evt_1", 1))
	for name, hdr := range map[string][]string{
		"no header":     nil,
		"unknown token": {"Authorization", "Bearer tok-nobody-0123456789"},
		"empty token":   {"Authorization", "Bearer "},
		"not bearer":    {"Authorization", "Basic dG9rLWFjbWUtMDEyMzQ1Njc4OQ=="},
	} {
		for _, path := range []string{"/v1/events", "/v1/events:batch"} {
			rep := b.do(t, "POST", path, body, hdr...)
			wantProblem(t, rep, http.StatusUnauthorized, "unauthorized")
			if !strings.HasPrefix(rep.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("%s %s: WWW-Authenticate %q", name, path, rep.header.Get("WWW-Authenticate"))
			}
		}
		wantProblem(t, b.do(t, "GET", "/v1/notifications", "", hdr...), http.StatusUnauthorized, "unauthorized")
	}
	if all := b.listAll(t, "Authorization", "Bearer tok-acme-0123456789"); len(all) != 0 {
		t.Errorf("unauthorised requests wrote %d notifications", len(all))
	}
	// Health checks need no token.
	if rep := b.do(t, "GET", "/healthz", ""); rep.status != http.StatusOK {
		t.Errorf("healthz: %s", rep)
	}
}

// 100 identical requests at once. Without an Idempotency-Key the event's
// identity dedupes: every request is answered 202 with the same
// notifications and exactly one says it was new. Under one shared key, one
// request runs and the others get its answer replayed (or 409 while it
// runs). Either way: one event, one notification per recipient.
func TestConcurrentIdenticalPosts(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "client-key-1"} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			const callers = 100
			body := jsonOf(t, receipt("evt_race", 3))
			var hdr []string
			if key != "" {
				hdr = []string{"Idempotency-Key", key}
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			start := make(chan struct{})
			replies := make([]reply, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					<-start
					replies[i], errs[i] = b.send(ctx, "POST", "/v1/events", body, hdr...)
				})
			}
			close(start)
			wg.Wait()

			var firstIDs []string
			ran, inFlight := 0, 0
			for i, rep := range replies {
				if errs[i] != nil {
					t.Fatalf("caller %d: %v", i, errs[i])
				}
				switch rep.status {
				case http.StatusAccepted:
					res := accepted(t, rep)
					if key != "" && rep.header.Get("Idempotent-Replayed") != "true" || key == "" && !res.Duplicate {
						ran++
					}
					if res.Count != 3 || len(res.Notifications) != 3 {
						t.Errorf("caller %d: %+v", i, res)
					}
					if firstIDs == nil {
						firstIDs = ids(res.Notifications)
					} else if !slices.Equal(ids(res.Notifications), firstIDs) {
						t.Errorf("caller %d: notifications %v, want every 202 to name %v", i, ids(res.Notifications), firstIDs)
					}
				case http.StatusConflict:
					if key == "" {
						t.Errorf("caller %d: %s; without a key a duplicate is a 202", i, rep)
					}
					wantProblem(t, rep, http.StatusConflict, "request-in-progress")
					inFlight++
				default:
					t.Errorf("caller %d: %s", i, rep)
				}
			}
			if ran != 1 {
				t.Errorf("%d requests created the event, want 1", ran)
			}
			t.Logf("%d answered 202 (1 new, the rest duplicates or replays), %d answered 409 in progress", callers-inFlight, inFlight)
			all := b.listAll(t)
			if len(all) != 3 {
				t.Fatalf("%d notifications stored, want 3", len(all))
			}
			perRecipient := map[string]int{}
			for _, n := range all {
				perRecipient[n.Recipient]++
			}
			for _, p := range people(3) {
				if perRecipient[p.ID] != 1 {
					t.Errorf("recipient %s has %d notifications, want 1", p.ID, perRecipient[p.ID])
				}
			}
		})
	}
}

// The same event at once under 50 different keys: every request runs, and
// the relay's unique index lets exactly one create anything.
func TestConcurrentKeysSameEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	const callers = 50
	body := jsonOf(t, receipt("evt_race", 2))
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := make(chan struct{})
	replies := make([]reply, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			replies[i], errs[i] = b.send(ctx, "POST", "/v1/events", body, "Idempotency-Key", "key-"+strconv.Itoa(i))
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	var want []string
	for i, rep := range replies {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		res := accepted(t, rep)
		if !res.Duplicate {
			fresh++
		}
		if want == nil {
			want = ids(res.Notifications)
		} else if !slices.Equal(ids(res.Notifications), want) {
			t.Errorf("caller %d: ids %v, want %v", i, ids(res.Notifications), want)
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers are not duplicates, want 1", fresh)
	}
	if all := b.listAll(t); len(all) != 2 {
		t.Errorf("%d notifications stored, want 2", len(all))
	}
}

const (
	acmeToken = "tok-acme-0123456789"
	betaToken = "tok-beta-0123456789"
)

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}

	// The tenant defaults to the token's.
	rep := b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 2)), acme...)
	res := accepted(t, rep)
	if res.Tenant != "acme" || res.Count != 2 {
		t.Fatalf("acme accept: %+v", res)
	}
	if h := rep.header.Get("X-Edgerelay-Tenant"); h != "acme" {
		t.Errorf("X-Edgerelay-Tenant %q", h)
	}
	n := res.Notifications[0]
	if n.Key != relay.Key("acme", "evt_1", "receipt", n.Recipient, "email") {
		t.Errorf("key %s is not acme's", n.Key)
	}
	own := b.do(t, "GET", "/v1/notifications/"+n.ID, "", acme...)
	if got := decode[notification](t, own); got.Tenant != "acme" {
		t.Errorf("acme reads its own: %+v", got)
	}
	// The same event id from beta is beta's own event.
	mine := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1)), beta...))
	if mine.Tenant != "beta" || mine.Duplicate {
		t.Errorf("beta's evt_1: %+v", mine)
	}

	// Another tenant's notification does not exist, rather than being forbidden.
	id := n.ID
	wantProblem(t, b.do(t, "GET", "/v1/notifications/"+id, "", beta...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", "/v1/notifications?key="+n.Key, "", beta...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "POST", "/v1/notifications/"+id+"/retry", "", beta...), http.StatusNotFound, "not-found")
	// A pending notification of acme's, retried by acme: 409, so the 404
	// above is the tenant check, not the status.
	wantProblem(t, b.do(t, "POST", "/v1/notifications/"+id+"/retry", "", acme...), http.StatusConflict, "not-retryable")
	for _, q := range []string{"", "?status=pending", "?recipient=" + n.Recipient, "?tenant=beta"} {
		for _, got := range decode[pageBody](t, b.do(t, "GET", "/v1/notifications"+q, "", beta...)).Notifications {
			if got.Tenant != "beta" {
				t.Errorf("beta lists %q: %+v", q, got)
			}
		}
	}
	// Listing by event id (what an accept's next link does) stays within
	// the caller's tenant; a query naming another tenant is refused, not
	// ignored.
	acmeOnly := receipt("evt_2", 1)
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, acmeOnly), acme...))
	wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=evt_2&purpose=receipt", "", beta...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=evt_2", "", beta...), http.StatusNotFound, "not-found")
	for _, q := range []string{"?tenant=acme", "?event_id=evt_1&tenant=acme", "?status=pending&tenant=acme"} {
		wantProblem(t, b.do(t, "GET", "/v1/notifications"+q, "", beta...), http.StatusForbidden, "tenant-mismatch")
	}
	for _, q := range []string{"&purpose=receipt", ""} {
		p := decode[pageBody](t, b.do(t, "GET", "/v1/notifications?event_id=evt_1"+q, "", beta...))
		if len(p.Notifications) != 1 || p.Notifications[0].ID != mine.Notifications[0].ID {
			t.Errorf("beta lists its evt_1 (%q): %+v, want its one notification", q, p.Notifications)
		}
	}

	// Acting as another tenant is forbidden.
	other := receipt("evt_9", 1)
	other.Tenant = "acme"
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, other), beta...), http.StatusForbidden, "tenant-mismatch")
	batch := decode[struct {
		Results []struct {
			Index  int             `json:"index"`
			Status int             `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"results"`
	}](t, b.do(t, "POST", "/v1/events:batch", `{"events": [`+jsonOf(t, other)+`]}`, beta...))
	if len(batch.Results) != 1 || batch.Results[0].Status != http.StatusForbidden {
		t.Errorf("beta batch as acme: %+v", batch)
	}
	wantProblem(t, b.do(t, "PUT", "/v1/audiences/team?tenant=acme", jsonOf(t, map[string]any{"members": people(1)}), beta...),
		http.StatusForbidden, "tenant-mismatch")
	if all := b.listAll(t, acme...); len(all) != 3 {
		t.Errorf("acme has %d notifications, want its 3", len(all))
	}
}

func TestStoredToken(t *testing.T) {
	t.Parallel()
	// No configured tokens: only those created in the store.
	b := setup(t, options{Tokens: map[string]string{}})
	_, token, err := b.r.CreateToken(context.Background(), "gamma", "ci")
	if err != nil {
		t.Fatal(err)
	}
	res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1)), "Authorization", "Bearer "+token))
	if res.Tenant != "gamma" {
		t.Errorf("tenant %q, want gamma", res.Tenant)
	}
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_2", 1)), "Authorization", "Bearer tok-delta-0123456789"),
		http.StatusUnauthorized, "unauthorized")
}

// Paging by cursor neither skips nor repeats, while events keep arriving.
func TestListPaging(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_0", 5))))
	seen := map[string]bool{}
	var order []int64 // rows: the ids are opaque, the order is the rows'
	next := "/v1/notifications?status=pending&limit=2"
	for page := 0; next != ""; page++ {
		if page > 50 {
			t.Fatal("paging does not end")
		}
		rep := b.do(t, "GET", next, "")
		if rep.status != http.StatusOK {
			t.Fatalf("page %d: %s", page, rep)
		}
		p := decode[pageBody](t, rep)
		if len(p.Notifications) > 2 {
			t.Fatalf("page %d has %d notifications, limit 2", page, len(p.Notifications))
		}
		for _, n := range p.Notifications {
			if seen[n.ID] {
				t.Fatalf("page %d repeats notification %s", page, n.ID)
			}
			row := b.row(t, n.ID)
			if len(order) > 0 && row < order[len(order)-1] {
				t.Fatalf("page %d: row %d after %d", page, row, order[len(order)-1])
			}
			if n.Status != model.StatusPending {
				t.Errorf("status filter: %+v", n)
			}
			seen[n.ID] = true
			order = append(order, row)
		}
		switch {
		case len(p.Notifications) == 2 && (p.NextCursor == "" || p.Next == ""):
			t.Fatalf("page %d is full but has no next cursor", page)
		case len(p.Notifications) < 2 && p.NextCursor != "":
			t.Fatalf("page %d is the last but has next_cursor %q", page, p.NextCursor)
		case p.NextCursor != "" && !strings.Contains(p.Next, "cursor="+p.NextCursor):
			t.Errorf("next %q does not carry next_cursor %q", p.Next, p.NextCursor)
		}
		next = p.Next
		if page < 3 {
			// New events between pages: later ids, reached by later pages.
			accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_"+strconv.Itoa(page+1), 2))))
		}
	}
	all := b.listAll(t)
	if len(all) != 5+3*2 || len(seen) != len(all) {
		t.Fatalf("paged through %d notifications, %d stored, want 11", len(seen), len(all))
	}
	for id := range all {
		if !seen[id] {
			t.Errorf("paging skipped notification %s", id)
		}
	}
	// The recipient filter.
	p := decode[pageBody](t, b.do(t, "GET", "/v1/notifications?recipient=u00004", ""))
	if len(p.Notifications) != 1 || p.Notifications[0].Recipient != "u00004" {
		t.Errorf("recipient filter: %+v", p.Notifications)
	}
}

func TestListInvalidQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, q := range []string{"status=bogus", "status=PENDING", "limit=0", "limit=-1", "limit=1001", "limit=ten",
		"cursor=-1", "cursor=abc", "cursor=1.5", "cursor=0", "cursor=99", "cursor=n_", "cursor=n_0123456789abc0", "cursor=N_0123456789ABC",
		"cursor=ev_0123456789abc"} {
		p := wantProblem(t, b.do(t, "GET", "/v1/notifications?"+q, ""), http.StatusBadRequest, "invalid-query")
		if strings.HasPrefix(q, "cursor=") && !strings.HasPrefix(p.Detail, "cursor: "+strconv.Quote(strings.TrimPrefix(q, "cursor="))) {
			t.Errorf("%s: detail %q does not name the cursor", q, p.Detail)
		}
	}
	// A cursor is an id the API gave (any spelling of one pages from where
	// it falls; none reaches another tenant's rows).
	for _, q := range []string{"status=pending", "status=dead", "limit=1", "limit=1000", "cursor=n_0123456789abc", "cursor=n_7zzzzzzzzzzzz"} {
		if rep := b.do(t, "GET", "/v1/notifications?"+q, ""); rep.status != http.StatusOK {
			t.Errorf("%s: %s", q, rep)
		} else if p := decode[pageBody](t, rep); p.Notifications == nil {
			t.Errorf("%s: notifications is null, want []", q)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	// A provider that refuses every message for good.
	refuser := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"error": "recipient rejected"}`)
	}))
	t.Cleanup(refuser.Close)
	p, err := providers.New("webhook+" + refuser.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"*": {p}}}})
	res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1))))
	id := res.Notifications[0].ID

	wantProblem(t, b.do(t, "POST", "/v1/notifications/"+id+"/retry", ""), http.StatusConflict, "not-retryable")

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := b.r.RunUntilIdle(ctx, time.Second); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+id, ""))
	if n.Status != model.StatusFailed || len(n.AttemptLog) != 1 {
		t.Fatalf("after a 422: %+v, want failed after one attempt", n)
	}

	rep := b.do(t, "POST", "/v1/notifications/"+id+"/retry", "", "Idempotency-Key", "retry-1")
	if rep.status != http.StatusOK {
		t.Fatalf("retry: %s", rep)
	}
	got := decode[struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}](t, rep)
	if got.ID != id || got.Status != model.StatusPending {
		t.Errorf("retry answered %+v", got)
	}
	if n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+id, "")); n.Status != model.StatusPending || n.Key != res.Notifications[0].Key {
		t.Errorf("after retry: %+v, want pending with the same key", n)
	}
	// The same retry again is the same answer, not a 409.
	again := b.do(t, "POST", "/v1/notifications/"+id+"/retry", "", "Idempotency-Key", "retry-1")
	if again.status != http.StatusOK || !bytes.Equal(again.body, rep.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeated retry: %s", again)
	}
}

// A 10,000-recipient event is accepted whole; the answer lists one page
// and links to the rest.
func TestFanOut10k(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Relay: relay.Options{MaxRecipients: 10000}, API: api.Options{MaxBody: 4 << 20}})
	const n = 10000
	res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_big", n))))
	if res.Count != n || len(res.Notifications) != 100 || res.Next == "" {
		t.Fatalf("count %d, %d inline, next %q: want 10000, 100 and a link", res.Count, len(res.Notifications), res.Next)
	}
	seen := map[string]bool{}
	for _, x := range res.Notifications {
		seen[x.ID] = true
	}
	next := res.Next
	for pages := 0; next != ""; pages++ {
		if pages > n/100+1 {
			t.Fatal("paging does not end")
		}
		rep := b.do(t, "GET", next, "")
		if rep.status != http.StatusOK {
			t.Fatalf("GET %s: %s", next, rep)
		}
		p := decode[pageBody](t, rep)
		for _, x := range p.Notifications {
			if seen[x.ID] {
				t.Fatalf("notification %s twice", x.ID)
			}
			if x.EventID != "evt_big" {
				t.Fatalf("next page lists another event's notification: %+v", x)
			}
			seen[x.ID] = true
		}
		next = p.Next
	}
	if len(seen) != n {
		t.Errorf("reached %d distinct notifications, want %d", len(seen), n)
	}
}

// Regression guard: the next link of an event accepted on the open API for
// a named tenant must reach its notifications.
func TestFanOutNextLinkNamedTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, options{API: api.Options{PageSize: 2}})
	ev := receipt("evt_acme", 3)
	ev.Tenant = "acme"
	res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev)))
	if res.Count != 3 || len(res.Notifications) != 2 || res.Next == "" {
		t.Fatalf("accept: %+v", res)
	}
	rep := b.do(t, "GET", res.Next, "")
	if rep.status != http.StatusOK {
		t.Fatalf("GET next %s: %s, want the third notification", res.Next, rep)
	}
	if p := decode[pageBody](t, rep); len(p.Notifications) != 1 || p.Notifications[0].Recipient != "u00002" {
		t.Errorf("next page: %+v", p.Notifications)
	}
}

func TestAudience(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	put := func(n int) {
		t.Helper()
		rep := b.do(t, "PUT", "/v1/audiences/team", jsonOf(t, map[string]any{"members": people(n)}))
		if rep.status != http.StatusOK {
			t.Fatalf("PUT audience: %s", rep)
		}
		got := decode[struct {
			Tenant  string `json:"tenant"`
			Name    string `json:"name"`
			Members int    `json:"members"`
		}](t, rep)
		if got.Tenant != "default" || got.Name != "team" || got.Members != n {
			t.Errorf("PUT audience answered %+v", got)
		}
	}
	put(3)
	ev := relay.Event{ID: "evt_a", Type: "incident", Channels: []string{"email"}, Audience: "team", Subject: "Down"}
	body := jsonOf(t, ev)
	first := b.do(t, "POST", "/v1/events", body)
	res := accepted(t, first)
	if res.Count != 3 || len(res.Notifications) != 3 || res.Duplicate {
		t.Fatalf("audience event: %+v", res)
	}

	put(5)
	// The same event, with or without a key: a duplicate of the first, not
	// a conflict, and nothing sent to the two new members.
	for _, hdr := range [][]string{nil, {"Idempotency-Key", "again"}} {
		dup := accepted(t, b.do(t, "POST", "/v1/events", body, hdr...))
		if !dup.Duplicate || dup.Count != 3 || !slices.Equal(ids(dup.Notifications), ids(res.Notifications)) {
			t.Errorf("resend after the audience changed (%v): %+v, want a duplicate with the first 3", hdr, dup)
		}
	}
	// A new event uses the new members.
	ev.ID = "evt_b"
	if res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev))); res.Count != 5 {
		t.Errorf("new event: count %d, want 5", res.Count)
	}

	ev.ID, ev.Audience = "evt_c", "nobody"
	if p := wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev)), http.StatusBadRequest, "invalid-event"); p.Field != "audience" {
		t.Errorf("unknown audience: field %q, want audience", p.Field)
	}
	both := receipt("evt_d", 1)
	both.Audience = "team"
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, both)), http.StatusBadRequest, "invalid-event")
	wantProblem(t, b.do(t, "PUT", "/v1/audiences/team", `{"members": []}`), http.StatusBadRequest, "invalid-event")
	wantProblem(t, b.do(t, "PUT", "/v1/audiences/team", `{"membres": []}`), http.StatusBadRequest, "invalid-json")
	p := wantProblem(t, b.do(t, "PUT", "/v1/audiences/team", `{"members": [{"id": "a"}]}`), http.StatusBadRequest, "invalid-event")
	if !strings.HasPrefix(p.Field, "members[0]") {
		t.Errorf("invalid member: field %q, want members[0]…", p.Field)
	}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	bad := `{"id": "evt_bad", "type": "t", "recipients": [{"id": "a"}]}`
	body := `{"events": [` + jsonOf(t, receipt("evt_1", 2)) + "," + bad + "," + jsonOf(t, receipt("evt_3", 1)) + `]}`
	rep := b.do(t, "POST", "/v1/events:batch", body)
	if rep.status != http.StatusOK {
		t.Fatalf("batch: %s", rep)
	}
	out := decode[struct {
		Results []struct {
			Index  int             `json:"index"`
			Status int             `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"results"`
	}](t, rep)
	if len(out.Results) != 3 {
		t.Fatalf("%d results, want 3", len(out.Results))
	}
	for i, want := range []int{202, 400, 202} {
		if r := out.Results[i]; r.Index != i || r.Status != want {
			t.Errorf("result %d: index %d status %d, want %d: %s", i, r.Index, r.Status, want, r.Result)
		}
	}
	var p api.Problem
	if err := json.Unmarshal(out.Results[1].Result, &p); err != nil || p.Status != 400 || p.Field != "recipients[0]" {
		t.Errorf("invalid event's result: %s", out.Results[1].Result)
	}
	var first acceptBody
	if err := json.Unmarshal(out.Results[0].Result, &first); err != nil || first.Count != 2 {
		t.Errorf("first event's result: %s", out.Results[0].Result)
	}
	wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=evt_bad&purpose=t", ""), http.StatusNotFound, "not-found")
	all := b.listAll(t)
	if len(all) != 3 {
		t.Errorf("%d notifications, want 3 (2 + 1, none of the invalid event)", len(all))
	}
	for _, n := range all {
		if n.EventID == "evt_bad" {
			t.Errorf("the invalid event wrote %+v", n)
		}
	}
	// The batch again under a key, twice: the second replays the first's
	// final results and runs the invalid event again (it is rejected the
	// same way), so it is not a replay as a whole.
	one := b.do(t, "POST", "/v1/events:batch", body, "Idempotency-Key", "batch-1")
	two := b.do(t, "POST", "/v1/events:batch", body, "Idempotency-Key", "batch-1")
	if one.status != http.StatusOK || !bytes.Equal(one.body, two.body) || two.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("keyed batch: %s then %s (Idempotent-Replayed %q)", one, two, two.header.Get("Idempotent-Replayed"))
	}
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, path := range []string{"/healthz", "/readyz"} {
		rep := b.do(t, "GET", path, "")
		if rep.status != http.StatusOK || rep.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %s", path, rep)
		}
	}
	// Closing the relay closes the store: the writer is gone, so the API
	// is alive but not ready.
	if err := b.closeRelay(); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do(t, "GET", "/readyz", ""), http.StatusServiceUnavailable, "not-ready")
	if rep := b.do(t, "GET", "/healthz", ""); rep.status != http.StatusOK {
		t.Errorf("healthz after close: %s", rep)
	}
	// An accept against a closed store is a 500, and says a retry is safe.
	rep := b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1)))
	if p := wantProblem(t, rep, http.StatusInternalServerError, "internal"); !strings.Contains(p.Detail, "retry") {
		t.Errorf("500 detail %q", p.Detail)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Metrics: true})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 2))))
	// The request counter is bumped after the answer went out, just before
	// the request is logged.
	b.logs.waitRequests(t, 1)
	rep := b.do(t, "GET", "/metrics", "")
	if rep.status != http.StatusOK {
		t.Fatalf("metrics: %s", rep)
	}
	text := string(rep.body)
	for _, want := range []string{
		"\nedgerelay_events_accepted_total 1\n",
		"\nedgerelay_notifications_created_total 2\n",
		"\nedgerelay_notifications{status=\"pending\"} 2\n",
		"\nedgerelay_writer_commit_seconds_count ",
		"\nedgerelay_http_requests_total{code=\"202\",route=\"POST /v1/events\"} 1\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
	// A duplicate counts as one, not as an accept.
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 2)), "Idempotency-Key", "k2"))
	text = string(b.do(t, "GET", "/metrics", "").body)
	if !strings.Contains(text, "\nedgerelay_events_accepted_total 1\n") || !strings.Contains(text, "\nedgerelay_events_duplicate_total 1\n") {
		t.Errorf("after a duplicate:\n%s", text)
	}
}

// Each bounded provider's window is a gauge: its size, its ceiling and the
// calls in flight (the log provider, unbounded, has none).
func TestMetricsProviderWindow(t *testing.T) {
	t.Parallel()
	p, err := providers.New("webhook+http://127.0.0.1:9/hook?concurrency=7&name=hook")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Metrics: true, Relay: relay.Options{Routes: relay.Routes{"*": {providers.NewLog(io.Discard, "log://discard")}, "webhook": {p}}}})
	text := string(b.do(t, "GET", "/metrics", "").body)
	for _, want := range []string{
		"\nedgerelay_provider_window{provider=\"hook\"} 7\n",
		"\nedgerelay_provider_window_ceiling{provider=\"hook\"} 7\n",
		"\nedgerelay_provider_calls_in_flight{provider=\"hook\"} 0\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	if strings.Contains(text, "log://discard\"}") {
		t.Errorf("the unbounded log provider has a window:\n%s", text)
	}
}

func TestNoMetricsRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	wantProblem(t, b.do(t, "GET", "/metrics", ""), http.StatusNotFound, "not-found")
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1))))
	b.do(t, "GET", "/v1/nothing", "")
	b.do(t, "GET", "/healthz", "")
	b.logs.waitRequests(t, 3)

	type line struct {
		Msg    string `json:"msg"`
		Level  string `json:"level"`
		Method string `json:"method"`
		Path   string `json:"path"`
		Route  string `json:"route"`
		Status int    `json:"status"`
		Took   *int64 `json:"took"`
		Bytes  int    `json:"bytes"`
		Remote string `json:"remote"`
	}
	var got []line
	for _, s := range strings.Split(strings.TrimSpace(b.logs.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		if l.Msg == "request" {
			got = append(got, l)
		}
	}
	want := []struct {
		method, path, route string
		status              int
	}{
		{"POST", "/v1/events", "POST /v1/events", 202},
		{"GET", "/v1/nothing", "/", 404},
		{"GET", "/healthz", "GET /healthz", 200},
	}
	if len(got) != len(want) {
		t.Fatalf("%d request lines, want %d:\n%s", len(got), len(want), b.logs.String())
	}
	for i, w := range want {
		l := got[i]
		if l.Method != w.method || l.Path != w.path || l.Route != w.route || l.Status != w.status || l.Level != "INFO" {
			t.Errorf("line %d: %+v, want %s %s (%s) %d", i, l, w.method, w.path, w.route, w.status)
		}
		if l.Took == nil || *l.Took < 0 {
			t.Errorf("line %d: took missing or negative", i)
		}
		if l.Bytes <= 0 || !strings.HasPrefix(l.Remote, "127.0.0.1:") {
			t.Errorf("line %d: bytes %d remote %q", i, l.Bytes, l.Remote)
		}
	}
}

// An event refused for what the relay found (an unknown audience) must be
// accepted once the cause is fixed: the rejection must not be replayed
// under the key the API derives from the event's id.
func TestRejectedEventAcceptedAfterFix(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ev := relay.Event{ID: "evt_a", Type: "incident", Channels: []string{"email"}, Audience: "oncall"}
	body := jsonOf(t, ev)
	wantProblem(t, b.do(t, "POST", "/v1/events", body), http.StatusBadRequest, "invalid-event")
	if rep := b.do(t, "PUT", "/v1/audiences/oncall", jsonOf(t, map[string]any{"members": people(2)})); rep.status != http.StatusOK {
		t.Fatalf("PUT audience: %s", rep)
	}
	rep := b.do(t, "POST", "/v1/events", body)
	if rep.status != http.StatusAccepted {
		t.Errorf("the same event once its audience exists: %s (Idempotent-Replayed: %q), want 202",
			rep, rep.header.Get("Idempotent-Replayed"))
	}
}

// An event the relay rejected, corrected and sent again with the same id,
// without an Idempotency-Key, must be judged on its own.
func TestCorrectedEventAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	bad := `{"id": "evt_1", "type": "payment.succeeded", "recipients": [{"id": "ada"}]}`
	wantProblem(t, b.do(t, "POST", "/v1/events", bad), http.StatusBadRequest, "invalid-event")
	good := `{"id": "evt_1", "type": "payment.succeeded", "recipients": [{"id": "ada", "email": "ada@example.com"}]}`
	rep := b.do(t, "POST", "/v1/events", good)
	if rep.status != http.StatusAccepted {
		t.Errorf("the corrected event: %s, want 202", rep)
	}
}

// The README's cost of an accept: one writer round without an
// Idempotency-Key (event dedupe is the record; a resend is that same round,
// finding the event there), three with one (the claim on the key, which
// every node sharing the store sees, the accept, then the stored answer);
// a keyed replay is a read only.
func TestAcceptWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	writes := func() int64 { return b.st.Stats().Writes }
	for _, c := range []struct {
		name string
		hdr  []string
		want int64
	}{
		{"no key", nil, 1},
		{"no key, resend", nil, 1},
		{"key", []string{"Idempotency-Key", "k1"}, 3},
		{"key, replay", []string{"Idempotency-Key", "k1"}, 0},
	} {
		id := "evt_w1"
		if c.hdr != nil {
			id = "evt_w2"
		}
		before := writes()
		accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt(id, 1)), c.hdr...))
		if got := writes() - before; got != c.want {
			t.Errorf("%s: %d writes, want %d", c.name, got, c.want)
		}
	}
}

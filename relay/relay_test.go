package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// bound is how long a test waits for something that should happen soon (the
// 1,200-notification run takes seconds under -race on a loaded machine);
// reaching it means a bug, not a slow machine.
const bound = time.Minute

// fastRetry keeps retries in the milliseconds so outcome tests finish fast.
var fastRetry = Policy{BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}

// testLogger routes a component's log to the test's output.
func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// setupRelay opens a relay on a fresh database in t.TempDir(), closed when
// the test ends. Unset options get test defaults: fast retries, a 20ms poll,
// the log at Info to t.Output().
func setupRelay(t *testing.T, opts Options) *Relay {
	t.Helper()
	return setupRelayAt(t, filepath.Join(t.TempDir(), "relay.db"), opts)
}

// setupRelayAt is setupRelay on the database at db (several relays on one
// database, or one reopened).
func setupRelayAt(t *testing.T, db string, opts Options) *Relay {
	t.Helper()
	if opts.Retry == (Policy{}) {
		opts.Retry = fastRetry
	}
	if opts.Poll == 0 {
		opts.Poll = 20 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t, slog.LevelInfo)
	}
	r, err := openAt(context.Background(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})
	return r
}

// simBundle is the provider simulator served over loopback HTTP, with every
// send request's Idempotency-Key recorded as it arrives.
type simBundle struct {
	srv     *sim.Server
	ts      *httptest.Server
	arrived chan string // the key of each send request, as it arrives

	mu   sync.Mutex
	keys []string
}

// setupSim starts the simulator; honour sets whether it honours keys.
func setupSim(t *testing.T, honour bool, rules ...sim.Rule) *simBundle {
	t.Helper()
	return setupSimWith(t, sim.Options{HonourKeys: honour, Script: &sim.Script{Rules: rules}})
}

func setupSimWith(t *testing.T, opts sim.Options) *simBundle {
	t.Helper()
	b := &simBundle{arrived: make(chan string, 10000)}
	if opts.Logger == nil {
		opts.Logger = testLogger(t, slog.LevelInfo)
	}
	b.srv = sim.New(opts)
	b.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.URL.Path == "/v1/emails" {
			k := req.Header.Get("Idempotency-Key")
			b.mu.Lock()
			b.keys = append(b.keys, k)
			b.mu.Unlock()
			select {
			case b.arrived <- k:
			default:
			}
		}
		b.srv.ServeHTTP(w, req)
	}))
	t.Cleanup(b.ts.Close)
	t.Cleanup(b.srv.Close) // runs first: ends held requests so ts.Close does not wait
	return b
}

// provider returns an email-http provider pointed at the simulator.
// idempotency is "honoured" or "none"; extra is appended to the query.
func (b *simBundle) provider(t *testing.T, idempotency string, extra ...string) providers.Provider {
	t.Helper()
	u := "email-http+" + b.ts.URL + "/v1/emails?from=relay@example.com&idempotency=" + idempotency + strings.Join(extra, "")
	p, err := providers.New(u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// requestKeys returns the Idempotency-Key of every send request so far.
func (b *simBundle) requestKeys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.keys...)
}

// waitArrivals waits until n send requests have reached the simulator.
func (b *simBundle) waitArrivals(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(bound)
	for i := range n {
		select {
		case <-b.arrived:
		case <-timeout:
			t.Fatalf("%d of %d send requests arrived within %s", i, n, bound)
		}
	}
}

// runIdle drives delivery until nothing is due within maxWait.
func runIdle(t *testing.T, r *Relay, maxWait time.Duration) Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	sum, err := r.RunUntilIdle(ctx, maxWait)
	if err != nil {
		t.Fatalf("RunUntilIdle: %v (summary %+v)", err, sum)
	}
	return sum
}

func accept(t *testing.T, r *Relay, ev Event) AcceptResult {
	t.Helper()
	res, err := r.Accept(context.Background(), ev)
	if err != nil {
		t.Fatalf("accept %s: %v", ev.ID, err)
	}
	return res
}

func notification(t *testing.T, r *Relay, id int64) model.Notification {
	t.Helper()
	n, err := r.Notification(context.Background(), fmt.Sprint(id))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func counts(t *testing.T, r *Relay) map[string]int64 {
	t.Helper()
	st, err := r.store.Status(context.Background(), r.now())
	if err != nil {
		t.Fatal(err)
	}
	return st.Counts
}

// receipt is a one-channel event, the common case.
func receipt(id string, rcpts ...Recipient) Event {
	return Event{ID: id, Type: "payment.succeeded", Purpose: "receipt", Channels: []string{"email"},
		Recipients: rcpts, Subject: "Your receipt", Body: "Thanks for your payment."}
}

var ada = Recipient{ID: "ada", Email: "ada@example.com"}

func TestAcceptInvalidEventWritesNothing(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{MaxRecipients: 2})
	ctx := context.Background()
	before := r.store.Stats()
	bad := []Event{
		{Type: "t", Recipients: []Recipient{ada}},                                                             // no id
		{ID: "e1", Type: "t", Recipients: []Recipient{ada, ada}},                                              // duplicate recipient
		{ID: "e2", Type: "t", Channels: []string{"sms"}, Recipients: []Recipient{ada}},                        // no phone
		{ID: "e3", Type: "t", Recipients: []Recipient{ada, {ID: "b", Email: "b@x"}, {ID: "c", Email: "c@x"}}}, // over the cap
		{ID: "e4", Type: "t", Tenant: "no spaces", Recipients: []Recipient{ada}},
	}
	for _, ev := range bad {
		_, err := r.Accept(ctx, ev)
		var ie *InvalidEventError
		if !errors.As(err, &ie) {
			t.Fatalf("accept %+v: got %v, want *InvalidEventError", ev, err)
		}
		// The keys it would have had are not in the store.
		for _, rc := range ev.Recipients {
			for _, ch := range []string{"email", "sms"} {
				tenant := ev.Tenant
				if tenant == "" {
					tenant = "default"
				}
				k := Key(tenant, ev.ID, ev.Type, rc.ID, ch)
				if _, err := r.Notification(ctx, k); !errors.Is(err, model.ErrNotFound) {
					t.Errorf("notification %s after invalid event %q: %v, want ErrNotFound", k, ev.ID, err)
				}
			}
		}
	}
	for s, n := range counts(t, r) {
		if n != 0 {
			t.Errorf("%d notifications %s after only invalid events", n, s)
		}
	}
	if st := r.store.Stats(); st.Commits != before.Commits || st.Writes != before.Writes || st.Failed != before.Failed {
		t.Errorf("writer stats %+v after invalid events, want no write since open (%+v)", st, before)
	}
	if evs, err := r.store.UnexpandedEvents(ctx, 10); err != nil || len(evs) != 0 {
		t.Errorf("unexpanded events %v, %v; want none", evs, err)
	}
}

func TestAcceptSameEventConcurrently(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true)
	r := setupRelay(t, Options{Routes: Routes{"email": {s.provider(t, "honoured")}}})
	ev := receipt("evt_1", ada)

	const n = 200
	results := make([]AcceptResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = r.Accept(context.Background(), ev)
		})
	}
	close(start)
	wg.Wait()

	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("accept %d: %v", i, errs[i])
		}
		if !results[i].Duplicate {
			fresh++
		}
		if len(results[i].Notifications) != 1 || results[i].Notifications[0].ID != results[0].Notifications[0].ID {
			t.Fatalf("accept %d: notifications %+v, want the one of accept 0 %+v", i, results[i].Notifications, results[0].Notifications)
		}
	}
	if fresh != 1 {
		t.Errorf("%d accepts were not duplicates, want exactly 1", fresh)
	}
	if c := counts(t, r); c[model.StatusPending] != 1 {
		t.Errorf("counts %v, want one pending notification", c)
	}

	sum := runIdle(t, r, time.Second)
	if sum.Sent != 1 || !sum.OK() {
		t.Errorf("summary %+v, want one sent", sum)
	}
	ds := s.srv.Deliveries()
	if len(ds) != 1 || ds[0].To != "ada@example.com" || ds[0].Key != results[0].Notifications[0].Key {
		t.Errorf("deliveries %+v, want one to ada with key %s", ds, results[0].Notifications[0].Key)
	}
}

// webhookRecorder is a webhook endpoint that keeps what it was sent.
type webhookRecorder struct {
	mu   sync.Mutex
	reqs []webhookReq
}

type webhookReq struct {
	Key  string // the Idempotency-Key header
	Body struct {
		Key            string `json:"key"`
		NotificationID any    `json:"notification_id"`
		Channel        string `json:"channel"`
		Recipient      struct {
			ID      string `json:"id"`
			Address string `json:"address"`
		} `json:"recipient"`
	}
}

func (w *webhookRecorder) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	var wr webhookReq
	wr.Key = req.Header.Get("Idempotency-Key")
	if err := json.NewDecoder(req.Body).Decode(&wr.Body); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.reqs = append(w.reqs, wr)
	n := len(w.reqs)
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"id": "wh_%d"}`, n)
}

func TestAcceptWithoutChannelsUsesEveryAddress(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true)
	hook := &webhookRecorder{}
	hs := httptest.NewServer(hook)
	t.Cleanup(hs.Close)
	smsp, err := providers.New("webhook+" + hs.URL + "/sms?idempotency=honoured")
	if err != nil {
		t.Fatal(err)
	}
	var chat bytes.Buffer
	r := setupRelay(t, Options{Routes: Routes{
		"email": {s.provider(t, "honoured")},
		"sms":   {smsp},
		"*":     {providers.NewLog(&chat, "log://chat")}}})

	ev := Event{ID: "evt_7", Type: "order.shipped", Body: "On its way", Recipients: []Recipient{
		{ID: "ada", Email: "ada@example.com", Phone: "+4420000001"},
		{ID: "ben", Email: "ben@example.com"},
		{ID: "cy", Phone: "+4420000003", Addresses: map[string]string{"chat": "#ops"}},
	}}
	res := accept(t, r, ev)
	want := []struct{ rcpt, ch string }{{"ada", "email"}, {"ada", "sms"}, {"ben", "email"}, {"cy", "sms"}, {"cy", "chat"}}
	if len(res.Notifications) != len(want) {
		t.Fatalf("notifications %+v, want %v", res.Notifications, want)
	}
	byKey := map[string]model.EventNotification{}
	for i, w := range want {
		n := res.Notifications[i]
		k := Key("default", "evt_7", "order.shipped", w.rcpt, w.ch)
		if n.Recipient != w.rcpt || n.Channel != w.ch || n.Key != k {
			t.Errorf("notification %d: %+v, want %s/%s with key %s", i, n, w.rcpt, w.ch, k)
		}
		byKey[n.Key] = n
	}

	sum := runIdle(t, r, time.Second)
	if sum.Sent != 5 || !sum.OK() {
		t.Errorf("summary %+v, want 5 sent", sum)
	}
	emails := map[string]int{}
	for _, d := range s.srv.Deliveries() {
		if byKey[d.Key].Channel != "email" {
			t.Errorf("email delivery %+v has the key of %+v", d, byKey[d.Key])
		}
		emails[d.To]++
	}
	if emails["ada@example.com"] != 1 || emails["ben@example.com"] != 1 || len(emails) != 2 {
		t.Errorf("emails %v, want one each to ada and ben", emails)
	}
	hook.mu.Lock()
	sms := map[string]int{}
	for _, w := range hook.reqs {
		n := byKey[w.Key]
		if n.Channel != "sms" || w.Body.Key != w.Key || w.Body.Channel != "sms" || w.Body.Recipient.ID != n.Recipient {
			t.Errorf("webhook request %+v does not match notification %+v", w, n)
		}
		sms[w.Body.Recipient.Address]++
	}
	hook.mu.Unlock()
	if sms["+4420000001"] != 1 || sms["+4420000003"] != 1 || len(sms) != 2 {
		t.Errorf("sms %v, want one each to ada's and cy's phone", sms)
	}
	lines := strings.Split(strings.TrimSpace(chat.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"channel":"chat"`) || !strings.Contains(lines[0], `"address":"#ops"`) {
		t.Errorf("chat log %q, want one line to #ops", chat.String())
	}
}

// manyRecipients returns n recipients r00000, r00001 …
func manyRecipients(n int) []Recipient {
	rs := make([]Recipient, n)
	for i := range rs {
		id := fmt.Sprintf("r%05d", i)
		rs[i] = Recipient{ID: id, Email: id + "@example.com"}
	}
	return rs
}

// checkFanOut checks that ns is exactly ev's fan-out (email only), in order.
func checkFanOut(t *testing.T, ev Event, ns []model.EventNotification) {
	t.Helper()
	if len(ns) != len(ev.Recipients) {
		t.Fatalf("%d notifications, want %d", len(ns), len(ev.Recipients))
	}
	seen := make(map[string]bool, len(ns))
	for i, n := range ns {
		rc := ev.Recipients[i]
		if k := Key("default", ev.ID, ev.Purpose, rc.ID, "email"); n.Key != k || n.Recipient != rc.ID || n.Channel != "email" {
			t.Fatalf("notification %d: %+v, want recipient %s key %s", i, n, rc.ID, k)
		}
		if seen[n.Key] {
			t.Fatalf("key %s twice", n.Key)
		}
		seen[n.Key] = true
		if i > 0 && n.ID <= ns[i-1].ID {
			t.Fatalf("notification %d has id %d after %d", i, n.ID, ns[i-1].ID)
		}
	}
}

func TestAcceptTenThousandRecipients(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 inserts: about 1s, 10s under -race")
	}
	r := setupRelay(t, Options{MaxRecipients: 10000, Logger: testLogger(t, slog.LevelWarn)})
	ev := receipt("evt_big", manyRecipients(10000)...)
	res := accept(t, r, ev)
	if res.Duplicate || res.Count != 10000 {
		t.Errorf("first accept: duplicate %v, count %d; want a new event of 10000", res.Duplicate, res.Count)
	}
	checkFanOut(t, ev, res.Notifications)
	if st := r.store.Stats(); st.Writes < 20 {
		t.Errorf("writer stats %+v: want the fan-out in 500-notification chunks, 20 writes or more", st)
	}

	again := accept(t, r, ev)
	if !again.Duplicate || len(again.Notifications) != len(res.Notifications) {
		t.Fatalf("re-accept: duplicate %v with %d notifications, want a duplicate with %d", again.Duplicate, len(again.Notifications), len(res.Notifications))
	}
	for i := range res.Notifications {
		if again.Notifications[i] != res.Notifications[i] {
			t.Fatalf("re-accept notification %d: %+v, want %+v", i, again.Notifications[i], res.Notifications[i])
		}
	}
	if c := counts(t, r); c[model.StatusPending] != 10000 {
		t.Errorf("counts %v, want 10000 pending", c)
	}

	ev.Recipients = manyRecipients(10001)
	ev.ID = "evt_too_big"
	var ie *InvalidEventError
	if _, err := r.Accept(context.Background(), ev); !errors.As(err, &ie) || ie.Field != "recipients" {
		t.Errorf("10001 recipients: %v, want an invalid recipients field", err)
	}
}

// A process that wrote an event and its first chunk, then died: the next
// dispatcher finishes the fan-out from the stored payload, and every
// recipient is sent exactly once.
func TestFanOutFinishedAfterCrash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "relay.db")
	ctx := context.Background()
	ev := receipt("evt_crash", manyRecipients(1200)...)
	// What Accept writes before its first commit, and nothing after.
	norm := ev
	if err := norm.Normalize(0); err != nil {
		t.Fatal(err)
	}
	rec, targets, err := norm.record()
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := st.AcceptEvent(ctx, rec, targets[:500], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if acc.Expanded != 500 || acc.Targets != 1200 {
		t.Fatalf("accepted %+v, want 500 of 1200 expanded", acc)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var out syncBuffer
	r := setupRelayAt(t, path, Options{Workers: 64, Logger: testLogger(t, slog.LevelWarn),
		Routes: Routes{"*": {providers.NewLog(&out, "log://test")}}})
	if c := counts(t, r); c[model.StatusPending] != 500 {
		t.Fatalf("counts before dispatch %v, want the first chunk of 500 pending", c)
	}
	sum := runIdle(t, r, time.Second)
	if sum.Sent != 1200 || !sum.OK() {
		t.Errorf("summary %+v, want 1200 sent", sum)
	}
	ns, err := r.store.EventNotifications(ctx, acc.EventRow, -1, 2000)
	if err != nil {
		t.Fatal(err)
	}
	checkFanOut(t, ev, ns)
	for _, n := range ns {
		if n.Status != model.StatusSent {
			t.Fatalf("notification %+v not sent", n)
		}
	}
	lines := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v struct{ Key string }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines[v.Key]++
	}
	for _, n := range ns {
		if lines[n.Key] != 1 {
			t.Errorf("notification %s (%s) written %d times, want once", n.Key, n.Recipient, lines[n.Key])
		}
	}
	if len(lines) != 1200 {
		t.Errorf("%d distinct keys written, want 1200", len(lines))
	}
	// A redelivery of the event is a duplicate of the finished fan-out.
	again := accept(t, r, ev)
	if !again.Duplicate {
		t.Error("re-accept after recovery is not a duplicate")
	}
	checkFanOut(t, ev, again.Notifications)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)

// AcceptAll writes a run of events with one commit, in order; a bad
// event is refused alone, a resend is a duplicate, and a failure to read
// stops the run there with nothing after it written.
func TestAcceptAll(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ada := Recipient{ID: "ada", Email: "ada@example.com"}
	ev := func(id, body string) Event {
		return Event{ID: id, Type: "news", Channels: []string{"email"}, Recipients: []Recipient{ada}, Body: body, Feeds: []string{"team"}}
	}
	bad := ev("e2", "b")
	bad.Type = ""
	events := []Event{ev("e1", "first"), bad, ev("e3", "third"), ev("e1", "other content"), ev("e3", "third")}
	res, errs := r.AcceptAll(context.Background(), events, 0)
	var inv *InvalidEventError
	switch {
	case errs[0] != nil || res[0].Duplicate || res[0].Count != 1:
		t.Errorf("e1: %+v, %v; want accepted", res[0], errs[0])
	case !errors.As(errs[1], &inv):
		t.Errorf("e2 without a type: %v, want an invalid event", errs[1])
	case errs[2] != nil || res[2].Duplicate:
		t.Errorf("e3: %+v, %v; want accepted", res[2], errs[2])
	case !errors.Is(errs[3], model.ErrEventConflict):
		t.Errorf("e1 with other content: %v, want a conflict", errs[3])
	case errs[4] != nil || !res[4].Duplicate || res[4].EventRow != res[2].EventRow:
		t.Errorf("e3 again: %+v, %v; want a duplicate of %d", res[4], errs[4], res[2].EventRow)
	case res[0].EventRow >= res[2].EventRow:
		t.Errorf("event rows %d, %d: not in the order given", res[0].EventRow, res[2].EventRow)
	}
	if st, err := r.store.Status(context.Background(), time.Now()); err != nil || st.Counts["pending"] != 2 {
		t.Errorf("statuses %v (%v), want 2 notifications pending", st.Counts, err)
	}

	// An audience that cannot be read (the store is closed) is not the
	// event's fault: the run stops there and nothing after it is written.
	aud := ev("e5", "b")
	aud.Recipients, aud.Audience = nil, "oncall"
	r2 := setupRelay(t, Options{})
	r2.Close()
	_, errs = r2.AcceptAll(context.Background(), []Event{aud, ev("e6", "b")}, 0)
	if errs[0] == nil || errors.As(errs[0], &inv) || errs[1] == nil {
		t.Errorf("after a failed read: %v, %v; want both failed, not as invalid events", errs[0], errs[1])
	}
}

// A webhook's payload names the notification by the id the API shows, not
// by its row id: the receiver may be the tenant's own server, and row ids,
// drawn from one sequence for every tenant, would count the others'
// traffic.
func TestWebhookPayloadCarriesTheAPIsID(t *testing.T) {
	t.Parallel()
	hook := &webhookRecorder{}
	hs := httptest.NewServer(hook)
	t.Cleanup(hs.Close)
	p, err := providers.New("webhook+" + hs.URL + "/hook?idempotency=honoured")
	if err != nil {
		t.Fatal(err)
	}
	r := setupRelay(t, Options{Routes: Routes{"sms": {p}}})
	res := accept(t, r, Event{ID: "evt_w", Type: "order.shipped", Body: "On its way",
		Recipients: []Recipient{{ID: "ada", Phone: "+4420000001"}}})
	if sum := runIdle(t, r, time.Second); sum.Sent != 1 {
		t.Fatalf("summary %+v, want 1 sent", sum)
	}
	ids, err := r.IDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := ids.Notification(res.Notifications[0].ID)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.reqs) != 1 {
		t.Fatalf("%d webhook requests, want 1", len(hook.reqs))
	}
	if got := hook.reqs[0].Body.NotificationID; got != want {
		t.Errorf("the payload's notification_id is %v, want %s (the API's id of row %d)", got, want, res.Notifications[0].ID)
	}
}

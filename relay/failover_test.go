package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/sim"
)

// endpoint is a webhook receiver that answers every request with status
// and counts them.
type endpoint struct {
	srv   *httptest.Server
	calls atomic.Int32
	keys  chan string
}

func newEndpoint(t *testing.T, status int, header ...string) *endpoint {
	t.Helper()
	e := &endpoint{keys: make(chan string, 100)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		e.calls.Add(1)
		e.keys <- r.Header.Get("Idempotency-Key")
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) provider(t *testing.T, name string) providers.Provider {
	t.Helper()
	p, err := providers.New("webhook+" + e.srv.URL + "/hook?name=" + name + "&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func webhookEvent(id string) Event {
	return Event{ID: id, Type: "notice", Channels: []string{"ops"},
		Recipients: []Recipient{{ID: "u1", Addresses: map[string]string{"ops": "ops-team"}}}, Body: "hi"}
}

// A refusal moves the notification to the next provider at once; the
// attempt trail shows both. The backoff is an hour: had the failover
// waited for it, the run would end with the notification still pending.
func TestFailoverOnRefusal(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusUnauthorized} {
		down, up := newEndpoint(t, status), newEndpoint(t, http.StatusOK)
		r := setupRelay(t, Options{Routes: Routes{"ops": {down.provider(t, "a"), up.provider(t, "b")}},
			Retry: Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}})
		acc := accept(t, r, webhookEvent("evt_1"))
		sum := runIdle(t, r, time.Second)
		n := notification(t, r, acc.Notifications[0].ID)
		if n.Status != model.StatusSent || sum.Sent != 1 || len(n.AttemptLog) != 2 ||
			n.AttemptLog[0].Provider != "a" || n.AttemptLog[0].Outcome != "refused" ||
			n.AttemptLog[1].Provider != "b" || n.AttemptLog[1].Outcome != "sent" {
			t.Fatalf("status %d: %+v", status, n)
		}
		if k1, k2 := <-down.keys, <-up.keys; k1 != n.Key || k2 != n.Key {
			t.Fatalf("keys %q %q, want %q on both", k1, k2, n.Key)
		}
	}
}

// An unknown outcome pins the notification to its provider: the retry goes
// to the same provider with the same key, never to the next one (which
// could deliver a second copy).
func TestUnknownPinsToProvider(t *testing.T) {
	t.Parallel()
	s := setupSim(t, true, sim.Rule{To: "ada@example.com", Attempts: []int{1}, Action: sim.ActionLoseAnswer})
	up := newEndpoint(t, http.StatusOK)
	first := s.provider(t, "honoured")
	r := setupRelay(t, Options{Routes: Routes{"email": {first, up.provider(t, "backup")}}})
	acc := accept(t, r, receipt("evt_1", Recipient{ID: "ada", Email: "ada@example.com"}))
	runIdle(t, r, time.Second)
	n := notification(t, r, acc.Notifications[0].ID)
	if n.Status != model.StatusSent || len(n.AttemptLog) != 2 || n.AttemptLog[0].Outcome != "unknown" ||
		n.AttemptLog[1].Provider != first.Name() {
		t.Fatalf("%+v", n.AttemptLog)
	}
	if up.calls.Load() != 0 {
		t.Fatalf("the backup provider was called %d times after an unknown outcome", up.calls.Load())
	}
	if got := s.srv.Counts()["ada@example.com"]; got != 1 {
		t.Fatalf("ada received %d", got)
	}
}

// A provider that declares an address dead fails the notification and puts
// the address on the tenant's suppression list; later notifications to it
// end suppressed without a call.
func TestInvalidAddressIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	dead := &fakeProvider{name: "push", send: func(m *providers.Message) providers.Result {
		calls.Add(1)
		return providers.Result{Outcome: providers.Refused, Permanent: true, InvalidAddress: true, Detail: "UNREGISTERED"}
	}}
	r := setupRelay(t, Options{Routes: Routes{"push": {dead}}})
	ev := Event{ID: "e1", Type: "t", Channels: []string{"push"}, Recipients: []Recipient{{ID: "u", DeviceToken: "tok-1"}}}
	accept(t, r, ev)
	runIdle(t, r, time.Second)
	ev.ID = "e2"
	acc := accept(t, r, ev)
	sum := runIdle(t, r, time.Second)
	n := notification(t, r, acc.Notifications[0].ID)
	if calls.Load() != 1 || n.Status != model.StatusSuppressed || len(n.AttemptLog) != 0 || n.Attempts != 0 || sum.Suppressed != 1 || sum.Failed != 0 {
		t.Fatalf("calls %d, second notification %+v", calls.Load(), n)
	}
}

// A provider at its concurrency limit holds no more than that many workers:
// other channels keep flowing while its calls hang.
func TestProviderLimitDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var slowCalls atomic.Int32
	slow := &fakeProvider{name: "slow", send: func(m *providers.Message) providers.Result {
		slowCalls.Add(1)
		<-release
		return providers.Result{Outcome: providers.Sent}
	}}
	fast := &fakeProvider{name: "fast", send: func(m *providers.Message) providers.Result {
		return providers.Result{Outcome: providers.Sent}
	}}
	r := setupRelay(t, Options{Workers: 3, Routes: Routes{"email": {slow}, "sms": {fast}},
		Limits: map[string]Limit{"slow": {Concurrency: 1}}})
	t.Cleanup(unblock) // runs before the relay's cleanup closes it
	var rs []Recipient
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		rs = append(rs, Recipient{ID: id, Email: id + "@example.com"})
	}
	accept(t, r, Event{ID: "mail", Type: "t", Channels: []string{"email"}, Recipients: rs})
	var phones []Recipient
	for i := range 20 {
		phones = append(phones, Recipient{ID: string(rune('a' + i)), Phone: "+1555000" + string(rune('0'+i%10))})
	}
	accept(t, r, Event{ID: "sms", Type: "t", Channels: []string{"sms"}, Recipients: phones})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for counts(t, r)[model.StatusSent] < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("sms not delivered while the slow provider holds its call: %v", counts(t, r))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := slowCalls.Load(); got != 1 {
		t.Fatalf("%d calls in flight to a provider limited to 1", got)
	}
	unblock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for counts(t, r)[model.StatusSent] < 25 {
		if ctx.Err() != nil {
			t.Fatalf("email not delivered after release: %v", counts(t, r))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

type fakeProvider struct {
	name string
	send func(*providers.Message) providers.Result
}

func (f *fakeProvider) Name() string      { return f.name }
func (f *fakeProvider) HonoursKeys() bool { return false }
func (f *fakeProvider) Send(ctx context.Context, m *providers.Message) providers.Result {
	return f.send(m)
}

// A type's (or purpose's) policy and mode win over the channel's, which
// wins over the default.
func TestPolicyAndModeByTypeOrPurpose(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{
		Delivery:     map[string]Mode{"otp": AtMostOnce, "alert": AtMostOnce},
		TypeRetry:    map[string]Policy{"receipt": {MaxAttempts: 2}},
		ChannelRetry: map[string]Policy{"sms": {MaxAttempts: 4}},
	})
	for _, tc := range []struct {
		c        model.Claimed
		attempts int
		mode     Mode
	}{
		{model.Claimed{Type: "payment", Purpose: "receipt", Channel: "sms"}, 2, AtLeastOnce},
		{model.Claimed{Type: "otp", Purpose: "login", Channel: "sms"}, 4, AtMostOnce},
		{model.Claimed{Type: "billing", Purpose: "alert", Channel: "email"}, DefaultPolicy.MaxAttempts, AtMostOnce},
	} {
		if got := r.policy(tc.c).MaxAttempts; got != tc.attempts {
			t.Errorf("%+v: max attempts %d, want %d", tc.c, got, tc.attempts)
		}
		if got := r.mode(tc.c); got != tc.mode {
			t.Errorf("%+v: mode %s, want %s", tc.c, got, tc.mode)
		}
	}
}

func TestOpenRefusesTwoProvidersWithOneName(t *testing.T) {
	t.Parallel()
	a := &fakeProvider{name: "twilio://api.twilio.com"}
	b := &fakeProvider{name: "twilio://api.twilio.com"}
	_, err := openAt(context.Background(), t.TempDir()+"/r.db", Options{Routes: Routes{"sms": {a, b}}})
	if err == nil || !strings.Contains(err.Error(), "two providers are named") {
		t.Fatalf("err = %v", err)
	}
	// The same provider in two routes is fine.
	r, err := openAt(context.Background(), t.TempDir()+"/r.db", Options{Routes: Routes{"sms": {a}, "push": {a}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// A provider paused by a Retry-After takes no claims until then; the other
// channels keep theirs.
func TestRetryAfterPausesProviderClaims(t *testing.T) {
	t.Parallel()
	slow, fast := &fakeProvider{name: "slow"}, &fakeProvider{name: "fast"}
	rt, err := newRouter(Routes{"email": {slow}, "sms": {fast}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if plans := rt.plan(now, 8); len(plans) != 1 || len(plans[0].filter.Exclude) != 0 {
		t.Fatalf("unbounded plan %+v", plans)
	}
	rt.gates[slow].pause(now.Add(2 * time.Second))
	plans := rt.plan(now, 8)
	if len(plans) != 1 || fmt.Sprint(plans[0].filter.Exclude) != "[email]" || plans[0].limit != 8 {
		t.Fatalf("while paused: %+v", plans)
	}
	if plans := rt.plan(now.Add(3*time.Second), 8); len(plans) != 1 || len(plans[0].filter.Exclude) != 0 {
		t.Fatalf("after the pause: %+v", plans)
	}
}

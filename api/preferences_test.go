package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// sink is a webhook receiver that records what reached it: the real HTTP
// provider posts there.
type sink struct {
	mu   sync.Mutex
	got  []sunk
	srv  *httptest.Server
	prov providers.Provider
}

type sunk struct {
	Key       string `json:"key"`
	Type      string `json:"type"`
	Recipient struct {
		ID string `json:"id"`
	} `json:"recipient"`
	at time.Time
}

func newSink(t *testing.T, clock func() time.Time) *sink {
	t.Helper()
	s := &sink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m sunk
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("sink: %v", err)
		}
		m.at = clock()
		s.mu.Lock()
		s.got = append(s.got, m)
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.srv.Close)
	p, err := providers.New("webhook+" + s.srv.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	s.prov = p
	return s
}

// delivered lists "TYPE→RECIPIENT" of what reached the sink, in order.
func (s *sink) delivered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.got {
		out = append(out, m.Type+"→"+m.Recipient.ID)
	}
	return out
}

// prefOptions are a relay with the categories the preference tests use:
// security (required: the OTP), marketing (optional, on by default).
func prefOptions(p providers.Provider) relay.Options {
	return relay.Options{
		Routes: relay.Routes{"*": {p}},
		Categories: map[string]relay.Category{
			"security":  {Required: true},
			"marketing": {},
		},
		TypeCategory: map[string]string{"otp": "security", "newsletter": "marketing"},
	}
}

func event(id, typ string, to ...string) string {
	var rs []string
	for _, r := range to {
		rs = append(rs, fmt.Sprintf(`{"id":%q,"email":%q}`, r, r+"@example.com"))
	}
	return fmt.Sprintf(`{"id":%q,"type":%q,"channels":["email"],"recipients":[%s],"subject":"s","body":"b"}`, id, typ, strings.Join(rs, ","))
}

// A recipient who turned marketing off (PUT …/preferences) is skipped for
// the next newsletter, without an attempt, with the reason; their OTP
// still goes out, and another recipient's newsletter too. status and
// /metrics count the skip.
func TestPreferencesOptOutSkipsMarketingNotOTP(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov), Metrics: true})

	got := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", ""))
	if len(got.Categories) != 2 || got.Categories[0].Name != "marketing" || !got.Categories[0].Enabled || got.Categories[1].Required != true {
		t.Fatalf("defaults: %+v", got)
	}
	rep := b.do(t, "PUT", "/v1/recipients/ada/preferences", `{"switches":[{"category":"marketing","enabled":false}]}`)
	if rep.status != http.StatusOK {
		t.Fatalf("put: %s", rep)
	}
	got = decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", ""))
	if m := got.Categories[0]; m.Enabled || m.SetBy != model.SetByAPI || m.SetAt.IsZero() {
		t.Fatalf("after the opt-out: %+v", m)
	}

	nl := accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada", "bob")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	sum := runIdle(t, b.r)
	if d := strings.Join(s.delivered(), " "); !strings.Contains(d, "newsletter→bob") || !strings.Contains(d, "otp→ada") || strings.Contains(d, "newsletter→ada") || len(s.delivered()) != 2 {
		t.Fatalf("delivered %q, want bob's newsletter and ada's OTP only", d)
	}
	if sum.Skipped != 1 || sum.Sent != 2 {
		t.Errorf("summary %+v, want 2 sent, 1 skipped", sum)
	}
	var adaID string
	for _, n := range nl.Notifications {
		if n.Recipient == "ada" {
			adaID = n.ID
		}
	}
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+adaID, ""))
	if n.Status != model.StatusSkipped || len(n.AttemptLog) != 0 || !strings.Contains(n.Reason, `recipient ada turned category "marketing" off on every channel`) ||
		!strings.Contains(n.Reason, "by api") {
		t.Fatalf("ada's newsletter: %s %q, %d attempts; want skipped naming the switch, no attempt", n.Status, n.Reason, len(n.AttemptLog))
	}
	text := string(b.do(t, "GET", "/metrics", "").body)
	if !strings.Contains(text, "\nedgerelay_notifications{status=\"skipped\"} 1\n") {
		t.Errorf("metrics do not count the skip:\n%s", text)
	}
}

// A preference that cannot hold is refused naming its field, and nothing
// is written.
func TestPreferencesRefused(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	for _, row := range []struct{ body, field string }{
		{`{"switches":[{"category":"marketing","enabled":false},{"category":"security","enabled":false}]}`, "switches[1].enabled"},
		{`{"switches":[{"category":"promos","enabled":false}]}`, "switches[0].category"},
		{`{"switches":[{"category":"marketing"}]}`, "switches[0].enabled"},
		{`{"timezone":"Mars/Olympus","switches":[{"category":"marketing","enabled":false}]}`, "timezone"},
		{`{"quiet_hours":[{"window":"21:00-25:00"}]}`, "quiet_hours[0].window"},
		{`{"quiet_hours":[{"category":"security","window":"21:00-08:00"}]}`, "quiet_hours[0].category"},
		{`{"switchs":[]}`, "switchs"},
	} {
		rep := b.do(t, "PUT", "/v1/recipients/ada/preferences", row.body)
		if rep.status != http.StatusBadRequest || !strings.Contains(string(rep.body), `"field":"`+row.field+`"`) {
			t.Errorf("%s: %s, want 400 naming %s", row.body, rep, row.field)
		}
	}
	got := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", ""))
	if !got.Categories[0].Enabled || !got.Categories[0].SetAt.IsZero() {
		t.Fatalf("a refused put wrote %+v", got.Categories[0])
	}
}

// clock is an injected relay clock a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// Quiet hours: a marketing notification accepted at 23:00
// in the recipient's Europe/Berlin, in their quiet hours 21:00-08:00,
// waits (no attempt) and is sent at 08:00, once, under its key; the OTP
// accepted with it goes at once.
func TestQuietHoursSendAtEightBerlinOnce(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Date(2026, 12, 1, 23, 0, 0, 0, berlin)}
	s := newSink(t, clk.Now)
	o := prefOptions(s.prov)
	o.Now = clk.Now
	// A max age shorter than the night: the budget must count from 08:00.
	o.Retry = relay.Policy{MaxAge: time.Hour}
	b := setup(t, options{Relay: o})
	if rep := b.do(t, "PUT", "/v1/recipients/ada/preferences",
		`{"timezone":"Europe/Berlin","quiet_hours":[{"window":"21:00-08:00"}]}`); rep.status != http.StatusOK {
		t.Fatalf("put: %s", rep)
	}
	nl := accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	if d := s.delivered(); len(d) != 1 || d[0] != "otp→ada" {
		t.Fatalf("at 23:00 delivered %v, want only the OTP (required: quiet hours never hold it)", d)
	}
	id := nl.Notifications[0].ID
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+id, ""))
	if n.Status != model.StatusPending || len(n.AttemptLog) != 0 || !strings.Contains(n.Reason, "quiet hours 21:00-08:00 in Europe/Berlin") {
		t.Fatalf("at 23:00 the newsletter is %s %q with %d attempts; want pending in quiet hours, no attempt", n.Status, n.Reason, len(n.AttemptLog))
	}
	clk.set(time.Date(2026, 12, 2, 7, 59, 59, 0, berlin))
	runIdle(t, b.r)
	if len(s.delivered()) != 1 {
		t.Fatalf("at 07:59:59 delivered %v", s.delivered())
	}
	eight := time.Date(2026, 12, 2, 8, 0, 0, 0, berlin)
	clk.set(eight)
	runIdle(t, b.r)
	clk.set(eight.Add(time.Hour))
	runIdle(t, b.r)
	got := s.delivered()
	if len(got) != 2 || got[1] != "newsletter→ada" {
		t.Fatalf("after 08:00 delivered %v, want the newsletter once", got)
	}
	s.mu.Lock()
	m := s.got[1]
	s.mu.Unlock()
	if !m.at.Equal(eight) || m.Key != nl.Notifications[0].Key {
		t.Fatalf("newsletter sent at %s under key %s; want at %s under %s", m.at.In(berlin), m.Key, eight, nl.Notifications[0].Key)
	}
	n = decode[notification](t, b.do(t, "GET", "/v1/notifications/"+id, ""))
	if n.Status != model.StatusSent || len(n.AttemptLog) != 1 {
		t.Fatalf("after 08:00: %s with %d attempts, want sent after 1", n.Status, len(n.AttemptLog))
	}
}

// A throttle of 2 marketing notifications per recipient per 24 h: the
// third is skipped (throttled) without an attempt; a day later one goes
// out again; another recipient has a window of their own.
func TestThrottleSkipsTheExcess(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	s := newSink(t, clk.Now)
	o := prefOptions(s.prov)
	o.Now = clk.Now
	o.Categories["marketing"] = relay.Category{Throttle: relay.Throttle{Max: 2, Per: 24 * time.Hour}}
	b := setup(t, options{Relay: o})
	var ids []string
	for i := range 3 {
		a := accepted(t, b.do(t, "POST", "/v1/events", event(fmt.Sprintf("n%d", i), "newsletter", "ada")))
		ids = append(ids, a.Notifications[0].ID)
		runIdle(t, b.r)
	}
	accepted(t, b.do(t, "POST", "/v1/events", event("nb", "newsletter", "bob")))
	runIdle(t, b.r)
	if d := strings.Join(s.delivered(), " "); d != "newsletter→ada newsletter→ada newsletter→bob" {
		t.Fatalf("delivered %q, want 2 to ada and bob's", d)
	}
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+ids[2], ""))
	if n.Status != model.StatusSkipped || len(n.AttemptLog) != 0 || !strings.Contains(n.Reason, "skipped (throttled)") {
		t.Fatalf("the third: %s %q %d attempts, want skipped (throttled)", n.Status, n.Reason, len(n.AttemptLog))
	}
	clk.set(clk.Now().Add(24*time.Hour + time.Second))
	accepted(t, b.do(t, "POST", "/v1/events", event("n9", "newsletter", "ada")))
	runIdle(t, b.r)
	if len(s.delivered()) != 4 {
		t.Fatalf("a day later delivered %v", s.delivered())
	}
}

// Preferences are the tenant's: acme's ada turning marketing off leaves
// beta's ada alone, and beta cannot read or write acme's (?tenant=acme is
// a 403). (A link re-labelled for another tenant: TestForgedUnsubscribeIs403.)
func TestPreferencesPerTenant(t *testing.T) {
	t.Parallel()
	s := newSink(t, time.Now)
	o := prefOptions(s.prov)
	b := setup(t, options{Relay: o, Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}
	if rep := b.do(t, "PUT", "/v1/recipients/ada/preferences", `{"switches":[{"category":"marketing","enabled":false}]}`, acme...); rep.status != http.StatusOK {
		t.Fatalf("acme's put: %s", rep)
	}
	if p := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", "", beta...)); p.Tenant != "beta" || !p.Categories[0].Enabled {
		t.Fatalf("beta's ada: %+v, want beta's own, marketing on", p)
	}
	wantProblem(t, b.do(t, "GET", "/v1/recipients/ada/preferences?tenant=acme", "", beta...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, b.do(t, "PUT", "/v1/recipients/ada/preferences?tenant=acme", `{"switches":[]}`, beta...), http.StatusForbidden, "tenant-mismatch")
	if p := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", "", acme...)); p.Categories[0].Enabled {
		t.Fatalf("beta's refused put changed acme's ada: %+v", p)
	}
}

package api_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"

	_ "modernc.org/sqlite"
)

// deadPush refuses every push token as unregistered, as FCM does.
type deadPush struct{}

func (deadPush) Name() string      { return "dead-push" }
func (deadPush) HonoursKeys() bool { return false }
func (deadPush) Send(context.Context, *providers.Message) providers.Result {
	return providers.Result{Outcome: providers.Refused, Permanent: true, InvalidAddress: true, Detail: "UNREGISTERED"}
}

// breakFanOut makes an accepted event look like a fan-out cut short after
// its first notification, with a stored payload that no longer decodes.
func breakFanOut(t *testing.T, db, eventID string) {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	for _, q := range []string{
		`DELETE FROM notifications WHERE seq > 0 AND event = (SELECT id FROM events WHERE event_id = ?)`,
		`UPDATE events SET expanded = 1, payload = '{"recipients": [' WHERE event_id = ?`,
	} {
		if _, err := sdb.Exec(q, eventID); err != nil {
			t.Fatal(err)
		}
	}
}

func runIdle(t *testing.T, r *relay.Relay) relay.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	sum, err := r.RunUntilIdle(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// Quarantined fan-outs and suppression lists over HTTP: each tenant sees
// and acts on its own only.
func TestQuarantineAndAddressMarksPerTenant(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	b := setup(t, options{
		DB: db, Relay: relay.Options{Routes: relay.Routes{
			"email": {providers.NewLog(io.Discard, "log://discard")}, "push": {deadPush{}}}},
		Tokens: map[string]string{sha256hex("tok-acme-0123456789"): "acme", sha256hex("tok-beta-0123456789"): "beta"},
	})
	acme := []string{"Authorization", "Bearer tok-acme-0123456789"}
	beta := []string{"Authorization", "Bearer tok-beta-0123456789"}
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_q", 3)), acme...))
	accepted(t, b.do(t, "POST", "/v1/events", `{"id": "evt_p", "type": "t", "channels": ["push"], "recipients": [{"id": "u", "device_token": "tok-1"}]}`, acme...))
	breakFanOut(t, db, "evt_q")
	if sum := runIdle(t, b.r); sum.Quarantined != 1 || sum.Sent != 1 || sum.Failed != 1 {
		t.Fatalf("summary %+v", sum)
	}

	type qpage struct {
		Events []quarantined `json:"events"`
		Next   string        `json:"next"`
	}
	if p := decode[qpage](t, b.do(t, "GET", "/v1/quarantine", "", beta...)); len(p.Events) != 0 {
		t.Errorf("beta sees acme's quarantine: %+v", p.Events)
	}
	p := decode[qpage](t, b.do(t, "GET", "/v1/quarantine", "", acme...))
	if len(p.Events) != 1 || p.Events[0].EventID != "evt_q" || p.Events[0].Tenant != "acme" || !strings.Contains(p.Events[0].Reason, "no longer decodes") {
		t.Fatalf("acme's quarantine: %+v", p.Events)
	}
	id := p.Events[0].ID
	// The notification's audit trail names the quarantine too, by the
	// event's id.
	n1 := b.listAll(t, acme...)
	for _, n := range n1 {
		if n.EventID != "evt_q" {
			continue
		}
		if n = decode[notification](t, b.do(t, "GET", "/v1/notifications/"+n.ID, "", acme...)); n.Quarantine == nil || n.Quarantine.ID != id {
			t.Errorf("GET /v1/notifications/%s: quarantine %+v, want %s", n.ID, n.Quarantine, id)
		}
	}
	wantProblem(t, b.do(t, "POST", "/v1/quarantine/"+id+"/retry", "", beta...), http.StatusNotFound, "not-found")
	if rep := b.do(t, "POST", "/v1/quarantine/"+id+"/retry", "", acme...); rep.status != http.StatusConflict || !strings.Contains(string(rep.body), "no longer decodes") {
		t.Errorf("retry while the payload is still bad: %s, want 409 naming why", rep)
	}
	wantProblem(t, b.do(t, "POST", "/v1/quarantine/"+id+"/drop", "", beta...), http.StatusNotFound, "not-found")
	if rep := b.do(t, "POST", "/v1/quarantine/"+id+"/drop", "", acme...); rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"dropped":2`) {
		t.Errorf("drop: %s", rep)
	}
	wantProblem(t, b.do(t, "POST", "/v1/quarantine/"+id+"/drop", "", acme...), http.StatusNotFound, "not-found")

	type apage struct {
		Suppressions []shownSuppression `json:"suppressions"`
		Next         string             `json:"next"`
	}
	if a := decode[apage](t, b.do(t, "GET", "/v1/suppressions", "", beta...)); len(a.Suppressions) != 0 {
		t.Errorf("beta sees acme's entries: %+v", a.Suppressions)
	}
	a := decode[apage](t, b.do(t, "GET", "/v1/suppressions", "", acme...))
	if len(a.Suppressions) != 1 || a.Suppressions[0].Address != "tok-1" || a.Suppressions[0].Provider != "dead-push" ||
		a.Suppressions[0].Reason != model.ReasonHardBounce || a.Suppressions[0].ExpiresAt != nil {
		t.Fatalf("acme's entries: %+v", a.Suppressions)
	}
	wantProblem(t, b.do(t, "DELETE", "/v1/suppressions?channel=push&address=tok-1", "", beta...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "DELETE", "/v1/suppressions?channel=push&address=tok-1&tenant=beta", "", acme...), http.StatusForbidden, "tenant-mismatch")
	if rep := b.do(t, "DELETE", "/v1/suppressions?channel=push&address=tok-1", "", acme...); rep.status != http.StatusOK {
		t.Errorf("remove: %s", rep)
	}
	if a := decode[apage](t, b.do(t, "GET", "/v1/suppressions", "", acme...)); len(a.Suppressions) != 0 {
		t.Errorf("entries after removing: %+v", a.Suppressions)
	}
}

// The metrics say how many fan-outs are quarantined and how many addresses
// are suppressed.
func TestQuarantineMetrics(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	b := setup(t, options{Metrics: true, DB: db, Relay: relay.Options{Routes: relay.Routes{
		"email": {providers.NewLog(io.Discard, "log://discard")}, "push": {deadPush{}}}}})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_q", 3)), ""))
	accepted(t, b.do(t, "POST", "/v1/events", `{"id": "evt_p", "type": "t", "channels": ["push"], "recipients": [{"id": "u", "device_token": "tok-1"}]}`))
	breakFanOut(t, db, "evt_q")
	runIdle(t, b.r)
	text := string(b.do(t, "GET", "/metrics", "").body)
	for _, want := range []string{"edgerelay_events_quarantined 1", "edgerelay_events_quarantined_total 1", "edgerelay_suppressions 1"} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The writer's work, by class: the accepts, the claims and the records
	// of what was delivered all show.
	for _, class := range []string{"accept", "claim", "record"} {
		m := regexp.MustCompile(`edgerelay_writer_writes_total\{class="` + class + `"\} (\d+)`).FindStringSubmatch(text)
		if m == nil || m[1] == "0" {
			t.Errorf("/metrics: writes of class %s: %v", class, m)
		}
		if !strings.Contains(text, `edgerelay_writer_busy_seconds_total{class="`+class+`"}`) {
			t.Errorf("/metrics lacks the writer's busy time for %s", class)
		}
	}
}

package console_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/console"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
)

// The overview, read without JavaScript: acme's counts by status, its
// accepts and sends of the last hour with the share of attempts that sent
// (ada's two lost answers and dan's refusal beside the two sends), the
// decisions waiting (dan, dead), attempts per provider by outcome, the
// chart, the writer's health, a schedule's last and next runs, and each
// tailed source's lag (caught up how long ago, rows behind, when the
// oldest not relayed was created, the gap ids waited on since when; or
// tailed by another process).
func TestConsoleOverview(t *testing.T) {
	t.Parallel()
	sch, err := schedule.Parse("0 3 * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	job := &schedule.Job{Name: "nightly", Schedule: sch, Run: func(context.Context, model.JobRun) (schedule.Outcome, error) {
		return schedule.Outcome{}, nil
	}}
	var caught, oldest, gap time.Time
	// The operator's console (open on loopback): process-wide figures are
	// shown there only (TestConsoleTenantSeesNoProcessFigures).
	f := setupWith(t, true, console.Options{Jobs: []*schedule.Job{job}, Sources: func() []console.SourceStatus {
		return []console.SourceStatus{
			{Name: "orders-outbox", Position: 42, Accepted: 40, Rejected: 2, CaughtUp: caught, Here: true,
				RowsBehind: 17, LagMeasured: caught, OldestUnrelayed: oldest, GapIDs: 3, OldestGap: gap},
			{Name: "billing-outbox", Position: 7},
			{Name: "audit-outbox", Position: 9, Here: true, LagMeasured: caught, RowsBehind: 2, AgeUnknown: true},
		}
	}})
	caught = f.r.Now().Add(-3 * time.Second)
	oldest, gap = f.r.Now().Add(-90*time.Second), f.r.Now().Add(-time.Hour)
	c := newClient(t, f)
	if resp, _ := c.signIn("tenant", "acme"); resp.StatusCode != 303 {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, page := c.do("GET", "/console/", nil)
	text := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(page, " ")
	text = strings.Join(strings.Fields(text), " ")
	for _, want := range []string{
		`<a href="/console/notifications?status=sent" aria-label="1 sent">1</a>`,
		`<a href="/console/notifications?status=dead" aria-label="1 dead">1</a>`,
		fmt.Sprintf(`<a href="/console/notifications/%s">%s</a>`, f.danID, f.danID),
		`<svg class="chart"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
	for _, want := range []string{
		"2 accepted", "1 sent", // acme's: ada's and dan's, ada sent (eve is beta's)
		"25% of 4 attempts", // ada: unknown, unknown, sent; dan: refused
		"resend 1 1 2",      // sent, refused, unknown
		"Database saving changes (since this process started:", "changes saved, grouped into",
		"Delivery no error: outcomes are recorded",
		`nightly &#34;0 3 * * *&#34; in UTC never`,
		"billing-outbox tailed by another process 7",
		"0 0 0 — — —",
		"2 unknown (no created_column) none",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	// Ages as rendered: the page is made a moment after the fixture's
	// times were set (more than a second under -race on a loaded machine).
	for _, want := range []string{
		`orders-outbox caught up [3-9]s ago 42`,
		`40 2 0 17 created 1m3\ds ago 3 ids, oldest missing since 1h0m\ds ago`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("the overview's text: %s", text)
	}
}

// The writer's commits and the tail sources' counters count every
// tenant's traffic: a tenant's session sees neither, however much another
// tenant sends, and still sees its own figures and the writer's health.
func TestConsoleTenantSeesNoProcessFigures(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var tailed int64
	f := setupWith(t, false, console.Options{Sources: func() []console.SourceStatus {
		mu.Lock()
		defer mu.Unlock()
		return []console.SourceStatus{{Name: "orders-outbox", Position: tailed, Accepted: tailed, Here: true}}
	}})
	c := newClient(t, f)
	if resp, _ := c.signIn("token", f.betaToken); resp.StatusCode != 303 {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	for i := range 100 {
		if _, err := f.r.Accept(t.Context(), relay.Event{ID: fmt.Sprintf("evt_9%03d", i), Type: "payment.succeeded", Purpose: "receipt",
			Tenant: "acme", Channels: []string{"email"}, Recipients: []relay.Recipient{{ID: "zed", Email: "zed@example.com"}},
			Subject: "Your receipt", Body: "Paid."}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	tailed = 100
	mu.Unlock()
	_, page := c.do("GET", "/console/", nil)
	text := strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(page, " ")), " ")
	for _, not := range []string{"changes saved", "transactions", "since this process started", "Tail sources", "orders-outbox"} {
		if strings.Contains(text, not) {
			t.Errorf("beta's overview shows the process-wide %q", not)
		}
	}
	if !strings.Contains(text, "Database saving changes") || !strings.Contains(text, "1 accepted") {
		t.Errorf("beta's overview lacks its own figures or the writer's health")
	}
	if t.Failed() {
		t.Logf("beta's overview: %s", text)
	}
}

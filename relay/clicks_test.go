package relay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

var trackedLink = regexp.MustCompile(`https://relay\.example/c/([A-Za-z0-9_.-]+)`)

// An invoice email with a tracked link; an hour later, an in-app reminder
// unless the link was clicked. u1 clicks (twice), u2 does not: u1's
// reminder is skipped, saying why, u2's is posted; u1's email lists its
// clicks. A forged token names no link.
func TestWorkflowSkipsAStepWhenALinkWasClicked(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, db string) {
		sim := setupSim(t, true)
		clk := &clock{}
		r := setupRelayAt(t, db, Options{Routes: Routes{"email": {sim.provider(t, "honoured")}}, Now: clk.now,
			PublicURL: "https://relay.example/"})
		ctx := context.Background()
		key, err := TemplateKey("acme", "invoice.due", "email", "en")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": "Invoice {{.data.n}}",
			"text": `Pay it at {{track (printf "https://pay.example/inv/%v" .data.n)}}`}); err != nil {
			t.Fatal(err)
		}
		putWorkflow(t, r, "acme", "invoice.due", `{"steps": [
		{"id": "email", "channels": ["email"]},
		{"id": "wait", "delay": {"for": "1h"}},
		{"id": "remind", "channels": ["in_app"], "if": "!steps.email.clicked"}]}`)
		accept(t, r, Event{ID: "inv-42", Type: "invoice.due", Tenant: "acme", Data: []byte(`{"n": 42}`),
			Recipients: []Recipient{{ID: "u1", Email: "u1@example.com"}, {ID: "u2", Email: "u2@example.com"}}})
		if n := stepAll(t, r); n != 4 {
			t.Fatalf("decided %d steps, want 4 (the email and the delay, each of 2 runs)", n)
		}
		// Both emails must go out. RunUntilIdle runs again (and the log says
		// so) if it returned with one still due, as it once did on a loaded
		// CI box on PostgreSQL, for a reason not found yet.
		for deadline := time.Now().Add(bound); ; {
			if _, err := r.RunUntilIdle(ctx, 0); err != nil {
				t.Fatal(err)
			}
			n := len(sim.srv.Deliveries())
			if n >= 2 || time.Now().After(deadline) {
				break
			}
			ns, _ := r.store.ListNotifications(ctx, model.ListFilter{Tenant: "acme"})
			var states []string
			for _, x := range ns {
				when := func(p *time.Time) string {
					if p == nil {
						return "-"
					}
					return p.Sub(clk.now()).Round(time.Millisecond).String()
				}
				states = append(states, fmt.Sprintf("%d %s %s due %s lease %s", x.ID, x.Channel, x.Status, when(x.NextAttemptAt), when(x.LeaseUntil)))
			}
			t.Logf("RunUntilIdle returned with %d of 2 emails delivered; running it again: %v", n, states)
		}
		tokens := map[string]string{}
		for _, d := range sim.srv.Deliveries() {
			m := trackedLink.FindStringSubmatch(d.Text)
			if m == nil || strings.Contains(d.Text, "pay.example") {
				t.Fatalf("email to %s says %q; want the link tracked", d.To, d.Text)
			}
			tokens[d.To] = m[1]
		}
		if len(tokens) != 2 || tokens["u1@example.com"] == tokens["u2@example.com"] {
			t.Fatalf("tracked links %v; want one per email, each its own", tokens)
		}
		clickedAt := clk.now()
		for range 2 {
			link, err := r.Click(ctx, tokens["u1@example.com"])
			if err != nil || link != "https://pay.example/inv/42" {
				t.Fatalf("click = %q, %v; want the invoice's link", link, err)
			}
		}
		tok := tokens["u2@example.com"]
		flip := map[byte]byte{'A': 'B'}[tok[len(tok)-5]]
		if flip == 0 {
			flip = 'A'
		}
		forged := tok[:len(tok)-5] + string(flip) + tok[len(tok)-4:]
		if link, err := r.Click(ctx, forged); !errors.Is(err, ErrBadLink) || link != "" {
			t.Fatalf("a forged token = %q, %v; want ErrBadLink and no link", link, err)
		}
		clk.advance(time.Hour)
		if n := stepAll(t, r); n != 2 {
			t.Fatalf("decided %d steps when the delay ended, want 2", n)
		}
		runs := runsByRecipient(t, r, model.RunFilter{Tenant: "acme"})
		u1, u2 := runs["inv-42/u1"], runs["inv-42/u2"]
		if s := u1.Steps[2]; s.Outcome != model.StepSkipped || !strings.Contains(s.Reason, "a tracked link clicked") {
			t.Errorf("u1's reminder = %+v; want skipped, saying the link was clicked", s)
		}
		if s := u2.Steps[2]; s.Outcome != model.StepSent || s.FeedSeq == 0 {
			t.Errorf("u2's reminder = %+v; want posted to the feed", s)
		}
		n, err := r.store.Notification(ctx, "acme", u1.Steps[0].Notification, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Clicks) != 1 || n.Clicks[0].URL != "https://pay.example/inv/42" || n.Clicks[0].Count != 2 ||
			n.Clicks[0].First.Before(clickedAt.Truncate(time.Millisecond)) || n.Clicks[0].Last.Before(n.Clicks[0].First) {
			t.Fatalf("u1's email's clicks = %+v; want the link, clicked twice, first at or after %v", n.Clicks, clickedAt)
		}
		if n, err := r.store.Notification(ctx, "acme", u2.Steps[0].Notification, ""); err != nil || len(n.Clicks) != 0 {
			t.Fatalf("u2's email's clicks = %+v, %v; want none", n.Clicks, err)
		}
	})
}

// A tracked link is the same every time it is made (a message rendered
// again after a crash carries the same bytes), and differs per message
// and per link.
func TestTrackedLinkIsTheSameEveryTime(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{PublicURL: "https://relay.example"})
	ctx := context.Background()
	mk := func(key, link string) string {
		t.Helper()
		out, err := r.tracker(ctx, "acme", key)(link)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := mk("k1", "https://a.example/1")
	if again := mk("k1", "https://a.example/1"); again != a || !strings.HasPrefix(a, "https://relay.example/c/") {
		t.Fatalf("the same link made twice: %q and %q", a, again)
	}
	if mk("k2", "https://a.example/1") == a || mk("k1", "https://a.example/2") == a {
		t.Fatal("another message's or another link's token is the same")
	}
	if r2 := setupRelay(t, Options{}); r2.tracker(ctx, "acme", "k1") != nil {
		t.Fatal("without a public URL links are tracked")
	}
}

package api_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
)

// A throttle whose excess folds into digest weekly, over HTTP
// with an injected clock: of two newsletters to ada (in the digest's
// audience) and bob (not in it), with at most 1 a day, the second of
// ada's ends folded, an item of her own feed; bob's ends skipped saying
// the digest would not carry it, and nothing is folded for him. /metrics
// counts both skips. The digest's run sends ada one digest; the run again
// and the next run send nothing more.
func TestThrottleFoldsOnlyWhatTheDigestCarries(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)}
	s := newSink(t, clk.Now)
	o := prefOptions(s.prov)
	o.Now = clk.Now
	o.Categories["marketing"] = relay.Category{Throttle: relay.Throttle{Max: 1, Per: 24 * time.Hour,
		Digest: &relay.FoldDigest{Job: "weekly", Tenant: "default", Audience: "team", Channel: "email"}}}
	b := setup(t, options{Relay: o, Metrics: true})
	if rep := b.do(t, "PUT", "/v1/audiences/team", `{"members": [{"id": "ada", "email": "ada@example.com"}]}`); rep.status/100 != 2 {
		t.Fatalf("put the audience: %s", rep)
	}
	p := decode[relay.Preferences](t, b.do(t, "GET", "/v1/recipients/ada/preferences", ""))
	if m := p.Categories[0]; m.Name != "marketing" || m.Throttle == nil || m.Throttle.Digest != "weekly" {
		t.Fatalf("ada's marketing %+v, want its throttle shown folding into weekly", m)
	}
	var second acceptBody
	for i := range 2 {
		second = accepted(t, b.do(t, "POST", "/v1/events", event(fmt.Sprintf("n%d", i), "newsletter", "ada", "bob")))
		runIdle(t, b.r)
	}
	sorted := func() string { d := s.delivered(); slices.Sort(d); return strings.Join(d, " ") } // calls run at once
	if d := sorted(); d != "newsletter→ada newsletter→bob" {
		t.Fatalf("delivered %q, want one newsletter each", d)
	}
	for _, n := range second.Notifications {
		got := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+n.ID, ""))
		want := "skipped (throttled), folded into digest weekly"
		if n.Recipient == "bob" {
			want = `skipped (throttled), not sent and not folded into digest weekly (recipient bob is not in digest weekly's audience "team")`
		}
		if got.Status != model.StatusSkipped || len(got.AttemptLog) != 0 || !strings.Contains(got.Reason, want) {
			t.Fatalf("%s's second: %s %q, want skipped: %s", n.Recipient, got.Status, got.Reason, want)
		}
	}
	if ada := b.feedPage(t, "/v1/users/ada/feed"); len(ada.Items) != 1 || ada.Items[0].EventID != "n1" || ada.Items[0].Feed != "@ada" {
		t.Fatalf("ada's feed %+v, want the folded n1 in @ada", ada.Items)
	}
	if bob := b.feedPage(t, "/v1/users/bob/feed"); len(bob.Items) != 0 {
		t.Fatalf("bob's feed %+v, want nothing folded", bob.Items)
	}
	if text := string(b.do(t, "GET", "/metrics", "").body); !strings.Contains(text, "\nedgerelay_notifications{status=\"skipped\"} 2\n") {
		t.Errorf("metrics do not count the two skips:\n%s", text)
	}

	run, err := schedule.Digest(b.r, "weekly", schedule.DigestConfig{Audience: "team", Channel: "email"})
	if err != nil {
		t.Fatal(err)
	}
	every, err := schedule.Parse("@every 1h", "")
	if err != nil {
		t.Fatal(err)
	}
	j := &schedule.Job{Name: "weekly", Schedule: every, Run: run}
	ctx := context.Background()
	hour := clk.Now().Truncate(time.Hour)
	if got, err := schedule.RunJob(ctx, b.r, b.st, j, hour, schedule.RunOptions{}); err != nil || got.New != 1 {
		t.Fatalf("the digest's run: %+v, %v; want one digest", got, err)
	}
	if got, err := schedule.RunJob(ctx, b.r, b.st, j, hour, schedule.RunOptions{Again: true}); err != nil || got.New != 0 || got.Duplicate != 1 {
		t.Fatalf("the same run again: %+v, %v; want a duplicate", got, err)
	}
	clk.set(hour.Add(time.Hour))
	if got, err := schedule.RunJob(ctx, b.r, b.st, j, hour.Add(time.Hour), schedule.RunOptions{}); err != nil || got.New != 0 {
		t.Fatalf("the next run: %+v, %v; want nothing new", got, err)
	}
	runIdle(t, b.r)
	if d := sorted(); d != "digest→ada newsletter→ada newsletter→bob" {
		t.Fatalf("delivered %q, want ada's digest once after the newsletters", d)
	}
}

package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/model"
)

// unfoldable reads the audience as it is at that moment: a member removed
// from the digest's audience is no longer folded for, a member added is,
// and a deleted audience folds nothing, each from the very next decision
// (it used to keep each audience for a second, whole, in memory).
func TestUnfoldableSeesTheAudienceAsItIsNow(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := t.Context()
	dg := FoldDigest{Job: "weekly", Tenant: "default", Audience: "team", Channel: "email"}
	ada := model.Claimed{Tenant: "default", Recipient: "ada"}
	ben := model.Claimed{Tenant: "default", Recipient: "ben"}
	want := func(c model.Claimed, prefix string) {
		t.Helper()
		got, err := r.unfoldable(ctx, c, dg)
		if err != nil || !strings.HasPrefix(got, prefix) || (prefix == "") != (got == "") {
			t.Errorf("%s: %q, %v; want %q", c.Recipient, got, err, prefix)
		}
	}
	if err := r.PutAudience(ctx, "default", "team", []Recipient{{ID: "ada", Email: "ada@example.com"}}); err != nil {
		t.Fatal(err)
	}
	want(ada, "")
	want(ben, "recipient ben is not in digest weekly's audience")
	if err := r.PutAudience(ctx, "default", "team", []Recipient{{ID: "ben", Email: "ben@example.com"}}); err != nil {
		t.Fatal(err)
	}
	want(ada, "recipient ada is not in digest weekly's audience")
	want(ben, "")
	if err := r.PutAudience(ctx, "default", "team", []Recipient{{ID: "ben", Phone: "+15550100"}}); err != nil {
		t.Fatal(err)
	}
	want(ben, "recipient ben has no email address")
	if err := r.DeleteAudience(ctx, "default", "team"); err != nil {
		t.Fatal(err)
	}
	want(ben, `digest weekly's audience "team" does not exist`)
}

// BenchmarkFoldDecision is what deciding whether a digest carries a
// throttled notification costs with a 50,000-member audience: one-member
// is the decision as made now (one indexed lookup and one member decoded);
// whole-audience is what the decision did before, once a second per
// audience, on the dispatcher's goroutine (read and decode every member,
// then index them by id). go test ./relay -run '^$' -bench FoldDecision -benchmem
func BenchmarkFoldDecision(b *testing.B) {
	const n = 50_000
	r, err := openAt(context.Background(), b.TempDir()+"/a.db", Options{Logger: slog.New(slog.DiscardHandler), MaxRecipients: n})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	members := make([]Recipient, n)
	for i := range members {
		members[i] = Recipient{ID: fmt.Sprintf("u%05d", i), Email: fmt.Sprintf("u%05d@example.com", i), Locale: "en", Timezone: "Europe/Vienna"}
	}
	if err := r.PutAudience(ctx, "default", "everyone", members); err != nil {
		b.Fatal(err)
	}
	dg := FoldDigest{Job: "weekly", Tenant: "default", Audience: "everyone", Channel: "email"}
	c := model.Claimed{Tenant: "default", Recipient: members[n/2].ID}
	b.Run("one-member", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if why, err := r.unfoldable(ctx, c, dg); err != nil || why != "" {
				b.Fatalf("%q, %v", why, err)
			}
		}
	})
	b.Run("whole-audience", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ms, err := r.Audience(ctx, dg.Tenant, dg.Audience)
			if err != nil {
				b.Fatal(err)
			}
			byID := make(map[string]Recipient, len(ms))
			for _, m := range ms {
				byID[m.ID] = m
			}
			if byID[c.Recipient].Address(dg.Channel) == "" {
				b.Fatal("not carried")
			}
		}
	})
}

package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Suppressions: each tenant's list of addresses nothing is sent to (issue
// 17). Entries come from a settled answer (Decision.Suppress), a receipt
// (Receipt.Suppress, even one that came before its send), or Suppress;
// a claim carries its notification's live entry; entries lapse; retry asks
// before it lifts one.
func suppressions(t *testing.T, open opener) {
	runAll(t, open, []test{
		{"a dead-address answer lists the address for its tenant only, and retry asks to lift it", testSuppressFromAnswer, false},
		{"entries lapse, a longer one replaces a shorter, prune drops lapsed ones", testSuppressionExpiry, false},
		{"a receipt that came before its send still lists the address", testSuppressFromEarlyReceipt, false},
		{"the list is keyed by the normalised address; list pages, filters and removes", testSuppressionKeysAndPages, false},
	})
}

func entries(t *testing.T, s store.Store, f model.SuppressionFilter, now time.Time) []model.Suppression {
	t.Helper()
	es, err := s.Suppressions(t.Context(), f, now)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func testSuppressFromAnswer(t *testing.T, s store.Store) {
	ctx := t.Context()
	mine := dispatchEventFor(t, s, "acme", "e1", "+15550100")
	theirs := dispatchEventFor(t, s, "beta", "e2", "+15550100")
	cs := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute})
	var c model.Claimed
	for _, x := range cs {
		if x.Suppression != nil {
			t.Errorf("claim of %d carries an entry before any: %+v", x.ID, x.Suppression)
		}
		if x.ID == mine {
			c = x
		}
	}
	a := model.Attempt{N: 1, Provider: "twilio-acme", StartedAt: t0, EndedAt: t0, Outcome: "refused", Permanent: true, Detail: "21211"}
	settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a, Decision: model.Decision{
		Status: model.StatusFailed, NextAttemptAt: t0, Reason: "refused for good, address invalid: 21211",
		Suppress: &model.Suppress{Reason: model.ReasonHardBounce, Detail: "twilio 21211"}}})
	es := entries(t, s, model.SuppressionFilter{}, t0)
	if len(es) != 1 {
		t.Fatalf("entries %+v, want acme's one", es)
	}
	if e := es[0]; e.Tenant != "acme" || e.Channel != "sms" || e.Address != "+15550100" || e.Reason != model.ReasonHardBounce ||
		e.Source != model.SourceProvider || e.Provider != "twilio-acme" || e.Notification != mine || e.Detail != "twilio 21211" ||
		!e.CreatedAt.Equal(t0) || e.ExpiresAt != nil {
		t.Errorf("entry %+v", e)
	}
	if other := entries(t, s, model.SuppressionFilter{Tenant: "beta"}, t0); len(other) != 0 {
		t.Errorf("beta's list holds acme's entry: %+v", other)
	}
	// acme's next notification to the number is claimed with the entry;
	// beta's, released and claimed again, without.
	for _, x := range cs {
		if x.ID == theirs {
			release(t, s, x, t0)
		}
	}
	acme2 := dispatchEventFor(t, s, "acme", "e3", "+15550100")
	got := claim(t, s, model.ClaimRequest{Limit: 10, Now: t0.Add(time.Minute), Lease: time.Minute})
	if len(got) != 2 {
		t.Fatalf("claimed %+v, want beta's and acme's second", got)
	}
	for _, x := range got {
		switch {
		case x.ID == acme2 && (x.Suppression == nil || x.Suppression.Reason != model.ReasonHardBounce || x.Suppression.Notification != mine ||
			x.Suppression.Provider != "twilio-acme" || x.Suppression.Tenant != "acme" || x.Suppression.ExpiresAt != nil):
			t.Errorf("acme's second claim carries %+v, want its hard bounce", x.Suppression)
		case x.ID == theirs && x.Suppression != nil:
			t.Errorf("beta's claim carries acme's entry: %+v", x.Suppression)
		}
		if x.ID == acme2 {
			settle(t, s, model.Settlement{ID: x.ID, Token: x.Token, At: t0, Decision: model.Decision{
				Status: model.StatusSuppressed, NextAttemptAt: t0, Reason: "not sent: suppressed"}})
		}
	}
	if n := notification(t, s, acme2); n.Status != model.StatusSuppressed || n.Attempts != 0 {
		t.Errorf("acme's second: %s after %d attempts, want suppressed after none", n.Status, n.Attempts)
	}
	// Retry without lifting says why and changes nothing; with it, the
	// entry goes in the same transaction.
	var se *model.SuppressedError
	if err := s.Retry(ctx, "acme", acme2, false, t0.Add(time.Minute)); !errors.As(err, &se) || se.Entry.Reason != model.ReasonHardBounce || se.Entry.Notification != mine {
		t.Fatalf("retry without lift: %v, want a SuppressedError with the entry", err)
	}
	if n := notification(t, s, acme2); n.Status != model.StatusSuppressed {
		t.Errorf("refused retry moved it to %s", n.Status)
	}
	if err := s.Retry(ctx, "acme", acme2, true, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0); len(es) != 0 {
		t.Errorf("retry with lift left %+v", es)
	}
	if n := notification(t, s, acme2); n.Status != model.StatusPending {
		t.Errorf("after retry with lift: %s, want pending", n.Status)
	}
	if ok, err := s.Unsuppress(ctx, "acme", "sms", "+15550100"); err != nil || ok {
		t.Errorf("remove of a lifted entry: %v %v, want false", ok, err)
	}
}

func testSuppressionExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	hour := t0.Add(time.Hour)
	soft := model.Suppression{Tenant: "acme", Channel: "email", Address: "a@example.com", Reason: model.ReasonSoftBounce,
		Source: model.SourceDSN, CreatedAt: t0, ExpiresAt: &hour}
	if n, err := s.Suppress(ctx, []model.Suppression{soft}, t0); err != nil || n != 1 {
		t.Fatalf("suppress: %d, %v", n, err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0.Add(2*time.Hour)); len(es) != 0 {
		t.Errorf("a lapsed entry is listed: %+v", es)
	}
	// A shorter one does not shorten it; a permanent one replaces it; a
	// soft one then changes nothing.
	half := t0.Add(30 * time.Minute)
	shorter := soft
	shorter.ExpiresAt, shorter.Detail = &half, "shorter"
	if n, err := s.Suppress(ctx, []model.Suppression{shorter}, t0); err != nil || n != 0 {
		t.Errorf("a shorter entry: %d written, %v; want 0", n, err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0.Add(45*time.Minute)); len(es) != 1 || es[0].Detail != "" {
		t.Errorf("after a shorter entry: %+v, want the first", es)
	}
	hard := soft
	hard.Reason, hard.ExpiresAt, hard.Source = model.ReasonHardBounce, nil, model.SourceAPI
	if n, err := s.Suppress(ctx, []model.Suppression{hard}, t0); err != nil || n != 1 {
		t.Errorf("a permanent entry over a soft one: %d, %v", n, err)
	}
	if n, err := s.Suppress(ctx, []model.Suppression{soft}, t0); err != nil || n != 0 {
		t.Errorf("a soft entry over a permanent one: %d written, %v; want 0", n, err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0.Add(24*time.Hour)); len(es) != 1 || es[0].Reason != model.ReasonHardBounce || es[0].ExpiresAt != nil {
		t.Errorf("entries %+v, want the permanent one", es)
	}
	// A lapsed entry is replaced by any new one, and prune drops lapsed ones.
	other := soft
	other.Address = "b@example.com"
	if _, err := s.Suppress(ctx, []model.Suppression{other}, t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(3 * time.Hour)
	newer, until := other, later.Add(time.Minute)
	newer.CreatedAt, newer.ExpiresAt, newer.Detail = later, &until, "again"
	newer2 := newer
	if n, err := s.Suppress(ctx, []model.Suppression{newer2}, later); err != nil || n != 1 {
		t.Errorf("a new entry over a lapsed one: %d, %v", n, err)
	}
	res, err := s.Prune(ctx, t0, later.Add(time.Hour), 100)
	if err != nil || res.Suppressions != 1 {
		t.Errorf("prune: %+v, %v; want the one lapsed entry", res, err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0); len(es) != 1 || es[0].Address != "a@example.com" {
		t.Errorf("after prune: %+v, want only the permanent entry", es)
	}
	if st, err := s.Status(ctx, t0); err != nil || st.Suppressions != 1 {
		t.Errorf("status counts %d suppressions, %v; want 1", st.Suppressions, err)
	}
}

func testSuppressFromEarlyReceipt(t *testing.T, s store.Store) {
	ctx := t.Context()
	dispatchEvent(t, s, "e", 1, "email")
	if _, err := s.AddReceipts(ctx, []model.Receipt{{Provider: "smtp", Dedupe: "r1", MessageID: "<e-0@example.com>", Status: "bounced",
		Detail: "5.1.1 no such user", Source: model.SourceDSN, Suppress: &model.Suppress{Reason: model.ReasonHardBounce}}}, t0); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0); len(es) != 0 {
		t.Errorf("listed before any notification matched: %+v", es)
	}
	c := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})[0]
	a := model.Attempt{N: 1, Provider: "smtp", StartedAt: t0, EndedAt: t0, Outcome: "sent", MessageID: "<e-0@example.com>"}
	settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: t0}})
	es := entries(t, s, model.SuppressionFilter{Tenant: "default"}, t0)
	if len(es) != 1 || es[0].Address != "r0@example.com" || es[0].Source != model.SourceDSN || es[0].Provider != "smtp" ||
		es[0].Notification != c.ID || es[0].Detail != "5.1.1 no such user" || es[0].Reason != model.ReasonHardBounce {
		t.Errorf("entries %+v, want the DSN's hard bounce of r0@example.com", es)
	}
	n := notification(t, s, c.ID)
	if n.Status != model.StatusBounced || len(n.Receipts) != 1 || n.Receipts[0].Suppress == nil || n.Receipts[0].Source != model.SourceDSN {
		t.Errorf("notification %s, receipts %+v; want bounced with the DSN receipt", n.Status, n.Receipts)
	}
	// A receipt that asks nothing lists nothing.
	dispatchEvent(t, s, "f", 1, "email")
	c = claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})[0]
	a = model.Attempt{N: 1, Provider: "smtp", StartedAt: t0, EndedAt: t0, Outcome: "sent", MessageID: "<f-0@example.com>"}
	settle(t, s, model.Settlement{ID: c.ID, Token: c.Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusSent, NextAttemptAt: t0}})
	if _, err := s.AddReceipts(ctx, []model.Receipt{{Provider: "smtp", Dedupe: "r2", MessageID: "<f-0@example.com>", Status: "bounced"}}, t0); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, s, model.SuppressionFilter{}, t0); len(es) != 1 {
		t.Errorf("a receipt without Suppress listed its address: %+v", es)
	}
}

func testSuppressionKeysAndPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	ev := model.NewEvent{Tenant: "acme", EventID: "k", Purpose: "receipt", Type: "payment", Payload: []byte(`{}`),
		Message: []byte(`{"subject":"hi"}`), Fingerprint: "fp-k", Targets: 1}
	id := acceptOne(t, s, ev, []model.Target{{Key: "k-0", Recipient: "ada", Channel: "email", Address: "Ada@Example.com", AddressKey: "ada@example.com"}})[0]
	var in []model.Suppression
	for _, addr := range []string{"ada@example.com", "bob@example.com", "cy@example.com"} {
		in = append(in, model.Suppression{Tenant: "acme", Channel: "email", Address: addr, Reason: model.ReasonManual, Source: model.SourceImport})
	}
	in = append(in, model.Suppression{Tenant: "acme", Channel: "sms", Address: "+15550100", Reason: model.ReasonManual, Source: model.SourceCLI})
	if n, err := s.Suppress(ctx, in, t0); err != nil || n != 4 {
		t.Fatalf("suppress: %d, %v", n, err)
	}
	c := claim(t, s, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})
	if len(c) != 1 || c[0].ID != id || c[0].Suppression == nil || c[0].Suppression.Address != "ada@example.com" || c[0].Address != "Ada@Example.com" {
		t.Fatalf("claim %+v, want Ada@Example.com with the entry of ada@example.com", c)
	}
	page := entries(t, s, model.SuppressionFilter{Tenant: "acme", Limit: 2}, t0)
	if len(page) != 2 || page[0].Address != "ada@example.com" || page[1].Address != "bob@example.com" {
		t.Fatalf("first page %+v", page)
	}
	page = entries(t, s, model.SuppressionFilter{Tenant: "acme", Limit: 2, After: page[1]}, t0)
	if len(page) != 2 || page[0].Address != "cy@example.com" || page[1].Channel != "sms" || !page[0].CreatedAt.Equal(t0) {
		t.Fatalf("second page %+v", page)
	}
	if es := entries(t, s, model.SuppressionFilter{Channel: "sms"}, t0); len(es) != 1 || es[0].Source != model.SourceCLI {
		t.Errorf("sms entries %+v", es)
	}
	if es := entries(t, s, model.SuppressionFilter{Tenant: "acme", Channel: "email", Address: "bob@example.com"}, t0); len(es) != 1 {
		t.Errorf("one address: %+v", es)
	}
	if ok, err := s.Unsuppress(ctx, "beta", "email", "bob@example.com"); err != nil || ok {
		t.Errorf("another tenant removed acme's entry: %v %v", ok, err)
	}
	if ok, err := s.Unsuppress(ctx, "acme", "email", "bob@example.com"); err != nil || !ok {
		t.Errorf("remove: %v %v", ok, err)
	}
	if es := entries(t, s, model.SuppressionFilter{Tenant: "acme"}, t0); len(es) != 3 {
		t.Errorf("after remove %+v", es)
	}
	// One bad entry writes none.
	bad := []model.Suppression{{Tenant: "acme", Channel: "email", Address: "dee@example.com", Reason: model.ReasonManual, Source: model.SourceAPI},
		{Tenant: "acme", Channel: "email", Address: "eve@example.com", Reason: "nonsense", Source: model.SourceAPI}}
	if _, err := s.Suppress(ctx, bad, t0); err == nil {
		t.Error("an entry with an unknown reason was written")
	}
	if es := entries(t, s, model.SuppressionFilter{Tenant: "acme"}, t0); len(es) != 3 {
		t.Errorf("a failed Suppress left %+v", es)
	}
}

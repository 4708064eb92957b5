package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/templates"
)

// putReceipts stores n templates named receipt0 … on r, one version each.
func putReceipts(t testing.TB, r *Relay, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		key, err := TemplateKey("acme", fmt.Sprint("receipt", i), "email", "en")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.PutTemplate(ctx, key, map[string]string{"subject": fmt.Sprint("Receipt ", i), "text": "{{.data.n}}"}); err != nil {
			t.Fatal(err)
		}
	}
}

// subjectOf renders name's English email subject from set.
func subjectOf(t *testing.T, set *templates.Set, name string) (string, bool) {
	t.Helper()
	tp, ok := set.Lookup("acme", name, "email", "en")
	if !ok {
		return "", false
	}
	out, err := tp.Render(templates.Input{Data: json.RawMessage(`{"n": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Subject + " v" + tp.Version(), true
}

// A change to one stored template recompiles that one alone, on the node
// that made it (not even there: its PUT's compile is reused) and on
// another node that refreshes; a delete compiles nothing and is seen; a
// set already handed to an accept is never changed under it.
func TestTemplateRefreshCompilesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func() string{
		"SQLite":     func() string { return filepath.Join(t.TempDir(), "relay.db") },
		"PostgreSQL": func() string { return pgtest.Start(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testTemplateRefreshCompilesOnlyWhatChanged(t, db())
		})
	}
}

func testTemplateRefreshCompilesOnlyWhatChanged(t *testing.T, db string) {
	a := setupRelayAt(t, db, Options{})
	b := setupRelayAt(t, db, Options{})
	ctx := context.Background()
	const n = 20
	putReceipts(t, a, n)
	if err := b.RefreshTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := b.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.stored.compiles.Load(); got != n {
		t.Fatalf("node b compiled %d at its first load, want %d", got, n)
	}
	if _, err := a.Templates(ctx); err != nil {
		t.Fatal(err)
	}
	a0, b0 := a.stored.compiles.Load(), b.stored.compiles.Load()

	key, _ := TemplateKey("acme", "receipt3", "email", "en")
	if _, _, err := a.PutTemplate(ctx, key, map[string]string{"subject": "Edited", "text": "{{.data.n}}"}); err != nil {
		t.Fatal(err)
	}
	if got := a.stored.compiles.Load() - a0; got != 1 {
		t.Errorf("node a compiled %d for one PUT, want 1 (its check, reused by the refresh)", got)
	}
	if err := b.RefreshTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.stored.compiles.Load() - b0; got != 1 {
		t.Errorf("node b compiled %d refreshing after one change among %d, want 1", got, n)
	}
	for _, r := range []*Relay{a, b} {
		set, _ := r.Templates(ctx)
		if s, _ := subjectOf(t, set, "receipt3"); s != "Edited v2" {
			t.Errorf("after the change: %q, want Edited v2", s)
		}
		if s, _ := subjectOf(t, set, "receipt4"); s != "Receipt 4 v1" {
			t.Errorf("an unchanged template: %q, want Receipt 4 v1", s)
		}
	}
	if s, _ := subjectOf(t, old, "receipt3"); s != "Receipt 3 v1" {
		t.Errorf("the set loaded before the change renders %q, want Receipt 3 v1 (never changed under a reader)", s)
	}

	// A delete on a: b sees it, compiling nothing.
	b1 := b.stored.compiles.Load()
	if _, err := a.RetireTemplate(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := b.RefreshTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.stored.compiles.Load() - b1; got != 0 {
		t.Errorf("node b compiled %d for a delete, want 0", got)
	}
	set, _ := b.Templates(ctx)
	if s, ok := subjectOf(t, set, "receipt3"); ok {
		t.Errorf("node b still renders the deleted template: %q", s)
	}
	if rs := set.Retired("acme", "receipt3"); len(rs) != 1 || rs[0] != "receipt3/email/en version 2" {
		t.Errorf("retired = %v, want receipt3/email/en version 2", rs)
	}
	if set.Len() != n-1 {
		t.Errorf("node b has %d templates, want %d", set.Len(), n-1)
	}
	// Nothing changed: nothing read but the generation, nothing compiled.
	if err := b.RefreshTemplates(ctx); err != nil || b.stored.compiles.Load() != b1 {
		t.Errorf("an idle refresh compiled %d (%v)", b.stored.compiles.Load()-b1, err)
	}
}

// A stored template is not read, let alone compiled, by opening a relay:
// only by the first accept (or preview) that needs the set.
func TestStoredTemplatesReadAtFirstUse(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	a := setupRelayAt(t, db, Options{Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	putReceipts(t, a, 3)
	b := setupRelayAt(t, db, Options{Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	if got := b.stored.compiles.Load(); got != 0 || b.stored.ready.Load() {
		t.Fatalf("open compiled %d stored templates (loaded %v), want none", got, b.stored.ready.Load())
	}
	res, err := b.Accept(context.Background(), Event{ID: "e1", Type: "receipt1", Tenant: "acme", Channels: []string{"email"},
		Recipients: []Recipient{{ID: "ada", Email: "ada@example.com"}}, Data: json.RawMessage(`{"n": 7}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.stored.compiles.Load(); got != 3 {
		t.Errorf("the first accept compiled %d, want all 3", got)
	}
	n, err := b.store.Notification(context.Background(), "", res.Notifications[0].ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(n.Message), `"subject":"Receipt 1"`) {
		t.Errorf("the first accept's message %s, want it rendered from receipt1", n.Message)
	}
}

// Renders race refreshes that publish new sets: each render sees one
// whole set (run with -race).
func TestTemplateRefreshRacesRenders(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	a := setupRelayAt(t, db, Options{})
	b := setupRelayAt(t, db, Options{})
	ctx := context.Background()
	putReceipts(t, a, 5)
	if err := b.RefreshTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	key, _ := TemplateKey("acme", "receipt0", "email", "en")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				set, err := b.Templates(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if set.Len() != 5 {
					t.Errorf("a set of %d templates, want 5", set.Len())
					return
				}
				tp, ok := set.Lookup("acme", "receipt0", "email", "en")
				if !ok {
					t.Error("receipt0 missing from a published set")
					return
				}
				_, err = tp.Render(templates.Input{Data: json.RawMessage(`{"n": 1}`)})
				// The render's time budget is wall time: on a loaded box a
				// descheduled render can run out of it, which is the budget
				// working, not a torn set.
				var be *templates.BudgetError
				if err != nil && !(errors.As(err, &be) && be.Limit == "time") {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 20 {
		if _, _, err := a.PutTemplate(ctx, key, map[string]string{"subject": fmt.Sprint("Edit ", i), "text": "{{.data.n}}"}); err != nil {
			t.Fatal(err)
		}
		var rw sync.WaitGroup
		for range 2 { // two refreshes at once, as WatchTemplates and a PUT's
			rw.Add(1)
			go func() {
				defer rw.Done()
				if err := b.RefreshTemplates(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		rw.Wait()
	}
	close(stop)
	wg.Wait()
	set, _ := b.Templates(ctx)
	if s, _ := subjectOf(t, set, "receipt0"); s != "Edit 19 v21" {
		t.Errorf("after the edits: %q, want Edit 19 v21", s)
	}
}

// BenchmarkTemplateRefreshAfterOneChange is one node's refresh after
// another changed one of 1,000 stored templates: what a PUT costs every
// node. go test ./relay -run '^$' -bench TemplateRefresh -benchmem
func BenchmarkTemplateRefreshAfterOneChange(b *testing.B) {
	db := filepath.Join(b.TempDir(), "relay.db")
	open := func() *Relay {
		r, err := openAt(context.Background(), db, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		return r
	}
	writer, reader := open(), open()
	putReceipts(b, writer, 1000)
	ctx := context.Background()
	if err := reader.RefreshTemplates(ctx); err != nil {
		b.Fatal(err)
	}
	key, _ := TemplateKey("acme", "receipt500", "email", "en")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if _, _, err := writer.store.PutTemplate(ctx, key, map[string]string{"subject": fmt.Sprint("Edit ", i), "text": "x"}, writer.now()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := reader.RefreshTemplates(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(reader.stored.compiles.Load()-1000)/float64(b.N), "compiles/op")
}

// Accepts that start together on a relay that has not read its stored
// templates yet compile them once between them, not once each.
func TestStoredTemplatesFirstLoadOnce(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	putReceipts(t, setupRelayAt(t, db, Options{}), 5)
	b := setupRelayAt(t, db, Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if set, err := b.Templates(context.Background()); err != nil || set.Len() != 5 {
				t.Errorf("a first use got %v templates (%v), want 5", set.Len(), err)
			}
		}()
	}
	wg.Wait()
	if got := b.stored.compiles.Load(); got != 5 {
		t.Errorf("8 first uses at once compiled %d, want 5", got)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Stored templates: versions numbered by the store, readable
// for good, retired without being lost, kept per tenant.
func templatesSuite(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "VersionsNumberedAndKept", run: testTemplateVersions},
		{name: "RetireKeepsVersions", run: testTemplateRetire},
		{name: "TenantsApart", run: testTemplateTenants},
		{name: "ConcurrentPutsGetDistinctVersions", run: testTemplateConcurrentPuts},
		{name: "ChangesSinceAGeneration", run: testTemplateChanges},
		{name: "ReadsAfterCloseAreErrClosed", run: testTemplateReadsAfterClose},
	})
}

var tkey = model.TemplateKey{Tenant: "acme", Name: "receipt", Channel: "email", Locale: "en"}

func testTemplateVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	g0, err := s.TemplateGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p1 := map[string]string{"subject": "Hi {{.data.name}}", "text": "one"}
	v1, created, err := s.PutTemplate(ctx, tkey, p1, now)
	if err != nil || !created || v1.Version != 1 || !reflect.DeepEqual(v1.Parts, p1) || !v1.CreatedAt.Equal(now) || v1.TemplateKey != tkey {
		t.Fatalf("first put = %+v, %v, %v; want version 1 created with its parts", v1, created, err)
	}
	p2 := map[string]string{"subject": "Hello {{.data.name}}", "text": "two"}
	v2, created, err := s.PutTemplate(ctx, tkey, p2, now.Add(time.Second))
	if err != nil || !created || v2.Version != 2 {
		t.Fatalf("second put = %+v, %v, %v; want version 2", v2, created, err)
	}
	g2, _ := s.TemplateGeneration(ctx)
	if g2 <= g0 {
		t.Fatalf("generation %d after two puts, was %d: want it raised", g2, g0)
	}
	// The same parts again (a PUT retried after a lost answer): no new
	// version, and the generation stays.
	again, created, err := s.PutTemplate(ctx, tkey, map[string]string{"text": "two", "subject": "Hello {{.data.name}}"}, now.Add(2*time.Second))
	if err != nil || created || again.Version != 2 || !again.CreatedAt.Equal(v2.CreatedAt) {
		t.Fatalf("repeated put = %+v, %v, %v; want version 2 unchanged", again, created, err)
	}
	if g, _ := s.TemplateGeneration(ctx); g != g2 {
		t.Errorf("generation %d after an unchanged put, want %d", g, g2)
	}
	got1, err := s.TemplateVersion(ctx, tkey, 1)
	if err != nil || !reflect.DeepEqual(got1.Parts, p1) || got1.Version != 1 {
		t.Fatalf("version 1 = %+v, %v; want the first parts", got1, err)
	}
	latest, err := s.TemplateVersion(ctx, tkey, 0)
	if err != nil || latest.Version != 2 || !reflect.DeepEqual(latest.Parts, p2) {
		t.Fatalf("latest = %+v, %v; want version 2", latest, err)
	}
	if _, err := s.TemplateVersion(ctx, tkey, 3); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("version 3: %v, want ErrNotFound", err)
	}
	if _, err := s.TemplateVersion(ctx, model.TemplateKey{Tenant: "acme", Name: "receipt", Channel: "sms", Locale: "en"}, 0); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("another channel: %v, want ErrNotFound", err)
	}
	vs, err := s.TemplateVersions(ctx, tkey)
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 2 {
		t.Fatalf("versions = %+v, %v; want 1 and 2", vs, err)
	}
	none, err := s.TemplateVersions(ctx, model.TemplateKey{Tenant: "acme", Name: "nothing", Channel: "email", Locale: "en"})
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("versions of nothing = %#v, %v; want an empty list", none, err)
	}
}

func testTemplateRetire(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	p1 := map[string]string{"text": "one"}
	p2 := map[string]string{"text": "two"}
	if _, _, err := s.PutTemplate(ctx, tkey, p1, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutTemplate(ctx, tkey, p2, now); err != nil {
		t.Fatal(err)
	}
	g, _ := s.TemplateGeneration(ctx)
	r, err := s.RetireTemplate(ctx, tkey, now.Add(time.Minute))
	if err != nil || r.Version != 2 || r.RetiredAt == nil || !r.RetiredAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("retire = %+v, %v; want version 2 retired at its time", r, err)
	}
	if g2, _ := s.TemplateGeneration(ctx); g2 <= g {
		t.Errorf("generation %d after a retire, was %d: want it raised", g2, g)
	}
	if _, err := s.RetireTemplate(ctx, tkey, now); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("retire again: %v, want ErrNotFound", err)
	}
	if _, err := s.RetireTemplate(ctx, model.TemplateKey{Tenant: "acme", Name: "nothing", Channel: "email", Locale: "en"}, now); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("retire what never was: %v, want ErrNotFound", err)
	}
	for v, want := range map[int]map[string]string{1: p1, 2: p2} {
		got, err := s.TemplateVersion(ctx, tkey, v)
		if err != nil || !reflect.DeepEqual(got.Parts, want) {
			t.Errorf("version %d after retire = %+v, %v; want it readable", v, got, err)
		}
	}
	latest, _, err := s.LatestTemplates(ctx, "acme")
	if err != nil || len(latest) != 1 || latest[0].Version != 2 || latest[0].RetiredAt == nil {
		t.Fatalf("latest = %+v, %v; want version 2, retired", latest, err)
	}
	// The same parts as the retired version: a new version, live.
	v3, created, err := s.PutTemplate(ctx, tkey, p2, now.Add(2*time.Minute))
	if err != nil || !created || v3.Version != 3 || v3.RetiredAt != nil {
		t.Fatalf("put after retire = %+v, %v, %v; want version 3, live", v3, created, err)
	}
}

func testTemplateTenants(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	b := tkey
	b.Tenant = "bravo"
	if _, _, err := s.PutTemplate(ctx, tkey, map[string]string{"text": "acme's"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TemplateVersion(ctx, b, 0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("bravo reads acme's key: %v, want ErrNotFound", err)
	}
	bv, created, err := s.PutTemplate(ctx, b, map[string]string{"text": "bravo's"}, now)
	if err != nil || !created || bv.Version != 1 {
		t.Fatalf("bravo's first put = %+v, %v, %v; want its own version 1", bv, created, err)
	}
	other := tkey
	other.Locale = "de"
	if _, _, err := s.PutTemplate(ctx, other, map[string]string{"text": "acme's de"}, now); err != nil {
		t.Fatal(err)
	}
	a, gen, err := s.LatestTemplates(ctx, "acme")
	if err != nil || len(a) != 2 || a[0].Locale != "de" || a[1].Locale != "en" || a[0].Tenant != "acme" || a[1].Tenant != "acme" {
		t.Fatalf("acme's latest = %+v, %v; want de and en, acme's only", a, err)
	}
	if g, _ := s.TemplateGeneration(ctx); g != gen {
		t.Errorf("LatestTemplates read generation %d, TemplateGeneration says %d", gen, g)
	}
	all, _, err := s.LatestTemplates(ctx, "")
	if err != nil || len(all) != 3 || all[2].Tenant != "bravo" {
		t.Fatalf("every tenant's latest = %+v, %v; want 3, bravo's last", all, err)
	}
}

func testTemplateConcurrentPuts(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	const n = 8
	putsGetDistinctVersions(t, n, func(i int) (int, error) {
		v, _, err := s.PutTemplate(ctx, tkey, map[string]string{"text": fmt.Sprint("text ", i)}, now)
		return v.Version, err
	})
	vs, err := s.TemplateVersions(ctx, tkey)
	if err != nil || len(vs) != n {
		t.Fatalf("versions = %d, %v; want %d", len(vs), err, n)
	}
}

// A refresh reads only what changed since the generation it loaded: new
// versions and retirements, each key once at its latest version, and
// nothing when nothing changed.
func testTemplateChanges(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	keys := make([]model.TemplateKey, 5)
	for i := range keys {
		keys[i] = tkey
		keys[i].Name = fmt.Sprint("n", i)
		if _, _, err := s.PutTemplate(ctx, keys[i], map[string]string{"text": "one"}, now); err != nil {
			t.Fatal(err)
		}
	}
	all, g0, err := s.TemplateChanges(ctx, 0)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("changes since 0 = %d, %v; want all %d", len(all), err, len(keys))
	}
	if _, g, _ := s.LatestTemplates(ctx, ""); g != g0 {
		t.Fatalf("TemplateChanges read generation %d, LatestTemplates %d", g0, g)
	}
	none, g, err := s.TemplateChanges(ctx, g0)
	if err != nil || len(none) != 0 || g != g0 || none == nil {
		t.Fatalf("changes since %d with none = %#v, %d, %v; want an empty list at %d", g0, none, g, err, g0)
	}
	// Two versions of one key, a retire of another, an unchanged put of a
	// third: two changes, each at its latest state.
	if _, _, err := s.PutTemplate(ctx, keys[1], map[string]string{"text": "two"}, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutTemplate(ctx, keys[1], map[string]string{"text": "three"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetireTemplate(ctx, keys[3], now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, created, err := s.PutTemplate(ctx, keys[4], map[string]string{"text": "one"}, now); err != nil || created {
		t.Fatalf("unchanged put: created %v, %v", created, err)
	}
	ch, g1, err := s.TemplateChanges(ctx, g0)
	if err != nil || len(ch) != 2 || g1 <= g0 {
		t.Fatalf("changes since %d = %+v, %d, %v; want n1 and n3 at a later generation", g0, ch, g1, err)
	}
	if ch[0].TemplateKey != keys[1] || ch[0].Version != 3 || ch[0].Parts["text"] != "three" || ch[0].RetiredAt != nil {
		t.Errorf("first change = %+v; want n1 version 3, live", ch[0])
	}
	if ch[1].TemplateKey != keys[3] || ch[1].Version != 1 || ch[1].RetiredAt == nil {
		t.Errorf("second change = %+v; want n3 version 1, retired", ch[1])
	}
	// A put after the retire is the key's change again, live.
	if _, _, err := s.PutTemplate(ctx, keys[3], map[string]string{"text": "back"}, now); err != nil {
		t.Fatal(err)
	}
	ch, g2, err := s.TemplateChanges(ctx, g1)
	if err != nil || len(ch) != 1 || ch[0].TemplateKey != keys[3] || ch[0].Version != 2 || ch[0].RetiredAt != nil || g2 <= g1 {
		t.Fatalf("changes since %d = %+v, %d, %v; want n3 version 2, live", g1, ch, g2, err)
	}
}

// A relay reads its stored templates at its first accept: on a closed
// store that read is refused with ErrClosed, as the accept's write would
// be, not with the driver's own words.
func testTemplateReadsAfterClose(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, _, err := s.PutTemplate(ctx, tkey, map[string]string{"text": "one"}, time.UnixMilli(1_700_000_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.TemplateGeneration(ctx)
	wantErr(t, "TemplateGeneration after Close", err, model.ErrClosed)
	_, _, err = s.TemplateChanges(ctx, 0)
	wantErr(t, "TemplateChanges after Close", err, model.ErrClosed)
	_, _, err = s.LatestTemplates(ctx, "")
	wantErr(t, "LatestTemplates after Close", err, model.ErrClosed)
}

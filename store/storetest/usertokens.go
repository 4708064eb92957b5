package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

func userTokens(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "KeysCreateRetireRotate", run: testUserTokenKeys},
		{name: "OneKeyIDOnce", run: testUserTokenKeySameIDConcurrently},
		{name: "Origins", run: testFeedOrigins},
	})
}

// A tenant's keys: a live key's secret is found by tenant and id, and
// only by them; a retired key verifies nothing and its id is never given
// to another secret; a rotation retires the others in the same write;
// listing shows every key, never a secret.
func testUserTokenKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	if ks, err := s.UserTokenKeys(ctx, "acme"); err != nil || ks == nil || len(ks) != 0 {
		t.Fatalf("UserTokenKeys on a new store = %#v, %v; want an empty list", ks, err)
	}
	k1 := model.UserTokenKey{Tenant: "acme", KID: "k1", CreatedAt: t0}
	k2 := model.UserTokenKey{Tenant: "acme", KID: "k2", CreatedAt: t0.Add(time.Second)}
	for _, k := range []model.UserTokenKey{k1, k2, {Tenant: "globex", KID: "k1", CreatedAt: t0}} {
		if err := s.CreateUserTokenKey(ctx, k, "secret of "+k.Tenant+"/"+k.KID, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ tenant, kid, want string }{
		{"acme", "k1", "secret of acme/k1"}, {"acme", "k2", "secret of acme/k2"}, {"globex", "k1", "secret of globex/k1"},
	} {
		if got, err := s.UserTokenSecret(ctx, c.tenant, c.kid); err != nil || got != c.want {
			t.Errorf("UserTokenSecret(%s, %s) = %q, %v; want %q", c.tenant, c.kid, got, err, c.want)
		}
	}
	_, err := s.UserTokenSecret(ctx, "globex", "k2")
	wantErr(t, "another tenant's key id", err, model.ErrNotFound)
	err = s.CreateUserTokenKey(ctx, model.UserTokenKey{Tenant: "acme", KID: "k1", CreatedAt: t0}, "another secret", false)
	wantErr(t, "a second key k1", err, model.ErrKeyExists)
	if got, _ := s.UserTokenSecret(ctx, "acme", "k1"); got != "secret of acme/k1" {
		t.Fatalf("k1's secret after a refused second k1: %q", got)
	}
	if err := s.CreateUserTokenKey(ctx, model.UserTokenKey{Tenant: "acme", KID: "k9", CreatedAt: t0}, "", false); err == nil {
		t.Fatal("a key with an empty secret was kept")
	}

	if err := s.RetireUserTokenKey(ctx, "acme", "k1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err = s.UserTokenSecret(ctx, "acme", "k1")
	wantErr(t, "a retired key", err, model.ErrNotFound)
	wantErr(t, "retiring it again", s.RetireUserTokenKey(ctx, "acme", "k1", t0.Add(time.Hour)), model.ErrNotFound)
	wantErr(t, "retiring a key that never was", s.RetireUserTokenKey(ctx, "acme", "k7", t0), model.ErrNotFound)
	err = s.CreateUserTokenKey(ctx, model.UserTokenKey{Tenant: "acme", KID: "k1", CreatedAt: t0.Add(time.Hour)}, "a new secret", false)
	wantErr(t, "a retired key's id again", err, model.ErrKeyExists)
	if _, err := s.UserTokenSecret(ctx, "globex", "k1"); err != nil {
		t.Fatalf("globex's k1 after acme retired its k1: %v", err)
	}

	// A rotation: k3 live, every other acme key retired at its creation.
	k3 := model.UserTokenKey{Tenant: "acme", KID: "k3", CreatedAt: t0.Add(2 * time.Minute)}
	if err := s.CreateUserTokenKey(ctx, k3, "secret of acme/k3", true); err != nil {
		t.Fatal(err)
	}
	_, err = s.UserTokenSecret(ctx, "acme", "k2")
	wantErr(t, "k2 after a rotation", err, model.ErrNotFound)
	if got, err := s.UserTokenSecret(ctx, "acme", "k3"); err != nil || got != "secret of acme/k3" {
		t.Fatalf("k3 after the rotation: %q, %v", got, err)
	}
	if _, err := s.UserTokenSecret(ctx, "globex", "k1"); err != nil {
		t.Fatalf("globex's key after acme rotated: %v", err)
	}
	ks, err := s.UserTokenKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	want := []model.UserTokenKey{
		{Tenant: "acme", KID: "k1", CreatedAt: t0, RetiredAt: t0.Add(time.Minute)},
		{Tenant: "acme", KID: "k2", CreatedAt: t0.Add(time.Second), RetiredAt: k3.CreatedAt},
		k3,
	}
	if !slices.EqualFunc(ks, want, func(a, b model.UserTokenKey) bool {
		return a.Tenant == b.Tenant && a.KID == b.KID && a.CreatedAt.Equal(b.CreatedAt) && a.RetiredAt.Equal(b.RetiredAt)
	}) {
		t.Fatalf("UserTokenKeys(acme) = %+v\nwant %+v", ks, want)
	}
}

// Callers creating one key id at once: one key, the others ErrKeyExists,
// and the secret is the winner's.
func testUserTokenKeySameIDConcurrently(t *testing.T, s store.Store) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, exists := 0, 0
	won := ""
	for i := range 20 {
		wg.Go(func() {
			secret := string(rune('a'+i)) + " secret"
			err := s.CreateUserTokenKey(t.Context(), model.UserTokenKey{Tenant: "acme", KID: "k", CreatedAt: t0}, secret, false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
				won = secret
			case errors.Is(err, model.ErrKeyExists):
				exists++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 1 || exists != 19 {
		t.Fatalf("created %d, exists %d; want 1 and 19", created, exists)
	}
	if got, err := s.UserTokenSecret(t.Context(), "acme", "k"); err != nil || got != won {
		t.Fatalf("the secret kept is %q (%v); the one created was %q", got, err, won)
	}
}

// Origins are a tenant's own list, replaced whole; a preflight's question
// (does any tenant allow this origin) follows every tenant's list.
func testFeedOrigins(t *testing.T, s store.Store) {
	ctx := t.Context()
	if os, err := s.FeedOrigins(ctx, "acme"); err != nil || os == nil || len(os) != 0 {
		t.Fatalf("FeedOrigins on a new store = %#v, %v; want an empty list", os, err)
	}
	a, b, c := "https://app.acme.test", "http://localhost:3000", "https://Z.example"
	if err := s.SetFeedOrigins(ctx, "acme", []string{a, b, c}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFeedOrigins(ctx, "globex", []string{"https://globex.test"}, t0); err != nil {
		t.Fatal(err)
	}
	check := func(when string, tenant string, want ...string) {
		t.Helper()
		got, err := s.FeedOrigins(ctx, tenant)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: FeedOrigins(%s) = %q, %v; want %q", when, tenant, got, err, want)
		}
	}
	allowed := func(when, origin string, want bool) {
		t.Helper()
		if got, err := s.OriginAllowed(ctx, origin); err != nil || got != want {
			t.Fatalf("%s: OriginAllowed(%s) = %v, %v; want %v", when, origin, got, err, want)
		}
	}
	check("set", "acme", b, c, a) // byte order: "http:" < "https://Z" < "https://a"
	check("set", "globex", "https://globex.test")
	allowed("set", a, true)
	allowed("set", "https://globex.test", true)
	allowed("set", "https://evil.test", false)
	allowed("set", "https://app.acme.test/", false) // not the origin as a browser sends it

	if err := s.SetFeedOrigins(ctx, "acme", []string{c, "https://new.acme.test"}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("replaced", "acme", c, "https://new.acme.test")
	allowed("replaced", a, false)
	allowed("replaced", b, false)
	if err := s.SetFeedOrigins(ctx, "acme", nil, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("emptied", "acme")
	allowed("emptied", c, false)
	check("emptied acme's", "globex", "https://globex.test")
}

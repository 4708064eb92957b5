package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/usertoken"
)

// key is the 201 body of POST /v1/user-token-keys.
type key struct {
	Tenant    string    `json:"tenant"`
	KID       string    `json:"kid"`
	Secret    string    `json:"secret"`
	CreatedAt time.Time `json:"created_at"`
}

func (b *bundle) createKey(tb testing.TB, body string, hdr ...string) key {
	tb.Helper()
	rep := b.do(tb, "POST", "/v1/user-token-keys", body, hdr...)
	if rep.status != http.StatusCreated {
		tb.Fatalf("create key: %s", rep)
	}
	return decode[key](tb, rep)
}

// mint signs a user token for tenant's user with k, as an app's backend
// would, valid for an hour from now.
func mint(tb testing.TB, k key, tenant, user string) []string {
	tb.Helper()
	now := time.Now()
	tok, err := usertoken.Mint(tenant, user, k.KID, []byte(k.Secret), now, now.Add(time.Hour))
	if err != nil {
		tb.Fatal(err)
	}
	return bearer(tok)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// userTokenSetup is a closed API with tenants acme and globex, a key
// each, and events in ada's, bob's and the tenant feed of acme.
func userTokenSetup(t *testing.T) (b *bundle, acme, globex []string, acmeKey, globexKey key) {
	// No sweep during a test: a stream hears of a change through the
	// store's signal, or not at all.
	b = setup(t, options{Tokens: map[string]string{api.HashToken("acme-token"): "acme", api.HashToken("globex-token"): "globex"},
		API: api.Options{StreamSweep: time.Hour}})
	acme, globex = bearer("acme-token"), bearer("globex-token")
	acmeKey, globexKey = b.createKey(t, "", acme...), b.createKey(t, "", globex...)
	b.postFeedEvent(t, feedEvent("e1", "For everyone", "*"), acme...)
	b.postFeedEvent(t, feedEvent("e2", "For ada", "@ada"), acme...)
	b.postFeedEvent(t, feedEvent("e3", "For bob", "@bob"), acme...)
	return b, acme, globex, acmeKey, globexKey
}

// A user token opens exactly its user's feed: the list, the unread count,
// one item read or dismissed, read-all with up_to; nothing else, on a
// closed API or an open one.
func TestUserTokenOpensItsUsersFeedOnly(t *testing.T) {
	t.Parallel()
	b, acme, _, acmeKey, _ := userTokenSetup(t)
	ada := mint(t, acmeKey, "acme", "ada")

	page := b.feedPage(t, "/v1/users/ada/feed", ada...)
	if got := itemSeqs(page.Items); len(got) != 2 {
		t.Fatalf("ada's feed with her token: seqs %v, want e2 and e1", got)
	}
	if n := b.unreadCount(t, "ada", ada...); n != 2 {
		t.Fatalf("ada's unread count with her token: %d, want 2", n)
	}
	newest, oldest := page.Items[0].Seq, page.Items[1].Seq
	for _, action := range []string{"read", "dismiss"} {
		if rep := b.do(t, "POST", seqPath("ada", oldest, action), "", ada...); rep.status != http.StatusOK {
			t.Fatalf("%s one with her token: %s", action, rep)
		}
	}
	// read-all needs up_to: a page marks read what it showed.
	p := wantProblem(t, b.do(t, "POST", "/v1/users/ada/feed/read-all", "", ada...), http.StatusBadRequest, "invalid-query")
	if p.Field != "up_to" {
		t.Errorf("read-all without up_to: field %q, want up_to", p.Field)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 1 {
		t.Fatalf("after a refused read-all: %d unread, want 1", n)
	}
	if mark := b.readAll(t, "ada", `{"up_to": `+strconv.FormatInt(newest, 10)+`}`, ada...); mark != newest {
		t.Fatalf("read-all up_to %d with her token: watermark %d", newest, mark)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 0 {
		t.Fatalf("after read-all: %d unread, want 0", n)
	}

	// Every other route answers a user token 401, before reading anything.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/users/ada/feed/dismiss-all", `{"up_to": 1}`},
		{"GET", "/v1/feeds/team:ops/members", ""},
		{"PUT", "/v1/feeds/team:ops/members", `{"members": ["ada"]}`},
		{"POST", "/v1/events", `{"id": "x", "type": "t", "feeds": ["@ada"]}`},
		{"GET", "/v1/notifications", ""},
		{"GET", "/v1/user-token-keys", ""},
		{"POST", "/v1/user-token-keys", ""},
		{"PUT", "/v1/feed-origins", `{"origins": []}`},
		{"GET", "/v1/audiences", ""},
	} {
		p := wantProblem(t, b.do(t, c.method, c.path, c.body, ada...), http.StatusUnauthorized, "unauthorized")
		if !strings.Contains(p.Detail, "user token opens only its user's feed") {
			t.Errorf("%s %s with a user token: %q, want it to say what a user token opens", c.method, c.path, p.Detail)
		}
	}
	if n := b.unreadCount(t, "ada", acme...); n != 0 {
		t.Errorf("a refused event posted to ada's feed: %d unread", n)
	}

	// A tenant's token still reads any of its users' feeds.
	if got := b.feedPage(t, "/v1/users/bob/feed", acme...); len(got.Items) != 2 {
		t.Errorf("bob's feed with acme's token: %d items, want 2", len(got.Items))
	}

	// An open API gives a user token no more.
	open := setup(t, options{})
	k := open.createKey(t, "")
	if k.Tenant != "default" {
		t.Fatalf("a key on an open API: tenant %q, want default", k.Tenant)
	}
	grace := mint(t, k, "default", "grace")
	if rep := open.do(t, "GET", "/v1/users/grace/feed/unread_count", "", grace...); rep.status != http.StatusOK {
		t.Fatalf("grace's own count on an open API: %s", rep)
	}
	wantProblem(t, open.do(t, "GET", "/v1/users/heidi/feed", "", grace...), http.StatusForbidden, "user-mismatch")
	wantProblem(t, open.do(t, "POST", "/v1/events", `{"id": "x", "type": "t", "feeds": ["*"]}`, grace...), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, open.do(t, "GET", "/v1/notifications", "", grace...), http.StatusUnauthorized, "unauthorized")
}

// User A's token asking for user B's feed is 403, the same answer whether
// B exists or not, and changes nothing of B's.
func TestUserTokenForAnotherUserIs403(t *testing.T) {
	t.Parallel()
	b, acme, _, acmeKey, _ := userTokenSetup(t)
	ada := mint(t, acmeKey, "acme", "ada")
	bobSeq := b.feedPage(t, "/v1/users/bob/feed", acme...).Items[0].Seq
	var bodies []string
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/users/bob/feed", ""},
		{"GET", "/v1/users/nobody/feed", ""},
		{"GET", "/v1/users/bob/feed/unread_count", ""},
		{"GET", "/v1/users/nobody/feed/unread_count", ""},
		{"POST", "/v1/users/bob/feed/read-all", `{"up_to": 100}`},
		{"POST", seqPath("bob", bobSeq, "read"), ""},
		{"POST", seqPath("bob", bobSeq, "dismiss"), ""},
		{"POST", seqPath("nobody", bobSeq, "dismiss"), ""},
	} {
		rep := b.do(t, c.method, c.path, c.body, ada...)
		wantProblem(t, rep, http.StatusForbidden, "user-mismatch")
		bodies = append(bodies, string(rep.body))
		if strings.Contains(string(rep.body), "bob") || strings.Contains(string(rep.body), "nobody") {
			t.Errorf("%s %s: the answer names the user asked for: %s", c.method, c.path, rep.body)
		}
	}
	for _, body := range bodies[1:] {
		if body != bodies[0] {
			t.Errorf("403 answers differ, telling users apart:\n%s\n%s", bodies[0], body)
		}
	}
	if n := b.unreadCount(t, "bob", acme...); n != 2 {
		t.Errorf("bob's unread count after ada's token tried to mark it: %d, want 2", n)
	}
}

// Expired, tampered with, signed with another tenant's key, with a key
// retired or rotated away: 401, saying which when it can.
func TestUserTokenRefusals(t *testing.T) {
	t.Parallel()
	b, acme, globex, acmeKey, globexKey := userTokenSetup(t)
	path := "/v1/users/ada/feed/unread_count"
	now := time.Now()
	expired, err := usertoken.Mint("acme", "ada", acmeKey.KID, []byte(acmeKey.Secret), now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p := wantProblem(t, b.do(t, "GET", path, "", bearer(expired)...), http.StatusUnauthorized, "unauthorized")
	if !strings.Contains(p.Detail, "expired") {
		t.Errorf("an expired token: %q, want it to say expired", p.Detail)
	}

	good := mint(t, acmeKey, "acme", "ada")[1][len("Bearer "):]
	parts := strings.Split(good, ".")
	bobClaims := strings.Split(mint(t, acmeKey, "acme", "bob")[1][len("Bearer "):], ".")[1]
	flipped := []byte(parts[2])
	flipped[3] ^= 1
	for name, tok := range map[string]string{
		"claims swapped for bob's":       parts[0] + "." + bobClaims + "." + parts[2],
		"signature changed":              parts[0] + "." + parts[1] + "." + string(flipped),
		"no signature":                   parts[0] + "." + parts[1] + ".",
		"acme's claims, globex's secret": tokenWith(t, "acme", "ada", acmeKey.KID, globexKey.Secret),
		"acme's claims, globex's key id": tokenWith(t, "acme", "ada", globexKey.KID, globexKey.Secret),
		"globex's claims, acme's key":    tokenWith(t, "globex", "ada", acmeKey.KID, acmeKey.Secret),
		"a tenant with no keys":          tokenWith(t, "initech", "ada", acmeKey.KID, acmeKey.Secret),
		"not base64":                     "eyJ!!.eyJ!!.x",
	} {
		rep := b.do(t, "GET", path, "", bearer(tok)...)
		wantProblem(t, rep, http.StatusUnauthorized, "unauthorized")
		if !strings.Contains(rep.header.Get("WWW-Authenticate"), "invalid_token") {
			t.Errorf("%s: WWW-Authenticate %q, want error=invalid_token", name, rep.header.Get("WWW-Authenticate"))
		}
	}
	// A globex token reads globex's ada, never acme's.
	gAda := mint(t, globexKey, "globex", "ada")
	if n := b.unreadCount(t, "ada", gAda...); n != 0 {
		t.Errorf("globex's ada: %d unread, want 0 (acme's ada has 2)", n)
	}
	wantProblem(t, b.do(t, "GET", path+"?tenant=acme", "", gAda...), http.StatusForbidden, "tenant-mismatch")

	// Retired: refused from the next request on; the other keys go on.
	second := b.createKey(t, "", acme...)
	ada2 := mint(t, second, "acme", "ada")
	ada1 := mint(t, acmeKey, "acme", "ada")
	if rep := b.do(t, "POST", "/v1/user-token-keys/"+acmeKey.KID+"/retire", "", acme...); rep.status != http.StatusOK {
		t.Fatalf("retire: %s", rep)
	}
	wantProblem(t, b.do(t, "GET", path, "", ada1...), http.StatusUnauthorized, "unauthorized")
	if n := b.unreadCount(t, "ada", ada2...); n != 2 {
		t.Errorf("with the second key after the first was retired: %d", n)
	}
	wantProblem(t, b.do(t, "POST", "/v1/user-token-keys/"+acmeKey.KID+"/retire", "", acme...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "POST", "/v1/user-token-keys/"+globexKey.KID+"/retire", "", acme...), http.StatusNotFound, "not-found")
	if n := b.unreadCount(t, "ada", gAda...); n != 0 {
		t.Errorf("globex's key after acme tried to retire it: %d", n)
	}

	// Rotated: every other key retired in the same write.
	third := b.createKey(t, `{"retire_others": true}`, acme...)
	wantProblem(t, b.do(t, "GET", path, "", ada2...), http.StatusUnauthorized, "unauthorized")
	if n := b.unreadCount(t, "ada", mint(t, third, "acme", "ada")...); n != 2 {
		t.Errorf("with the rotated key: %d", n)
	}
	rep := b.do(t, "GET", "/v1/user-token-keys", "", acme...)
	if rep.status != http.StatusOK || strings.Contains(string(rep.body), acmeKey.Secret) || strings.Contains(string(rep.body), third.Secret) ||
		strings.Contains(string(rep.body), `"secret"`) {
		t.Fatalf("list keys: %s; want no secret", rep)
	}
	list := decode[struct {
		Tenant string `json:"tenant"`
		Keys   []struct {
			Tenant    string    `json:"tenant"`
			KID       string    `json:"kid"`
			CreatedAt time.Time `json:"created_at"`
			RetiredAt time.Time `json:"retired_at"`
		} `json:"keys"`
	}](t, rep)
	if len(list.Keys) != 3 || list.Keys[0].KID != acmeKey.KID || list.Keys[0].RetiredAt.IsZero() ||
		list.Keys[1].RetiredAt.IsZero() || list.Keys[2].KID != third.KID || !list.Keys[2].RetiredAt.IsZero() {
		t.Errorf("acme's keys: %+v; want two retired, then %s live", list.Keys, third.KID)
	}
	// globex's key was not rotated with acme's.
	if n := b.unreadCount(t, "ada", gAda...); n != 0 {
		t.Errorf("globex's key after acme rotated: %d", n)
	}
	wantProblem(t, b.do(t, "GET", "/v1/user-token-keys?tenant=globex", "", acme...), http.StatusForbidden, "tenant-mismatch")
	if rep := b.do(t, "GET", "/v1/user-token-keys", "", globex...); strings.Contains(string(rep.body), third.KID) {
		t.Errorf("globex lists acme's key: %s", rep)
	}
}

// tokenWith signs claims for tenant's user with secret under kid, without
// Mint's checks (a forger's token).
func tokenWith(t *testing.T, tenant, user, kid, secret string) string {
	t.Helper()
	now := time.Now()
	tok, err := usertoken.Mint(tenant, user, kid, []byte(secret), now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Origins are set per tenant, checked as a browser sends them; a
// preflight is answered for an origin some tenant allows; the request
// itself is held to its token's tenant's origins, refused before it does
// anything otherwise; Access-Control-Allow-Origin is the exact origin,
// never "*", never with credentials; every answer varies on Origin.
func TestUserTokenCORS(t *testing.T) {
	t.Parallel()
	b, acme, globex, acmeKey, _ := userTokenSetup(t)
	for _, c := range []struct{ body, field, says string }{
		{`{"origins": ["*"]}`, "origins[0]", "wildcard"},
		{`{"origins": ["null"]}`, "origins[0]", "sandboxed"},
		{`{"origins": ["https://app.acme.test/"]}`, "origins[0]", "no path"},
		{`{"origins": ["https://app.acme.test/inbox"]}`, "origins[0]", "no path"},
		{`{"origins": ["https://App.Acme.test"]}`, "origins[0]", "lower case"},
		{`{"origins": ["ftp://app.acme.test"]}`, "origins[0]", "http or https"},
		{`{"origins": ["https://app.acme.test:443"]}`, "origins[0]", "default port"},
		{`{"origins": ["https://a.test", "app.acme.test"]}`, "origins[1]", "scheme://host"},
		{`{"origins": ["https://a.test", "https://a.test"]}`, "origins[1]", "twice"},
		{`{}`, "origins", "required"},
	} {
		p := wantProblem(t, b.do(t, "PUT", "/v1/feed-origins", c.body, acme...), http.StatusBadRequest, "")
		if p.Field != c.field || !strings.Contains(p.Detail, c.says) {
			t.Errorf("origins %s: %+v; want field %s saying %q", c.body, p, c.field, c.says)
		}
	}
	app, other := "https://app.acme.test", "https://globex.test"
	rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app+`", "http://localhost:3000"]}`, acme...)
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), app) {
		t.Fatalf("set origins: %s", rep)
	}
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+other+`"]}`, globex...); rep.status != http.StatusOK {
		t.Fatalf("set globex's origins: %s", rep)
	}

	preflight := func(origin, method string) reply {
		return b.do(t, "OPTIONS", "/v1/users/ada/feed/read-all", "", "Origin", origin,
			"Access-Control-Request-Method", method, "Access-Control-Request-Headers", "authorization,content-type")
	}
	rep = preflight(app, "POST")
	if rep.status != http.StatusNoContent || rep.header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(rep.header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		rep.header.Get("Access-Control-Allow-Methods") != "POST" || rep.header.Get("Access-Control-Allow-Credentials") != "" ||
		!strings.Contains(rep.header.Get("Vary"), "Origin") {
		t.Fatalf("preflight from %s: %d %v", app, rep.status, rep.header)
	}
	rep = preflight("https://evil.test", "POST")
	wantProblem(t, rep, http.StatusForbidden, "origin-not-allowed")
	if got := rep.header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("preflight from an origin no tenant allows: Access-Control-Allow-Origin %q", got)
	}
	wantProblem(t, preflight(app, "DELETE"), http.StatusBadRequest, "invalid-request")
	if rep := b.do(t, "OPTIONS", "/v1/users/ada/feed", ""); rep.status != http.StatusNoContent || rep.header.Get("Allow") != "GET, OPTIONS" {
		t.Errorf("a plain OPTIONS: %d Allow %q", rep.status, rep.header.Get("Allow"))
	}

	ada := mint(t, acmeKey, "acme", "ada")
	rep = b.do(t, "GET", "/v1/users/ada/feed", "", append([]string{"Origin", app}, ada...)...)
	if rep.status != http.StatusOK || rep.header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(rep.header.Get("Vary"), "Origin") ||
		rep.header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("ada's feed from %s: %s %v", app, rep, rep.header)
	}
	// globex's origin passes a preflight, but acme's token is held to
	// acme's origins: refused, and nothing marked.
	rep = b.do(t, "POST", "/v1/users/ada/feed/read-all", `{"up_to": 100}`, append([]string{"Origin", other}, ada...)...)
	wantProblem(t, rep, http.StatusForbidden, "origin-not-allowed")
	if rep.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("from another tenant's origin: Access-Control-Allow-Origin %q", rep.header.Get("Access-Control-Allow-Origin"))
	}
	if n := b.unreadCount(t, "ada", acme...); n != 2 {
		t.Errorf("after a read-all from an origin acme does not allow: %d unread, want 2", n)
	}
	// An expired token from an allowed origin: a 401 the page can read.
	now := time.Now()
	expired, err := usertoken.Mint("acme", "ada", acmeKey.KID, []byte(acmeKey.Secret), now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rep = b.do(t, "GET", "/v1/users/ada/feed", "", append([]string{"Origin", app}, bearer(expired)...)...)
	wantProblem(t, rep, http.StatusUnauthorized, "unauthorized")
	if rep.header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("a 401 to an allowed origin: Access-Control-Allow-Origin %q, want %s", rep.header.Get("Access-Control-Allow-Origin"), app)
	}
	// A tenant's token is never a browser's: no CORS for it.
	rep = b.do(t, "GET", "/v1/users/ada/feed", "", append([]string{"Origin", app}, acme...)...)
	if rep.status != http.StatusOK || rep.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a tenant token with Origin: %d, Access-Control-Allow-Origin %q; want none", rep.status, rep.header.Get("Access-Control-Allow-Origin"))
	}
	// Emptied: the preflight is refused again.
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": []}`, acme...); rep.status != http.StatusOK {
		t.Fatalf("empty origins: %s", rep)
	}
	wantProblem(t, preflight(app, "POST"), http.StatusForbidden, "origin-not-allowed")
	if rep := b.do(t, "GET", "/v1/feed-origins", "", acme...); !strings.Contains(string(rep.body), `"origins":[]`) {
		t.Errorf("origins after emptying: %s", rep)
	}
}

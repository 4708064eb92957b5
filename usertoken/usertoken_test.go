package usertoken

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"
)

var (
	t0      = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	secretA = []byte("tenant-a's secret, 32 bytes or more")
	secretB = []byte("tenant-b's secret, 32 bytes or more")
)

func keys(_ context.Context, tenant, kid string) ([]byte, error) {
	switch tenant + "/" + kid {
	case "acme/k1":
		return secretA, nil
	case "globex/k1":
		return secretB, nil
	case "broken/k1":
		return nil, errors.New("database is down")
	}
	return nil, ErrUnknownKey
}

// hs256 signs header.claims as any JWT library would: base64url without
// padding, HMAC-SHA256 over the two joined by a dot.
func hs256(t *testing.T, header, claims map[string]any, secret []byte) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	in := enc(header) + "." + enc(claims)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func claims(over map[string]any) map[string]any {
	c := map[string]any{"iss": "acme", "sub": "ada", "aud": Audience, "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

var hdr = map[string]any{"alg": "HS256", "typ": "JWT", "kid": "k1"}

func TestMintThenVerify(t *testing.T) {
	tok, err := Mint("acme", "ada", "k1", secretA, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(context.Background(), tok, keys, t0.Add(59*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenant != "acme" || c.User != "ada" || c.KeyID != "k1" || !c.Expires.Equal(t0.Add(time.Hour)) {
		t.Errorf("claims %+v", c)
	}
	for _, bad := range []struct {
		tenant, user, kid string
		secret            []byte
		exp               time.Time
	}{
		{"", "ada", "k1", secretA, t0.Add(time.Hour)},
		{"acme", "a d a", "k1", secretA, t0.Add(time.Hour)},
		{"acme", "ada", "", secretA, t0.Add(time.Hour)},
		{"acme", "ada", "k1", []byte("short"), t0.Add(time.Hour)},
		{"acme", "ada", "k1", secretA, t0},
		{"acme", "ada", "k1", secretA, t0.Add(25 * time.Hour)},
	} {
		if _, err := Mint(bad.tenant, bad.user, bad.kid, bad.secret, t0, bad.exp); err == nil {
			t.Errorf("Mint(%q, %q, %q, %d bytes, %v) made a token", bad.tenant, bad.user, bad.kid, len(bad.secret), bad.exp.Sub(t0))
		}
	}
}

// A token minted the way the README tells an app to (any HMAC library)
// verifies; each way of forging or stretching one is refused.
func TestVerifyRefusesForgeries(t *testing.T) {
	ctx := context.Background()
	good := hs256(t, hdr, claims(nil), secretA)
	if c, err := Verify(ctx, good, keys, t0); err != nil || c.User != "ada" {
		t.Fatalf("a hand-made token: %+v, %v", c, err)
	}
	none := func() string {
		parts := strings.Split(hs256(t, map[string]any{"alg": "none", "kid": "k1"}, claims(nil), secretA), ".")
		return parts[0] + "." + parts[1] + "."
	}()
	tampered := func() string {
		parts := strings.Split(good, ".")
		other := strings.Split(hs256(t, hdr, claims(map[string]any{"sub": "bob"}), secretB), ".")
		return parts[0] + "." + other[1] + "." + parts[2]
	}()
	for name, tok := range map[string]string{
		"alg none":                         none,
		"HS512":                            hs256(t, map[string]any{"alg": "HS512", "kid": "k1"}, claims(nil), secretA),
		"another tenant's claims, our key": hs256(t, hdr, claims(map[string]any{"iss": "globex"}), secretA),
		"wrong secret":                     hs256(t, hdr, claims(nil), []byte("not the tenant's secret at all, no")),
		"payload swapped":                  tampered,
		"unknown kid":                      hs256(t, map[string]any{"alg": "HS256", "kid": "k9"}, claims(nil), secretA),
		"no kid":                           hs256(t, map[string]any{"alg": "HS256"}, claims(nil), secretA),
		"no exp":                           hs256(t, hdr, claims(map[string]any{"exp": nil}), secretA),
		"lives 48 h":                       hs256(t, hdr, claims(map[string]any{"exp": t0.Add(48 * time.Hour).Unix()}), secretA),
		"lives 48 h, no iat":               hs256(t, hdr, claims(map[string]any{"iat": nil, "exp": t0.Add(48 * time.Hour).Unix()}), secretA),
		"no audience":                      hs256(t, hdr, claims(map[string]any{"aud": nil}), secretA),
		"another audience":                 hs256(t, hdr, claims(map[string]any{"aud": "billing"}), secretA),
		"no user":                          hs256(t, hdr, claims(map[string]any{"sub": nil}), secretA),
		"no tenant":                        hs256(t, hdr, claims(map[string]any{"iss": nil}), secretA),
		"not a JWT":                        "ada",
	} {
		if c, err := Verify(ctx, tok, keys, t0); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %+v, %v; want ErrInvalid", name, c, err)
		}
	}
	// Expiry, with the leeway for clocks apart.
	if _, err := Verify(ctx, good, keys, t0.Add(time.Hour+Leeway-time.Second)); err != nil {
		t.Errorf("within the leeway: %v", err)
	}
	if _, err := Verify(ctx, good, keys, t0.Add(time.Hour+Leeway+time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("past the leeway: %v, want ErrExpired", err)
	}
	// A key store that fails is not the token's fault: its error comes
	// back as it is (the API answers 503, not 401).
	broken := hs256(t, hdr, claims(map[string]any{"iss": "broken"}), secretA)
	if _, err := Verify(ctx, broken, keys, t0); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("key store down: %v, want its own error", err)
	}
}

// Node's crypto, not Go's, makes a token the way an app's backend in
// JavaScript would, and checks the signature of one Mint made.
func TestTokensAgreeWithNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testserver.Unavailable(t, "usertoken", "node is not installed (Debian's nodejs): the tokens are not checked against a second implementation")
	}
	script := `
const crypto = require('crypto');
const [secret, tok] = process.argv.slice(1);
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const head = b64({alg: 'HS256', typ: 'JWT', kid: 'k1'});
const body = b64({iss: 'acme', sub: 'grace', aud: 'edgerelay-feed', iat: 1796385600, exp: 1796389200});
const sig = crypto.createHmac('sha256', secret).update(head + '.' + body).digest('base64url');
const [h, c, s] = tok.split('.');
const ours = crypto.createHmac('sha256', secret).update(h + '.' + c).digest('base64url');
console.log(head + '.' + body + '.' + sig);
console.log(ours === s ? 'ok' : 'bad signature');
console.log(JSON.stringify(JSON.parse(Buffer.from(c, 'base64url'))));
`
	mine, err := Mint("acme", "ada", "k1", secretA, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "-e", script, string(secretA), mine).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || lines[1] != "ok" {
		t.Fatalf("node says:\n%s", out)
	}
	if c, err := Verify(context.Background(), lines[0], keys, time.Unix(1796385600, 0)); err != nil || c.User != "grace" || c.Tenant != "acme" {
		t.Errorf("node's token: %+v, %v", c, err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &got); err != nil || got["iss"] != "acme" || got["sub"] != "ada" || got["aud"] != Audience {
		t.Errorf("Mint's claims as node reads them: %s (%v)", lines[2], err)
	}
}

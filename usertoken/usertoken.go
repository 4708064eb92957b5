// Package usertoken is the token a browser holds to read one user's in-app
// feed directly: a JWT (RFC 7519) signed with HS256 by the app's backend,
// with a secret edgerelay keeps per tenant. It grants that user's feed and
// nothing else; the tenant's own tokens are never given to a browser.
//
// Any language's JWT library mints one. The header names the key:
//
//	{"alg": "HS256", "typ": "JWT", "kid": "<the key's id>"}
//
// and the claims are:
//
//	{"iss": "<tenant>", "sub": "<user id>", "aud": "edgerelay-feed",
//	 "exp": <Unix seconds>, "iat": <Unix seconds>}
//
// exp is required and at most MaxLifetime after iat (or after now, without
// iat); a token is refused a leeway of Leeway past its exp. Only HS256 is
// accepted ("none" and every other algorithm are refused, whatever the
// header says), the key is the one the kid names for that tenant, and a
// key the tenant retired verifies nothing.
package usertoken

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Audience is the aud every user token carries: a token minted for
// another service with the same secret is not a feed token.
const Audience = "edgerelay-feed"

// MaxLifetime bounds how long a token lives: a stolen one ends within it.
const MaxLifetime = 24 * time.Hour

// Leeway is the clock skew allowed between the app's backend and edgerelay.
const Leeway = 30 * time.Second

// Claims are what a verified token grants: one user of one tenant, until
// Expires.
type Claims struct {
	Tenant  string
	User    string
	KeyID   string
	Expires time.Time
}

// KeyFunc finds the secret a tenant's key id names: ErrUnknownKey if the
// tenant has no such key (or retired it).
type KeyFunc func(ctx context.Context, tenant, kid string) ([]byte, error)

// Errors Verify returns; every refusal wraps ErrInvalid.
var (
	ErrInvalid    = errors.New("invalid user token")
	ErrUnknownKey = errors.New("no such key")
	ErrExpired    = fmt.Errorf("%w: expired", ErrInvalid)
)

var ident = regexp.MustCompile(`^[A-Za-z0-9_.:@+-]{1,128}$`)

// MinSecret is the shortest secret Mint and a key store accept (HS256
// wants at least its 32-byte output).
const MinSecret = 32

// Mint makes a token for tenant's user, signed with the key kid, expiring
// at exp (at most MaxLifetime after now).
func Mint(tenant, user, kid string, secret []byte, now, exp time.Time) (string, error) {
	switch {
	case !ident.MatchString(tenant):
		return "", fmt.Errorf("tenant %q: 1 to 128 of letters, digits and _.:@+-", tenant)
	case !ident.MatchString(user):
		return "", fmt.Errorf("user %q: 1 to 128 of letters, digits and _.:@+-", user)
	case !ident.MatchString(kid):
		return "", fmt.Errorf("key id %q: 1 to 128 of letters, digits and _.:@+-", kid)
	case len(secret) < MinSecret:
		return "", fmt.Errorf("a secret of %d bytes: at least %d", len(secret), MinSecret)
	case !exp.After(now) || exp.Sub(now) > MaxLifetime:
		return "", fmt.Errorf("expiry %v from now: after now and at most %v", exp.Sub(now), MaxLifetime)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss": tenant, "sub": user, "aud": Audience, // aud a string, as the package documents it
		"exp": exp.Unix(), "iat": now.Unix(),
	})
	t.Header["kid"] = kid
	return t.SignedString(secret)
}

// Verify checks token at now and returns what it grants. keys finds the
// secret named by the token's tenant (iss) and key id (kid); the tenant
// is only trusted once the signature made with that tenant's key holds.
func Verify(ctx context.Context, token string, keys KeyFunc, now time.Time) (Claims, error) {
	var c Claims
	var rc jwt.RegisteredClaims
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithStrictDecoding(),
	)
	var keyErr error
	_, err := p.ParseWithClaims(token, &rc, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if !ident.MatchString(kid) {
			return nil, fmt.Errorf("the header has no kid naming the key")
		}
		if !ident.MatchString(rc.Issuer) {
			return nil, fmt.Errorf("iss is not a tenant")
		}
		secret, err := keys(ctx, rc.Issuer, kid)
		if err != nil {
			keyErr = err
			return nil, err
		}
		c.Tenant, c.KeyID = rc.Issuer, kid
		return secret, nil
	})
	switch {
	case keyErr != nil && !errors.Is(keyErr, ErrUnknownKey):
		return Claims{}, keyErr // the key store failed: not the token's fault
	case errors.Is(err, jwt.ErrTokenExpired):
		return Claims{}, ErrExpired
	case err != nil:
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !ident.MatchString(rc.Subject) {
		return Claims{}, fmt.Errorf("%w: sub is not a user id", ErrInvalid)
	}
	exp := rc.ExpiresAt.Time
	from := now
	if rc.IssuedAt != nil {
		from = rc.IssuedAt.Time
	}
	if exp.Sub(from) > MaxLifetime+Leeway {
		return Claims{}, fmt.Errorf("%w: it lives %v, at most %v", ErrInvalid, exp.Sub(from).Round(time.Second), MaxLifetime)
	}
	c.User, c.Expires = rc.Subject, exp
	return c, nil
}

// Shaped reports whether token has the shape of a JWT (three base64url
// parts, the first a JSON object): the API tells a user token from a
// tenant's token by it, before verifying anything.
func Shaped(token string) bool {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || !strings.HasPrefix(head, "eyJ") {
		return false
	}
	claims, sig, ok := strings.Cut(rest, ".")
	return ok && claims != "" && !strings.Contains(sig, ".")
}

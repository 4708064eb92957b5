package relay

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/usertoken"
)

// User tokens. The relay draws each key's id and secret (the secret is
// returned once, here); the tenant's backend signs user tokens with it
// (package usertoken), and the API verifies them through VerifyUserToken.

// MaxFeedOrigins bounds a tenant's allowed browser origins: each is
// matched on every preflight, and a longer list is a mistake, not a need.
const MaxFeedOrigins = 32

// CreateUserTokenKey makes a new key for tenant's user tokens and returns
// it with its secret, which is shown only now. With retireOthers the
// tenant's other keys stop verifying tokens in the same write (after a
// leak); without, they go on until retired (a rotation without downtime:
// create, switch the backend to the new key, retire the old one).
//
// The secret is a string of 43 URL-safe characters; the HMAC key is the
// string's bytes as they are (not decoded), so that any JWT library that
// takes a string secret signs with the same key.
func (r *Relay) CreateUserTokenKey(ctx context.Context, tenant string, retireOthers bool) (model.UserTokenKey, string, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return model.UserTokenKey{}, "", err
	}
	for range 3 {
		id := make([]byte, 10)
		rand.Read(id)
		raw := make([]byte, 32)
		rand.Read(raw)
		k := model.UserTokenKey{
			Tenant:    tenant,
			KID:       "utk_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(id)),
			CreatedAt: r.now().UTC().Truncate(1e6), // kept in ms
		}
		secret := base64.RawURLEncoding.EncodeToString(raw)
		err := r.store.CreateUserTokenKey(ctx, k, secret, retireOthers)
		if errors.Is(err, model.ErrKeyExists) {
			continue // 80 random bits collided: draw again
		}
		if err != nil {
			return model.UserTokenKey{}, "", err
		}
		return k, secret, nil
	}
	return model.UserTokenKey{}, "", fmt.Errorf("create user-token key: three random ids were taken")
}

// UserTokenKeys lists tenant's keys, retired ones too, oldest first.
func (r *Relay) UserTokenKeys(ctx context.Context, tenant string) ([]model.UserTokenKey, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return nil, err
	}
	return r.store.UserTokenKeys(ctx, tenant)
}

// RetireUserTokenKey retires tenant's key kid: tokens it signed are
// refused from the next request on. ErrNotFound if no such live key.
func (r *Relay) RetireUserTokenKey(ctx context.Context, tenant, kid string) error {
	if err := CheckTenant("tenant", tenant); err != nil {
		return err
	}
	return r.store.RetireUserTokenKey(ctx, tenant, kid, r.now())
}

// VerifyUserToken checks a user token against its tenant's live keys at
// the relay's clock (usertoken.Verify): every refusal wraps
// usertoken.ErrInvalid; any other error is the store's.
func (r *Relay) VerifyUserToken(ctx context.Context, token string) (usertoken.Claims, error) {
	return usertoken.Verify(ctx, token, func(ctx context.Context, tenant, kid string) ([]byte, error) {
		secret, err := r.store.UserTokenSecret(ctx, tenant, kid)
		if errors.Is(err, model.ErrNotFound) {
			return nil, usertoken.ErrUnknownKey
		}
		return []byte(secret), err
	}, r.now())
}

// SetFeedOrigins replaces the browser origins allowed to call tenant's
// users' feeds with origins, each as a browser sends it in Origin:
// scheme://host[:port], lower case, no path. None: no browser may.
func (r *Relay) SetFeedOrigins(ctx context.Context, tenant string, origins []string) error {
	if err := CheckTenant("tenant", tenant); err != nil {
		return err
	}
	if len(origins) > MaxFeedOrigins {
		return invalid("origins", "%d origins: at most %d", len(origins), MaxFeedOrigins)
	}
	for i, o := range origins {
		if err := CheckOrigin(fmt.Sprintf("origins[%d]", i), o); err != nil {
			return err
		}
		if slices.Index(origins, o) != i {
			return invalid(fmt.Sprintf("origins[%d]", i), "%q is listed twice", o)
		}
	}
	return r.store.SetFeedOrigins(ctx, tenant, origins, r.now())
}

// FeedOrigins lists the origins allowed to call tenant's users' feeds.
func (r *Relay) FeedOrigins(ctx context.Context, tenant string) ([]string, error) {
	if err := CheckTenant("tenant", tenant); err != nil {
		return nil, err
	}
	return r.store.FeedOrigins(ctx, tenant)
}

// CheckOrigin accepts an origin as a browser sends it (RFC 6454):
// http or https, a host, an optional port, nothing else, in lower case.
// A wildcard is refused: an origin list is what lets a page read a
// user's feed with that user's token, and "any page" is never meant.
func CheckOrigin(field, o string) error {
	switch {
	case o == "*":
		return invalid(field, `"*": name each origin (https://app.example.com); a wildcard would let any page use a user's token`)
	case o == "null":
		return invalid(field, `"null" is the origin of sandboxed and file pages, which any page can make: not allowed`)
	case len(o) > maxIDLen:
		return invalid(field, "longer than %d bytes", maxIDLen)
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return invalid(field, "%q: an origin is scheme://host[:port] (https://app.example.com)", o)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid(field, "%q: the scheme is http or https", o)
	case u.User != nil:
		return invalid(field, "%q: an origin has no user name or password", o)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return invalid(field, "%q: an origin has no path, query or fragment (not even a trailing /): %s://%s", o, u.Scheme, u.Host)
	case strings.ToLower(o) != o:
		return invalid(field, "%q: browsers send origins in lower case: %s", o, strings.ToLower(o))
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return invalid(field, "%q: the port is a number from 1 to 65535", o)
		}
		if u.Scheme == "https" && p == "443" || u.Scheme == "http" && p == "80" {
			return invalid(field, "%q: browsers leave the default port out: %s://%s", o, u.Scheme, u.Hostname())
		}
	}
	return nil
}

package relay

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Signed links for recipients: a one-click unsubscribe link
// (RFC 8058) that names a recipient, a category and a channel, and a link
// to a recipient's preferences page that expires. Neither needs a login:
// each is signed with HMAC-SHA256 under its tenant's key (32 random bytes,
// made once when first needed and kept in the store), so only the relay
// can make one, and changing any byte of what it names (another recipient,
// another category, every channel, a later expiry) breaks the signature.
//
// A token is base64url(payload) "." base64url(mac). The payload is a kind
// byte and length-prefixed fields; the kind keeps an unsubscribe token
// from being taken for a page token. The tenant is in the payload in the
// clear: it says whose key checks the mac.

// ErrBadLink: a link token that is malformed, forged, widened or expired.
var ErrBadLink = errors.New("link is not valid")

const (
	linkUnsubscribe byte = 'u'
	linkPage        byte = 'p'
)

// UnsubscribeLink is what a one-click unsubscribe token names.
type UnsubscribeLink struct {
	Tenant, Recipient, Category, Channel string
}

// PageLink is what a preferences page token names.
type PageLink struct {
	Tenant, Recipient string
	Expires           time.Time
}

// tenantKey returns the tenant's key, making it if create and it has none.
func (r *Relay) tenantKey(ctx context.Context, tenant string, create bool) ([]byte, error) {
	if k, ok := r.keys.Load(tenant); ok {
		return k.([]byte), nil
	}
	var fresh []byte
	if create {
		fresh = make([]byte, 32)
		rand.Read(fresh)
	}
	k, err := r.store.TenantKey(ctx, tenant, fresh, r.now())
	if err != nil {
		return nil, err
	}
	r.keys.Store(tenant, k)
	return k, nil
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readField(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

func (r *Relay) sign(ctx context.Context, tenant string, payload []byte) (string, error) {
	key, err := r.tenantKey(ctx, tenant, true)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(m.Sum(nil)), nil
}

// verify checks a token's mac and returns its kind and fields.
func (r *Relay) verify(ctx context.Context, token string) (byte, []string, error) {
	enc := base64.RawURLEncoding
	p, s, ok := strings.Cut(token, ".")
	if !ok || len(token) > 2048 {
		return 0, nil, ErrBadLink
	}
	payload, err1 := enc.DecodeString(p)
	mac, err2 := enc.DecodeString(s)
	if err1 != nil || err2 != nil || len(payload) < 2 {
		return 0, nil, ErrBadLink
	}
	kind, rest := payload[0], payload[1:]
	var fields []string
	for len(rest) > 0 {
		f, more, ok := readField(rest)
		if !ok {
			return 0, nil, ErrBadLink
		}
		fields, rest = append(fields, f), more
	}
	if len(fields) == 0 {
		return 0, nil, ErrBadLink
	}
	key, err := r.tenantKey(ctx, fields[0], false)
	if errors.Is(err, model.ErrNotFound) {
		return 0, nil, ErrBadLink // a tenant that never had a link made has no key: never make one here
	}
	if err != nil {
		return 0, nil, err
	}
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	if !hmac.Equal(m.Sum(nil), mac) {
		return 0, nil, ErrBadLink
	}
	return kind, fields, nil
}

// UnsubscribeToken makes the one-click unsubscribe token of a recipient,
// category and channel. It is the same every time (no expiry: mail keeps
// its link for as long as it is read), so a retried message carries the
// same bytes.
func (r *Relay) UnsubscribeToken(ctx context.Context, l UnsubscribeLink) (string, error) {
	if err := CheckChannel(l.Channel); err != nil {
		return "", fmt.Errorf("an unsubscribe link names one channel: %w", err)
	}
	b := []byte{linkUnsubscribe}
	for _, f := range []string{l.Tenant, l.Recipient, l.Category, l.Channel} {
		b = appendField(b, f)
	}
	return r.sign(ctx, l.Tenant, b)
}

// CheckUnsubscribe verifies a one-click token without acting on it (the
// confirmation page a GET shows).
func (r *Relay) CheckUnsubscribe(ctx context.Context, token string) (UnsubscribeLink, error) {
	kind, f, err := r.verify(ctx, token)
	if err != nil {
		return UnsubscribeLink{}, err
	}
	if kind != linkUnsubscribe || len(f) != 4 || f[3] == "" {
		return UnsubscribeLink{}, ErrBadLink
	}
	l := UnsubscribeLink{Tenant: f[0], Recipient: f[1], Category: f[2], Channel: f[3]}
	// An unsubscribe link never stops a password reset: a required
	// category (or one no longer configured) is refused.
	if cat, ok := r.categories(l.Tenant)[l.Category]; !ok || cat.Required {
		return l, fmt.Errorf("category %q cannot be turned off: %w", l.Category, ErrBadLink)
	}
	return l, nil
}

// Unsubscribe turns the token's category off for its recipient on its
// channel. Idempotent: a repeat changes nothing (changed false), the time
// of the first kept.
func (r *Relay) Unsubscribe(ctx context.Context, token string) (UnsubscribeLink, bool, error) {
	l, err := r.CheckUnsubscribe(ctx, token)
	if err != nil {
		return l, false, err
	}
	_, changed, err := r.store.SetSwitch(ctx, l.Tenant, l.Recipient,
		model.Switch{Category: l.Category, Channel: l.Channel, Enabled: false, SetBy: model.SetByUnsubscribe}, r.now())
	return l, changed, err
}

// PageToken makes a link token to a recipient's preferences page, valid
// for ttl.
func (r *Relay) PageToken(ctx context.Context, tenant, recipient string, ttl time.Duration) (string, time.Time, error) {
	if err := checkPrefIDs(tenant, recipient); err != nil {
		return "", time.Time{}, err
	}
	exp := r.now().Add(ttl).Truncate(time.Second)
	b := []byte{linkPage}
	for _, f := range []string{tenant, recipient, fmt.Sprint(exp.Unix())} {
		b = appendField(b, f)
	}
	tok, err := r.sign(ctx, tenant, b)
	return tok, exp, err
}

// CheckPage verifies a preferences page token and its expiry.
func (r *Relay) CheckPage(ctx context.Context, token string) (PageLink, error) {
	kind, f, err := r.verify(ctx, token)
	if err != nil {
		return PageLink{}, err
	}
	if kind != linkPage || len(f) != 3 {
		return PageLink{}, ErrBadLink
	}
	var unix int64
	if _, err := fmt.Sscan(f[2], &unix); err != nil {
		return PageLink{}, ErrBadLink
	}
	l := PageLink{Tenant: f[0], Recipient: f[1], Expires: time.Unix(unix, 0).UTC()}
	if !r.now().Before(l.Expires) {
		return l, fmt.Errorf("the link expired at %s: %w", l.Expires.Format(time.RFC3339), ErrBadLink)
	}
	return l, nil
}

// FormToken is the value a preferences page's form carries and its POST
// must send back (CSRF): a mac of the page token under the tenant's key,
// which only a page the relay rendered can know.
func (r *Relay) FormToken(ctx context.Context, l PageLink, token string) (string, error) {
	key, err := r.tenantKey(ctx, l.Tenant, false)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("form\x00"))
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// CheckForm reports whether form is the page's form token.
func (r *Relay) CheckForm(ctx context.Context, l PageLink, token, form string) bool {
	want, err := r.FormToken(ctx, l, token)
	return err == nil && hmac.Equal([]byte(want), []byte(form))
}

// unsubscribeURL is the one-click link of a claimed notification whose
// category is optional, "" if there is none (no public URL configured, a
// required category, no category, or the key cannot be read: the message
// then goes without one rather than not at all).
func (r *Relay) unsubscribeURL(ctx context.Context, c model.Claimed) string {
	if r.opts.PublicURL == "" {
		return ""
	}
	name, cat, ok := r.categoryOf(c.Tenant, c.Type, c.Purpose)
	if !ok || cat.Required {
		return ""
	}
	tok, err := r.UnsubscribeToken(ctx, UnsubscribeLink{Tenant: c.Tenant, Recipient: c.Recipient, Category: name, Channel: c.Channel})
	if err != nil {
		r.log.Warn("no unsubscribe link for the message", "notification", c.ID, "err", err)
		return ""
	}
	return strings.TrimSuffix(r.opts.PublicURL, "/") + "/u/" + tok
}

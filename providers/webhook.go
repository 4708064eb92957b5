package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"code.dny.dev/ssrf"
)

var (
	_ Provider       = (*Webhook)(nil)
	_ AddressChecker = (*Webhook)(nil)
)

var webhookKind = &Kind{
	Name: "webhook", Schemes: httpSchemes("webhook"),
	URLs: []string{"webhook+https://host/path[?secret=whsec_…]",
		"webhook+https://NAME?to=recipient&allow=hooks.example.com,*.customer.example"},
	Summary: "POST the notification as JSON with `Idempotency-Key`, to the URL or to each recipient's own",
	Params: httpParams(
		Param{"secret", "a `whsec_…` secret that signs each request per " +
			"[Standard Webhooks](https://www.standardwebhooks.com) (`webhook-id` = the key, so a receiver using any " +
			"Standard Webhooks library verifies it and dedupes on `webhook-id`); receipts must be signed with it too"},
		Param{"to", "`recipient`: POST to each recipient's `url` instead of this URL (per-customer endpoints), if " +
			"`allow` or `allow_prefix` admits it; the URL then only names the provider, and `token` and userinfo are " +
			"refused (every recipient would get them); `route` (the default): POST to this URL"},
		Param{"allow", "with `to=recipient`, the hosts recipient URLs may name, comma-separated: " +
			"`hooks.example.com`, `*.customer.example` (its subdomains) or `*` (any host), on any port"},
		Param{"allow_prefix", "with `to=recipient`, URL prefixes recipient URLs may start with, comma-separated " +
			"(`https://hooks.example.com/customers/`: the same scheme, host and port, a path below it)"},
		Param{"allow_private", "`true`: recipient URLs may reach loopback, private, link-local and other " +
			"non-public addresses, which are refused by default on the address each connection resolves to"},
	),
	Keys:    "as declared (`idempotency=`)",
	Example: "webhook+https://hooks.example.com/notify?secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	build:   newWebhookURL,
}

// Webhook POSTs each message as JSON to one URL (webhook+http://,
// webhook+https://), or with to=recipient to each recipient's own URL
// within an allow-list. Build it with New. With secret=whsec_… every
// request is signed the Standard Webhooks way, and the receiver may post
// receipts back signed with the same secret (signing.go).
type Webhook struct {
	*httpEndpoint
	key []byte // the decoded secret; nil when the URL sets none
	// recipients, with to=recipient, says which recipient URLs may be
	// called; nil: every POST goes to the URL.
	recipients *recipientURLs
}

type webhookRecipient struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

type webhookBody struct {
	Key            string           `json:"key"`
	NotificationID string           `json:"notification_id"`
	Tenant         string           `json:"tenant"`
	EventID        string           `json:"event_id"`
	Type           string           `json:"type"`
	Purpose        string           `json:"purpose"`
	Channel        string           `json:"channel"`
	Recipient      webhookRecipient `json:"recipient"`
	Subject        string           `json:"subject"`
	Body           string           `json:"body"`
	// Data is null when the message has none, so receivers see one shape.
	Data json.RawMessage `json:"data"`
}

func (w *Webhook) Send(ctx context.Context, m *Message) Result {
	target := "" // the URL
	if w.recipients != nil {
		// Checked at accept too; checked again since the route may have
		// changed since (and the dialer checks the address it resolves to).
		u, err := w.recipients.admit(m.Address)
		if err != nil {
			return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "recipient URL refused: " + err.Error()}
		}
		target = u.String()
	}
	body, err := json.Marshal(webhookBody{
		Key: m.Key, NotificationID: m.NotificationID, Tenant: m.Tenant, EventID: m.EventID,
		Type: m.Type, Purpose: m.Purpose, Channel: m.Channel,
		Recipient: webhookRecipient{ID: m.RecipientID, Address: m.Address},
		Subject:   m.Subject, Body: m.Body, Data: m.Data,
	})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	if w.key != nil {
		return w.postSigned(ctx, target, m.Key, body)
	}
	r, _ := w.postWith(ctx, postSpec{target: target, key: m.Key, body: body, idKeys: []string{"id"}})
	return r
}

// CheckAddress says, at accept, whether the webhook would use address: with
// to=recipient, a URL the allow-list admits; without it, anything but a
// URL (which would be silently ignored: every POST goes to the route's
// URL). Other addresses (an email address on a webhook that serves the
// email channel) travel in the body.
func (w *Webhook) CheckAddress(channel, address string) error {
	if w.recipients != nil {
		_, err := w.recipients.admit(address)
		return err
	}
	if u, err := url.Parse(address); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return errors.New("this route's webhook posts to its own URL, not to the recipient's " +
			"(a webhook route with to=recipient and allow= posts to recipient URLs)")
	}
	return nil
}

func newWebhookURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "webhook")
	if problem != "" {
		return nil, problem
	}
	w := &Webhook{httpEndpoint: e}
	if q.Has("secret") {
		if problem := w.sign(q.Get("secret")); problem != "" {
			return nil, problem
		}
	}
	switch to := q.Get("to"); to {
	case "", "route":
		for _, p := range []string{"allow", "allow_prefix", "allow_private"} {
			if q.Has(p) {
				return nil, fmt.Sprintf(`parameter %q applies only with to=recipient`, p)
			}
		}
	case "recipient":
		if e.token != "" || e.basic {
			return nil, "to=recipient: a token or userinfo would be sent to every recipient's URL; " +
				"sign requests with secret= instead"
		}
		rs, problem := parseRecipientURLs(u.Scheme == "webhook+https", q)
		if problem != "" {
			return nil, problem
		}
		w.recipients = rs
		if !rs.private {
			e.publicOnly()
		}
	default:
		return nil, fmt.Sprintf(`parameter "to": %q is neither route nor recipient`, to)
	}
	return w, ""
}

// recipientURLs is a to=recipient webhook's allow-list.
type recipientURLs struct {
	httpsOnly bool     // a webhook+https route calls https URLs only
	hosts     []string // exact host names or IPs, "*.suffix" or "*"
	prefixes  []*url.URL
	private   bool // allow_private=true
	guard     *ssrf.Guardian
	list      string // the allow-list as written, for errors
}

// hostRE is a host name as an allow-list may write it (IP literals parse
// separately).
var hostRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

func parseRecipientURLs(httpsOnly bool, q url.Values) (*recipientURLs, string) {
	rs := &recipientURLs{httpsOnly: httpsOnly, guard: ssrf.New(ssrf.WithAnyPort())}
	switch v := q.Get("allow_private"); v {
	case "", "false":
	case "true":
		rs.private = true
	default:
		return nil, fmt.Sprintf(`parameter "allow_private": %q is neither true nor false`, v)
	}
	if !q.Has("allow") && !q.Has("allow_prefix") {
		return nil, `to=recipient needs parameter "allow" (hosts) or "allow_prefix" (URL prefixes): ` +
			`the recipient URLs this route may call`
	}
	var list []string
	if q.Has("allow") {
		for _, h := range strings.Split(q.Get("allow"), ",") {
			h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
			name := strings.TrimPrefix(h, "*.")
			_, ipErr := netip.ParseAddr(h)
			switch {
			case h == "*", ipErr == nil, hostRE.MatchString(name):
			default:
				return nil, fmt.Sprintf(`parameter "allow": %q is not a host name, *.DOMAIN or * `+
					`(no scheme, port or path: allow_prefix takes those)`, h)
			}
			rs.hosts = append(rs.hosts, h)
			list = append(list, h)
		}
	}
	if q.Has("allow_prefix") {
		for _, raw := range strings.Split(q.Get("allow_prefix"), ",") {
			raw = strings.TrimSpace(raw)
			p, err := url.Parse(raw)
			switch {
			case err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Hostname() == "":
				return nil, fmt.Sprintf(`parameter "allow_prefix": %q is not an absolute http(s) URL`, raw)
			case httpsOnly && p.Scheme != "https":
				return nil, fmt.Sprintf(`parameter "allow_prefix": %q is http on a webhook+https route`, raw)
			case p.User != nil || p.RawQuery != "" || p.Fragment != "" || hasDotSegment(p.Path):
				return nil, fmt.Sprintf(`parameter "allow_prefix": %q: want scheme, host, port and path only`, raw)
			}
			rs.prefixes = append(rs.prefixes, p)
			list = append(list, raw)
		}
	}
	rs.list = strings.Join(list, ", ")
	return rs, ""
}

// admit returns the URL to call for a recipient address, or why the
// route will not call it.
func (rs *recipientURLs) admit(address string) (*url.URL, error) {
	u, err := url.Parse(address)
	switch {
	case err != nil, u.Opaque != "", u.Host == "", u.Hostname() == "",
		u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("not an absolute http(s) URL")
	case rs.httpsOnly && u.Scheme != "https":
		return nil, errors.New("not an https URL (this route calls https only)")
	case u.User != nil:
		return nil, errors.New("a URL with userinfo (user:password@) is refused")
	case hasDotSegment(u.Path):
		return nil, errors.New(`a URL path with "." or ".." segments is refused`)
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if !rs.allows(u, host) {
		return nil, fmt.Errorf("not in the route's allow-list (%s)", rs.list)
	}
	if !rs.private {
		// A literal address is refused here; a name is checked on what it
		// resolves to, when the connection is made.
		if ip, err := netip.ParseAddr(host); err == nil {
			if err := rs.guard.SafeAddr(ip); err != nil {
				return nil, fmt.Errorf("%s is not a public address (allow_private=true on the route permits it)", ip)
			}
		}
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return nil, fmt.Errorf("%s is a loopback name (allow_private=true on the route permits it)", host)
		}
	}
	t := *u
	t.Fragment, t.RawFragment = "", "" // never sent
	return &t, nil
}

func (rs *recipientURLs) allows(u *url.URL, host string) bool {
	for _, h := range rs.hosts {
		if h == "*" || h == host || strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) {
			return true
		}
	}
	return slices.ContainsFunc(rs.prefixes, func(p *url.URL) bool { return underPrefix(u, host, p) })
}

// underPrefix reports whether u is within prefix p: the same scheme, host
// and port, and a path that is p's or below it (a prefix path without a
// trailing slash does not admit a sibling: /hooks admits /hooks/a, not
// /hooks-evil).
func underPrefix(u *url.URL, host string, p *url.URL) bool {
	if u.Scheme != p.Scheme || host != strings.ToLower(strings.TrimSuffix(p.Hostname(), ".")) ||
		portOf(u) != portOf(p) {
		return false
	}
	pp := p.Path
	switch {
	case pp == "" || pp == "/":
		return true
	case strings.HasSuffix(pp, "/"):
		return strings.HasPrefix(u.Path, pp)
	}
	return u.Path == pp || strings.HasPrefix(u.Path, pp+"/")
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// hasDotSegment reports a "." or ".." segment in a (decoded) path, which a
// server may resolve out of an allowed prefix.
func hasDotSegment(path string) bool {
	for _, s := range strings.Split(path, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

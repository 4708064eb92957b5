package providers

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultTimeout bounds one HTTP call when the URL sets no timeout.
const defaultTimeout = 10 * time.Second

// New builds the provider a URL describes, Apprise/Shoutrrr style:
//
//	log://stdout, log://stderr, log:///var/log/edgerelay.log
//	webhook+https://hooks.example.com/notify?token=…
//	email-http+https://api.resend.com/emails?from=Acme%20%3Cno-reply%40acme.test%3E&token=…
//
// The scheme picks the Kind (Kinds lists them with their parameters). HTTP
// providers accept timeout (a Go duration, default 10s), idempotency
// (honoured or none, default none), token (sent as a bearer token), name
// (overrides Name) and userinfo (sent as basic auth). An unknown parameter
// is an error, so a typo cannot silently drop a setting. Errors quote the
// URL through Redact.
func New(rawURL string) (Provider, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, urlError(rawURL, parseProblem(rawURL, err))
	}
	if u.Opaque != "" {
		return nil, urlError(rawURL, fmt.Sprintf("expected %s://…", u.Scheme))
	}
	if u.Fragment != "" || strings.HasSuffix(rawURL, "#") {
		return nil, urlError(rawURL, "unexpected fragment (escape # as %23)")
	}
	p, problem := build(u)
	if problem != "" {
		return nil, urlError(rawURL, problem)
	}
	return p, nil
}

// build builds the provider of u's kind, or says what is wrong with u
// (without quoting it: New does, through Redact).
func build(u *url.URL) (Provider, string) {
	k := kindOf(u.Scheme)
	switch {
	case u.Scheme == "":
		return nil, "missing scheme (supported: " + strings.Join(schemes(), ", ") + ")"
	case k == nil:
		return nil, fmt.Sprintf("unknown scheme %q (supported: %s)", u.Scheme, strings.Join(schemes(), ", "))
	}
	q, problem := params(u, k.paramNames(), k.explained)
	if problem != "" {
		return nil, problem
	}
	return k.build(u, q)
}

func urlError(rawURL, problem string) error {
	return fmt.Errorf("provider URL %q: %s", Redact(rawURL), problem)
}

// parseProblem describes a url.Parse failure. The parser's message can
// quote the text around the fault (an unescaped character in a password
// turns the rest of it into an "invalid port"), so it is withheld whenever
// the URL holds anything Redact would hide.
func parseProblem(rawURL string, err error) string {
	if ue, ok := err.(*url.Error); ok {
		err = ue.Err
	}
	if Redact(rawURL) != rawURL {
		return "not a valid URL (check that reserved characters in credentials are percent-encoded)"
	}
	return "not a valid URL: " + err.Error()
}

// parseEndpoint reads what the HTTP providers share from u and its checked
// query q; base is the scheme without its +http/+https, as Name shows it.
func parseEndpoint(u *url.URL, q url.Values, base string) (*httpEndpoint, string) {
	if u.Host == "" {
		return nil, "missing host"
	}
	target := url.URL{Scheme: strings.TrimPrefix(u.Scheme, base+"+"), Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	e := &httpEndpoint{
		name:    base + "://" + u.Host + u.EscapedPath(),
		url:     target.String(),
		timeout: defaultTimeout,
	}
	if v := q.Get("timeout"); q.Has("timeout") {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Sprintf(`parameter "timeout": %q is not a positive Go duration (try 10s or 1500ms)`, v)
		}
		e.timeout = d
	}
	var problem string
	if e.concurrency, problem = parseConcurrency(q, HTTPConcurrency); problem != "" {
		return nil, problem
	}
	switch v := q.Get("idempotency"); v {
	case "", "none":
	case "honoured":
		e.honours = true
	default:
		return nil, fmt.Sprintf(`parameter "idempotency": %q is neither honoured nor none`, v)
	}
	if q.Has("token") {
		if e.token = q.Get("token"); e.token == "" {
			return nil, `parameter "token" is empty`
		}
	}
	if u.User != nil {
		if e.token != "" {
			return nil, `both userinfo and parameter "token" set: choose basic auth or a bearer token`
		}
		e.user = u.User.Username()
		e.pass, _ = u.User.Password()
		e.basic = true
	}
	if q.Has("name") {
		if e.name = q.Get("name"); e.name == "" {
			return nil, `parameter "name" is empty`
		}
	}
	e.client = newClient(e)
	return e, ""
}

// params parses u's query and refuses parameters outside allowed and
// explained, and parameters given twice: a setting the provider ignores is
// a bug the operator cannot see. explained pass so that the provider can
// say what to use instead; the error names only allowed.
func params(u *url.URL, allowed, explained []string) (url.Values, string) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, "query: " + err.Error()
	}
	var unknown []string
	for k, v := range q {
		if !slices.Contains(allowed, k) && !slices.Contains(explained, k) {
			unknown = append(unknown, strconv.Quote(k))
		} else if len(v) > 1 {
			return nil, fmt.Sprintf("parameter %q given %d times", k, len(v))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		allowed = slices.Sorted(slices.Values(allowed))
		noun := "parameter"
		if len(unknown) > 1 {
			noun = "parameters"
		}
		return nil, fmt.Sprintf("unknown %s %s (supported: %s)", noun, strings.Join(unknown, ", "), strings.Join(allowed, ", "))
	}
	return q, ""
}

// publicParams are the query parameters whose values are not secret.
// Redact hides every other value, so a credential put under a wrong name
// (apikey=…) is not echoed by the error that names the wrong parameter.
var publicParams = []string{"concurrency", "from", "idempotency", "name", "timeout", "preset", "starttls", "dkim_selector", "dkim_domain", "list_unsubscribe", "channel", "to", "allow", "allow_prefix", "allow_private", "vapid_key", "subject", "ttl", "urgency", "key_id", "team_id", "topic", "push_type", "priority", "ca", "domain", "tag", "thread_id"}

// secretPathSchemes are the kinds whose URL path is a credential.
var secretPathSchemes = []string{"slack+", "discord+", "teams+"}

// secretPath reports whether a URL that starts with head (its scheme and
// //) keeps a credential in its path.
func secretPath(head string) bool {
	head = strings.ToLower(head)
	return slices.ContainsFunc(secretPathSchemes, func(s string) bool { return strings.HasPrefix(head, s) })
}

// Redact returns rawURL fit to quote in errors and logs: userinfo becomes
// REDACTED, as do the values of token and of any parameter not known to be
// public, and the fragment. It works on the text, so it also covers URLs
// that do not parse: when one holds an @ after its scheme, everything
// after the scheme is hidden, since where the userinfo ends is unknowable.
func Redact(rawURL string) string {
	const hidden = "REDACTED"
	s, frag, hasFrag := strings.Cut(rawURL, "#")
	s, query, hasQuery := strings.Cut(s, "?")
	// An authority follows the first // when only a scheme (or nothing)
	// comes before it, as url.Parse reads it.
	if i := strings.Index(s, "//"); i >= 0 && (i == 0 || strings.HasSuffix(s[:i], ":")) {
		head, rest := s[:i+2], s[i+2:]
		if _, err := url.Parse(rawURL); err != nil && strings.Contains(rawURL[len(head):], "@") {
			return head + hidden
		}
		authority, path, hasPath := strings.Cut(rest, "/")
		if j := strings.LastIndexByte(authority, '@'); j >= 0 {
			authority = hidden + authority[j:]
		}
		// A chat webhook's path is its secret (Slack's, Discord's token,
		// a Teams webhook's ids).
		if hasPath && secretPath(head) {
			path = hidden
		}
		s = head + authority
		if hasPath {
			s += "/" + path
		}
	}
	if hasQuery {
		pairs := strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' })
		for i, pair := range pairs {
			k, _, hasValue := strings.Cut(pair, "=")
			name, err := url.QueryUnescape(k)
			if err != nil {
				name = k
			}
			if hasValue && !slices.Contains(publicParams, name) {
				pairs[i] = k + "=" + hidden
			}
		}
		s += "?" + strings.Join(pairs, "&")
	}
	if hasFrag && frag != "" {
		s += "#" + hidden
	}
	return s
}

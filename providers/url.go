package providers

import (
	"fmt"
	"net/mail"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// schemes lists the supported provider URL schemes, in the order errors name them.
var schemes = []string{"log", "webhook+http", "webhook+https", "email-http+http", "email-http+https",
	"smtp", "smtps", "twilio+http", "twilio+https", "fcm+http", "fcm+https", "slack+http", "slack+https"}

// httpParams are the query parameters every HTTP provider accepts; the
// provider's own (email-http's from) come on top.
var httpParams = []string{"idempotency", "name", "timeout", "token"}

// defaultTimeout bounds one HTTP call when the URL sets no timeout.
const defaultTimeout = 10 * time.Second

// New builds the provider a URL describes, Apprise/Shoutrrr style:
//
//	log://stdout, log://stderr, log:///var/log/edgerelay.log
//	webhook+https://hooks.example.com/notify?token=…
//	email-http+https://api.resend.com/emails?from=Acme%20%3Cno-reply%40acme.test%3E&token=…
//
// HTTP providers accept timeout (a Go duration, default 10s), idempotency
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
	var p Provider
	var problem string
	switch u.Scheme {
	case "log":
		p, problem = newLogURL(u)
	case "webhook+http", "webhook+https":
		p, problem = newWebhookURL(u)
	case "email-http+http", "email-http+https":
		p, problem = newEmailHTTPURL(u)
	case "smtp", "smtps":
		p, problem = newSMTPURL(u)
	case "twilio+http", "twilio+https":
		p, problem = newTwilioURL(u)
	case "fcm+http", "fcm+https":
		p, problem = newFCMURL(u)
	case "slack+http", "slack+https":
		p, problem = newSlackURL(u)
	case "":
		problem = "missing scheme (supported: " + strings.Join(schemes, ", ") + ")"
	default:
		problem = fmt.Sprintf("unknown scheme %q (supported: %s)", u.Scheme, strings.Join(schemes, ", "))
	}
	if problem != "" {
		return nil, urlError(rawURL, problem)
	}
	return p, nil
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

func newLogURL(u *url.URL) (Provider, string) {
	q, problem := params(u, "name")
	if problem != "" {
		return nil, problem
	}
	if u.User != nil {
		return nil, "log URLs take no credentials"
	}
	name := "log://" + u.Host + u.Path
	if q.Has("name") {
		name = q.Get("name")
	}
	switch {
	case u.Host == "stdout" && u.Path == "":
		return NewLog(os.Stdout, name), ""
	case u.Host == "stderr" && u.Path == "":
		return NewLog(os.Stderr, name), ""
	case u.Host == "" && strings.HasPrefix(u.Path, "/"):
		f, err := os.OpenFile(u.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, "open log file: " + err.Error()
		}
		l := NewLog(f, name)
		l.closer = f
		return l, ""
	}
	return nil, "log target must be stdout, stderr or an absolute file path (log:///var/log/edgerelay.log)"
}

func newWebhookURL(u *url.URL) (Provider, string) {
	e, q, problem := parseEndpoint(u, "webhook", "secret")
	if problem != "" {
		return nil, problem
	}
	w := &Webhook{httpEndpoint: e}
	if q.Has("secret") {
		if problem := w.sign(q.Get("secret")); problem != "" {
			return nil, problem
		}
	}
	return w, ""
}

func newEmailHTTPURL(u *url.URL) (Provider, string) {
	e, q, problem := parseEndpoint(u, "email-http", "from", "preset")
	if problem != "" {
		return nil, problem
	}
	from := q.Get("from")
	if from == "" {
		return nil, `missing parameter "from" (the sender, e.g. from=no-reply%40example.com)`
	}
	if _, err := mail.ParseAddress(from); err != nil {
		return nil, fmt.Sprintf(`parameter "from": %q is not an email address: %v`, from, err)
	}
	p := &EmailHTTP{httpEndpoint: e, from: from}
	if problem := p.preset(q.Get("preset"), q.Has("idempotency")); problem != "" {
		return nil, problem
	}
	return p, ""
}

// parseEndpoint reads what the HTTP providers share from u; base is the
// scheme without its +http/+https, as Name shows it.
func parseEndpoint(u *url.URL, base string, extra ...string) (*httpEndpoint, url.Values, string) {
	q, problem := params(u, append(slices.Clone(httpParams), extra...)...)
	if problem != "" {
		return nil, nil, problem
	}
	if u.Host == "" {
		return nil, nil, "missing host"
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
			return nil, nil, fmt.Sprintf(`parameter "timeout": %q is not a positive Go duration (try 10s or 1500ms)`, v)
		}
		e.timeout = d
	}
	switch v := q.Get("idempotency"); v {
	case "", "none":
	case "honoured":
		e.honours = true
	default:
		return nil, nil, fmt.Sprintf(`parameter "idempotency": %q is neither honoured nor none`, v)
	}
	if q.Has("token") {
		if e.token = q.Get("token"); e.token == "" {
			return nil, nil, `parameter "token" is empty`
		}
	}
	if u.User != nil {
		if e.token != "" {
			return nil, nil, `both userinfo and parameter "token" set: choose basic auth or a bearer token`
		}
		e.user = u.User.Username()
		e.pass, _ = u.User.Password()
		e.basic = true
	}
	if q.Has("name") {
		if e.name = q.Get("name"); e.name == "" {
			return nil, nil, `parameter "name" is empty`
		}
	}
	e.client = newClient(e)
	return e, q, ""
}

// params parses u's query and refuses parameters outside allowed, and
// parameters given twice: a setting the provider ignores is a bug the
// operator cannot see.
func params(u *url.URL, allowed ...string) (url.Values, string) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, "query: " + err.Error()
	}
	var unknown []string
	for k, v := range q {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, strconv.Quote(k))
		} else if len(v) > 1 {
			return nil, fmt.Sprintf("parameter %q given %d times", k, len(v))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		slices.Sort(allowed)
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
var publicParams = []string{"from", "idempotency", "name", "timeout", "preset", "starttls", "channel"}

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
		// A Slack incoming webhook's path is its secret.
		if hasPath && strings.HasPrefix(strings.ToLower(head), "slack+") {
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

package providers

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// A Kind is one provider as the rest of edgerelay sees it before building
// one: New builds it from its schemes, and the errors that list schemes,
// the --route help and the README's provider table are all read from its
// fields. Each provider's file declares its Kind; kinds lists them, so a
// new provider is its file and one line there.
//
// Text fields are Markdown (code in backquotes, links); the CLI prints them
// as plain text.
type Kind struct {
	// Name is the scheme, or the base of the schemes: webhook for
	// webhook+http and webhook+https.
	Name string
	// Schemes are the URL schemes New builds this kind from.
	Schemes []string
	// URLs are the URL shapes to show, e.g. webhook+https://host/path.
	URLs []string
	// Summary says in one line what the kind delivers through.
	Summary string
	// Params are the query parameters the kind takes, each with one line
	// of documentation. New refuses any other.
	Params []Param
	// Keys says whether the remote side honours the idempotency key, and
	// what a repeat looks like when it does not.
	Keys string
	// Example is a URL New accepts (given its files): tests build it
	// against loopback servers.
	Example string

	// explained are parameters the kind does not take but that pass the
	// query check so that build can say what to do instead (twilio's
	// token: the credentials go in the userinfo).
	explained []string
	build     func(u *url.URL, q url.Values) (Provider, string)
}

// A Param is one query parameter of a provider URL.
type Param struct {
	Name string
	Doc  string
}

// kinds are the providers New knows, in the order errors and the README
// list them.
var kinds = []*Kind{logKind, webhookKind, emailHTTPKind, smtpKind, twilioKind, fcmKind, slackKind, discordKind, telegramKind, teamsKind, mailgunKind, sesKind, webPushKind, apnsKind}

// Kinds returns every provider kind, in the order errors and the README
// list them.
func Kinds() []Kind {
	out := make([]Kind, len(kinds))
	for i, k := range kinds {
		out[i] = *k
		out[i].Schemes = slices.Clone(k.Schemes)
		out[i].URLs = slices.Clone(k.URLs)
		out[i].Params = slices.Clone(k.Params)
	}
	return out
}

// The parameters several kinds share, documented once.
var (
	paramName = Param{"name", "the provider's name in the audit trail, status counts and receipt URLs " +
		"(default: from the URL, without credentials)"}
	paramTimeout     = Param{"timeout", "the longest one call may take, a Go duration (default `10s`)"}
	paramIdempotency = Param{"idempotency", "whether the remote dedupes on the key, `honoured` or `none` " +
		"(default `none`, or the preset's; the operator's word wins)"}
	paramToken = Param{"token", "sent as a bearer token; `user:pass@` in the URL is sent as basic auth instead"}
	// paramConcurrency is the ceiling of the provider's window of calls in
	// flight; the relay halves the window when the provider pushes back.
	paramConcurrency = Param{"concurrency", "the most calls in flight at once, a whole number " +
		"(default " + itoa(HTTPConcurrency) + " for an HTTP API, " + itoa(SMTPConcurrency) + " connections for SMTP); " +
		"the relay halves it while the provider pushes back (429, 503, Retry-After; SMTP 421, 451) and grows it back after"}
)

// The default most calls in flight to one provider, by kind: what the
// relay's window for it starts at and never passes (see Concurrency). An
// HTTP API takes hundreds of requests at once: 1,024 in flight hide a
// 300 ms answer at about 3,400 calls a second. An SMTP relay is a server of
// the operator's, and each call is a connection of its own.
const (
	HTTPConcurrency = 1024
	SMTPConcurrency = 8
)

// Concurrency is the most calls p should have in flight at once: its URL's
// concurrency parameter, else its kind's default; 0 is unbounded (the log
// provider, and providers from outside this package that say nothing).
func Concurrency(p Provider) int {
	if c, ok := p.(interface{ Concurrency() int }); ok {
		return c.Concurrency()
	}
	return 0
}

// parseConcurrency reads the concurrency parameter, def when absent.
func parseConcurrency(q url.Values, def int) (int, string) {
	if !q.Has("concurrency") {
		return def, ""
	}
	v := q.Get("concurrency")
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Sprintf(`parameter "concurrency": %q is not a positive whole number (try 64)`, v)
	}
	return n, ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// SharedParams are the parameters that mean the same for every kind that
// takes them.
func SharedParams() []Param {
	return []Param{paramConcurrency, paramIdempotency, paramName, paramTimeout, paramToken}
}

// httpParams are a kind's own parameters followed by those every HTTP
// provider takes.
func httpParams(own ...Param) []Param {
	return append(slices.Clone(own), SharedParams()...)
}

// httpSchemes are the two schemes of an HTTP provider: base+http for tests
// and private endpoints, base+https for the world.
func httpSchemes(base string) []string {
	return []string{base + "+http", base + "+https"}
}

// codeList writes names as Markdown code: `a`, `b`, `c`.
func codeList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "`" + n + "`"
	}
	return strings.Join(quoted, ", ")
}

// kindOf returns the kind that builds scheme, or nil.
func kindOf(scheme string) *Kind {
	for _, k := range kinds {
		if slices.Contains(k.Schemes, scheme) {
			return k
		}
	}
	return nil
}

// schemes lists every scheme New builds, in the order errors name them.
func schemes() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.Schemes...)
	}
	return out
}

func (k *Kind) paramNames() []string {
	names := make([]string, len(k.Params))
	for i, p := range k.Params {
		names[i] = p.Name
	}
	return names
}

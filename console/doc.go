// Package console is the operator's console: HTML pages, served by
// `edgerelay serve` at /console, that answer "did my OTP go out?" and let a
// person act on the answer (retry, quarantine, address marks) in a browser.
//
// It owns the pages (html/template, rendered on the server; every read works
// without JavaScript), their assets (embedded: nothing is fetched from
// elsewhere), the charts (inline SVG drawn here), and access to them: a
// login that exchanges an API token for a session kept in the store (the
// cookie holds only its random id), a throttle on failed logins, CSRF
// tokens on every form that posts, and the security headers of every
// answer.
//
// It must never reach storage but through *relay.Relay, never resolve a
// token but as the API does (Auth, which api.Server implements), and never
// show one tenant's rows to another: every page is scoped to the session's
// tenant, and another tenant's notification is "not found".
package console

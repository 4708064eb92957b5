package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// Sessions. A login exchanges an API token for a cookie holding a random
// 256-bit session id; the store keeps only the id's SHA-256, with the
// tenant, the token's hash and the expiry (model.Sessions). Every request
// looks the session up in the store, then resolves the token's hash again
// as the API resolves a token. So a logout (the row deleted) and a revoked
// token end the session on every process sharing the store at once, a
// login on one node works on every node, and no process has a key of its
// own to sign with (none is needed: nothing the browser holds is trusted
// but the id, which is checked against the store). The CSRF token of a
// session's forms is derived from its id (a hash, which does not reveal
// the id).
//
// The cookie is HttpOnly and SameSite=Strict. Over HTTPS (TLS here, or a
// trusted proxy's X-Forwarded-Proto: https; see proxy.go) it is Secure,
// named with the __Host- prefix and so Path=/ (which that prefix
// requires); over plain HTTP it is Path=/console. An open console (the
// API open on loopback) needs no token: its session names the tenant
// chosen and ends when the API closes.

const (
	sessionCookie = "edgerelay_console"
	loginCookie   = "edgerelay_console_login" // the login form's CSRF nonce, before a session exists
	hostPrefix    = "__Host-"
	// pruneOnLogin is how many expired sessions each login deletes: logins
	// are what make sessions, so this keeps the table to about the live
	// ones without a job of its own.
	pruneOnLogin = 100
)

// session is who is looking.
type session struct {
	Tenant string
	Hash   string // the token's hash; "" in open mode
	CSRF   string
	// Who names the caller for the audit trail (never a secret).
	Who string
	// idHash is the hash of the session's id, under which the store keeps it.
	idHash string
}

// operator reports whether the session is the operator's: one of the
// console open on loopback (no token, the API serves every tenant). A
// session from a tenant's token is that tenant's only.
func (s *session) operator() bool { return s.Hash == "" }

// newSessionID draws a session's id: 256 random bits, as the cookie
// holds them.
func newSessionID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionIDLen is the length of newSessionID's ids: a cookie of another
// length is no session, and is not looked up.
const sessionIDLen = 43

// idHash is what the store keeps of a session id.
func idHash(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// csrfOf is the CSRF token of the session whose id is id: a hash in its
// own domain, so neither the page showing it nor the store reveals the id.
func csrfOf(id string) string {
	h := sha256.Sum256([]byte("edgerelay console csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// cookieName is a cookie's name for this request: with the __Host- prefix
// over HTTPS, which the browser accepts only Secure, with Path=/ and no
// Domain, and so never from a subdomain or over plain HTTP.
func (c *Console) cookieName(r *http.Request, name string) string {
	if c.https(r) {
		return hostPrefix + name
	}
	return name
}

func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	ck := &http.Cookie{Name: c.cookieName(r, name), Value: value, Path: c.opts.Prefix, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode}
	if c.https(r) {
		ck.Secure, ck.Path = true, "/"
	}
	return ck
}

var errSignedOut = errors.New("signed out")

// current returns the request's session, checked against the store's
// sessions and the API's tokens now.
func (c *Console) current(r *http.Request) (*session, error) {
	ck, err := r.Cookie(c.cookieName(r, sessionCookie))
	if err != nil || len(ck.Value) != sessionIDLen {
		return nil, errSignedOut
	}
	ss, err := c.sessions.Session(r.Context(), idHash(ck.Value), c.opts.Now())
	if errors.Is(err, model.ErrNotFound) {
		return nil, errSignedOut // ended, expired, or never made
	}
	if err != nil {
		return nil, err
	}
	s := &session{Tenant: ss.Tenant, Hash: ss.TokenHash, Who: ss.Who, CSRF: csrfOf(ck.Value), idHash: ss.IDHash}
	if s.Hash == "" {
		open, err := c.opts.Auth.Open(r.Context())
		if err != nil {
			return nil, err
		}
		if !open {
			return nil, errSignedOut // a token was created: the open session ends
		}
		return s, nil
	}
	t, err := c.opts.Auth.TokenByHash(r.Context(), s.Hash)
	if errors.Is(err, model.ErrNotFound) || err == nil && t.Tenant != s.Tenant {
		return nil, errSignedOut
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

type authedFunc func(w http.ResponseWriter, r *http.Request, s *session)

// authed serves a page to a signed-in session (else the login page, or 403
// for a POST), and checks every POST's CSRF token and origin.
func (c *Console) authed(h authedFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.current(r)
		if errors.Is(err, errSignedOut) {
			if r.Method != http.MethodGet {
				c.fail(w, r, nil, http.StatusForbidden, "Signed out", "Your session has ended; sign in again. Nothing was changed.")
				return
			}
			http.Redirect(w, r, c.opts.Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			c.internal(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost && !c.checkPost(w, r, s.CSRF) {
			return
		}
		h(w, r, s)
	}
}

// checkPost refuses a POST whose CSRF token is not the session's, or that
// came from another origin (SameSite=Strict already keeps the cookie off
// cross-site requests; this holds without it).
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request, want string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, http.StatusBadRequest, "Bad form", err.Error())
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			c.fail(w, r, nil, http.StatusForbidden, "Refused", "This form was posted from another site ("+o+"). Nothing was changed.")
			return false
		}
	}
	got := r.PostForm.Get("csrf")
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		c.fail(w, r, nil, http.StatusForbidden, "Refused", "The form's security token is missing or stale: reload the page and try again. Nothing was changed.")
		return false
	}
	return true
}

func random() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// loginData is the login page's content.
type loginData struct {
	Open    bool
	Next    string
	Error   string
	Tenant  string
	LoginTK string
}

// safeNext keeps a redirect after login inside the console.
func (c *Console) safeNext(next string) string {
	if !strings.HasPrefix(next, c.opts.Prefix+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return c.opts.Prefix + "/"
	}
	return next
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.showLogin(w, r, http.StatusOK, "", "")
}

// showLogin draws the login form with a fresh nonce, in a cookie and in
// the form: a login POST must carry both, equal (a double submit; the
// cookie is SameSite=Strict, so another site's form arrives without it).
// The nonce needs no key: anyone may fetch a valid pair, and what it
// proves is only that the form was posted from a page this console drew.
func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, code int, msg, tenant string) {
	open, err := c.opts.Auth.Open(r.Context())
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	nonce := random()
	http.SetCookie(w, c.cookie(r, loginCookie, nonce, 600))
	if tenant == "" {
		tenant = "default"
	}
	c.render(w, r, nil, code, "login", "Sign in", loginData{Open: open, Next: c.safeNext(r.FormValue("next")), Error: msg,
		Tenant: tenant, LoginTK: nonce})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, http.StatusBadRequest, "Bad form", err.Error())
		return
	}
	ck, err := r.Cookie(c.cookieName(r, loginCookie))
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(ck.Value)) != 1 {
		c.showLogin(w, r, http.StatusForbidden, "The form was stale; sign in again.", "")
		return
	}
	open, err := c.opts.Auth.Open(r.Context())
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	now := c.opts.Now()
	id := newSessionID()
	ss := model.Session{IDHash: idHash(id), CreatedAt: now, ExpiresAt: now.Add(c.opts.SessionTTL)}
	client := c.clientAddr(r)
	if open {
		ss.Tenant = strings.TrimSpace(r.PostForm.Get("tenant"))
		if err := relay.CheckTenant("tenant", ss.Tenant); err != nil {
			c.showLogin(w, r, http.StatusBadRequest, err.Error(), ss.Tenant)
			return
		}
		ss.Who = "console, open on loopback, as tenant " + ss.Tenant
	} else {
		// A guess costs the address one try of its allowance; a login that
		// succeeds gives it back.
		try, wait := c.logins.try(client, now)
		if wait > 0 {
			secs := int((wait + 999_999_999) / 1_000_000_000)
			c.log.Warn("console: sign-in throttled", "remote", client, "retry_after_s", secs)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			c.showLogin(w, r, http.StatusTooManyRequests,
				fmt.Sprintf("Too many failed sign-ins from your address: try again in %d seconds.", secs), "")
			return
		}
		token := strings.TrimSpace(r.PostForm.Get("token"))
		t, err := c.opts.Auth.TokenByHash(r.Context(), api.HashToken(token))
		if errors.Is(err, model.ErrNotFound) || token == "" {
			c.log.Warn("console: sign-in refused: unknown token", "remote", client)
			c.showLogin(w, r, http.StatusUnauthorized, "That token is not known: use an API token of your tenant.", "")
			return
		}
		try.refund(now)
		if err != nil {
			c.internal(w, r, nil, err)
			return
		}
		ss.Tenant, ss.TokenHash = t.Tenant, api.HashToken(token)
		if t.ID == 0 {
			ss.Who = fmt.Sprintf("console, a config token of tenant %s", t.Tenant)
		} else {
			ss.Who = fmt.Sprintf("console, token %d (%s) of tenant %s", t.ID, t.Name, t.Tenant)
		}
	}
	if err := c.sessions.CreateSession(r.Context(), ss); err != nil {
		c.internal(w, r, nil, err)
		return
	}
	// A session this browser held before ends: a login never leaves two.
	if old, err := r.Cookie(c.cookieName(r, sessionCookie)); err == nil && len(old.Value) == sessionIDLen {
		if err := c.sessions.DeleteSession(r.Context(), idHash(old.Value)); err != nil {
			c.log.Warn("console: end the session signed in over", "err", err)
		}
	}
	if _, err := c.sessions.PruneSessions(r.Context(), now, pruneOnLogin); err != nil {
		c.log.Warn("console: prune expired sessions", "err", err)
	}
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, c.cookie(r, sessionCookie, id, int(c.opts.SessionTTL.Seconds())))
	c.log.Info("console: signed in", "who", ss.Who, "remote", client)
	http.Redirect(w, r, c.safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session in the store, for every node, before it
// clears the cookie: a copy of the cookie opens nothing after.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	s, err := c.current(r)
	switch {
	case err == nil:
		if !c.checkPost(w, r, s.CSRF) {
			return
		}
		if err := c.sessions.DeleteSession(r.Context(), s.idHash); err != nil {
			c.internal(w, r, s, err)
			return
		}
		c.log.Info("console: signed out", "who", s.Who, "remote", c.clientAddr(r))
	case !errors.Is(err, errSignedOut):
		c.internal(w, r, nil, err)
		return
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, c.opts.Prefix+"/login", http.StatusSeeOther)
}

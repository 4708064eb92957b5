package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"edgerelay/api"
	"edgerelay/relay"
	"edgerelay/store"
)

// Sessions. A login exchanges an API token for a cookie holding the
// token's hash, its tenant, an expiry and a CSRF secret, signed with
// HMAC-SHA256 under Options.Key. Every request checks the signature and the
// expiry, then resolves the hash again as the API resolves a token, so a
// revoked token ends its sessions at once. The cookie is HttpOnly,
// SameSite=Strict, Path=/console, and Secure when the request came over
// TLS. An open console (the API open on loopback) needs no token: its
// session names the tenant chosen and ends when the API closes.

const (
	sessionCookie = "edgerelay_console"
	loginCookie   = "edgerelay_console_login" // the login form's CSRF secret, before a session exists
)

// session is who is looking.
type session struct {
	Tenant string `json:"t"`
	Hash   string `json:"h,omitempty"` // the token's hash; "" in open mode
	Expiry int64  `json:"e"`
	CSRF   string `json:"c"`
	// Who names the caller for the audit trail (never a secret).
	Who string `json:"w"`
}

// operator reports whether the session is the operator's: one of the
// console open on loopback (no token, the API serves every tenant). A
// session from a tenant's token is that tenant's only.
func (s *session) operator() bool { return s.Hash == "" }

func (c *Console) sign(b []byte) string {
	m := hmac.New(sha256.New, c.opts.Key)
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (c *Console) encode(s session) string {
	b, _ := json.Marshal(s)
	return base64.RawURLEncoding.EncodeToString(b) + "." + c.sign(b)
}

func (c *Console) decode(v string) (session, bool) {
	var s session
	body, sig, ok := strings.Cut(v, ".")
	if !ok {
		return s, false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || !hmac.Equal([]byte(sig), []byte(c.sign(b))) {
		return s, false
	}
	if json.Unmarshal(b, &s) != nil || time.Now().Unix() > s.Expiry {
		return s, false
	}
	return s, true
}

func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: c.opts.Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

var errSignedOut = errors.New("signed out")

// current returns the request's session, checked against the API's
// tokens now.
func (c *Console) current(r *http.Request) (*session, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, errSignedOut
	}
	s, ok := c.decode(ck.Value)
	if !ok {
		return nil, errSignedOut
	}
	if s.Hash == "" {
		open, err := c.opts.Auth.Open(r.Context())
		if err != nil {
			return nil, err
		}
		if !open {
			return nil, errSignedOut // a token was created: the open session ends
		}
		return &s, nil
	}
	t, err := c.opts.Auth.TokenByHash(r.Context(), s.Hash)
	if errors.Is(err, store.ErrNotFound) || err == nil && t.Tenant != s.Tenant {
		return nil, errSignedOut
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
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

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, code int, msg, tenant string) {
	open, err := c.opts.Auth.Open(r.Context())
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	secret := random()
	http.SetCookie(w, c.cookie(r, loginCookie, secret, 600))
	if tenant == "" {
		tenant = "default"
	}
	c.render(w, r, nil, code, "login", "Sign in", loginData{Open: open, Next: c.safeNext(r.FormValue("next")), Error: msg,
		Tenant: tenant, LoginTK: c.sign([]byte("login:" + secret))})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, http.StatusBadRequest, "Bad form", err.Error())
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.sign([]byte("login:"+ck.Value)))) {
		c.showLogin(w, r, http.StatusForbidden, "The form was stale; sign in again.", "")
		return
	}
	open, err := c.opts.Auth.Open(r.Context())
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	s := session{Expiry: time.Now().Add(c.opts.SessionTTL).Unix(), CSRF: random()}
	if open {
		s.Tenant = strings.TrimSpace(r.PostForm.Get("tenant"))
		if err := relay.CheckTenant("tenant", s.Tenant); err != nil {
			c.showLogin(w, r, http.StatusBadRequest, err.Error(), s.Tenant)
			return
		}
		s.Who = "console, open on loopback, as tenant " + s.Tenant
	} else {
		token := strings.TrimSpace(r.PostForm.Get("token"))
		t, err := c.opts.Auth.TokenByHash(r.Context(), api.HashToken(token))
		if errors.Is(err, store.ErrNotFound) || token == "" {
			c.log.Warn("console: sign-in refused: unknown token", "remote", r.RemoteAddr)
			c.showLogin(w, r, http.StatusUnauthorized, "That token is not known: use an API token of your tenant.", "")
			return
		}
		if err != nil {
			c.internal(w, r, nil, err)
			return
		}
		s.Tenant, s.Hash = t.Tenant, api.HashToken(token)
		if t.ID == 0 {
			s.Who = fmt.Sprintf("console, a config token of tenant %s", t.Tenant)
		} else {
			s.Who = fmt.Sprintf("console, token %d (%s) of tenant %s", t.ID, t.Name, t.Tenant)
		}
	}
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, c.cookie(r, sessionCookie, c.encode(s), int(c.opts.SessionTTL.Seconds())))
	c.log.Info("console: signed in", "who", s.Who, "remote", r.RemoteAddr)
	http.Redirect(w, r, c.safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if s, err := c.current(r); err == nil && !c.checkPost(w, r, s.CSRF) {
		return
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, c.opts.Prefix+"/login", http.StatusSeeOther)
}

package api

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// The recipients' own pages, reached through signed links, no
// login: one-click unsubscribe (RFC 8058) at /u/{token} and the
// preferences page at /p/{token}. Rendered on the server with
// html/template (escaping by default), no script, no asset from elsewhere.
//
// A GET changes nothing but a click count: link scanners and mail
// previews fetch GETs. Only a POST changes what a recipient gets: /u/{token} with List-Unsubscribe=One-Click (what
// a mail client sends, RFC 8058 §3.2; the confirmation page's form sends
// the same), /p/{token} with the form token its page carried (CSRF: only
// a page the relay rendered knows it) and not from another site
// (Sec-Fetch-Site). A forged, widened or expired token is a 403.

func (s *Server) linkRoutes() {
	s.handle("POST /v1/recipients/{id}/links", s.auth(s.postLinks))
	s.handle("GET /u/{token}", s.recipientPage(s.unsubscribePage))
	s.handle("POST /u/{token}", s.recipientPage(s.unsubscribe))
	s.handle("GET /p/{token}", s.recipientPage(s.preferencesPage))
	s.handle("POST /p/{token}", s.recipientPage(s.postPreferencesPage))
	s.handle("GET /c/{token}", s.recipientPage(s.click))
}

// click is a tracked link (a template's track helper): it counts the click
// for the message's notification and sends the browser on with 302 Found.
// The redirect sends no Referer, so the destination never sees the token.
// A forged or altered token is the 403 page and sends nowhere: the relay
// only redirects to links it signed. A mail scanner that follows links
// counts as a click too, as it does for every sender that tracks them.
func (s *Server) click(w http.ResponseWriter, r *http.Request) response {
	link, err := s.r.Click(r.Context(), r.PathValue("token"))
	if err != nil {
		return s.linkRefused(err)
	}
	w.Header().Set("Location", link)
	w.Header().Set("Referrer-Policy", "no-referrer")
	body := `<!doctype html><title>Redirecting</title><p><a href="` + template.HTMLEscapeString(link) + `">Continue</a></p>` + "\n"
	return response{status: http.StatusFound, ctype: "text/html; charset=utf-8", body: []byte(body)}
}

// recipientPage wraps the recipients' pages. Their answers are never
// framed (a framed unsubscribe button can be clickjacked) nor cached (a
// page shows one recipient's preferences, and its link is the only key).
// A POST a browser says came from another site is refused before anything
// is read or changed. A POST without Origin or Sec-Fetch-Site is let
// through: RFC 8058 one-click unsubscribes are sent by mail providers'
// servers, which send neither.
func (s *Server) recipientPage(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) response {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cache-Control", "no-store")
		if r.Method == http.MethodPost && s.crossSite(r) {
			return problem(http.StatusForbidden, probInvalidRequest, "Cross-site request refused",
				"this form can only be sent from its own page, not from another site")
		}
		return h(w, r)
	}
}

// crossSite tells whether a browser says the request came from another
// site: Sec-Fetch-Site cross-site, or an Origin whose host is neither the
// request's own nor the public URL's. "Origin: null" is what a browser
// sends for a form POST from a page with referrer policy no-referrer (as
// these pages are), so it says nothing and is not refused by itself.
func (s *Server) crossSite(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return true
	}
	if strings.EqualFold(u.Host, r.Host) {
		return false
	}
	if pu, err := url.Parse(s.opts.PublicURL); err == nil && pu.Host != "" && strings.EqualFold(u.Host, pu.Host) {
		return false
	}
	return true
}

// linksRequest is the body of POST /v1/recipients/{id}/links.
type linksRequest struct {
	// TTL of the preferences page link; default 7 days, at most 90.
	TTL string `json:"ttl"`
	// Channels to make unsubscribe links for; default ["email"].
	Channels []string `json:"channels"`
}

// linksBody answers it: the page link, and one unsubscribe link per
// optional category and channel. Paths are relative to where the API is
// served (Options.PublicURL, when set, makes them absolute).
type linksBody struct {
	Preferences struct {
		URL     string    `json:"url"`
		Expires time.Time `json:"expires_at"`
	} `json:"preferences"`
	Unsubscribe []unsubscribeLink `json:"unsubscribe"`
}

type unsubscribeLink struct {
	Category string `json:"category"`
	Channel  string `json:"channel"`
	URL      string `json:"url"`
}

func (s *Server) postLinks(w http.ResponseWriter, r *http.Request, c caller) response {
	var req linksRequest // no body at all: every default
	if perr := s.readOptionalJSON(w, r, &req, `{"ttl": "168h", "channels": ["email"]}`); perr != nil {
		return *perr
	}
	tenant, perr := s.preferenceTenant(r, c, "link")
	if perr != nil {
		return *perr
	}
	ttl := 7 * 24 * time.Hour
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > 90*24*time.Hour {
			return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid ttl", "ttl: want a duration up to 2160h (90 days), e.g. 168h", "ttl")
		}
		ttl = d
	}
	if len(req.Channels) == 0 {
		req.Channels = []string{"email"}
	}
	for i, ch := range req.Channels {
		if err := relay.CheckChannel(ch); err != nil {
			f := fmt.Sprintf("channels[%d]", i)
			return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid channel", f+": "+err.Error(), f)
		}
	}
	id := r.PathValue("id")
	tok, exp, err := s.r.PageToken(r.Context(), tenant, id, ttl)
	if err != nil {
		return s.preferenceError(err)
	}
	var out linksBody
	out.Preferences.URL, out.Preferences.Expires = s.linkURL("/p/"+tok), exp
	out.Unsubscribe = []unsubscribeLink{}
	p, err := s.r.RecipientPreferences(r.Context(), tenant, id)
	if err != nil {
		return s.preferenceError(err)
	}
	for _, cp := range p.Categories {
		if cp.Required {
			continue
		}
		for _, ch := range req.Channels {
			t, err := s.r.UnsubscribeToken(r.Context(), relay.UnsubscribeLink{Tenant: tenant, Recipient: id, Category: cp.Name, Channel: ch})
			if err != nil {
				return s.internal(err)
			}
			out.Unsubscribe = append(out.Unsubscribe, unsubscribeLink{Category: cp.Name, Channel: ch, URL: s.linkURL("/u/" + t)})
		}
	}
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) linkURL(path string) string {
	return strings.TrimSuffix(s.opts.PublicURL, "/") + path
}

var pages = template.Must(template.New("pages").Parse(`
{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>{{.}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:2em auto;padding:0 1em}
fieldset{border:1px solid #ccc;margin:1em 0}button{font:inherit;padding:.3em 1em}.channel{margin-left:2em}</style></head><body>{{end}}
{{define "unsubscribe"}}{{template "head" "Unsubscribe"}}
<h1>Unsubscribe</h1>
<p>Stop <strong>{{.Category}}</strong> messages by <strong>{{.Channel}}</strong> to <strong>{{.Recipient}}</strong>?</p>
<form method="post" action="/u/{{.Token}}">
<input type="hidden" name="List-Unsubscribe" value="One-Click">
<button type="submit">Unsubscribe</button>
</form></body></html>{{end}}
{{define "unsubscribed"}}{{template "head" "Unsubscribed"}}
<h1>Unsubscribed</h1>
<p>No more <strong>{{.Category}}</strong> messages by <strong>{{.Channel}}</strong> will be sent to <strong>{{.Recipient}}</strong>.</p>
</body></html>{{end}}
{{define "refused"}}{{template "head" "Link not valid"}}
<h1>This link is not valid</h1><p>{{.}}</p></body></html>{{end}}
{{define "preferences"}}{{template "head" "Your notification preferences"}}
<h1>Your notification preferences</h1>
{{if .Saved}}<p role="status"><strong>Saved.</strong></p>{{end}}
<form method="post" action="/p/{{.Token}}">
<input type="hidden" name="form" value="{{.Form}}">
<fieldset><legend>What reaches you</legend>
{{range .Prefs.Categories}}<p><label><input type="checkbox" name="on" value="{{.Name}}"{{if .Enabled}} checked{{end}}{{if .Required}} disabled{{end}}>
{{.Name}}</label>{{if .Required}} (always sent){{else if .Channels}} (on every channel, except as set below){{end}}</p>
{{if not .Required}}{{$cat := .Name}}{{range .Channels}}<p class="channel"><input type="hidden" name="shown" value="{{$cat}}/{{.Channel}}">
<label><input type="checkbox" name="channel" value="{{$cat}}/{{.Channel}}"{{if .Enabled}} checked{{end}}>
{{$cat}} by {{.Channel}}</label>{{if not .Enabled}} (turned off {{if eq .SetBy "unsubscribe"}}by an unsubscribe link{{else}}for {{.Channel}} alone{{end}}: tick it to receive it again){{end}}</p>
{{end}}{{end}}{{end}}</fieldset>
<fieldset><legend>Quiet hours</legend>
<p><label>From <input name="quiet_from" type="time" value="{{.QuietFrom}}"></label>
<label>to <input name="quiet_to" type="time" value="{{.QuietTo}}"></label></p>
<p><label>Time zone <input name="timezone" value="{{.Prefs.TimeZone}}" placeholder="Europe/Berlin"></label></p>
</fieldset>
<button type="submit">Save</button>
</form>
<p><small>This page's link expires {{.Expires}}.</small></p></body></html>{{end}}
`))

func renderPage(status int, name string, data any) response {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		return problem(http.StatusInternalServerError, probInternal, "Internal error", err.Error())
	}
	return response{status: status, ctype: "text/html; charset=utf-8", body: b.Bytes()}
}

// linkRefused is the page of a link that is not valid (403), or an
// internal error.
func (s *Server) linkRefused(err error) response {
	if errors.Is(err, relay.ErrBadLink) {
		msg := "It may have been changed or copied incompletely."
		if strings.Contains(err.Error(), "expired") {
			msg = "It has expired. Ask for a new one."
		}
		return renderPage(http.StatusForbidden, "refused", msg)
	}
	s.log.Error("link", "err", err)
	return renderPage(http.StatusInternalServerError, "refused", "Something went wrong; try again later.")
}

type unsubscribeData struct {
	relay.UnsubscribeLink
	Token string
}

// unsubscribePage confirms what the link would do; it changes nothing.
func (s *Server) unsubscribePage(w http.ResponseWriter, r *http.Request) response {
	tok := r.PathValue("token")
	l, err := s.r.CheckUnsubscribe(r.Context(), tok)
	if err != nil {
		return s.linkRefused(err)
	}
	return renderPage(http.StatusOK, "unsubscribe", unsubscribeData{l, tok})
}

// readForm parses a small form body, urlencoded or multipart (RFC 8058
// allows either).
func readForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseMultipartForm(64 << 10); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return err
	}
	return nil
}

func (s *Server) unsubscribe(w http.ResponseWriter, r *http.Request) response {
	tok := r.PathValue("token")
	if err := readForm(w, r); err != nil || r.PostForm.Get("List-Unsubscribe") != "One-Click" {
		// Checked before the token: nothing but a one-click POST acts.
		return problem(http.StatusBadRequest, probInvalidRequest, "Not a one-click unsubscribe",
			"the body must hold List-Unsubscribe=One-Click (RFC 8058)")
	}
	l, _, err := s.r.Unsubscribe(r.Context(), tok)
	if err != nil {
		return s.linkRefused(err)
	}
	return renderPage(http.StatusOK, "unsubscribed", l)
}

type preferencesData struct {
	Prefs       relay.Preferences
	Token, Form string
	QuietFrom   string
	QuietTo     string
	Expires     string
	Saved       bool
	relay.PageLink
}

func (s *Server) renderPreferences(r *http.Request, tok string, l relay.PageLink, saved bool) response {
	p, err := s.r.RecipientPreferences(r.Context(), l.Tenant, l.Recipient)
	if err != nil {
		return s.linkRefused(err)
	}
	form, err := s.r.FormToken(r.Context(), l, tok)
	if err != nil {
		return s.linkRefused(err)
	}
	d := preferencesData{Prefs: p, Token: tok, Form: form, Expires: l.Expires.Format("2 January 2006 15:04 MST"), Saved: saved, PageLink: l}
	for _, q := range p.Quiet {
		if q.Category == "" {
			d.QuietFrom, d.QuietTo, _ = strings.Cut(q.Window, "-")
		}
	}
	return renderPage(http.StatusOK, "preferences", d)
}

func (s *Server) preferencesPage(w http.ResponseWriter, r *http.Request) response {
	tok := r.PathValue("token")
	l, err := s.r.CheckPage(r.Context(), tok)
	if err != nil {
		return s.linkRefused(err)
	}
	return s.renderPreferences(r, tok, l, false)
}

// postPreferencesPage saves the page's form: every optional category on
// if ticked, off if not (on every channel); each channel's own switch the
// page showed (an unsubscribe link's, or one set through the API) on if
// ticked, off if not, and dropped when it says what the category says (it
// then follows the category again); one the page did not show (set since
// it was loaded) stays; the quiet hours for every optional category and
// the time zone.
func (s *Server) postPreferencesPage(w http.ResponseWriter, r *http.Request) response {
	tok := r.PathValue("token")
	l, err := s.r.CheckPage(r.Context(), tok)
	if err != nil {
		return s.linkRefused(err)
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return renderPage(http.StatusForbidden, "refused", "This form can only be sent from its own page.")
	}
	if err := readForm(w, r); err != nil || !s.r.CheckForm(r.Context(), l, tok, r.PostForm.Get("form")) {
		return renderPage(http.StatusForbidden, "refused", "This form can only be sent from its own page; reload it and try again.")
	}
	cur, err := s.r.RecipientPreferences(r.Context(), l.Tenant, l.Recipient)
	if err != nil {
		return s.linkRefused(err)
	}
	in := relay.PreferencesInput{TimeZone: strings.TrimSpace(r.PostForm.Get("timezone")), Switches: pageSwitches(cur, r.PostForm)}
	for _, q := range cur.Quiet {
		if q.Category != "" {
			in.QuietHours = append(in.QuietHours, relay.QuietPreference{Category: q.Category, Window: q.Window})
		}
	}
	if from, to := r.PostForm.Get("quiet_from"), r.PostForm.Get("quiet_to"); from != "" || to != "" {
		in.QuietHours = append(in.QuietHours, relay.QuietPreference{Window: from + "-" + to})
	}
	if _, err := s.r.PutPreferences(r.Context(), l.Tenant, l.Recipient, in, model.SetByPage); err != nil {
		var inv *relay.InvalidEventError
		if errors.As(err, &inv) {
			return renderPage(http.StatusBadRequest, "refused", "Not saved: "+inv.Reason)
		}
		return s.linkRefused(err)
	}
	return s.renderPreferences(r, tok, l, true)
}

// pageSwitches are the switches the preferences form sets: see
// postPreferencesPage.
func pageSwitches(cur relay.Preferences, form url.Values) []relay.SwitchInput {
	set := func(vs []string) map[string]bool {
		m := map[string]bool{}
		for _, v := range vs {
			m[v] = true
		}
		return m
	}
	on, shown, channelOn := set(form["on"]), set(form["shown"]), set(form["channel"])
	var out []relay.SwitchInput
	for _, cp := range cur.Categories {
		all := cp.Enabled
		if !cp.Required {
			all = on[cp.Name]
			if all != cp.Default || !cp.SetAt.IsZero() { // else still the default: nothing to store
				out = append(out, relay.SwitchInput{Category: cp.Name, Enabled: &all})
			}
		}
		for _, sw := range cp.Channels {
			enabled, key := sw.Enabled, cp.Name+"/"+sw.Channel
			if shown[key] && !cp.Required {
				if enabled = channelOn[key]; enabled == all {
					continue // the same as the category's: it follows the category again
				}
			}
			out = append(out, relay.SwitchInput{Category: sw.Category, Channel: sw.Channel, Enabled: &enabled})
		}
	}
	return out
}

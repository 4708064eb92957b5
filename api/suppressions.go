package api

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// Suppression lists over HTTP, each scoped to the caller's
// tenant (an open API names one with ?tenant=, default "default", or sees
// every tenant when it names none on a read):
//
//	GET    /v1/suppressions             a page of entries (JSON), or all of them as CSV (?format=csv or Accept: text/csv)
//	POST   /v1/suppressions             add entries (JSON), or import a CSV body (Content-Type: text/csv)
//	DELETE /v1/suppressions             remove one (?channel=&address=)
//	POST   /v1/bounces                  a DSN (RFC 3464) or ARF complaint, as a whole mail message
const (
	probSuppressed = "https://edgerelay.dev/problems/suppressed"
	probBadBounce  = "https://edgerelay.dev/problems/invalid-bounce"
)

// suppressionJSON is an entry as the API shows it: the notification that
// put it there by its opaque id.
type suppressionJSON struct {
	model.Suppression
	Notification string `json:"notification,omitempty"`
}

func suppressionViews(x *relay.IDs, es []model.Suppression) []suppressionJSON {
	out := make([]suppressionJSON, len(es))
	for i, e := range es {
		out[i] = suppressionJSON{Suppression: e}
		if e.Notification != 0 {
			out[i].Notification = x.Notification(e.Notification)
		}
	}
	return out
}

// noteIDs is the CSV notification column in the API's opaque ids.
func noteIDs(x *relay.IDs) relay.NoteID {
	return relay.NoteID{Format: x.Notification, Parse: x.NotificationRow}
}

func (s *Server) suppressionRoutes() {
	s.handle("GET /v1/suppressions", s.auth(s.listSuppressions))
	s.handle("POST /v1/suppressions", s.auth(s.addSuppressions))
	s.handle("DELETE /v1/suppressions", s.auth(s.removeSuppression))
	s.handle("POST /v1/bounces", s.auth(s.postBounce))
}

// readTenant is the tenant a read covers: the caller's, or on an open API
// the one it names ("" for every tenant).
func readTenant(c caller, named string) (string, bool) {
	if c.any {
		return named, true
	}
	return c.tenantFor(named)
}

func (s *Server) listSuppressions(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	tenant, ok := readTenant(c, q.Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot read another tenant's suppression list")
	}
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	f := model.SuppressionFilter{Tenant: tenant, Channel: q.Get("channel"), Address: q.Get("address")}
	if q.Get("format") == "csv" || strings.HasPrefix(r.Header.Get("Accept"), "text/csv") {
		// The whole list, page by page, into one CSV.
		var b bytes.Buffer
		f.Limit = 1000
		for first := true; ; first = false {
			page, err := s.r.Suppressions(r.Context(), f)
			if err != nil {
				return s.internal(err)
			}
			if err := relay.WriteSuppressionsCSV(&b, page, first, noteIDs(x)); err != nil {
				return s.internal(err)
			}
			if len(page) < f.Limit {
				break
			}
			f.After = page[len(page)-1]
		}
		return response{status: http.StatusOK, ctype: "text/csv; charset=utf-8", body: b.Bytes()}
	}
	limit, perr := pageLimit(q, s.opts.PageSize)
	if perr != nil {
		return *perr
	}
	f.Limit = limit
	f.After = model.Suppression{Tenant: q.Get("after_tenant"), Channel: q.Get("after_channel"), Address: q.Get("after_address")}
	es, err := s.r.Suppressions(r.Context(), f)
	if err != nil {
		return s.internal(err)
	}
	out := map[string]any{"suppressions": suppressionViews(x, es)}
	if len(es) == limit {
		last := es[len(es)-1]
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("after_tenant", last.Tenant)
		next.Set("after_channel", last.Channel)
		next.Set("after_address", last.Address)
		out["next"] = r.URL.Path + "?" + next.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

// suppressionIn is one entry as a client adds it.
type suppressionIn struct {
	Channel string `json:"channel"`
	Address string `json:"address"`
	Reason  string `json:"reason"` // default manual
	Detail  string `json:"detail"`
	// ExpiresAt (RFC 3339) or TTL ("72h") makes it lapse; neither: never.
	ExpiresAt *time.Time `json:"expires_at"`
	TTL       string     `json:"ttl"`
}

func (s *Server) addSuppressions(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot change another tenant's suppression list")
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "text/csv" {
		x, perr := s.codec(r.Context())
		if perr != nil {
			return *perr
		}
		body, perr := s.readBody(w, r)
		if perr != nil {
			return *perr
		}
		read, written, err := s.r.ImportSuppressions(r.Context(), bytes.NewReader(body), tenant, c.any, noteIDs(x))
		if err != nil {
			return s.suppressError(err)
		}
		return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "read": read, "written": written})
	}
	var in struct {
		Suppressions []suppressionIn `json:"suppressions"`
	}
	if _, perr := s.readJSON(w, r, &in, `{"suppressions": [{"channel": "email", "address": "…", "reason": "manual", "ttl": "72h"}]} or a text/csv body`); perr != nil {
		return *perr
	}
	if len(in.Suppressions) == 0 {
		return problemField(http.StatusBadRequest, probInvalidRequest, "No entries", "suppressions: at least one entry", "suppressions")
	}
	now := time.Now()
	entries := make([]model.Suppression, len(in.Suppressions))
	for i, e := range in.Suppressions {
		if e.Reason == "" {
			e.Reason = model.ReasonManual
		}
		entries[i] = model.Suppression{Tenant: tenant, Channel: e.Channel, Address: e.Address, Reason: e.Reason,
			Source: model.SourceAPI, Detail: e.Detail, ExpiresAt: e.ExpiresAt}
		if e.TTL != "" {
			d, err := time.ParseDuration(e.TTL)
			if err != nil || d <= 0 || e.ExpiresAt != nil {
				field := "suppressions[" + strconv.Itoa(i) + "].ttl"
				return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid ttl",
					field+": "+strconv.Quote(e.TTL)+": want a positive duration such as 72h, and no expires_at beside it", field)
			}
			// The relay stamps CreatedAt with its own clock; an expiry
			// from this clock is close enough for a TTL.
			t := now.Add(d)
			entries[i].ExpiresAt = &t
		}
	}
	written, err := s.r.Suppress(r.Context(), entries)
	if err != nil {
		return s.suppressError(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "read": len(entries), "written": written})
}

// suppressError is a refused entry's 400 naming it, or a 500.
func (s *Server) suppressError(err error) response {
	var se *relay.SuppressionError
	if errors.As(err, &se) {
		field := "suppressions[" + strconv.Itoa(se.Index) + "]." + se.Field
		return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid entry", field+": "+se.Why, field)
	}
	if strings.HasPrefix(err.Error(), "line ") || strings.Contains(err.Error(), "parse error on line") || strings.Contains(err.Error(), "wrong number of fields") {
		return problem(http.StatusBadRequest, probInvalidRequest, "Invalid CSV", err.Error())
	}
	return s.internal(err)
}

func (s *Server) removeSuppression(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	tenant, ok := c.tenantFor(q.Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot change another tenant's suppression list")
	}
	channel, address := q.Get("channel"), q.Get("address")
	if channel == "" || address == "" {
		return problem(http.StatusBadRequest, probInvalidQuery, "Missing address", "give channel= and address= of the entry to remove")
	}
	err := s.r.Unsuppress(r.Context(), tenant, channel, address)
	if errors.Is(err, model.ErrNotFound) {
		return problem(http.StatusNotFound, probNotFound, "Not found", err.Error())
	}
	if err != nil {
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "channel": channel, "address": relay.SuppressionKey(channel, address), "removed": true})
}

// postBounce takes a DSN or an ARF report (the raw message, as a mailbox
// pipe or a provider's inbound-mail webhook delivers it) about one of the
// caller's notifications.
func (s *Server) postBounce(w http.ResponseWriter, r *http.Request, c caller) response {
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	body, perr := s.readBody(w, r)
	if perr != nil {
		return *perr
	}
	b, err := s.r.AddBounce(r.Context(), c.tenant, body)
	switch {
	case errors.Is(err, relay.ErrNotBounce):
		return problem(http.StatusBadRequest, probBadBounce, "Unreadable bounce", err.Error())
	case errors.Is(err, model.ErrNotFound):
		return problem(http.StatusNotFound, probNotFound, "No matching notification", err.Error())
	case err != nil:
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, bouncedJSON{Bounced: b, Notification: x.Notification(b.Notification)})
}

// bouncedJSON is AddBounce's answer with the notification's opaque id.
type bouncedJSON struct {
	relay.Bounced
	Notification string `json:"notification"`
}

// suppressedProblem is a retry of notification id refused because its
// address is suppressed: 409 with the entry in words (no row ids), and how
// to lift it.
func (s *Server) suppressedProblem(r *http.Request, se *model.SuppressedError, id string) response {
	e := se.Entry
	return problem(http.StatusConflict, probSuppressed, "Address suppressed",
		"notification "+strconv.Quote(id)+": "+e.Channel+" "+strconv.Quote(e.Address)+" is on tenant "+strconv.Quote(e.Tenant)+
			"'s suppression list ("+e.Describe()+"): retry with ?lift=true ("+r.URL.Path+"?lift=true) to remove the entry and send it")
}

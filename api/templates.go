package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/templates"
)

// Templates over HTTP, each scoped to the caller's tenant (an
// open API names one with ?tenant=, default "default"):
//
//	GET    /v1/templates                                       the tenant's templates: files and stored
//	PUT    /v1/templates/{name}/{channel}/{locale}             save the parts as the next version
//	GET    /v1/templates/{name}/{channel}/{locale}             the latest version (?version=N: that one)
//	GET    /v1/templates/{name}/{channel}/{locale}/versions    every version, oldest first
//	GET    /v1/templates/{name}/{channel}/{locale}/versions/{version}
//	DELETE /v1/templates/{name}/{channel}/{locale}             retire it (its versions stay readable)
//	POST   /v1/templates/{name}/{channel}/render               what an accept would store, nothing written
//
// The locale is part of the path because a template's identity is its
// tenant, name, channel and locale: each translation is its own resource
// with its own versions. A preview takes no locale: the recipient's
// chooses one, by the same fallback as an accept.
const (
	probTemplateParse    = "https://edgerelay.dev/problems/template-parse"
	probTemplateConflict = "https://edgerelay.dev/problems/template-defined-by-file"
	probTemplateBudget   = "https://edgerelay.dev/problems/template-budget"
)

func (s *Server) templateRoutes() {
	s.handle("GET /v1/templates", s.auth(s.listTemplates))
	s.handle("PUT /v1/templates/{name}/{channel}/{locale}", s.auth(s.oneRenderPerTenant(s.putTemplate)))
	s.handle("GET /v1/templates/{name}/{channel}/{locale}", s.auth(s.getTemplate))
	s.handle("GET /v1/templates/{name}/{channel}/{locale}/versions", s.auth(s.templateVersions))
	s.handle("GET /v1/templates/{name}/{channel}/{locale}/versions/{version}", s.auth(s.getTemplate))
	s.handle("DELETE /v1/templates/{name}/{channel}/{locale}", s.auth(s.deleteTemplate))
	s.handle("POST /v1/templates/{name}/{channel}/render", s.auth(s.oneRenderPerTenant(s.renderTemplate)))
}

// templateKey is the path's template in the caller's tenant.
func (s *Server) templateKey(r *http.Request, c caller, verb string) (model.TemplateKey, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot "+verb+" another tenant's templates")
		return model.TemplateKey{}, &p
	}
	k, err := relay.TemplateKey(tenant, r.PathValue("name"), r.PathValue("channel"), r.PathValue("locale"))
	if err != nil {
		p := s.paramError(err, "tenant", "name", "channel", "locale")
		return k, &p
	}
	return k, nil
}

// templateJSON is one stored version as the API shows it.
type templateJSON struct {
	model.StoredTemplate
	Retired bool `json:"retired"`
}

func templateView(st model.StoredTemplate) templateJSON {
	return templateJSON{StoredTemplate: st, Retired: st.RetiredAt != nil}
}

func (s *Server) putTemplate(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := s.templateKey(r, c, "change")
	if perr != nil {
		return *perr
	}
	var in struct {
		Parts map[string]string `json:"parts"`
	}
	if _, perr := s.readJSON(w, r, &in, `{"parts": {"subject": "…", "text": "…", "html": "…"}} (the parts of the channel)`); perr != nil {
		return *perr
	}
	st, created, err := s.r.PutTemplate(r.Context(), key, in.Parts)
	if err != nil {
		return s.templateError(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return jsonResponse(status, templateView(st))
}

// templateError maps a refused template to its problem.
func (s *Server) templateError(err error) response {
	var pe *templates.ParseError
	var ce *relay.TemplateConflictError
	if p, ok := budgetProblem(err); ok {
		return p
	}
	switch {
	case errors.As(err, &pe):
		field := "parts." + pe.Part
		return problemField(http.StatusBadRequest, probTemplateParse, "Template does not parse",
			field+": line "+strconv.Itoa(pe.Line)+", column "+strconv.Itoa(pe.Column)+": "+pe.Msg, field)
	case errors.As(err, &ce):
		return problem(http.StatusConflict, probTemplateConflict, "Template defined by a file", err.Error())
	case errors.Is(err, model.ErrNotFound):
		return problem(http.StatusNotFound, probNotFound, "Not found", err.Error())
	}
	var inv *relay.InvalidEventError
	if errors.As(err, &inv) {
		return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid template", inv.Field+": "+inv.Reason, inv.Field)
	}
	return s.internal(err)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := s.templateKey(r, c, "read")
	if perr != nil {
		return *perr
	}
	v := r.PathValue("version")
	if v == "" {
		v = r.URL.Query().Get("version")
	}
	version := 0
	if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid version", "version: "+strconv.Quote(v)+": want a version number (1, 2, …)", "version")
		}
		version = n
	}
	st, err := s.st.TemplateVersion(r.Context(), key, version)
	if err != nil {
		return s.templateError(err)
	}
	return jsonResponse(http.StatusOK, templateView(st))
}

func (s *Server) templateVersions(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := s.templateKey(r, c, "read")
	if perr != nil {
		return *perr
	}
	vs, err := s.st.TemplateVersions(r.Context(), key)
	if err != nil {
		return s.internal(err)
	}
	if len(vs) == 0 {
		return problem(http.StatusNotFound, probNotFound, "Not found", "no template "+key.Name+"/"+key.Channel+"/"+key.Locale+" in tenant "+strconv.Quote(key.Tenant))
	}
	out := make([]templateJSON, len(vs))
	for i, v := range vs {
		out[i] = templateView(v)
	}
	return jsonResponse(http.StatusOK, map[string]any{"versions": out})
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, c caller) response {
	key, perr := s.templateKey(r, c, "change")
	if perr != nil {
		return *perr
	}
	st, err := s.r.RetireTemplate(r.Context(), key)
	if err != nil {
		return s.templateError(err)
	}
	return jsonResponse(http.StatusOK, templateView(st))
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot read another tenant's templates")
	}
	ts, err := s.r.ListTemplates(r.Context(), tenant)
	if err != nil {
		return s.internal(err)
	}
	if ts == nil {
		ts = []relay.TemplateInfo{}
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "templates": ts})
}

// renderTemplate previews what an accept would store for one recipient:
// relay.Preview, the code path `edgerelay template render` takes, over
// the templates accepts use now. Nothing is written.
func (s *Server) renderTemplate(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		return problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot render another tenant's templates")
	}
	var in struct {
		Recipient relay.Recipient `json:"recipient"`
		Data      json.RawMessage `json:"data"`
	}
	if _, perr := s.readJSON(w, r, &in, `{"recipient": {"id": "ada", "email": "…", "locale": "de-AT"}, "data": {…}}`); perr != nil {
		return *perr
	}
	ev := relay.Event{Type: r.PathValue("name"), Tenant: tenant, Recipients: []relay.Recipient{in.Recipient}, Data: in.Data}
	set, err := s.r.Templates(r.Context())
	if err != nil {
		return s.internal(err)
	}
	msg, err := relay.Preview(r.Context(), set, ev, r.PathValue("channel"))
	if err != nil {
		if p, ok := budgetProblem(err); ok {
			return p
		}
		var inv *relay.InvalidEventError
		if errors.As(err, &inv) {
			field := strings.Replace(inv.Field, "recipients[0]", "recipient", 1)
			return problemField(http.StatusBadRequest, probInvalidEvent, "Cannot render", field+": "+inv.Reason, field)
		}
		return s.internal(err)
	}
	return response{status: http.StatusOK, ctype: "application/json", body: append(msg, '\n')}
}

// budgetProblem is a rendering (or the check at save) stopped by one of a
// template's budgets: 422, naming the template and the budget.
func budgetProblem(err error) (response, bool) {
	var be *templates.BudgetError
	if !errors.As(err, &be) {
		return response{}, false
	}
	return problem(http.StatusUnprocessableEntity, probTemplateBudget, "Template exceeds its "+be.Limit+" budget",
		strings.TrimPrefix(err.Error(), "invalid event: ")), true
}

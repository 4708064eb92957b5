package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// The audience endpoints: named recipient lists of the caller's tenant (on
// an open API, ?tenant=, default "default"), written whole, read back,
// listed and deleted.

func (s *Server) audienceRoutes() {
	s.handle("GET /v1/audiences", s.auth(s.listAudiences))
	s.handle("GET /v1/audiences/{name}", s.auth(s.getAudience))
	s.handle("PUT /v1/audiences/{name}", s.auth(s.putAudience))
	s.handle("DELETE /v1/audiences/{name}", s.auth(s.deleteAudience))
}

// audienceTenant resolves the tenant of an audience request.
func (s *Server) audienceTenant(r *http.Request, c caller, verb string) (string, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot "+verb+" another tenant's audiences")
		return "", &p
	}
	return tenant, nil
}

// audienceRequest is the body of PUT /v1/audiences/{name}.
type audienceRequest struct {
	Members []relay.Recipient `json:"members"`
}

func (s *Server) putAudience(w http.ResponseWriter, r *http.Request, c caller) response {
	var req audienceRequest
	if _, perr := s.readJSON(w, r, &req, `{"members": [RECIPIENT, ...]}`); perr != nil {
		return *perr
	}
	tenant, perr := s.audienceTenant(r, c, "write")
	if perr != nil {
		return *perr
	}
	name := r.PathValue("name")
	if err := s.r.PutAudience(r.Context(), tenant, name, req.Members); err != nil {
		return s.paramError(err, "tenant", "name")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "name": name, "members": len(req.Members)})
}

// audienceBody is the body of GET /v1/audiences/{name}: what a PUT of
// {"members": …} stored, so it can be edited and put back.
type audienceBody struct {
	Tenant  string            `json:"tenant"`
	Name    string            `json:"name"`
	Members []relay.Recipient `json:"members"`
}

func (s *Server) getAudience(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.audienceTenant(r, c, "read")
	if perr != nil {
		return *perr
	}
	name := r.PathValue("name")
	ms, err := s.r.Audience(r.Context(), tenant, name)
	if errors.Is(err, model.ErrNotFound) { // the name and tenant are valid: checked first
		return problem(http.StatusNotFound, probNotFound, "Not found", fmt.Sprintf("no audience %q in tenant %q", name, tenant))
	}
	if err != nil {
		return s.paramError(err, "tenant", "name")
	}
	return jsonResponse(http.StatusOK, audienceBody{Tenant: tenant, Name: name, Members: ms})
}

func (s *Server) deleteAudience(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.audienceTenant(r, c, "delete")
	if perr != nil {
		return *perr
	}
	name := r.PathValue("name")
	err := s.r.DeleteAudience(r.Context(), tenant, name)
	if errors.Is(err, model.ErrNotFound) {
		return problem(http.StatusNotFound, probNotFound, "Not found", fmt.Sprintf("no audience %q in tenant %q", name, tenant))
	}
	if err != nil {
		return s.paramError(err, "tenant", "name")
	}
	return jsonResponse(http.StatusOK, map[string]any{"tenant": tenant, "name": name, "deleted": true})
}

// audienceList is the body of GET /v1/audiences.
type audienceList struct {
	Tenant    string               `json:"tenant"`
	Audiences []model.AudienceInfo `json:"audiences"`
	// Next continues the listing (?after= the last name); absent on the
	// last page.
	Next string `json:"next,omitempty"`
}

func (s *Server) listAudiences(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.audienceTenant(r, c, "list")
	if perr != nil {
		return *perr
	}
	q := r.URL.Query()
	limit, perr := pageLimit(q, s.opts.PageSize)
	if perr != nil {
		return *perr
	}
	as, err := s.r.ListAudiences(r.Context(), tenant, q.Get("after"), limit)
	if err != nil {
		return s.paramError(err, "tenant")
	}
	out := audienceList{Tenant: tenant, Audiences: as}
	if len(as) == limit {
		q.Set("after", as[len(as)-1].Name)
		out.Next = r.URL.Path + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

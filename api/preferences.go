package api

import (
	"errors"
	"net/http"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// The preference endpoints: what a recipient of the caller's
// tenant (on an open API, ?tenant=, default "default") lets reach them,
// read and written whole.

func (s *Server) preferenceRoutes() {
	s.handle("GET /v1/recipients/{id}/preferences", s.auth(s.getPreferences))
	s.handle("PUT /v1/recipients/{id}/preferences", s.auth(s.putPreferences))
}

func (s *Server) preferenceTenant(r *http.Request, c caller, verb string) (string, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot "+verb+" another tenant's recipients' preferences")
		return "", &p
	}
	return tenant, nil
}

func (s *Server) getPreferences(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.preferenceTenant(r, c, "read")
	if perr != nil {
		return *perr
	}
	p, err := s.r.RecipientPreferences(r.Context(), tenant, r.PathValue("id"))
	if err != nil {
		return s.preferenceError(err)
	}
	return jsonResponse(http.StatusOK, p)
}

func (s *Server) putPreferences(w http.ResponseWriter, r *http.Request, c caller) response {
	var in relay.PreferencesInput
	if _, perr := s.readJSON(w, r, &in,
		`{"timezone": "Europe/Berlin", "switches": [{"category": C, "channel": CH, "enabled": BOOL}, ...], "quiet_hours": [{"category": C, "window": "21:00-08:00"}, ...]}`); perr != nil {
		return *perr
	}
	tenant, perr := s.preferenceTenant(r, c, "write")
	if perr != nil {
		return *perr
	}
	p, err := s.r.PutPreferences(r.Context(), tenant, r.PathValue("id"), in, model.SetByAPI)
	if err != nil {
		return s.preferenceError(err)
	}
	return jsonResponse(http.StatusOK, p)
}

// preferenceError maps a refused preference (its field named) to a 400.
func (s *Server) preferenceError(err error) response {
	var inv *relay.InvalidEventError
	if errors.As(err, &inv) {
		return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid "+inv.Field, inv.Field+": "+inv.Reason, inv.Field)
	}
	return s.internal(err)
}

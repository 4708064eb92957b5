package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/workflow"
)

// Workflows over HTTP, each scoped to the caller's tenant (an open API
// names one with ?tenant=, default "default"):
//
//	PUT    /v1/workflows/{type}                    save the definition as the next version
//	GET    /v1/workflows/{type}                    the latest version (?version=N: that one)
//	GET    /v1/workflows/{type}/versions           every version, oldest first
//	DELETE /v1/workflows/{type}                    retire it (its versions stay readable)
//	GET    /v1/workflow-runs                       the runs, each with its steps (?state= &event_id= &after= &limit=)
//	POST   /v1/workflow-runs/{cancel_key}/cancel   cancel the waiting runs with that cancel key
//
// A definition that does not decode is 400 invalid-json, as every body
// of the API; one that decodes but does not check is 422 workflow-invalid
// with every problem listed, so a client fixes them all in one round.
const probWorkflowInvalid = "https://edgerelay.dev/problems/workflow-invalid"

func (s *Server) workflowRoutes() {
	s.handle("PUT /v1/workflows/{type}", s.auth(s.putWorkflow))
	s.handle("GET /v1/workflows/{type}", s.auth(s.getWorkflow))
	s.handle("GET /v1/workflows/{type}/versions", s.auth(s.workflowVersions))
	s.handle("DELETE /v1/workflows/{type}", s.auth(s.deleteWorkflow))
	s.handle("GET /v1/workflow-runs", s.auth(s.listWorkflowRuns))
	s.handle("POST /v1/workflow-runs/{cancel_key}/cancel", s.auth(s.cancelWorkflowRuns))
}

// workflowTenant is the tenant a workflow request acts on.
func (s *Server) workflowTenant(r *http.Request, c caller, verb string) (string, *response) {
	tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
	if !ok {
		p := problem(http.StatusForbidden, probTenantMismatch, "Tenant mismatch", "this token cannot "+verb+" another tenant's workflows")
		return "", &p
	}
	if err := relay.CheckTenant("tenant", tenant); err != nil {
		p := s.paramError(err, "tenant")
		return "", &p
	}
	return tenant, nil
}

// workflowJSON is one stored version as the API shows it.
type workflowJSON struct {
	model.StoredWorkflow
	Definition json.RawMessage `json:"definition"`
	Retired    bool            `json:"retired"`
}

func workflowView(st model.StoredWorkflow) workflowJSON {
	return workflowJSON{StoredWorkflow: st, Definition: st.Definition, Retired: st.RetiredAt != nil}
}

// workflowProblemJSON is one problem of a refused definition; Step is
// absent for the workflow as a whole.
type workflowProblemJSON struct {
	Step    *int   `json:"step,omitempty"`
	ID      string `json:"id,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// workflowInvalidJSON is the workflow-invalid problem: the RFC 9457
// members and, as an extension member, every problem.
type workflowInvalidJSON struct {
	Problem
	Problems []workflowProblemJSON `json:"problems"`
}

// workflowInvalid is the 422 of a definition refused: field is the path
// of its first problem (steps[1].if), the detail names them all.
func workflowInvalid(probs workflow.Error) response {
	out := workflowInvalidJSON{
		Problem:  Problem{Type: probWorkflowInvalid, Title: "Workflow refused", Status: http.StatusUnprocessableEntity},
		Problems: make([]workflowProblemJSON, len(probs)),
	}
	said := make([]string, len(probs))
	for i, p := range probs {
		wp := workflowProblemJSON{ID: p.ID, Field: p.Field, Message: p.Msg}
		path := p.Field
		if p.Step >= 0 {
			wp.Step = &p.Step
			path = fmt.Sprintf("steps[%d].%s", p.Step, p.Field)
		}
		if i == 0 {
			out.Field = path
		}
		out.Problems[i], said[i] = wp, p.String()
	}
	out.Detail = strings.Join(said, "; ") + "; nothing was saved"
	b, _ := json.Marshal(out)
	return response{status: out.Status, ctype: "application/problem+json", body: append(b, '\n')}
}

func noWorkflow(tenant, typ, what string) response {
	return problem(http.StatusNotFound, probNotFound, "Not found", fmt.Sprintf("no workflow for type %q in tenant %q%s", typ, tenant, what))
}

func (s *Server) putWorkflow(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "change")
	if perr != nil {
		return *perr
	}
	// Decoded here for the API's strict-JSON answer (400 naming the path);
	// the relay decodes and checks the same bytes.
	var def workflow.Definition
	body, perr := s.readJSON(w, r, &def, `{"cancel_key": "…", "steps": [{"id": "…", "channels": ["email"]}, …]} (a workflow)`)
	if perr != nil {
		return *perr
	}
	st, created, err := s.r.PutWorkflow(r.Context(), tenant, r.PathValue("type"), body)
	var we *relay.WorkflowError
	switch {
	case errors.As(err, &we):
		return workflowInvalid(we.Problems)
	case err != nil:
		return s.internal(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return jsonResponse(status, workflowView(st))
}

func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "read")
	if perr != nil {
		return *perr
	}
	typ, version := r.PathValue("type"), 0
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid version", "version: "+strconv.Quote(v)+": want a version number (1, 2, …)", "version")
		}
		version = n
	}
	st, err := s.st.WorkflowVersion(r.Context(), tenant, typ, version)
	switch {
	case errors.Is(err, model.ErrNotFound) && version > 0:
		return noWorkflow(tenant, typ, " with version "+strconv.Itoa(version))
	case errors.Is(err, model.ErrNotFound):
		return noWorkflow(tenant, typ, "")
	case err != nil:
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, workflowView(st))
}

func (s *Server) workflowVersions(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "read")
	if perr != nil {
		return *perr
	}
	typ := r.PathValue("type")
	vs, err := s.st.WorkflowVersions(r.Context(), tenant, typ)
	if err != nil {
		return s.internal(err)
	}
	if len(vs) == 0 {
		return noWorkflow(tenant, typ, "")
	}
	out := make([]workflowJSON, len(vs))
	for i, v := range vs {
		out[i] = workflowView(v)
	}
	return jsonResponse(http.StatusOK, map[string]any{"versions": out})
}

func (s *Server) deleteWorkflow(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "change")
	if perr != nil {
		return *perr
	}
	typ := r.PathValue("type")
	st, err := s.r.RetireWorkflow(r.Context(), tenant, typ)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return noWorkflow(tenant, typ, " to retire (none was saved, or it is retired already)")
	case err != nil:
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, workflowView(st))
}

// runJSON is a workflow run as the API shows it: its id and its steps'
// notifications opaque, the rest as stored.
type runJSON struct {
	ID string `json:"id"`
	model.Run
	Steps []runStepJSON `json:"steps"`
}

type runStepJSON struct {
	model.RunStep
	// Notification is the notification the step wrote (n_…), if any.
	Notification string `json:"notification,omitempty"`
}

// runList is the body of GET /v1/workflow-runs.
type runList struct {
	Tenant string    `json:"tenant"`
	Runs   []runJSON `json:"runs"`
	// Next continues the listing; absent on the last page.
	Next string `json:"next,omitempty"`
}

func (s *Server) listWorkflowRuns(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "read")
	if perr != nil {
		return *perr
	}
	q := r.URL.Query()
	limit, perr := pageLimit(q, s.opts.PageSize)
	if perr != nil {
		return *perr
	}
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	f := model.RunFilter{Tenant: tenant, State: q.Get("state"), EventID: q.Get("event_id"), Limit: limit}
	if v := q.Get("after"); v != "" {
		// The last run's id: the tenant's filter applies as on the first
		// page, so no cursor reaches another tenant's runs.
		row, ok := x.RunRow(v)
		if !ok {
			return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid cursor",
				"after: "+strconv.Quote(v)+": "+notAnID(v, relay.RunIDPrefix)+"; pass the after of the previous page's next", "after")
		}
		f.AfterID = row
	}
	runs, err := s.r.Runs(r.Context(), f)
	var inv *relay.InvalidEventError
	switch {
	case errors.As(err, &inv) && inv.Field == "state":
		return problemField(http.StatusBadRequest, probInvalidQuery, "Invalid state", inv.Field+": "+inv.Reason, inv.Field)
	case err != nil:
		return s.internal(err)
	}
	out := runList{Tenant: tenant, Runs: make([]runJSON, len(runs))}
	for i, run := range runs {
		v := runJSON{ID: x.Run(run.ID), Run: run.Run, Steps: make([]runStepJSON, len(run.Steps))}
		for j, st := range run.Steps {
			v.Steps[j].RunStep = st
			if st.Notification > 0 {
				v.Steps[j].Notification = x.Notification(st.Notification)
			}
		}
		out.Runs[i] = v
	}
	if len(runs) == limit {
		q.Set("after", out.Runs[len(out.Runs)-1].ID)
		out.Next = r.URL.Path + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

// cancelWorkflowRuns cancels the tenant's waiting runs with the path's
// cancel key, as an event with "cancels" does; the runs' reason names
// the API. Cancelling again cancels none.
func (s *Server) cancelWorkflowRuns(w http.ResponseWriter, r *http.Request, c caller) response {
	tenant, perr := s.workflowTenant(r, c, "change")
	if perr != nil {
		return *perr
	}
	n, err := s.r.CancelRuns(r.Context(), tenant, r.PathValue("cancel_key"), "the API")
	if err != nil {
		return s.paramError(err, "cancel_key")
	}
	return jsonResponse(http.StatusOK, map[string]int64{"cancelled": n})
}

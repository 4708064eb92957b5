package api

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/edgerelay/edgerelay/model"
)

// Tailed outboxes' rejected rows over HTTP, as `edgerelay tail rejects`.
// A source is the operator's, not a tenant's, and a rejected row may not
// even decode to an event with a tenant: so only a caller that sees every
// tenant (an open API) reaches them; a tenant's token is 403.

func (s *Server) sourceRoutes() {
	s.handle("GET /v1/sources/{name}/rejects", s.auth(s.operatorOnly(s.listRejects)))
	s.handle("POST /v1/sources/{name}/rejects/retry", s.auth(s.operatorOnly(s.retryRejects)))
	s.handle("POST /v1/sources/{name}/rejects/drop", s.auth(s.operatorOnly(s.dropRejects)))
}

func (s *Server) operatorOnly(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		if !c.any {
			return problem(http.StatusForbidden, probTenantMismatch, "Not a tenant's",
				"a tailed source's rejected rows belong to no tenant (a row may not even hold one): they are served on an API without tokens only; on the host, edgerelay tail rejects")
		}
		return h(w, r, c)
	}
}

// rejectJSON is a recorded rejected row as the API shows it.
type rejectJSON struct {
	model.SourceReject
	Source string `json:"source,omitempty"` // in the path already
}

func (s *Server) listRejects(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	limit, perr := pageLimit(q, s.opts.PageSize)
	if perr != nil {
		return *perr
	}
	name := r.PathValue("name")
	var after int64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid cursor", "after: "+strconv.Quote(v)+": want the last row id of the previous page")
		}
		after = n
	}
	rs, err := s.st.SourceRejects(r.Context(), model.SourceRejectFilter{Source: name, AfterSource: name, AfterRow: after, Limit: limit})
	if err != nil {
		return s.internal(err)
	}
	rows := make([]rejectJSON, len(rs))
	for i, x := range rs {
		rows[i] = rejectJSON{SourceReject: x}
	}
	out := map[string]any{"source": name, "rejects": rows}
	if len(rs) == limit {
		q.Set("after", strconv.FormatInt(rs[len(rs)-1].Row, 10))
		out["next"] = r.URL.EscapedPath() + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) retryRejects(w http.ResponseWriter, r *http.Request, c caller) response {
	return s.actOnRejects(w, r, "retried", func(name string, rows []int64) ([]int64, error) {
		return s.st.RetrySourceRejects(r.Context(), name, rows, s.r.Now())
	})
}

func (s *Server) dropRejects(w http.ResponseWriter, r *http.Request, c caller) response {
	return s.actOnRejects(w, r, "dropped", func(name string, rows []int64) ([]int64, error) {
		return s.st.DropSourceRejects(r.Context(), name, rows)
	})
}

// actOnRejects reads {"rows": [2, 3]} or {"all": true}, applies act, and
// answers with the rows it reached and those that have no record (404 if
// none was reached).
func (s *Server) actOnRejects(w http.ResponseWriter, r *http.Request, verb string, act func(name string, rows []int64) ([]int64, error)) response {
	var in struct {
		Rows []int64 `json:"rows"`
		All  bool    `json:"all"`
	}
	if _, perr := s.readJSON(w, r, &in, `{"rows": [2, 3]} or {"all": true}`); perr != nil {
		return *perr
	}
	switch {
	case in.All && in.Rows != nil:
		return problemField(http.StatusBadRequest, probInvalidRequest, "Rows or all", "rows: give the rows or all: true, not both", "rows")
	case !in.All && len(in.Rows) == 0:
		return problemField(http.StatusBadRequest, probInvalidRequest, "No rows", "rows: at least one row id (or all: true)", "rows")
	}
	for i, id := range in.Rows {
		if id < 1 {
			field := "rows[" + strconv.Itoa(i) + "]"
			return problemField(http.StatusBadRequest, probInvalidRequest, "Invalid row", field+": "+strconv.FormatInt(id, 10)+": want a row id (positive)", field)
		}
	}
	rows := in.Rows // nil with all (refused above with rows)
	name := r.PathValue("name")
	got, err := act(name, rows)
	if err != nil {
		return s.internal(err)
	}
	missing := []int64{}
	for _, id := range in.Rows {
		if !slices.Contains(got, id) && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(got) == 0 {
		return problem(http.StatusNotFound, probNotFound, "Not found", "source "+strconv.Quote(name)+" has no rejected row recorded among those named")
	}
	return jsonResponse(http.StatusOK, map[string]any{"source": name, verb: got, "not_found": missing})
}

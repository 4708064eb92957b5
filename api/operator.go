package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// What an operator (or a tenant's support staff) looks at and acts on over
// HTTP: quarantined fan-outs (and suppression lists, suppressions.go). Each is scoped to
// the caller's tenant; an open API sees every tenant.

func (s *Server) operatorRoutes() {
	s.handle("GET /v1/quarantine", s.auth(s.listQuarantine))
	s.handle("POST /v1/quarantine/{id}/retry", s.auth(s.retryQuarantine))
	s.handle("POST /v1/quarantine/{id}/drop", s.auth(s.dropQuarantine))
}

func (s *Server) listQuarantine(w http.ResponseWriter, r *http.Request, c caller) response {
	q := r.URL.Query()
	limit, perr := pageLimit(q, s.opts.PageSize)
	if perr != nil {
		return *perr
	}
	x, perr := s.codec(r.Context())
	if perr != nil {
		return *perr
	}
	var before int64
	if v := q.Get("before"); v != "" {
		// The last event's id, as on the previous page: the next page is
		// the caller's events with lower rows.
		row, ok := x.EventRow(v)
		if !ok || row < 1 {
			return problem(http.StatusBadRequest, probInvalidQuery, "Invalid cursor",
				"before: "+strconv.Quote(v)+": "+notAnID(v, relay.EventIDPrefix)+"; pass the id of the last event of the previous page")
		}
		before = row
	}
	qs, err := s.st.QuarantinedEvents(r.Context(), c.tenant, before, limit)
	if err != nil {
		return s.internal(err)
	}
	events := make([]quarantinedJSON, len(qs))
	for i, e := range qs {
		events[i] = quarantinedView(x, e)
	}
	out := map[string]any{"events": events}
	if len(qs) == limit {
		q.Set("before", events[len(events)-1].ID)
		out["next"] = r.URL.Path + "?" + q.Encode()
	}
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) retryQuarantine(w http.ResponseWriter, r *http.Request, c caller) response {
	_, row, perr := s.eventPath(r)
	if perr != nil {
		return *perr
	}
	id := r.PathValue("id")
	err := s.r.RetryQuarantined(r.Context(), c.tenant, row)
	if errors.Is(err, model.ErrNotFound) {
		return noQuarantined(id)
	}
	if err != nil {
		return s.internal(err)
	}
	// The fan-out was tried at once: it finished, or the event is back in
	// quarantine with the new reason.
	qs, err := s.st.QuarantinedEvents(r.Context(), c.tenant, row+1, 1)
	if err != nil {
		return s.internal(err)
	}
	if len(qs) == 1 && qs[0].EventRow == row {
		return jsonResponse(http.StatusConflict, map[string]any{"id": id, "quarantined": true, "reason": qs[0].Reason})
	}
	return jsonResponse(http.StatusOK, map[string]any{"id": id, "quarantined": false})
}

func (s *Server) dropQuarantine(w http.ResponseWriter, r *http.Request, c caller) response {
	_, row, perr := s.eventPath(r)
	if perr != nil {
		return *perr
	}
	id := r.PathValue("id")
	n, err := s.st.DropEvent(r.Context(), c.tenant, row, s.r.Now())
	if errors.Is(err, model.ErrNotFound) {
		return noQuarantined(id)
	}
	if err != nil {
		return s.internal(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"id": id, "dropped": n})
}

// pageLimit reads ?limit= (1 to 1000), def when absent.
func pageLimit(q url.Values, def int) (int, *response) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		p := problem(http.StatusBadRequest, probInvalidQuery, "Invalid limit", "limit: a number from 1 to 1000")
		return 0, &p
	}
	return n, nil
}

package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
)

// workflowsData is the workflow runs page: the tenant's runs in a state
// (any when State is ""), oldest first, each with what every step decided
// and why.
type workflowsData struct {
	Runs   []relay.RunView
	State  string
	States []string
	Next   string
}

func (c *Console) workflows(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d := workflowsData{State: q.Get("state"), States: model.RunStates}
	if d.State != "" && !slices.Contains(model.RunStates, d.State) {
		c.fail(w, r, s, http.StatusBadRequest, "Bad state", fmt.Sprintf("No runs are %q: a run is %s.", d.State, strings.Join(model.RunStates, ", ")))
		return
	}
	f := model.RunFilter{Tenant: s.Tenant, State: d.State, EventID: q.Get("event_id"), Limit: searchPage}
	if a := q.Get("after"); a != "" {
		x, err := c.r.IDs(r.Context())
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		row, ok := x.RunRow(a)
		if !ok {
			c.fail(w, r, s, http.StatusBadRequest, "Bad page", fmt.Sprintf("%q is not a run id (run_…).", relay.ShowControls(a)))
			return
		}
		f.AfterID = row
	}
	runs, err := c.r.Runs(r.Context(), f)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d.Runs = runs
	if len(runs) == searchPage {
		d.Next = c.opts.Prefix + "/workflows?state=" + d.State + "&after=" + c.rid(runs[len(runs)-1].ID)
	}
	c.render(w, r, s, http.StatusOK, "workflows", "Workflow runs", d)
}

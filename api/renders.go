package api

import (
	"net/http"
	"strconv"
	"sync"
)

// A tenant's template PUTs and previews run one at a time: each can cost a
// rendering's budgets (templates.MaxRenderTime of CPU), so a tenant
// sending many at once holds at most one core, and the others' requests
// keep theirs. A second one while one runs is refused (429, Retry-After),
// not queued: a queue would hold the attacker's requests in memory.
const maxTenantRenders = 1

const probTemplateBusy = "https://edgerelay.dev/problems/template-render-busy"

// renderSlots counts each tenant's template renderings in flight.
type renderSlots struct {
	mu      sync.Mutex
	running map[string]int
}

func (rs *renderSlots) take(tenant string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.running[tenant] >= maxTenantRenders {
		return false
	}
	if rs.running == nil {
		rs.running = map[string]int{}
	}
	rs.running[tenant]++
	return true
}

func (rs *renderSlots) release(tenant string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.running[tenant]--; rs.running[tenant] <= 0 {
		delete(rs.running, tenant)
	}
}

// oneRenderPerTenant runs h in one of the caller's tenant's rendering
// slots, or answers 429 when they are all taken.
func (s *Server) oneRenderPerTenant(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		tenant, ok := c.tenantFor(r.URL.Query().Get("tenant"))
		if !ok {
			return h(w, r, c) // refused there, naming the tenant
		}
		if !s.renders.take(tenant) {
			p := problem(http.StatusTooManyRequests, probTemplateBusy, "Template rendering busy",
				"tenant "+strconv.Quote(tenant)+" has "+strconv.Itoa(maxTenantRenders)+
					" template save or preview running (the most at once): retry when it has answered")
			p.retryAfter = "1"
			return p
		}
		defer s.renders.release(tenant)
		return h(w, r, c)
	}
}

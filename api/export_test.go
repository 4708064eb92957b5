package api

import (
	"context"
	"net/http/httptest"
	"strings"
)

// HoldEvent holds the Idempotency-Key of POST /v1/events with this body,
// as a request running under it would (the same fingerprint), in the
// store, until release is called.
func (s *Server) HoldEvent(key, body string) (release func()) {
	r := httptest.NewRequest("POST", "/v1/events", strings.NewReader(body))
	ev, canon, perr := s.decodeEvent([]byte(body), caller{any: true})
	if perr != nil {
		panic("HoldEvent: the body is not an event")
	}
	k := requestKey(r, ev.Tenant, key, canon)
	claim, err := s.r.ClaimRequest(context.Background(), k)
	if err != nil || !claim.Held() {
		panic("HoldEvent: the key is taken")
	}
	return func() { s.release(k) }
}

// HoldRender takes one of tenant's template rendering slots, as a PUT or a
// preview running would, until release is called.
func (s *Server) HoldRender(tenant string) (release func()) {
	if !s.renders.take(tenant) {
		panic("HoldRender: the tenant's slots are taken")
	}
	return func() { s.renders.release(tenant) }
}

package api

import "edgerelay/store"

// HoldKey marks an idempotency key as held by a request in flight, as a
// running request would, until release is called.
func (s *Server) HoldKey(tenant, key string) (release func()) {
	k := store.RequestKey{Tenant: tenant, Key: key}
	if !s.inFlight.begin(k) {
		panic("key already held")
	}
	return func() { s.inFlight.end(k) }
}

// Package api is edgerelay's HTTP API: JSON over localhost (or a network
// with tokens), errors as RFC 9457 problem+json, request idempotency by the
// Idempotency-Key header, tenants by bearer token, Prometheus metrics.
//
// It translates HTTP to calls on a relay.Relay and never writes SQL or
// decides delivery policy itself. Every handler returns its response as a
// value, so a stored response can be replayed byte for byte.
package api

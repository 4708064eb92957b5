package api

import (
	"encoding/json"
	"net/http"
)

// Problem is an RFC 9457 problem detail. Type is stable per kind of error,
// so clients can branch on it; Detail is for people.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the offending part of an event ("recipients[2].id").
	Field string `json:"field,omitempty"`
}

// Problem types. The URIs identify the kind of error; they are not fetched.
const (
	probInvalidJSON    = "https://edgerelay.dev/problems/invalid-json"
	probInvalidEvent   = "https://edgerelay.dev/problems/invalid-event"
	probTooLarge       = "https://edgerelay.dev/problems/too-large"
	probUnauthorized   = "https://edgerelay.dev/problems/unauthorized"
	probTenantMismatch = "https://edgerelay.dev/problems/tenant-mismatch"
	probNotFound       = "https://edgerelay.dev/problems/not-found"
	probEventConflict  = "https://edgerelay.dev/problems/event-conflict"
	probKeyInFlight    = "https://edgerelay.dev/problems/request-in-progress"
	probKeyReused      = "https://edgerelay.dev/problems/idempotency-key-reused"
	probNotRetryable   = "https://edgerelay.dev/problems/not-retryable"
	probInvalidQuery   = "https://edgerelay.dev/problems/invalid-query"
	probNotReady       = "https://edgerelay.dev/problems/not-ready"
	probInternal       = "https://edgerelay.dev/problems/internal"
	probUnavailable    = "https://edgerelay.dev/problems/storage-unavailable"
	probOverloaded     = "https://edgerelay.dev/problems/overloaded"
	probMethod         = "https://edgerelay.dev/problems/method-not-allowed"
	probBadSignature   = "https://edgerelay.dev/problems/bad-signature"
	probInvalidReceipt = "https://edgerelay.dev/problems/invalid-receipt"
	probInvalidRequest = "https://edgerelay.dev/problems/invalid-request"
	probBodyTimeout    = "https://edgerelay.dev/problems/body-timeout"
	// A user token for one user, asking for another's feed.
	probUserMismatch = "https://edgerelay.dev/problems/user-mismatch"
	// A page whose origin the tenant has not allowed (CORS).
	probOriginNotAllowed = "https://edgerelay.dev/problems/origin-not-allowed"
	// A stream beyond the bound of its user's or its tenant's.
	probTooManyStreams = "https://edgerelay.dev/problems/too-many-streams"
)

// response is what a handler produces: written once, and stored verbatim
// for request idempotency so a replay is byte-identical.
type response struct {
	status     int
	ctype      string
	body       []byte
	retryAfter string // seconds, for 503 and 429
	streamed   bool   // the handler wrote the answer itself, as it went (a stream)
}

func jsonResponse(status int, v any) response {
	b, err := json.Marshal(v)
	if err != nil {
		return problem(http.StatusInternalServerError, probInternal, "Internal error", err.Error())
	}
	return response{status: status, ctype: "application/json", body: append(b, '\n')}
}

func problem(status int, typ, title, detail string) response {
	return problemField(status, typ, title, detail, "")
}

func problemField(status int, typ, title, detail, field string) response {
	b, _ := json.Marshal(Problem{Type: typ, Title: title, Status: status, Detail: detail, Field: field})
	return response{status: status, ctype: "application/problem+json", body: append(b, '\n')}
}

func (r response) write(w http.ResponseWriter) {
	if r.streamed {
		return
	}
	if r.ctype != "" { // "" for a 204
		w.Header().Set("Content-Type", r.ctype)
	}
	if r.retryAfter != "" {
		w.Header().Set("Retry-After", r.retryAfter)
	}
	w.WriteHeader(r.status)
	w.Write(r.body)
}

package api_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/relay"
)

// PostgreSQL stops under a request that holds an Idempotency-Key: its
// accept fails, and so does the release of its key (the database is down),
// so the store keeps the claim in flight, owned by this process. Once the
// database is back, the client's retry with the same key runs at once: the
// key's owner is this process, which runs nothing under it any more. (It
// was 409 request-in-progress until the hold ran out; the hold here is an
// hour, so a 409 would last the test.) The retry's answer is then the
// stored one for a third try.
func TestIdempotencyKeyAnswersAtOnceAfterAPostgresOutage(t *testing.T) {
	t.Parallel()
	sv := pgtest.Own(t)
	var armed atomic.Bool
	hooks := relay.Hooks{At: func(p relay.Phase) {
		if p == relay.PhaseAccept && armed.CompareAndSwap(true, false) {
			sv.Stop(t) // the database goes away before the accept is written
		}
	}}
	b := setup(t, options{Quiet: true, DB: sv.Start(t), Relay: relay.Options{Hooks: hooks, RequestHold: time.Hour}})
	body := `{"id": "evt_outage", "type": "notice", "recipients": [{"id": "ada", "email": "ada@example.com"}], "body": "hi"}`

	armed.Store(true)
	first := b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "outage-1")
	if first.status < 500 {
		t.Fatalf("with the database down: %d %s, want a 5xx", first.status, first.body)
	}
	sv.Resume(t)

	// The pool may hold connections the restart broke: a 5xx the client
	// retries is fine, a 409 is the bug.
	var again reply
	for try := 0; ; try++ {
		again = b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "outage-1")
		if again.status == 409 || again.status < 500 || try == 5 {
			break
		}
	}
	if again.status != 202 {
		t.Fatalf("the retry after the outage: %d %s, want 202 at once", again.status, again.body)
	}
	var acc acceptBody
	if err := json.Unmarshal(again.body, &acc); err != nil || acc.Duplicate || acc.Count != 1 {
		t.Fatalf("the retry's answer %s (%v): want the event accepted afresh, once", again.body, err)
	}
	third := b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "outage-1")
	if third.status != 202 || third.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(third.body), `"evt_outage"`) {
		t.Fatalf("a third try: %d %s (replayed %q), want the stored answer", third.status, third.body, third.header.Get("Idempotent-Replayed"))
	}
}

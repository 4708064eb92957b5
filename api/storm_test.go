package api_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
)

// The duplicate storm: 1,000 concurrent submissions over HTTP of 100
// distinct events, 10 copies each, shuffled. Exactly 100 events, their 100
// notifications, and one send each.
func TestDuplicateStorm(t *testing.T) {
	t.Parallel()
	provider := sim.New(sim.Options{HonourKeys: true})
	ps := httptest.NewServer(provider)
	t.Cleanup(func() { provider.Close(); ps.Close() })
	p, err := providers.New("email-http+" + ps.URL + "/v1/emails?from=relay%40example.com&idempotency=honoured&name=sim")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Quiet: true, Relay: relay.Options{Routes: relay.Routes{"email": {p}}}})

	const events, copies = 100, 10
	var bodies []string
	for i := range events {
		body := fmt.Sprintf(`{"id": "storm-%d", "type": "receipt", "channels": ["email"],
			"recipients": [{"id": "u%d", "email": "u%d@example.com"}], "body": "thanks"}`, i, i, i)
		for range copies {
			bodies = append(bodies, body)
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for _, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := b.send(ctx, "POST", "/v1/events", body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[-1]++
				return
			}
			statuses[rep.status]++
		}()
	}
	close(start)
	wg.Wait()
	// 202 for the first and for replays; 409 for a copy that arrived while
	// the first was in flight (the client retries it). Nothing else.
	if statuses[http.StatusAccepted]+statuses[http.StatusConflict] != events*copies {
		t.Fatalf("answers %v", statuses)
	}
	if _, err := b.r.RunUntilIdle(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := b.st.Status(context.Background(), b.r.Now())
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, n := range st.Counts {
		total += n
	}
	if total != events || st.Counts[model.StatusSent] != events {
		t.Fatalf("notifications %v, want %d, all sent", st.Counts, events)
	}
	if got := len(provider.Deliveries()); got != events || provider.Requests() != events {
		t.Fatalf("%d deliveries in %d requests, want %d and %d", got, provider.Requests(), events, events)
	}
	t.Logf("storm: %d submissions answered %v; %d events, %d sends", events*copies, statuses, events, len(provider.Deliveries()))
}

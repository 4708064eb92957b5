package sim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/edgerelay/edgerelay/sim"
)

// A provider that loses its first answer to ada: a retry with the same
// Idempotency-Key gets the stored answer, and ada receives one email.
func Example() {
	script, err := sim.ParseScript([]byte(`{"honour_keys": true, "rules": [
		{"to": "ada@example.com", "attempts": [1], "action": "lose-answer"}]}`))
	if err != nil {
		panic(err)
	}
	srv := sim.New(sim.Options{Script: script})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for attempt := 1; attempt <= 2; attempt++ {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/emails",
			strings.NewReader(`{"from": "relay@example.com", "to": "ada@example.com", "subject": "Receipt", "text": "Thanks"}`))
		req.Header.Set("Idempotency-Key", "evt_501:receipt")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Printf("attempt %d: no answer\n", attempt)
			continue
		}
		resp.Body.Close()
		fmt.Printf("attempt %d: %d, replayed %s\n", attempt, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("requests:", srv.Requests(), "ada received:", srv.Counts()["ada@example.com"])
	// Output:
	// attempt 1: no answer
	// attempt 2: 200, replayed true
	// requests: 2 ada received: 1
}

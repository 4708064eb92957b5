package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/sim"
)

// An Idempotency-Key held by a request in flight when serve is SIGKILLed is
// free for the client's retry at once, after the restart: the stored
// answer if the accept committed (killed after it), a fresh run if it did
// not (killed before). Before keys recorded their owner, the retry was
// 409 request-in-progress for the whole hold (60 s), past the retry budget
// of many clients.
func TestIdempotencyKeyFreeAfterSIGKILL(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds the binary and SIGKILLs real processes")
	}
	t.Parallel()
	bin := binary(t)
	hs := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(hs.Close)
	for _, c := range []struct {
		crashAt   string
		duplicate bool // whether the retry finds the event committed
	}{
		{"accept:1", false},
		{"accepted:1", true},
	} {
		t.Run(c.crashAt, func(t *testing.T) {
			dir := t.TempDir()
			d := &drill{t: t, bin: bin, dir: dir, db: filepath.Join(dir, "relay.db"), config: filepath.Join(dir, "edgerelay.yaml")}
			cfg := "routes:\n  email: \"email-http+" + hs.URL + "/v1/emails?from=relay@example.com\"\n"
			if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			body := []byte(`{"id":"ev-1","type":"receipt","channels":["email"],"subject":"s","body":"b",
				"recipients":[{"id":"u1","email":"u1@example.com"}]}`)
			post := func(p *serveProc) (*http.Response, []byte, error) {
				req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/events", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "order-42")
				resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
				if err != nil {
					return nil, nil, err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, b, err
			}

			p := d.start(c.crashAt)
			if _, _, err := post(p); err == nil {
				t.Fatalf("the POST was answered: the crash point %s did not kill serve", c.crashAt)
			}
			<-p.exited
			if !p.killedBySIGKILL() {
				t.Fatalf("serve ended by %v, want SIGKILL", p.err)
			}

			p = d.start("")
			resp, b, err := post(p)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("the retry after the restart: %d %s; want 202 at once", resp.StatusCode, b)
			}
			var acc struct {
				Duplicate bool `json:"duplicate"`
			}
			if err := json.Unmarshal(b, &acc); err != nil || acc.Duplicate != c.duplicate {
				t.Fatalf("the retry's answer %s (%v): duplicate should be %v", b, err, c.duplicate)
			}
			// And a second retry replays the stored answer.
			resp2, b2, err := post(p)
			if err != nil || resp2.StatusCode != http.StatusAccepted || !bytes.Equal(b2, b) || resp2.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("a second retry: %v %v %s; want the first answer replayed", err, resp2, b2)
			}
		})
	}
}

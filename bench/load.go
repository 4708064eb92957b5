package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LoadOptions describe a load of new one-recipient events posted to
// POST /v1/events, as clients of serve send them. `edgerelay bench load`
// runs it in a process of its own, so that the load's CPU is not the
// server's.
type LoadOptions struct {
	URL    string // serve's base URL: http://127.0.0.1:PORT
	Token  string // a tenant's API token; "" for an open API
	Conns  int    // connections, each kept alive, one request at a time
	Prefix string // event ids are Prefix0, Prefix1 …: new in each run
	// Rate, when positive, offers Rate events per second for For (open
	// loop: event i is due at start + i/Rate, whether or not earlier ones
	// were answered; what the connections could not send by then is not
	// sent, and counted). Zero posts Events as fast as the connections
	// allow (closed loop).
	Rate   float64
	For    time.Duration
	Events int
}

// LoadResult is what the load saw, as JSON for the process that ran it.
type LoadResult struct {
	Sent     int `json:"sent"`     // requests that got an answer
	Accepted int `json:"accepted"` // 202
	Shed     int `json:"shed"`     // 503 overloaded
	// ShedNoRetryAfter counts 503 answers without a Retry-After header.
	ShedNoRetryAfter int `json:"shed_no_retry_after"`
	Other            int `json:"other"`  // any other status
	Errors           int `json:"errors"` // no answer (connection refused or reset, timeout)
	// Unsent counts the events of an open-loop load still unsent at its
	// end: every connection was waiting for an answer when they were due.
	Unsent     int    `json:"unsent"`
	FirstError string `json:"first_error,omitempty"`
	// Start and End are Unix milliseconds: the first request's start and
	// the last answer's end, on the clock the store writes.
	Start int64 `json:"start_ms"`
	End   int64 `json:"end_ms"`
	// FirstShed is when the first 503 came, from Start; 0 if none.
	FirstShed time.Duration `json:"first_shed_ns"`
	P50       time.Duration `json:"accept_p50_ns"` // of the accepted requests
	P99       time.Duration `json:"accept_p99_ns"`
}

// Elapsed is from the first request to the last answer.
func (r LoadResult) Elapsed() time.Duration { return time.Duration(r.End-r.Start) * time.Millisecond }

// AcceptedPerSecond is the accepted events per second while the load ran.
func (r LoadResult) AcceptedPerSecond() float64 {
	return float64(r.Accepted) / max(1e-3, r.Elapsed().Seconds())
}

// Load posts the events described by o and reports what came back.
func Load(ctx context.Context, o LoadOptions) (LoadResult, error) {
	total := o.Events
	if o.Rate > 0 {
		total = int(o.Rate * o.For.Seconds())
	}
	if total <= 0 || o.Conns <= 0 {
		return LoadResult{}, fmt.Errorf("load: nothing to send (%d events, %d connections)", total, o.Conns)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = o.Conns, o.Conns, o.Conns
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := strings.TrimSuffix(o.URL, "/") + "/v1/events"

	var next atomic.Int64
	var mu sync.Mutex
	var res LoadResult
	var firstShed time.Time
	lat := make([]time.Duration, 0, total)
	start := time.Now()
	deadline := start.Add(o.For)
	var wg sync.WaitGroup
	for range o.Conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				if o.Rate > 0 && time.Now().After(deadline) {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if o.Rate > 0 {
					due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						t := time.NewTimer(wait)
						select {
						case <-t.C:
						case <-ctx.Done():
							t.Stop()
							return
						}
					}
				}
				id := o.Prefix + strconv.Itoa(i)
				body := `{"id":"` + id + `","type":"receipt","channels":["email"],"recipients":[{"id":"u` + id +
					`","email":"u` + id + `@example.com"}],"subject":"Your receipt","body":"Thanks for your order."}`
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				if o.Token != "" {
					req.Header.Set("Authorization", "Bearer "+o.Token)
				}
				t := time.Now()
				rep, err := client.Do(req)
				if err != nil {
					mu.Lock()
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, rep.Body)
				rep.Body.Close()
				took := time.Since(t)
				mu.Lock()
				res.Sent++
				switch rep.StatusCode {
				case http.StatusAccepted:
					res.Accepted++
					lat = append(lat, took)
				case http.StatusServiceUnavailable:
					res.Shed++
					if rep.Header.Get("Retry-After") == "" {
						res.ShedNoRetryAfter++
					}
					if firstShed.IsZero() {
						firstShed = time.Now()
					}
				default:
					res.Other++
					if res.FirstError == "" {
						res.FirstError = "POST /v1/events: " + rep.Status
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	end := time.Now()
	if err := ctx.Err(); err != nil {
		return LoadResult{}, err
	}
	res.Start, res.End = start.UnixMilli(), end.UnixMilli()
	res.Unsent = total - res.Sent - res.Errors
	if !firstShed.IsZero() {
		res.FirstShed = firstShed.Sub(start)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return res, nil
}

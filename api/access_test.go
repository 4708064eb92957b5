package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/sources"
)

// An open API (loopback, no tokens) closes itself once a token is created
// in the store, by this process or another, within TokenCheck: requests
// without a token or with a wrong one are refused from then on, and a
// token's tenant is applied.
func TestOpenAPIClosesWhenATokenIsCreated(t *testing.T) {
	t.Parallel()
	b := setup(t, options{API: api.Options{TokenCheck: 20 * time.Millisecond}})
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_open", 1))))
	_, token, err := b.r.CreateToken(context.Background(), "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(bound)
	for {
		rep := b.do(t, "GET", "/v1/notifications", "")
		if rep.status == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still open %s after a token was created: %s", bound, rep)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_2", 1)), "Authorization", "Bearer ert_wrong"), http.StatusUnauthorized, "unauthorized")
	auth := []string{"Authorization", "Bearer " + token}
	if res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_2", 1)), auth...)); res.Tenant != "acme" {
		t.Errorf("the token's event went to tenant %q, want acme", res.Tenant)
	}
	other := receipt("evt_3", 1)
	other.Tenant = "default"
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, other), auth...), http.StatusForbidden, "tenant-mismatch")
	// The events of the open time are another tenant's now.
	if all := b.listAll(t, auth...); len(all) != 1 {
		t.Errorf("acme sees %d notifications, want its 1", len(all))
	}
	// Revoking every token does not reopen the API.
	ts, err := b.st.Tokens(context.Background())
	if err != nil || len(ts) != 1 {
		t.Fatalf("tokens: %v %v", ts, err)
	}
	if err := b.st.DeleteToken(context.Background(), ts[0].ID); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do(t, "GET", "/v1/notifications", "", auth...), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, b.do(t, "GET", "/v1/notifications", ""), http.StatusUnauthorized, "unauthorized")
}

// Metrics cover every tenant: on the API's listener they are served while
// the API is open, or to the metrics token, never to a tenant's token.
func TestMetricsProtected(t *testing.T) {
	t.Parallel()
	const acmeTok = "tok-acme-0123456789"
	const metricsTok = "tok-metrics-0123456789"
	tokens := map[string]string{sha256hex(acmeTok): "acme"}
	acme := []string{"Authorization", "Bearer " + acmeTok}

	open := setup(t, options{Metrics: true})
	ev := receipt("evt-private-id", 1)
	ev.Tenant, ev.Recipients[0].ID = "tenant-private", "user-private"
	accepted(t, open.do(t, "POST", "/v1/events", jsonOf(t, ev)))
	open.logs.waitRequests(t, 1)
	rep := open.do(t, "GET", "/metrics", "")
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), "edgerelay_events_accepted_total 1") {
		t.Errorf("open API: %s", rep)
	}
	// No label names a tenant, a user or an id.
	if strings.Contains(string(rep.body), "private") {
		t.Errorf("metrics name a tenant's data:\n%s", rep.body)
	}

	closed := setup(t, options{Metrics: true, Tokens: tokens})
	for _, hdr := range [][]string{nil, acme} {
		p := wantProblem(t, closed.do(t, "GET", "/metrics", "", hdr...), http.StatusUnauthorized, "unauthorized")
		if !strings.Contains(p.Detail, "--metrics-listen") || !strings.Contains(p.Detail, "--metrics-token") ||
			!strings.Contains(p.Detail, "token create --metrics") {
			t.Errorf("the 401 does not say how to read metrics: %q", p.Detail)
		}
	}
	// A stored metrics token (token create --metrics) opens them at once,
	// without a restart, and nothing else; revoked, it stops.
	stored := "ert_stored-metrics-0123456789"
	mt, err := closed.st.CreateToken(context.Background(), api.MetricsTenant, "scraper", api.HashToken(stored), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep := closed.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+stored); rep.status != http.StatusOK ||
		!strings.Contains(string(rep.body), "edgerelay_notifications{") {
		t.Errorf("a stored metrics token: %s", rep)
	}
	wantProblem(t, closed.do(t, "GET", "/v1/notifications", "", "Authorization", "Bearer "+stored), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, closed.do(t, "POST", "/v1/events", jsonOf(t, ev), "Authorization", "Bearer "+stored), http.StatusUnauthorized, "unauthorized")
	if err := closed.st.DeleteToken(context.Background(), mt.ID); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, closed.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+stored), http.StatusUnauthorized, "unauthorized")
	// Their own listener (serve --metrics-listen) serves them as they are.
	own := httptest.NewServer(closed.api.MetricsHandler())
	defer own.Close()
	resp, err := http.Get(own.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "edgerelay_notifications{") {
		t.Errorf("metrics listener: %d %.200s", resp.StatusCode, body)
	}

	withToken := setup(t, options{Metrics: true, Tokens: tokens, API: api.Options{MetricsToken: metricsTok}})
	for _, hdr := range [][]string{nil, acme, {"Authorization", "Bearer " + metricsTok + "x"}, {"Authorization", "Bearer " + metricsTok[:10]}} {
		rep := withToken.do(t, "GET", "/metrics", "", hdr...)
		if p := wantProblem(t, rep, http.StatusUnauthorized, "unauthorized"); !strings.Contains(p.Detail, "metrics token") {
			t.Errorf("401 detail %q", p.Detail)
		}
	}
	if rep := withToken.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+metricsTok); rep.status != http.StatusOK {
		t.Errorf("the metrics token: %s", rep)
	}
	// And the metrics token is no tenant's token.
	wantProblem(t, withToken.do(t, "GET", "/v1/notifications", "", "Authorization", "Bearer "+metricsTok), http.StatusUnauthorized, "unauthorized")
}

// rawRequest writes a request's head and the first bytes of its body on a
// connection of its own, and returns the connection and a reader.
func rawRequest(t *testing.T, srv *httptest.Server, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// An unauthenticated request is refused on its headers: the 401 comes at
// once, without waiting for a body the client is slow to send (or never
// sends).
func TestUnauthenticatedSlowBodyRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex("tok-acme-0123456789"): "acme"}, API: api.Options{BodyTimeout: time.Minute}})
	conn, rd := rawRequest(t, b.srv, "POST /v1/events HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"id\":")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second)) // far below the body timeout
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("no answer while the body is outstanding: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("got %s (close %v), want 401 and the connection closed", resp.Status, resp.Close)
	}
}

// A client that sends its headers and then trickles its body is answered
// 408 and cut off once BodyTimeout has passed since the body was first
// read; the server goes on serving others meanwhile.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	b := setup(t, options{API: api.Options{BodyTimeout: timeout}})
	start := time.Now()
	conn, rd := rawRequest(t, b.srv, "POST /v1/events HTTP/1.1\r\nHost: relay\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 20 ms: the body would take 20 s
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	// Others are served while the slow body trickles in.
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 1))))
	conn.SetReadDeadline(time.Now().Add(bound))
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("the slow body was not cut off: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body-timeout") {
		t.Errorf("got %s %s, want 408 body-timeout", resp.Status, body)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("cut off after %s, want about %s", took, timeout)
	}
	accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_2", 1))))
	// The deadline is the body's, not the handler's: a body read in time
	// leaves the rest of the request undisturbed.
	if rep := b.do(t, "GET", fmt.Sprintf("/v1/notifications?limit=%d", 10), ""); rep.status != http.StatusOK {
		t.Errorf("list: %s", rep)
	}
}

// /readyz answers every probe, but names the tailed outboxes (the app's
// database host and table) only as metrics are shown: on an open API or
// to the metrics token.
func TestReadyzShowsSourcesToOperatorsOnly(t *testing.T) {
	t.Parallel()
	const acmeTok = "tok-acme-0123456789"
	const metricsTok = "tok-metrics-0123456789"
	srcs := func() []api.TailSource {
		return []api.TailSource{{TailStats: sources.TailStats{Source: "db.internal/app/edgerelay_outbox", Position: 7}, Here: true}}
	}
	open := setup(t, options{API: api.Options{Sources: srcs}})
	closed := setup(t, options{Tokens: map[string]string{sha256hex(acmeTok): "acme"}, API: api.Options{Sources: srcs, MetricsToken: metricsTok}})
	for _, c := range []struct {
		name  string
		b     *bundle
		hdr   []string
		shown bool
	}{
		{"open API", open, nil, true},
		{"closed, no token", closed, nil, false},
		{"closed, a tenant's token", closed, []string{"Authorization", "Bearer " + acmeTok}, false},
		{"closed, the metrics token", closed, []string{"Authorization", "Bearer " + metricsTok}, true},
	} {
		rep := c.b.do(t, "GET", "/readyz", "", c.hdr...)
		if rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"ready"`) {
			t.Errorf("%s: %s", c.name, rep)
		}
		if got := strings.Contains(string(rep.body), "db.internal"); got != c.shown {
			t.Errorf("%s: source shown %v, want %v: %s", c.name, got, c.shown, rep.body)
		}
	}
}

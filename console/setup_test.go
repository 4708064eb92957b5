package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/console"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
)

// fixture is a relay on a fresh database delivering through the simulator
// on loopback, the API and the console mounted as serve mounts them, and
// the ada/ben case delivered: ada's first two answers lost (the provider
// honours keys), dan refused once and dead (his type allows one attempt),
// eve in another tenant.
type fixture struct {
	r         *relay.Relay
	path      string      // the database, which another node may open too
	apiOpts   api.Options // as the API was made
	srv       *httptest.Server
	url       string // the console's root
	acmeToken string // a stored token of acme
	betaToken string // a config token of beta
	ada, dan  int64
	eve       int64
	// adaID, danID, eveID: the same as the pages spell them (n_…).
	adaID, danID, eveID string
}

const betaConfigToken = "beta-config-token-0123456789"

func setup(t *testing.T, open bool) *fixture {
	t.Helper()
	return setupWith(t, open, console.Options{})
}

// setupWith is setup with the console's options (Auth is set here).
func setupWith(t *testing.T, open bool, opts console.Options) *fixture {
	t.Helper()
	return setupAt(t, filepath.Join(t.TempDir(), "relay.db"), open, opts)
}

// setupAt is setupWith on the database at path (a file, or a PostgreSQL
// URL).
func setupAt(t *testing.T, path string, open bool, opts console.Options) *fixture {
	t.Helper()
	honour := true
	simulator := sim.New(sim.Options{Script: &sim.Script{HonourKeys: &honour, Rules: []sim.Rule{
		{To: "ada@example.com", Attempts: []int{1, 2}, Action: sim.ActionLoseAnswer},
		{To: "dan@example.com", Attempts: []int{1}, Action: sim.ActionRefuse, Status: 503},
	}}})
	t.Cleanup(simulator.Close)
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: simulator}
	go hs.Serve(sln)
	t.Cleanup(func() { hs.Close() })
	p, err := providers.New(fmt.Sprintf("email-http+http://%s/v1/emails?from=billing@example.com&timeout=2s&idempotency=honoured&name=resend", sln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	r, err := relaytest.Open(t.Context(), path, relay.Options{
		Routes:    relay.Routes{"email": {p}},
		Retry:     relay.Policy{BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
		TypeRetry: map[string]relay.Policy{"account.alert": {MaxAttempts: 1, BaseDelay: 20 * time.Millisecond}},
		Poll:      20 * time.Millisecond,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f := &fixture{r: r, path: path}
	if !open {
		if _, f.acmeToken, err = r.CreateToken(t.Context(), "acme", "support"); err != nil {
			t.Fatal(err)
		}
		f.betaToken = betaConfigToken
	}
	accept := func(tenant, id, typ, who string) int64 {
		res, err := r.Accept(t.Context(), relay.Event{ID: id, Type: typ, Purpose: "receipt", Tenant: tenant, Channels: []string{"email"},
			Recipients: []relay.Recipient{{ID: who, Email: who + "@example.com"}},
			Subject:    "Your receipt", Body: "We received your payment of EUR 20.00.", Data: []byte(`{"amount":"20.00"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Notifications[0].ID
	}
	f.ada = accept("acme", "evt_501", "payment.succeeded", "ada")
	f.dan = accept("acme", "evt_502", "account.alert", "dan")
	f.eve = accept("beta", "evt_701", "payment.succeeded", "eve")
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ids, err := r.IDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f.adaID, f.danID, f.eveID = ids.Notification(f.ada), ids.Notification(f.dan), ids.Notification(f.eve)
	waitStatus(t, r, f.ada, model.StatusSent)
	waitStatus(t, r, f.dan, model.StatusDead)
	waitStatus(t, r, f.eve, model.StatusSent)

	apiOpts := api.Options{Open: open, TokenHashes: map[string]string{}, TokenCheck: 10 * time.Millisecond}
	if !open {
		apiOpts.TokenHashes[api.HashToken(betaConfigToken)] = "beta"
	}
	f.apiOpts = apiOpts
	f.srv = serveNode(t, r, apiOpts, opts)
	f.url = f.srv.URL + "/console"
	return f
}

// serveNode mounts the API and the console over r as serve does, on a
// loopback port of their own.
func serveNode(t *testing.T, r *relay.Relay, apiOpts api.Options, opts console.Options) *httptest.Server {
	t.Helper()
	a := api.New(r, r.Store(), apiOpts)
	opts.Auth = a
	con, err := console.New(r, r.Store(), opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", con)
	mux.Handle("/", a)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// node is a second process over the fixture's database, as a second node
// of a cluster: its own relay (not dispatching), API and console, with
// nothing in memory shared with the first. It returns the node's server.
func (f *fixture) node(t *testing.T, opts console.Options) *httptest.Server {
	t.Helper()
	r, err := relaytest.Open(t.Context(), f.path, relay.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return serveNode(t, r, f.apiOpts, opts)
}

// waitStatus polls until notification id has status want.
func waitStatus(t *testing.T, r *relay.Relay, id int64, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := r.Store().Notification(context.Background(), "", id, "")
		if err != nil {
			t.Fatal(err)
		}
		if n.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %d is %s after 10 s, want %s (reason %q)", id, n.Status, want, n.Reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/mysqltest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/internal/testbin"
	"github.com/edgerelay/edgerelay/internal/testpar"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sim"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// binary is edgerelay built from this tree, once per run for all the test
// binaries (internal/testbin): crash tests kill a real process, not a
// goroutine.
func binary(t *testing.T) string {
	t.Helper()
	return testbin.Edgerelay(t)
}

func TestMain(m *testing.M) {
	testpar.Raise()
	code := m.Run()
	pgtest.Stop()
	mysqltest.Stop()
	os.Exit(code)
}

// A dispatcher process killed with SIGKILL again and again, mid-batch,
// loses nothing and, against a provider that honours keys, duplicates
// nothing: every notification ends sent, delivered exactly once.
func TestSIGKILLMidDispatchLosesAndDuplicatesNothing(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")

	// Every call is slow, so kills land between claim, call and record.
	server := sim.New(sim.Options{HonourKeys: true, Script: &sim.Script{Rules: []sim.Rule{
		{To: "*", Action: sim.ActionSlow, Delay: 15 * time.Millisecond},
	}}})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	const n = 400
	ctx := context.Background()
	r, err := relaytest.Open(ctx, db, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := relay.Event{ID: "evt_crash", Type: "notice", Channels: []string{"email"}, Subject: "s", Body: "b"}
	for i := range n {
		ev.Recipients = append(ev.Recipients, relay.Recipient{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i)})
	}
	acc, err := r.Accept(ctx, ev)
	if err != nil || len(acc.Notifications) != n {
		t.Fatalf("accept: %d notifications, %v", len(acc.Notifications), err)
	}
	r.Close()

	route := "email=email-http+" + hs.URL + "/v1/emails?from=relay@example.com&idempotency=honoured&timeout=2s"
	args := []string{"dispatch", "--db", db, "--route", route, "--lease", "1s", "--workers", "16", "--log-level", "warn"}
	const kills = 5
	for k := range kills {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Let it get some way in (a random number of calls), then kill it.
		target := server.Requests() + 10 + rand.IntN(40)
		deadline := time.Now().Add(20 * time.Second)
		for server.Requests() < target && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("kill %d: process was not killed by the signal (%v); stderr:\n%s", k, err, stderr.String())
		}
	}
	// One clean run finishes the rest, including the attempts the kills
	// interrupted (their leases expire after 1s).
	final := exec.Command(bin, append(args, "--until-idle", "--max-wait", "10s")...)
	out, err := final.CombinedOutput()
	if err != nil {
		t.Fatalf("final dispatch: %v\n%s", err, out)
	}

	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	status, err := st.Status(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if status.Counts["sent"] != n {
		t.Fatalf("statuses %v, want all %d sent", status.Counts, n)
	}
	perKey := map[string]int{}
	for _, d := range server.Deliveries() {
		perKey[d.Key]++
	}
	var recovered, lost, dup int
	for _, an := range acc.Notifications {
		switch c := perKey[an.Key]; {
		case c == 0:
			lost++
		case c > 1:
			dup++
		}
		full, err := st.Notification(ctx, "", an.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range full.AttemptLog {
			if strings.Contains(a.Detail, "lease expired") {
				recovered++
			}
		}
	}
	t.Logf("ledger: accepted %d, delivered %d, lost %d, duplicated %d; %d HTTP requests; %d attempts interrupted by a kill and recovered",
		n, len(perKey), lost, dup, server.Requests(), recovered)
	if lost != 0 || dup != 0 || len(server.Deliveries()) != n {
		t.Fatalf("lost %d, duplicated %d, %d deliveries for %d notifications", lost, dup, len(server.Deliveries()), n)
	}
	if recovered == 0 {
		t.Fatalf("no kill hit a call in flight: the test did not exercise recovery")
	}
}

// SIGTERM stops a running dispatcher cleanly: it stops claiming, lets the
// calls in flight finish, records them, and exits 0 with nothing left in
// sending and nothing claimed but unrecorded.
func TestSIGTERMDrainsCallsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals real processes")
	}
	t.Parallel()
	bin := binary(t)
	db := filepath.Join(t.TempDir(), "relay.db")
	server := sim.New(sim.Options{HonourKeys: true, Script: &sim.Script{Rules: []sim.Rule{
		{To: "*", Action: sim.ActionSlow, Delay: 300 * time.Millisecond},
	}}})
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })

	ctx := context.Background()
	r, err := relaytest.Open(ctx, db, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := relay.Event{ID: "evt_term", Type: "notice", Channels: []string{"email"}, Body: "b"}
	for i := range 50 {
		ev.Recipients = append(ev.Recipients, relay.Recipient{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("u%d@example.com", i)})
	}
	if _, err := r.Accept(ctx, ev); err != nil {
		t.Fatal(err)
	}
	r.Close()

	cmd := exec.Command(bin, "dispatch", "--db", db, "--workers", "8", "--log-level", "warn",
		"--route", "email=email-http+"+hs.URL+"/v1/emails?from=relay@example.com&idempotency=honoured")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for server.Requests() < 8 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond) // until the first batch of calls is in flight
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dispatch after SIGTERM: %v\n%s", err, stderr.String())
	}
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	status, _ := st.Status(ctx, time.Now())
	sent := int64(len(server.Deliveries()))
	if status.Counts["sending"] != 0 || status.Counts["sent"] != sent || sent < 8 ||
		status.Counts["pending"] != 50-sent {
		t.Fatalf("after SIGTERM: statuses %v, %d delivered: want the in-flight calls recorded sent, the rest pending", status.Counts, sent)
	}
}

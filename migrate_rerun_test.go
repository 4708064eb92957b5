package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/sim"

	"github.com/jackc/pgx/v5"
)

// The rollback drill, through the real binary: a first run is killed
// after it copied notification N as pending (EDGERELAY_CRASH_AT); the
// operator rolls back, and the relay on the SQLite source delivers N;
// the next day a second run finishes the move. The target then holds N
// as sent, with its attempt, and dispatch on PostgreSQL sends nothing
// more: the provider (which does not honour keys) received N once.
func TestMigrateStoreRerunCarriesTheSourcesChanges(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	t.Parallel()
	ctx := t.Context()
	bin := binary(t)
	src := filepath.Join(t.TempDir(), "box.db")
	pg := pgtest.Start(t)
	server := sim.New(sim.Options{}) // keys not honoured: a second send is a second delivery
	hs := httptest.NewServer(server)
	t.Cleanup(func() { server.Close(); hs.Close() })
	route := "email=email-http+" + hs.URL + "/v1/emails?from=relay@example.com&timeout=2s"
	cli := func(stdin string, args ...string) {
		t.Helper()
		if r := runCLI(t, stdin, args...); r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	dispatch := func(db string) {
		t.Helper()
		cli("", "dispatch", "--db", db, "--route", route, "--lease", "1s", "--until-idle", "--max-wait", "20s", "--log-level", "warn")
	}
	cli(`{"id": "evt_601", "type": "t", "purpose": "receipt", "recipients": [{"id": "ada", "email": "ada@example.com"}], "subject": "s", "body": "b"}`,
		"send", "--db", src)

	// Run 1: events are batch 1, notifications batch 2; killed after it.
	run1 := startMigrate(t, bin, []string{"EDGERELAY_CRASH_AT=copied:2"}, "--from", src, "--to", pg)
	<-run1.exited
	if ws, ok := run1.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("run 1 was not killed at its crash point: %v\n%s", run1.cmd.ProcessState, run1.errText())
	}
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	state := func() (status string, attempts int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM attempts a WHERE a.notification = n.id AND a.outcome = 'sent')
			FROM notifications n WHERE recipient = 'ada'`).Scan(&status, &attempts); err != nil {
			t.Fatal(err)
		}
		return status, attempts
	}
	if st, n := state(); st != "pending" || n != 0 {
		t.Fatalf("after run 1 the target has N %s with %d attempts, want pending and none", st, n)
	}

	// The rollback: the source's relay delivers N.
	dispatch(src)
	if n := len(server.Deliveries()); n != 1 {
		t.Fatalf("the source's relay made %d deliveries, want 1", n)
	}

	// Run 2 carries that over.
	cli("", "migrate-store", "--from", src, "--to", pg)
	if st, n := state(); st != "sent" || n != 1 {
		t.Errorf("after run 2 the target has N %s with %d sent attempts, want sent with the source's 1", st, n)
	}
	dispatch(pg)
	if n := len(server.Deliveries()); n != 1 {
		t.Errorf("the provider received N %d times, want once: the target sent it again", n)
	}
}

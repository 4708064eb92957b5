package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// An operator pastes what a client holds: the commands that take a
// notification (show, retry) take the id the API showed (n_…) as well as
// the row id they print, and quarantine retry and drop take an event's
// (ev_…). An id of the wrong kind, or a spelling that is no id, is a usage
// error naming it; an id of no row is "not found". Run through the real
// binary, on the file an API (in this process) serves.
func TestCommandsTakeTheAPIsIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	refuser := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusUnprocessableEntity) // refused for good: failed, retryable by hand
	}))
	t.Cleanup(refuser.Close)
	hook, err := providers.New("webhook+" + refuser.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := relaytest.Open(ctx, db, relay.Options{Routes: relay.Routes{"*": {hook}}, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	srv := httptest.NewServer(api.New(r, r.Store(), api.Options{Open: true}))
	t.Cleanup(srv.Close)
	post := func(path, body string) []byte {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	status := func(id string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/notifications/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var n struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&n)
		return n.Status
	}
	idle := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := r.RunUntilIdle(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	event := func(id string, n int) string {
		var rs []string
		for i := range n {
			rs = append(rs, fmt.Sprintf(`{"id": "u%d", "email": "u%d@example.com"}`, i, i))
		}
		return fmt.Sprintf(`{"id": %q, "type": "t", "channels": ["email"], "recipients": [%s], "subject": "s", "body": "b"}`, id, strings.Join(rs, ", "))
	}
	var acc struct{ Notifications []struct{ ID string } }
	json.Unmarshal(post("/v1/events", event("evt_1", 2)), &acc)
	if len(acc.Notifications) != 2 {
		t.Fatalf("accept: %+v", acc)
	}
	n1, n2 := acc.Notifications[0].ID, acc.Notifications[1].ID
	idle()
	if status(n1) != "failed" || status(n2) != "failed" {
		t.Fatalf("after the 422s: %s %s, want failed", status(n1), status(n2))
	}

	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--db", db)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}
	want := func(code int, in string, args ...string) string {
		t.Helper()
		got, stdout, stderr := run(args...)
		if got != code || !strings.Contains(stdout+stderr, in) {
			t.Errorf("edgerelay %s: exit %d\n%s%s\nwant exit %d saying %q", strings.Join(args, " "), got, stdout, stderr, code, in)
		}
		return stdout
	}

	// show: by the API's id, and by the row id it prints, the same one.
	out := want(0, "api id     "+n1, "show", n1)
	m := regexp.MustCompile(`notification (\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("show %s prints no row id:\n%s", n1, out)
	}
	want(0, "api id     "+n1, "show", m[1])
	x, err := r.IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nowhere := x.Notification(1 << 40)
	want(exitError, "not found", "show", nowhere)
	want(exitUsage, "not an id", "show", "n_abc")
	want(exitUsage, "not an id", "show", x.Event(1))

	// retry: by the API's id, and by the row id; both put back.
	want(0, "notification "+n1+" is pending again", "retry", n1)
	row2, err := r.NotificationRow(ctx, n2)
	if err != nil {
		t.Fatal(err)
	}
	want(0, "is pending again", "retry", fmt.Sprint(row2))
	if status(n1) != "pending" || status(n2) != "pending" {
		t.Errorf("after retry: %s %s, want pending", status(n1), status(n2))
	}
	want(exitError, "not found", "retry", nowhere)
	for _, bad := range []string{"abc", x.Event(1), "0"} {
		want(exitUsage, "n_", "retry", bad)
	}
	want(exitUsage, "not an id", "retry", "n_"+strings.Repeat("i", 13))

	// quarantine retry and drop take the event's id the API showed.
	post("/v1/events", event("evt_q", 3))
	sdb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DELETE FROM notifications WHERE seq > 0 AND event = (SELECT id FROM events WHERE event_id = 'evt_q')`,
		`UPDATE events SET expanded = 1, payload = '{"recipients": [' WHERE event_id = 'evt_q'`,
	} {
		if _, err := sdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	sdb.Close()
	idle()
	resp, err := http.Get(srv.URL + "/v1/quarantine")
	if err != nil {
		t.Fatal(err)
	}
	var qs struct{ Events []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&qs)
	resp.Body.Close()
	if len(qs.Events) != 1 || !strings.HasPrefix(qs.Events[0].ID, "ev_") {
		t.Fatalf("quarantine: %+v", qs)
	}
	ev := qs.Events[0].ID
	want(exitUsage, "ev_", "quarantine", "drop", n1)
	want(exitUsage, "not an id", "quarantine", "drop", "ev_abc")
	want(exitError, "quarantined again", "quarantine", "retry", ev)
	want(0, "event "+ev+": 2 notifications dropped", "quarantine", "drop", ev)
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hookLog is a loopback webhook receiver that notes the Idempotency-Key of
// every request it gets, and answers 200.
type hookLog struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []string
}

func newHookLog(t *testing.T) *hookLog {
	h := &hookLog{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.keys = append(h.keys, r.Header.Get("Idempotency-Key"))
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// route is the --route value that sends email to h as provider name.
func (h *hookLog) route(name string) string {
	return "email=webhook+" + h.srv.URL + "/hook?name=" + name + "&idempotency=honoured&timeout=2s"
}

func (h *hookLog) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keys)
}

// A dispatcher is SIGKILLed after provider x answered and before the answer
// was recorded (x sent it; the store cannot know). The next dispatcher runs
// with other routes: the recovered attempt is x's, as the claim recorded
// it, and the notification is pinned to x. With route [y, x] the retry goes
// to x with the same Idempotency-Key; with route [y], an at-most-once type
// is not resent. Either way y, which would deliver a second copy, never
// gets it. Before the claim recorded its provider, recovery took the new
// route's provider at the old position: attempt 1 was recorded as y's and
// the retry went to y.
func TestSIGKILLMidCallThenNewRoutesKeepsTheProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		name, mode string
		routes     func(x, y *hookLog) []string
		attempts   []string // the provider of each recorded attempt
		xcalls     int
		status     string
		code       int // the exit code of the run after the crash
	}{
		{"route y, x: the retry goes to x with the same key", "at-least-once",
			func(x, y *hookLog) []string { return []string{y.route("y"), x.route("x")} }, []string{"x", "x"}, 2, "sent", 0},
		{"route y, at-most-once: not resent, unknown", "at-most-once",
			func(x, y *hookLog) []string { return []string{y.route("y")} }, []string{"x"}, 1, "unknown", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db := filepath.Join(t.TempDir(), "relay.db")
			x, y := newHookLog(t), newHookLog(t)
			cli := func(env []string, args ...string) *exec.Cmd {
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append(os.Environ(), env...)
				return cmd
			}
			send := cli(nil, "send", "--db", db)
			send.Stdin = strings.NewReader(`{"id": "evt_pin", "type": "notice", "channels": ["email"],
				"recipients": [{"id": "ada", "email": "ada@example.com"}], "subject": "s", "body": "b"}`)
			out, err := send.Output()
			var acc struct {
				ID  int64  `json:"id"`
				Key string `json:"key"`
			}
			if err != nil || json.Unmarshal(out, &acc) != nil {
				t.Fatalf("send: %v\n%s", err, out)
			}
			delivery := "notice=" + tc.mode

			// The first dispatcher dies once x has answered.
			first := cli([]string{"EDGERELAY_CRASH_AT=called:1"}, "dispatch", "--db", db, "--route", x.route("x"),
				"--delivery", delivery, "--lease", "1s", "--log-level", "warn")
			out, err = first.CombinedOutput()
			if ws, ok := first.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the first dispatcher was not SIGKILLed at its crash point: %v\n%s", err, out)
			}
			if got := x.got(); len(got) != 1 || got[0] != acc.Key {
				t.Fatalf("x got keys %q before the kill, want one call with %s", got, acc.Key)
			}

			// The next one, with the new routes, once the lease (1s) has run out.
			args := []string{"dispatch", "--db", db, "--delivery", delivery, "--lease", "1s", "--until-idle", "--max-wait", "5s", "--log-level", "warn"}
			for _, r := range tc.routes(x, y) {
				args = append(args, "--route", r)
			}
			next := cli(nil, args...)
			out, err = next.CombinedOutput()
			if code := next.ProcessState.ExitCode(); code != tc.code {
				t.Fatalf("dispatch after the crash exited %d (%v), want %d\n%s", code, err, tc.code, out)
			}

			show := cli(nil, "show", "--db", db, "--json", acc.Key)
			out, err = show.Output()
			var n struct {
				Status   string `json:"status"`
				Attempts []struct {
					Provider string `json:"provider"`
					Outcome  string `json:"outcome"`
					Detail   string `json:"detail"`
				} `json:"attempt_log"`
			}
			if err != nil || json.Unmarshal(out, &n) != nil {
				t.Fatalf("show: %v\n%s", err, out)
			}
			var providers []string
			for _, a := range n.Attempts {
				providers = append(providers, a.Provider)
			}
			if n.Status != tc.status || !slices.Equal(providers, tc.attempts) {
				t.Fatalf("status %s with attempts at %q, want %s with attempts at %q\n%s", n.Status, providers, tc.status, tc.attempts, out)
			}
			if a := n.Attempts[0]; a.Outcome != "unknown" || !strings.Contains(a.Detail, "lease expired") {
				t.Errorf("attempt 1 is %+v, want the recovered one, unknown", a)
			}
			if got := y.got(); len(got) != 0 {
				t.Errorf("y was called with keys %q: it could deliver a second copy", got)
			}
			if got := x.got(); len(got) != tc.xcalls || slices.ContainsFunc(got, func(k string) bool { return k != acc.Key }) {
				t.Errorf("x got keys %q, want %d calls, each with %s", got, tc.xcalls, acc.Key)
			}
		})
	}
}

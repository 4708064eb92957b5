package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
	"github.com/edgerelay/edgerelay/usertoken"
)

// serve's stream flags: a value it cannot use is a usage error naming the
// flag, before anything opens.
func TestServeStreamFlagsChecked(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	for _, args := range [][]string{
		{"--streams-per-user", "0"}, {"--streams-per-tenant", "-1"}, {"--stream-heartbeat", "0s"}, {"--stream-sweep", "1ms"},
		{"--streams-per-tenant", "3", "--streams-per-user", "4"},
	} {
		r := runCLI(t, "", append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("serve %v: exit %d %q, want a usage error naming %s", args, r.code, r.stderr, args[0])
		}
	}
	// The same settings from the config file's api: keys, named as the
	// file spells them; a flag still wins over the file.
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("api:\n  streams_per_tenant: 3\n  streams_per_user: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "serve", "--db", db, "--listen", "127.0.0.1:0", "--config", cfg)
	if r.code != exitUsage || !strings.Contains(r.stderr, "api.streams_per_tenant 3 is below api.streams_per_user 4") {
		t.Errorf("serve with the bounds in its config: exit %d %q, want a usage error naming both keys", r.code, r.stderr)
	}
	r = runCLI(t, "", "serve", "--db", db, "--listen", "127.0.0.1:0", "--config", cfg, "--streams-per-user", "0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--streams-per-user 0") {
		t.Errorf("serve with a flag over the file: exit %d %q, want the flag's value refused", r.code, r.stderr)
	}
	if err := os.WriteFile(cfg, []byte("api:\n  stream_heartbeat: 0s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", "config", "check", cfg)
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "stream_heartbeat must be positive") {
		t.Errorf("config check of stream_heartbeat: 0s: exit %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused serve created its database")
	}
}

// feedStream is an open GET /v1/users/{user}/feed/stream on a real serve.
type feedStream struct {
	resp  *http.Response
	lines *bufio.Scanner
}

// streamClient keeps a connection per stream, as browsers' tabs do.
var streamClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// openFeedStream opens user's stream with tok; a refusal is returned as
// its status and body, with a nil stream.
func openFeedStream(ctx context.Context, base, user, tok string) (*feedStream, int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/users/"+user+"/feed/stream", nil)
	if err != nil {
		return nil, 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := streamClient.Do(req)
	if err != nil {
		return nil, 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		return nil, resp.StatusCode, resp.Header.Get("Retry-After") + " " + b.String(), nil
	}
	sc := bufio.NewScanner(resp.Body)
	return &feedStream{resp: resp, lines: sc}, resp.StatusCode, "", nil
}

// until reads lines until one satisfies ok; false if the stream ended.
func (s *feedStream) until(ok func(line string) bool) bool {
	for s.lines.Scan() {
		if ok(s.lines.Text()) {
			return true
		}
	}
	return false
}

// userTokens makes a user-token key for the open API's default tenant and
// mints a token for each user.
func userTokens(t *testing.T, base string, users []string) []string {
	t.Helper()
	code, body := call(t, "POST", base+"/v1/user-token-keys", "", "")
	if code != http.StatusCreated {
		t.Fatalf("create a user-token key: %d %s", code, body)
	}
	var k struct{ KID, Secret string }
	if err := json.Unmarshal([]byte(body), &k); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	out := make([]string, len(users))
	for i, u := range users {
		tok, err := usertoken.Mint("default", u, k.KID, []byte(k.Secret), now, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = tok
	}
	return out
}

// A real serve takes its stream bounds and heartbeat from flags and the
// environment: a stream beyond the user's bound or the tenant's is 429
// too-many-streams with Retry-After and a detail naming the bound; an idle
// stream sends heartbeats at the flag's period.
func TestServeStreamBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process")
	}
	t.Parallel()
	p := startServeEnv(t, binary(t), []string{"EDGERELAY_STREAMS_PER_TENANT=2"},
		"--db", filepath.Join(t.TempDir(), "r.db"), "--route", "*=log:///dev/null", "--streams-per-user", "1", "--stream-heartbeat", "50ms")
	toks := userTokens(t, p.base, []string{"ada", "bob", "carol"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	open := func(user, tok string) (*feedStream, int, string) {
		s, code, body, err := openFeedStream(ctx, p.base, user, tok)
		if err != nil {
			t.Fatalf("stream of %s: %v", user, err)
		}
		if s != nil {
			t.Cleanup(func() { s.resp.Body.Close() })
		}
		return s, code, body
	}
	ada, code, body := open("ada", toks[0])
	if ada == nil {
		t.Fatalf("ada's first stream: %d %s", code, body)
	}
	if !ada.until(func(l string) bool { return l == ": heartbeat" }) {
		t.Fatal("ada's stream ended before a heartbeat")
	}
	if _, code, body := open("ada", toks[0]); code != http.StatusTooManyRequests || !strings.Contains(body, "too-many-streams") ||
		!strings.Contains(body, "this user has 1 streams open") || strings.HasPrefix(body, " ") {
		t.Errorf("ada's second stream (--streams-per-user 1): %d %s, want 429 too-many-streams with Retry-After", code, body)
	}
	if bob, code, body := open("bob", toks[1]); bob == nil {
		t.Fatalf("bob's stream: %d %s", code, body)
	}
	if _, code, body := open("carol", toks[2]); code != http.StatusTooManyRequests || !strings.Contains(body, "this tenant has 2 streams open") {
		t.Errorf("carol's stream (EDGERELAY_STREAMS_PER_TENANT=2): %d %s, want 429 naming the tenant's bound", code, body)
	}
}

// startServeEnv is startAPIServe with env added to serve's environment.
func startServeEnv(t *testing.T, bin string, env []string, args ...string) *apiServe {
	t.Helper()
	addr := freeAddr(t)
	p := &apiServe{base: "http://" + addr, stderr: &syncBuffer{}}
	p.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	p.cmd.Env = diskEnv(env)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) || p.cmd.ProcessState != nil {
			t.Fatalf("serve not ready: %v\n%s", err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a process that starts: nothing to wait on
	}
}

// rss is a process's resident set, in bytes (Linux).
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// The inbox's figures for docs/inbox.md, against a real serve (its
// defaults but the tenant's stream bound): the server's RSS per idle
// stream, 1,000 streams of 1,000 users opened from this process; and the
// fan-out of one item in the tenant's feed to all of them, from the POST's
// answer to each stream's item event, three times.
func TestInboxStreamsMemoryAndFanOut(t *testing.T) {
	longtest.Require(t)
	const n = 1000
	p := startServeEnv(t, binary(t), nil, "--db", filepath.Join(t.TempDir(), "r.db"), "--route", "*=log:///dev/null",
		"--streams-per-tenant", strconv.Itoa(n), "--streams-per-user", "1")
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("u%04d", i)
	}
	toks := userTokens(t, p.base, users)
	// Warm: one stream opened and closed, so the baseline has the code
	// paths' first allocations.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if s, code, body, err := openFeedStream(ctx, p.base, users[0], toks[0]); s == nil {
		t.Fatalf("warm-up stream: %d %s %v", code, body, err)
	} else {
		s.until(func(l string) bool { return strings.HasPrefix(l, "event: state") })
		s.resp.Body.Close()
	}
	waitStatus(t, http.StatusOK, "GET", p.base+"/readyz", "", "")
	before := rss(t, p.cmd.Process.Pid)

	streams := make([]*feedStream, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s, code, body, err := openFeedStream(ctx, p.base, users[i], toks[i])
			if s == nil {
				errs <- fmt.Errorf("stream %d: %d %s %v", i, code, body, err)
				return
			}
			if !s.until(func(l string) bool { return strings.HasPrefix(l, "event: state") }) {
				errs <- fmt.Errorf("stream %d ended before its state", i)
			}
			streams[i] = s
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	opened := time.Since(start)
	after := rss(t, p.cmd.Process.Pid)
	t.Logf("%d idle streams open in %s: serve's RSS %.1f MiB before, %.1f MiB after: %d bytes a stream",
		n, opened.Round(time.Millisecond), float64(before)/(1<<20), float64(after)/(1<<20), (after-before)/n)

	for run := 1; run <= 3; run++ {
		got := make([]time.Time, n)
		id := fmt.Sprintf("fan%d", run)
		for i, s := range streams {
			wg.Go(func() {
				if s.until(func(l string) bool {
					return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"event_id":"`+id+`"`)
				}) {
					got[i] = time.Now()
				}
			})
		}
		sent := time.Now()
		code, body := call(t, "POST", p.base+"/v1/events", "", `{"id": "`+id+`", "type": "notice", "feeds": ["*"], "subject": "to everyone"}`)
		answered := time.Now()
		if code != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, code, body)
		}
		wg.Wait()
		lat := make([]time.Duration, n)
		for i, at := range got {
			if at.IsZero() {
				t.Fatalf("run %d: stream %d ended without the item", run, i)
			}
			lat[i] = max(0, at.Sub(answered))
		}
		slices.Sort(lat)
		t.Logf("run %d: POST answered in %s; after the answer the item reached stream p50 %s, p99 %s, the last (max) %s",
			run, answered.Sub(sent).Round(time.Microsecond), lat[n/2].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond), lat[n-1].Round(time.Microsecond))
	}
	for _, s := range streams {
		s.resp.Body.Close()
	}
}

//go:build linux

package main

// Disk and database fault drills, against the real binary: a database the
// process may not write, a disk that fills up under serve and under batch
// send. What must hold whatever the fault: a clear error (one line naming
// the problem), a non-zero exit or a 503, no panic, no hang, and nothing
// acknowledged that was not committed.
//
// The full disk is a small tmpfs mounted for the test (needs CAP_SYS_ADMIN,
// as root in a container); without it the binary runs under RLIMIT_FSIZE
// through a re-exec of the test binary (see init below), so writes past the
// limit fail with EFBIG. EDGERELAY_TEST_DISK_FULL=rlimit forces the fallback.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/edgerelay/edgerelay/internal/longtest"
)

// diskFSizeEnv makes the test binary a wrapper: it lowers RLIMIT_FSIZE to
// the variable's value and execs its arguments (the edgerelay binary and its
// arguments). Go ignores SIGXFSZ, so a write past the limit fails with EFBIG.
const diskFSizeEnv = "EDGERELAY_DISK_TEST_FSIZE"

func init() {
	v := os.Getenv(diskFSizeEnv)
	if v == "" {
		return
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "disk test wrapper: %s=%q, args %q\n", diskFSizeEnv, v, os.Args)
		os.Exit(126)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		fmt.Fprintf(os.Stderr, "disk test wrapper: setrlimit: %v\n", err)
		os.Exit(126)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, diskFSizeEnv+"=") {
			env = append(env, kv)
		}
	}
	err = syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintf(os.Stderr, "disk test wrapper: exec %s: %v\n", os.Args[1], err)
	os.Exit(127)
}

// diskCmd is one run of a binary.
type diskCmd struct {
	argv  []string
	env   []string            // added to the environment
	cred  *syscall.Credential // run as this user (root only)
	stdin string
}

// diskEnv is the environment without EDGERELAY_* variables other tests
// may have set, plus extra.
func diskEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDGERELAY_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func (c diskCmd) cmd(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Env = diskEnv(c.env)
	cmd.Stdin = strings.NewReader(c.stdin)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// diskRun runs c to its end (a hang is a failure) and returns its exit
// code and output.
func diskRun(t *testing.T, c diskCmd) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := c.cmd(ctx)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%q hung (killed after 20s)\nstderr: %s", c.argv, errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%q: %v", c.argv, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// diskProc is a running serve.
type diskProc struct {
	cmd     *exec.Cmd
	serving chan string   // the base URL, once serve says it is serving
	done    chan struct{} // closed when the process has exited
	code    int           // its exit code (-1: killed by a signal), after done

	mu     sync.Mutex
	stderr bytes.Buffer
}

func diskStart(t *testing.T, c diskCmd) *diskProc {
	t.Helper()
	cmd := c.cmd(context.Background())
	cmd.Stdout = io.Discard
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &diskProc{cmd: cmd, serving: make(chan string, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if rest, ok := strings.CutPrefix(line, "edgerelay: serving "); ok {
				u, _, _ := strings.Cut(rest, " ")
				select {
				case p.serving <- u:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// waitServing returns serve's base URL, or "" if it exited first.
func (p *diskProc) waitServing(t *testing.T) string {
	t.Helper()
	select {
	case u := <-p.serving:
		return u
	case <-p.done:
		return ""
	case <-time.After(15 * time.Second):
		t.Fatalf("serve neither served nor exited in 15s:\n%s", p.output())
		return ""
	}
}

func (p *diskProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *diskProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *diskProc) kill() {
	if !p.exited() {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// stop sends SIGTERM and returns the exit code; a hang is a failure.
func (p *diskProc) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.code
	case <-time.After(15 * time.Second):
		p.kill()
		t.Fatalf("serve did not exit within 15s of SIGTERM:\n%s", p.output())
		return -1
	}
}

var diskClient = &http.Client{Timeout: 15 * time.Second}

type diskResp struct {
	status int
	ctype  string
	body   string
}

// diskTry makes one request, with headers as name, value pairs.
func diskTry(method, url, body string, header ...string) (diskResp, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return diskResp{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := diskClient.Do(req)
	if err != nil {
		return diskResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return diskResp{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}, err
}

// diskDo makes one request; a transport error or timeout (a hang) fails the test.
func diskDo(t *testing.T, method, url, body string) diskResp {
	t.Helper()
	r, err := diskTry(method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

// diskPost posts the drill's event id: every other one with an
// Idempotency-Key (a claimed request key, three commits), the others without
// (the event's identity is the record, one commit). A retry sends the same.
func diskPost(base, id string) (diskResp, error) {
	var header []string
	if n, _ := strconv.Atoi(id[strings.LastIndex(id, "-")+1:]); n%2 == 1 {
		header = []string{"Idempotency-Key", "key-" + id}
	}
	return diskTry("POST", base+"/v1/events", diskEvent(id, 1500), header...)
}

func diskEvent(id string, bodySize int) string {
	b, _ := json.Marshal(map[string]any{
		"id": id, "type": "disk.drill", "channels": []string{"email"},
		"recipients": []map[string]string{{"id": "u-" + id, "email": id + "@example.com"}},
		"subject":    "drill " + id, "body": strings.Repeat("x", bodySize),
	})
	return string(b)
}

func diskHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// diskOpen opens db read-write (so a WAL left by a killed process is
// recovered) for checks.
func diskOpen(t *testing.T, db string) *sql.DB {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	return sdb
}

func diskIntegrity(t *testing.T, sdb *sql.DB) string {
	t.Helper()
	rows, err := sdb.Query("PRAGMA integrity_check")
	if err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	return strings.Join(out, "; ")
}

// diskStored maps the event ids matching like to their notification counts.
func diskStored(t *testing.T, sdb *sql.DB, like string) map[string]int {
	t.Helper()
	rows, err := sdb.Query(`SELECT e.event_id, count(n.id) FROM events e LEFT JOIN notifications n ON n.event = e.id
		WHERE e.event_id LIKE ? GROUP BY e.id`, like)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

var diskReadOnlyRE = regexp.MustCompile(`(?i)read-?only`)

// diskOneLine reports whether s is a single line of text.
func diskOneLine(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && !strings.Contains(s, "\n")
}

// TestReadOnlyDatabase: a database created and filled normally, then made
// read-only (the file and its directory, or the file alone). Writing
// commands refuse with one line naming the file, non-zero, and change
// nothing; reads should still work.
func TestReadOnlyDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		name        string
		dirWritable bool
	}{
		{"file and directory", false},
		{"file only", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			diskReadOnlyDrill(t, bin, tc.dirWritable)
		})
	}
}

func diskReadOnlyDrill(t *testing.T, bin string, dirWritable bool) {
	root := os.Geteuid() == 0
	base, err := os.MkdirTemp("", "edgerelay-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dbDir := filepath.Join(base, "db")
	if err := os.Mkdir(dbDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dbDir, 0o755) }) // runs before RemoveAll
	db := filepath.Join(dbDir, "r.db")

	// Root ignores file modes: the binary runs as nobody, so it must be
	// where nobody can reach it (binary() builds into a 0700 directory).
	var cred *syscall.Credential
	if root {
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		// A hard link, not a copy: a file this process has open for
		// writing makes every exec of it racy (a child forked by another
		// parallel test holds the descriptor until its own exec, and the
		// kernel answers "text file busy").
		linked := filepath.Join(base, "edgerelay")
		if err := os.Link(bin, linked); err != nil {
			t.Fatalf("linking the binary where nobody can reach it: %v", err)
		}
		bin = linked
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	if code, _, stderr := diskRun(t, diskCmd{argv: []string{bin, "send", "--db", db}, stdin: adaEvent}); code != 0 {
		t.Fatalf("filling the database: exit %d %s", code, stderr)
	}
	if err := os.Chmod(db, 0o444); err != nil {
		t.Fatal(err)
	}
	dirMode := os.FileMode(0o555)
	if dirWritable {
		dirMode = 0o755
		if root {
			dirMode = 0o777 // writable by nobody
		}
	}
	if err := os.Chmod(dbDir, dirMode); err != nil {
		t.Fatal(err)
	}
	before := diskHash(t, db)
	as := func(args ...string) diskCmd { return diskCmd{argv: append([]string{bin}, args...), cred: cred} }
	newEvent := strings.Replace(adaEvent, "evt_501", "evt_ro", 1)

	t.Run("send is refused", func(t *testing.T) {
		c := as("send", "--db", db)
		c.stdin = newEvent
		code, stdout, stderr := diskRun(t, c)
		t.Logf("send: exit %d, stderr %q", code, stderr)
		if code == 0 || stdout != "" {
			t.Fatalf("send on a read-only database: exit %d, printed %q: an acknowledgement that cannot have been written", code, stdout)
		}
		if code != exitError || !diskOneLine(stderr) || !diskReadOnlyRE.MatchString(stderr) {
			t.Errorf("send: exit %d, stderr %q; want exit %d and one line saying the database is read-only", code, stderr, exitError)
		}
		if !strings.Contains(stderr, db) {
			t.Skipf("BUG: send's error does not name the database file %s: %q (store write errors carry no path; "+
				"the file is only named when Open fails)", db, strings.TrimSpace(stderr))
		}
	})

	t.Run("serve", func(t *testing.T) {
		p := diskStart(t, as("serve", "--db", db, "--listen", "127.0.0.1:0"))
		base := p.waitServing(t)
		if base == "" {
			// It refused to start: that is the right answer, with a reason.
			out := p.output()
			t.Logf("serve refused to start: exit %d, stderr %q", p.code, out)
			if p.code != exitError || !diskOneLine(out) || !diskReadOnlyRE.MatchString(out) || !strings.Contains(out, db) {
				t.Errorf("serve: exit %d, stderr %q; want exit %d and one line naming %s as read-only", p.code, out, exitError, db)
			}
			return
		}
		// It started: it must not acknowledge what it cannot store, and
		// must not call itself ready.
		post := diskDo(t, "POST", base+"/v1/events", newEvent)
		ready := diskDo(t, "GET", base+"/readyz", "")
		code := p.stop(t)
		out := p.output()
		t.Logf("serve started on a read-only database; POST /v1/events -> %d %s; GET /readyz -> %d %s; exit %d after SIGTERM",
			post.status, strings.TrimSpace(post.body), ready.status, strings.TrimSpace(ready.body), code)
		if post.status < 300 {
			t.Fatalf("POST /v1/events answered %d on a read-only database: %s", post.status, post.body)
		}
		if post.status < 500 || post.ctype != "application/problem+json" {
			t.Errorf("POST /v1/events: %d %s %s; want a 5xx problem", post.status, post.ctype, post.body)
		}
		if strings.Contains(out, "panic") {
			t.Errorf("serve panicked:\n%s", out)
		}
		if ready.status != http.StatusServiceUnavailable {
			t.Skipf("BUG: serve runs on a read-only database and /readyz answers %d %s while every write fails "+
				"(store.Ping commits an empty transaction, which needs no write access; the dispatcher logged: %s)",
				ready.status, strings.TrimSpace(ready.body), diskGrep(out, "dispatcher stopped"))
		}
	})

	t.Run("status and show still read", func(t *testing.T) {
		code, stdout, stderr := diskRun(t, as("status", "--db", db))
		code2, stdout2, stderr2 := diskRun(t, as("show", "--db", db, "1"))
		t.Logf("status: exit %d %q; show 1: exit %d %q", code, strings.TrimSpace(stderr), code2, strings.TrimSpace(stderr2))
		if code != 0 || !strings.Contains(stdout, "  pending     3\n") || code2 != 0 || !strings.Contains(stdout2, "notification 1") {
			// A documented limitation: SQLite must be able to create the
			// -wal and -shm files beside a WAL database to read it. Then
			// the refusal must say so, in one line naming the directory.
			explains := func(s string) bool {
				return diskOneLine(s) && strings.Contains(s, filepath.Dir(db)) && strings.Contains(s, "not writable")
			}
			if code == exitError && explains(stderr) && code2 == exitError && explains(stderr2) {
				t.Logf("reads need a writable directory (documented): %s", strings.TrimSpace(stderr))
				return
			}
			t.Errorf("status: exit %d %q %q; show: exit %d %q %q", code, stdout, stderr, code2, stdout2, stderr2)
		}
	})

	if after := diskHash(t, db); after != before {
		t.Fatalf("the read-only database file changed")
	}
	os.Chmod(dbDir, 0o755) // to count (a WAL database is not readable in a read-only directory)
	if n, m := countRows(t, db, "events"), countRows(t, db, "notifications"); n != 1 || m != 3 {
		t.Fatalf("%d events, %d notifications after the drill; want 1 and 3, as before", n, m)
	}
}

func diskGrep(out, what string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, what) {
			return strings.TrimSpace(l)
		}
	}
	return "(nothing)"
}

// diskLimit is a directory whose disk fills up: a tmpfs of the given size,
// or (without the right to mount) an ordinary directory with the binary
// run under RLIMIT_FSIZE.
type diskLimit struct {
	dir  string
	how  string // "tmpfs" or "rlimit"
	size int64
}

func diskFullDir(t *testing.T, size int64) *diskLimit {
	t.Helper()
	base, err := os.MkdirTemp("", "edgerelay-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &diskLimit{dir: dir, how: "rlimit", size: size}
	if os.Getenv("EDGERELAY_TEST_DISK_FULL") != "rlimit" {
		out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", size>>10), "tmpfs", dir).CombinedOutput()
		if err == nil {
			l.how = "tmpfs"
			t.Cleanup(func() { // before RemoveAll; after the processes are killed
				if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
					t.Logf("umount %s: %v %s; detaching it", dir, err, out)
					exec.Command("umount", "-l", dir).Run()
				}
			})
		} else {
			t.Logf("cannot mount a tmpfs (%v: %s): running the binary under RLIMIT_FSIZE=%d instead", err, bytes.TrimSpace(out), size)
		}
	}
	t.Logf("disk full by %s (%d KiB)", l.how, size>>10)
	return l
}

// command runs bin on the limited disk.
func (l *diskLimit) command(bin string, args ...string) diskCmd {
	if l.how == "tmpfs" {
		return diskCmd{argv: append([]string{bin}, args...)}
	}
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return diskCmd{argv: append([]string{self, bin}, args...), env: []string{fmt.Sprintf("%s=%d", diskFSizeEnv, l.size)}}
}

// resize sets the tmpfs's size.
func (l *diskLimit) resize(t *testing.T, size int64) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dk", size>>10), l.dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v %s", l.dir, err, out)
	}
}

// grow gives the space back in place (tmpfs); under RLIMIT_FSIZE the limit
// goes with the process.
func (l *diskLimit) grow(t *testing.T) {
	t.Helper()
	if l.how != "tmpfs" {
		return
	}
	l.resize(t, 64<<20)
}

// TestDiskFullServe fills the disk under serve with a stream of events:
// once writes fail, events are answered 5xx, nothing is acknowledged that
// was not committed, and once the space is back the relay works again.
func TestDiskFullServe(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary on a full disk")
	}
	t.Parallel()
	bin := binary(t)
	lim := diskFullDir(t, 8<<20)
	db := filepath.Join(lim.dir, "r.db")
	// The provider is slow while the disk fills, so the dispatcher has a
	// backlog to claim and record when writes start failing; fast after.
	var slow atomic.Int64
	slow.Store(int64(200 * time.Millisecond))
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Duration(slow.Load())):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(sink.Close)
	args := []string{"serve", "--db", db, "--listen", "127.0.0.1:0", "--route", "*=webhook+" + sink.URL + "/hook", "--log-level", "warn"}
	p := diskStart(t, lim.command(bin, args...))
	base := p.waitServing(t)
	if base == "" {
		t.Fatalf("serve did not start on an empty disk: exit %d\n%s", p.code, p.output())
	}

	// The driver: 4 clients post distinct events until 20 answers in a
	// row are not 2xx. Every acknowledged id is recorded.
	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		refused  []string
		statuses = map[int]int{}
		samples  = map[int]string{}
		bad      []string
		seq      atomic.Int64
		failRun  atomic.Int64
	)
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for failRun.Load() < 20 && seq.Load() < 20000 && time.Since(start) < 12*time.Second {
				id := fmt.Sprintf("full-%05d", seq.Add(1))
				r, err := diskPost(base, id)
				mu.Lock()
				if err != nil { // a hang or a dead server: never an acknowledgement
					bad = append(bad, fmt.Sprintf("%s: %v", id, err))
					refused = append(refused, id)
					failRun.Add(1)
					mu.Unlock()
					continue
				}
				statuses[r.status]++
				if r.status/100 == 2 {
					acked[id] = true
					failRun.Store(0)
				} else {
					refused = append(refused, id)
					failRun.Add(1)
					if _, ok := samples[r.status]; !ok {
						samples[r.status] = strings.TrimSpace(r.body)
					}
					if r.status < 500 || r.ctype != "application/problem+json" {
						bad = append(bad, fmt.Sprintf("%s: %d %s %s", id, r.status, r.ctype, r.body))
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("filling: %d posts in %s, answers %v; %d acknowledged, %d refused; first refusals: %v",
		seq.Load(), time.Since(start).Round(time.Millisecond), statuses, len(acked), len(refused), samples)
	if len(bad) > 0 {
		t.Errorf("refusals that are not 5xx problems, or requests that failed: %q", bad)
	}
	if len(acked) == 0 {
		t.Fatalf("nothing was accepted before the disk was full: the disk is too small\n%s", p.output())
	}
	if failRun.Load() < 20 {
		t.Fatalf("the disk never filled: %d posts, answers %v", seq.Load(), statuses)
	}

	if p.exited() {
		// Exiting is also a right answer, if it is non-zero with a reason.
		t.Logf("serve exited on the full disk: exit %d\n%s", p.code, p.output())
		if p.code == 0 {
			t.Errorf("serve exited 0 on a full disk")
		}
	} else {
		ready := diskDo(t, "GET", base+"/readyz", "")
		t.Logf("while full: serve is running; GET /readyz -> %d %s", ready.status, strings.TrimSpace(ready.body))
		t.Run("readyz is 503 while writes fail", func(t *testing.T) {
			if ready.status != http.StatusServiceUnavailable {
				t.Skipf("BUG: /readyz answers %d %s while every event is refused for a full disk "+
					"(store.Ping commits an empty transaction, which needs no space)", ready.status, strings.TrimSpace(ready.body))
			}
		})
	}
	if out := p.output(); strings.Contains(out, "panic") {
		t.Errorf("serve panicked:\n%s", out)
	}
	t.Logf("serve's errors while full:\n%s", diskFirstLines(p.output(), 6))

	// Nearly full: the space comes back a page at a time, so that small
	// writes (an idempotency key's claim) fit where a whole event does not.
	if lim.how == "tmpfs" && !p.exited() {
		trickle := map[int]int{}
		for k := 1; k <= 48; k++ {
			lim.resize(t, lim.size+int64(k)*4096)
			id := fmt.Sprintf("trickle-%02d", k)
			r, err := diskPost(base, id)
			if err != nil {
				t.Fatalf("%s on a nearly full disk: %v", id, err)
			}
			trickle[r.status]++
			switch {
			case r.status/100 == 2:
				acked[id] = true
			case r.status >= 500 && r.ctype == "application/problem+json":
				refused = append(refused, id)
			default:
				t.Errorf("%s on a nearly full disk: %d %s %s", id, r.status, r.ctype, r.body)
			}
		}
		t.Logf("nearly full, a page more at a time: answers %v", trickle)
	}

	// The space comes back: in place (tmpfs), or by a restart without the
	// limit (the limit belongs to the process).
	lim.grow(t)
	slow.Store(0)
	samePro := lim.how == "tmpfs" && !p.exited()
	if !samePro {
		p.kill()
		p = diskStart(t, diskCmd{argv: append([]string{bin}, args...)})
		if base = p.waitServing(t); base == "" {
			t.Fatalf("serve does not start after the disk was full: exit %d\n%s", p.code, p.output())
		}
	}
	after := diskDo(t, "POST", base+"/v1/events", diskEvent("after-1", 10))
	ready := diskDo(t, "GET", base+"/readyz", "")
	t.Logf("space back (same process: %v): POST -> %d, GET /readyz -> %d", samePro, after.status, ready.status)
	if after.status != http.StatusAccepted || ready.status != http.StatusOK {
		t.Fatalf("after the space came back: POST %d %s, readyz %d %s\n%s", after.status, after.body, ready.status, ready.body, p.output())
	}
	acked["after-1"] = true
	var acc struct{ Notifications []struct{ ID string } }
	json.Unmarshal([]byte(after.body), &acc)

	t.Run("dispatcher resumes once the space is back", func(t *testing.T) {
		if len(acc.Notifications) != 1 {
			t.Fatalf("accept response %s", after.body)
		}
		url := base + "/v1/notifications/" + acc.Notifications[0].ID
		deadline := time.Now().Add(5 * time.Second)
		var n struct{ Status string }
		for {
			r := diskDo(t, "GET", url, "")
			json.Unmarshal([]byte(r.body), &n)
			if n.Status == "sent" {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if line := diskGrep(p.output(), "dispatcher stopped"); line != "(nothing)" {
			t.Skipf("BUG: a notification accepted after the space came back is still %q 5s later: the dispatcher "+
				"died on the first failed write and serve kept running without it (relay/dispatch.go dispatcher.loop returns on any "+
				"store error; logged: %s)", n.Status, line)
		}
		t.Fatalf("notification not sent 5s after the space came back: %q\n%s", n.Status, p.output())
	})

	t.Run("refused events are accepted when retried", func(t *testing.T) {
		var conflicts []string
		other := map[int]int{}
		for _, id := range refused {
			r, err := diskPost(base, id)
			if err != nil {
				t.Fatalf("retry of %s: %v", id, err)
			}
			switch {
			case r.status/100 == 2:
				acked[id] = true
			case r.status == http.StatusConflict && strings.Contains(r.body, "request-in-progress"):
				conflicts = append(conflicts, id)
			default:
				other[r.status]++
			}
		}
		t.Logf("%d refused events retried: %d accepted, %d answered 409 request-in-progress, others %v",
			len(refused), len(refused)-len(conflicts)-len(other), len(conflicts), other)
		if len(other) > 0 {
			t.Errorf("retries after the space came back answered %v", other)
		}
		if len(conflicts) > 0 {
			t.Skipf("BUG: %d of %d events refused for the full disk answer 409 request-in-progress when retried after the space "+
				"is back (%v): the claim of their idempotency key committed, the accept did not, and ReleaseRequest failed too "+
				"(api/server.go idempotent logs \"record request key\"), so the key stays locked for 5 minutes although the 500 "+
				"said it is safe to retry", len(conflicts), len(refused), conflicts)
		}
	})

	// The proof: kill it, open the file in place, find every acknowledged
	// event with its notification, and an intact database.
	p.kill()
	sdb := diskOpen(t, db)
	if res := diskIntegrity(t, sdb); res != "ok" {
		t.Fatalf("integrity_check after the full disk: %s", res)
	}
	stored := diskStored(t, sdb, "%")
	var missing []string
	for id := range acked {
		if stored[id] != 1 {
			missing = append(missing, id)
		}
	}
	t.Logf("after SIGKILL: %d events acknowledged, %d stored, integrity_check ok", len(acked), len(stored))
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged events are not stored (with their notification): %v", len(missing), missing)
	}
}

func diskFirstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// TestDiskFullRecoversWhenSpaceIsFreed: on a disk of a few MB the WAL holds
// most of the database when the disk fills (SQLite checkpoints it into the
// database file only every 1000 pages, about 4 MB), so writes can succeed
// again only once the WAL has been copied into the file and truncated.
//
// On a 4 MB tmpfs the drill fills the disk through serve, deletes a 1 MB
// file it put there, and requires serve, without a restart, to accept the
// next events, to be ready, and to go on accepting far more than the freed
// megabyte holds as WAL (about 30 pages an event). Under RLIMIT_FSIZE the
// limit is per file: it is set to 2 MB, below SQLite's own checkpoint, so
// the WAL reaches it while the database file is small, and nothing needs
// freeing for the same checkpoint to let writes go on.
func TestDiskFullRecoversWhenSpaceIsFreed(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary on a full disk")
	}
	t.Parallel()
	bin := binary(t)
	lim := diskFullDir(t, 4<<20)
	db := filepath.Join(lim.dir, "r.db")
	filler := filepath.Join(lim.dir, "filler")
	more := 150 // events to accept once the space is back
	switch lim.how {
	case "tmpfs":
		if err := os.WriteFile(filler, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	case "rlimit":
		lim.size, more = 2<<20, 300 // 300 events fit in 2 MB, their WAL does not
	default:
		t.Skipf("no way to fill a disk here (%s)", lim.how)
	}
	sizes := func() string {
		var s []string
		for _, f := range []string{db, db + "-wal"} {
			if fi, err := os.Stat(f); err == nil {
				s = append(s, fmt.Sprintf("%s %d KiB", filepath.Base(f), fi.Size()>>10))
			}
		}
		var fs syscall.Statfs_t
		if lim.how == "tmpfs" && syscall.Statfs(lim.dir, &fs) == nil {
			s = append(s, fmt.Sprintf("free %d KiB", fs.Bavail*uint64(fs.Bsize)>>10))
		}
		return strings.Join(s, ", ")
	}
	p := diskStart(t, lim.command(bin, "serve", "--db", db, "--listen", "127.0.0.1:0", "--route", "*=log:///dev/null", "--log-level", "info"))
	base := p.waitServing(t)
	if base == "" {
		t.Fatalf("serve did not start on an empty disk: exit %d\n%s", p.code, p.output())
	}
	start := time.Now()
	acked := map[string]bool{}
	post := func(id string) (ok bool, refusal string) {
		t.Helper()
		r := diskDo(t, "POST", base+"/v1/events", diskEvent(id, 1500))
		if r.status/100 == 2 {
			acked[id] = true
			return true, ""
		}
		if r.status != http.StatusServiceUnavailable || r.ctype != "application/problem+json" {
			t.Fatalf("%s: %d %s %s; want 2xx or a 503 problem", id, r.status, r.ctype, r.body)
		}
		return false, strings.TrimSpace(r.body)
	}

	if lim.how == "tmpfs" {
		// Full: five refusals in a row.
		var refusal string
		n := 0
		for inARow := 0; inARow < 5; n++ {
			if n == 2000 {
				t.Fatalf("the disk never filled: %d posts", n)
			}
			if ok, why := post(fmt.Sprintf("fill-%04d", n)); ok {
				inARow = 0
			} else {
				inARow, refusal = inARow+1, why
			}
		}
		if len(acked) == 0 {
			t.Fatalf("nothing was accepted before the disk was full: the disk is too small\n%s", p.output())
		}
		ready := diskDo(t, "GET", base+"/readyz", "")
		t.Logf("full after %d posts (%d accepted): %s; readyz %d; last refusal %s", n, len(acked), sizes(), ready.status, refusal)
		if ready.status != http.StatusServiceUnavailable {
			t.Errorf("/readyz answered %d on the full disk, want 503", ready.status)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		t.Logf("deleted the 1 MiB filler: %s", sizes())
	}

	// A few refusals may come first (the dispatcher's writes may be the
	// ones that meet the full WAL and checkpoint it), never more.
	var refused []string
	for i := range more {
		id := fmt.Sprintf("more-%03d", i)
		if ok, why := post(id); !ok {
			if refused = append(refused, id); len(refused) > 3 {
				t.Fatalf("%d of %d posts refused (the last, %s: %s): the store stays refused once the space is back (%s)\n%s",
					len(refused), i+1, id, why, sizes(), diskFirstLines(p.output(), 8))
			}
		}
	}
	ready := diskDo(t, "GET", base+"/readyz", "")
	t.Logf("space back: %d of %d posts accepted (refused: %v) in %s since serving; %s; readyz %d",
		more-len(refused), more, refused, time.Since(start).Round(time.Millisecond), sizes(), ready.status)
	if ready.status != http.StatusOK {
		t.Errorf("/readyz answered %d %s after writes succeed again, want 200", ready.status, ready.body)
	}
	out := p.output()
	if strings.Contains(out, "panic") {
		t.Fatalf("serve panicked:\n%s", out)
	}
	for _, what := range []string{"the disk was full", "truncated it", "writes succeed again"} {
		t.Logf("serve logged: %s", diskGrep(out, what))
	}

	p.kill()
	sdb := diskOpen(t, db)
	if res := diskIntegrity(t, sdb); res != "ok" {
		t.Fatalf("integrity_check: %s", res)
	}
	stored := diskStored(t, sdb, "%")
	for id := range acked {
		if stored[id] != 1 {
			t.Errorf("acknowledged event %s is not stored with its notification", id)
		}
	}
}

var diskStoppedRE = regexp.MustCompile(`batch: stopped after (\d+) lines \((\d+) accepted, (\d+) rejected\)`)

// TestDiskFullBatchSend runs batch send onto a disk that fills up: a
// non-zero exit with a clear line, every event it counted accepted is
// stored, and the same file run again once the space is back finishes it.
func TestDiskFullBatchSend(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary on a full disk")
	}
	t.Parallel()
	bin := binary(t)
	lim := diskFullDir(t, 2<<20)
	db := filepath.Join(lim.dir, "r.db")
	// A database created normally, before the disk fills.
	if code, _, stderr := diskRun(t, diskCmd{argv: []string{bin, "send", "--db", db}, stdin: adaEvent}); code != 0 {
		t.Fatalf("creating the database: exit %d %s", code, stderr)
	}
	const lines = 3000
	file := filepath.Join(t.TempDir(), "events.jsonl")
	var b strings.Builder
	for i := range lines {
		b.WriteString(diskEvent(fmt.Sprintf("b-%05d", i), 1000) + "\n")
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	code, _, stderr := diskRun(t, lim.command(bin, "batch", "send", "--db", db, "--progress-every", "0", file))
	t.Logf("batch send onto a full disk: exit %d\n%s", code, strings.TrimSpace(stderr))
	m := diskStoppedRE.FindStringSubmatch(stderr)
	last := strings.TrimSpace(stderr)
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if code != exitError || m == nil || strings.Contains(stderr, "panic") ||
		!regexp.MustCompile(`(?i)^edgerelay: .*(disk is full|disk i/o error|file too large)`).MatchString(last) {
		t.Fatalf("batch send onto a full disk: exit %d, stderr:\n%s\nwant exit %d, the stopped line and a last line saying the disk is full",
			code, stderr, exitError)
	}
	accepted, _ := strconv.Atoi(m[2])
	if accepted == 0 || accepted >= lines {
		t.Fatalf("batch accepted %d of %d lines before the disk was full: the disk size does not fit the drill", accepted, lines)
	}

	lim.grow(t)
	sdb := diskOpen(t, db)
	if res := diskIntegrity(t, sdb); res != "ok" {
		t.Fatalf("integrity_check after the full disk: %s", res)
	}
	stored := len(diskStored(t, sdb, "b-%"))
	t.Logf("batch reported %d accepted; %d stored", accepted, stored)
	if stored < accepted {
		t.Fatalf("batch reported %d accepted, only %d are stored", accepted, stored)
	}
	if stored > accepted {
		t.Logf("note: %d events stored beyond the %d reported accepted (committed, not counted; a rerun counts them duplicate)", stored-accepted, accepted)
	}
	sdb.Close()

	// The same file again, with room: it finishes, sending nothing twice.
	code, _, stderr = diskRun(t, diskCmd{argv: []string{bin, "batch", "send", "--db", db, "--progress-every", "0", file}})
	want := fmt.Sprintf("batch: %d lines, %d accepted (%d new, %d duplicate), 0 rejected", lines, lines, lines-stored, stored)
	if code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("rerun with room: exit %d %q; want %q", code, stderr, want)
	}
	if n := countRows(t, db, "events"); n != lines+1 {
		t.Fatalf("%d events after the rerun, want %d", n, lines+1)
	}
}

// TestDiskCorruptPages: a database whose header is intact but whose later
// pages are garbage (a torn copy, a bad sector) opens, so Open cannot
// refuse it as it refuses a file that is not a database at all
// (TestCorruptDatabaseIsRefused). Every command that touches a bad page
// must fail with one line, serve must not acknowledge events it could not
// store, and it must not call itself ready.
func TestDiskCorruptPages(t *testing.T) {
	longtest.Require(t)
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	file := filepath.Join(dir, "events.jsonl")
	var b strings.Builder
	for i := range 300 {
		b.WriteString(diskEvent(fmt.Sprintf("c-%03d", i), 300) + "\n")
	}
	os.WriteFile(file, []byte(b.String()), 0o644)
	if code, _, stderr := diskRun(t, diskCmd{argv: []string{bin, "batch", "send", "--db", db, "--progress-every", "0", file}}); code != 0 {
		t.Fatalf("filling: exit %d %s", code, stderr)
	}
	// The last third of the pages (table and index pages of the events
	// just written) overwritten with a constant pattern.
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	pages := len(data) / page
	for p := pages * 2 / 3; p < pages; p++ {
		copy(data[p*page:(p+1)*page], bytes.Repeat([]byte{0xa5}, page))
	}
	if err := os.WriteFile(db, data, 0o644); err != nil {
		t.Fatal(err)
	}

	malformed := regexp.MustCompile(`malformed|corrupt|not a database`)
	for _, args := range [][]string{{"status"}, {"send"}} {
		c := diskCmd{argv: append([]string{bin}, append(args, "--db", db)...), stdin: diskEvent("c-new", 10)}
		code, stdout, stderr := diskRun(t, c)
		t.Logf("%s on a database with %d of %d pages garbage: exit %d, stderr %q", args[0], pages-pages*2/3, pages, code, strings.TrimSpace(stderr))
		if code == 0 {
			if args[0] == "send" {
				t.Errorf("send answered exit 0 on a corrupt database: %q", stdout)
			}
			continue
		}
		if code != exitError || !diskOneLine(stderr) || !malformed.MatchString(stderr) || strings.Contains(stderr, "panic") {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line saying the database is malformed", args[0], code, stderr, exitError)
		}
	}

	p := diskStart(t, diskCmd{argv: []string{bin, "serve", "--db", db, "--listen", "127.0.0.1:0", "--log-level", "warn"}})
	base := p.waitServing(t)
	if base == "" {
		out := p.output()
		t.Logf("serve refused a corrupt database: exit %d, %q", p.code, out)
		if p.code != exitError || !diskOneLine(out) || !malformed.MatchString(out) {
			t.Errorf("serve: exit %d, stderr %q; want exit %d and one line saying the database is malformed", p.code, out, exitError)
		}
		return
	}
	post := diskDo(t, "POST", base+"/v1/events", diskEvent("c-serve", 10))
	ready := diskDo(t, "GET", base+"/readyz", "")
	code := p.stop(t)
	t.Logf("serve started on the corrupt database: POST /v1/events -> %d, GET /readyz -> %d %s, exit %d after SIGTERM; %s",
		post.status, ready.status, strings.TrimSpace(ready.body), code, diskGrep(p.output(), "dispatcher stopped"))
	if post.status/100 == 2 {
		t.Fatalf("POST /v1/events answered %d on a corrupt database (%s)", post.status, post.body)
	}
	if post.status < 500 || post.ctype != "application/problem+json" {
		t.Errorf("POST /v1/events: %d %s %s; want a 5xx problem", post.status, post.ctype, post.body)
	}
	if strings.Contains(p.output(), "panic") {
		t.Errorf("serve panicked:\n%s", p.output())
	}
	t.Run("readyz is 503 on a corrupt database", func(t *testing.T) {
		if ready.status != http.StatusServiceUnavailable {
			t.Skipf("BUG: serve starts on a database with corrupt pages and /readyz answers %d %s while every write fails "+
				"(\"database disk image is malformed\"); Open checks only the header and store.Ping writes nothing",
				ready.status, strings.TrimSpace(ready.body))
		}
	})
}

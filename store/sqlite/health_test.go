package sqlite

// Write failures of the file (read-only, full, corrupt) and what the store
// says about them: the writer's errors name the database file, Open tells a
// read-only file or directory apart, and Ping reports a failure episode
// until a commit that wrote something succeeds. The failures are real: a
// commit SQLite refuses, a file SQLite opened read-only, a tmpfs that fills
// up (as root) or a file size limit (otherwise).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"
)

// codeOf is the extended SQLite result code in err's chain, or 0.
func codeOf(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func acceptOne(s *Store, id string, payload int) error {
	ev, ts := testEvent(id, 1)
	ev.Payload = []byte(`{"pad":"` + strings.Repeat("x", payload) + `"}`)
	_, err := s.AcceptEvent(context.Background(), ev, ts, t0)
	return err
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// syncBuffer is a log destination the writer goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A commit SQLite refuses starts an episode: Ping fails, naming the file,
// through empty commits and commits that change nothing, until a commit
// that wrote something. An op's own failure (rolled back to its savepoint
// while the rest commits) is not one.
func TestPingReportsFailedCommitUntilAWriteCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	if err := acceptOne(s, "ok-1", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on a healthy store: %v", err)
	}

	// An op that fails on its own (a trigger raising, from a second
	// connection) is that op's error: the commit succeeds, Ping too.
	other, err := sql.Open("sqlite", "file:"+s.Where()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`CREATE TRIGGER fail_events BEFORE INSERT ON events BEGIN SELECT RAISE(FAIL, 'injected'); END`); err != nil {
		t.Fatal(err)
	}
	err = acceptOne(s, "raised", 10)
	if err == nil || !strings.Contains(err.Error(), "injected") || strings.Contains(err.Error(), s.Where()) {
		t.Fatalf("accept under a raising trigger: %v; want the trigger's error, not one about the file", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after an op's own failure: %v", err)
	}
	if _, err := other.Exec(`DROP TRIGGER fail_events`); err != nil {
		t.Fatal(err)
	}

	// A failed commit: a foreign key deferred to COMMIT.
	err = s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec("PRAGMA defer_foreign_keys = ON"); err != nil {
			return err
		}
		_, err := tx.exec(`INSERT INTO feed_items (tenant, seq, feed, pos, event, created_at) VALUES ('default', 1, 'f', 1, 999999, 0)`)
		return err
	})
	if err == nil || !strings.HasPrefix(err.Error(), "commit: ") || codeOf(err)&0xff != 19 {
		t.Fatalf("commit with a deferred foreign key violation: %v; want a failed commit (SQLITE_CONSTRAINT)", err)
	}
	pingFails := func(when string) {
		t.Helper()
		err := s.Ping(ctx)
		if err == nil {
			t.Fatalf("Ping %s: nil; want the failed commit", when)
		}
		msg := err.Error()
		if !strings.Contains(msg, "database "+s.Where()) || !strings.Contains(msg, "FOREIGN KEY") ||
			!strings.Contains(msg, "writes failing for") || strings.Contains(msg, "\n") || codeOf(err)&0xff != 19 {
			t.Fatalf("Ping %s: %q (code %d); want one line naming the file and the commit's error, which errors.As finds", when, msg, codeOf(err))
		}
	}
	pingFails("after a failed commit")
	pingFails("again (its own empty commit ends nothing)")
	if err := s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`UPDATE events SET type = type WHERE 0`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pingFails("after a commit that changed nothing")
	if err := s.w.do(ctx, func(tx *Tx) error {
		ev, _ := testEvent("rolled-back", 1)
		if _, err := tx.exec(`INSERT INTO events (tenant, event_id, purpose, type, payload, message, fingerprint, targets, expanded, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0)`, ev.Tenant, ev.EventID, ev.Purpose, ev.Type, ev.Payload, ev.Message, ev.Fingerprint); err != nil {
			return err
		}
		return errors.New("changed its mind")
	}); err == nil || err.Error() != "changed its mind" {
		t.Fatalf("an op that wrote, then failed: %v", err)
	}
	pingFails("after a commit whose only write was rolled back to its savepoint")

	if err := acceptOne(s, "ok-2", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write committed: %v", err)
	}
}

// Open's write probe (is the file writable?) is rolled back: opening an
// up-to-date database writes nothing, so reads need no space.
func TestOpenWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := acceptOne(s, "one", 10); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := fileHash(t, path)
	s, err = Open(context.Background(), path, Options{RequireWritable: true})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil || fi.Size() != 0 {
		t.Fatalf("after Open, %s-wal: %v, %v; want it empty", path, fi, err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fileHash(t, path) != before {
		t.Fatal("Open and Close changed the database file")
	}
}

// makeReadOnly makes path (a file or a directory) read-only for this
// process: by its mode, or, as root (whom modes do not stop), by a
// read-only bind mount over it. It skips the test if neither is possible.
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		mode := os.FileMode(0o444)
		if fi.IsDir() {
			mode = 0o555
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(path, fi.Mode().Perm()) })
		return
	}
	if out, err := exec.Command("mount", "--bind", path, path).CombinedOutput(); err != nil {
		t.Skipf("as root, a read-only file needs a read-only bind mount: %v %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { unmount(t, path) })
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", path).CombinedOutput(); err != nil {
		t.Skipf("remount %s read-only: %v %s", path, err, bytes.TrimSpace(out))
	}
}

// unmount undoes a mount of the test's. SQLite's files are not opened
// close-on-exec, so a process another test starts meanwhile (mount, the
// file size child) may hold one for a moment: retry, then detach it.
func unmount(t *testing.T, path string) {
	var out []byte
	var err error
	for range 20 {
		if out, err = exec.Command("umount", path).CombinedOutput(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("umount %s: %v %s; detaching it", path, err, bytes.TrimSpace(out))
	if out, err := exec.Command("umount", "-l", path).CombinedOutput(); err != nil {
		t.Errorf("umount -l %s: %v %s", path, err, out)
	}
}

// A read-only file (in a writable directory) opens for reads; writes fail
// naming the file, Ping fails from the start, and RequireWritable refuses
// it at Open with one line. The file is not changed.
func TestReadOnlyFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ro.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := acceptOne(s, "before", 10); err != nil {
		t.Fatal(err)
	}
	s.Close()
	makeReadOnly(t, path)
	before := fileHash(t, path)

	_, err = Open(ctx, path, Options{RequireWritable: true})
	want := "database " + path + " is read-only (attempt to write a readonly database (8))"
	if err == nil || err.Error() != want || codeOf(err) != 8 {
		t.Fatalf("Open with RequireWritable: %v; want %q", err, want)
	}

	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("Open for reading: %v", err)
	}
	defer s.Close()
	if n := count(t, s, "SELECT count(*) FROM events"); n != 1 {
		t.Fatalf("%d events read, want 1", n)
	}
	if _, err := s.Status(ctx, t0); err != nil {
		t.Fatalf("Status on a read-only file: %v", err)
	}
	err = s.Ping(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "database "+path+" is read-only (") || codeOf(err)&0xff != 8 {
		t.Fatalf("Ping on a read-only file: %v; want the file named as read-only", err)
	}
	err = acceptOne(s, "after", 10)
	if err == nil || !strings.Contains(err.Error(), "database "+path+" is read-only (") || codeOf(err)&0xff != 8 {
		t.Fatalf("accept on a read-only file: %v; want the file named as read-only, SQLITE_READONLY underneath", err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping after a failed write on a read-only file: nil")
	}
	s.Close()
	if fileHash(t, path) != before {
		t.Fatal("the read-only file changed")
	}
}

// Even reads of a WAL database need its -wal and -shm files: in a
// directory this process cannot write, Open fails with one line saying
// so, not with "attempt to write a readonly database" alone.
func TestReadOnlyDirectoryIsExplained(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "r.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := acceptOne(s, "before", 10); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatalf("%s-wal is still there after Close", path)
	}
	if os.Geteuid() != 0 {
		makeReadOnly(t, path)
	}
	makeReadOnly(t, dir)

	_, err = Open(context.Background(), path, Options{})
	if err == nil {
		t.Skip("SQLite opened a WAL database in a read-only directory (its -wal and -shm could be opened)")
	}
	msg := err.Error()
	t.Logf("Open: %s", msg)
	if !strings.Contains(msg, path) || !strings.Contains(msg, "r.db-wal") || !strings.Contains(msg, "r.db-shm") || strings.Contains(msg, "\n") {
		t.Fatalf("Open in a read-only directory: %q; want one line naming the file and the -wal and -shm it must create", msg)
	}
}

// fsizeChildEnv names the database a child test process fills under
// RLIMIT_FSIZE (set by sh's ulimit before it execs the test binary).
const fsizeChildEnv = "EDGERELAY_STORE_TEST_FSIZE_DB"

// A disk that fills up: the failing write names the file ("disk full"),
// Ping fails, and stays failing through empty commits, until the space is
// back and a write commits; nothing acknowledged is lost. A tmpfs as root;
// otherwise a child process under a file size limit (EFBIG: SQLite says
// "disk I/O error"), whose recovery is a reopen without the limit;
// EDGERELAY_TEST_DISK_FULL=rlimit forces that one.
func TestDiskFullHealth(t *testing.T) {
	if path := os.Getenv(fsizeChildEnv); path != "" {
		fillUntilFailure(t, path)
		return
	}
	if testing.Short() {
		t.Skip("fills a disk")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "full.db")
	out, err := []byte("EDGERELAY_TEST_DISK_FULL=rlimit"), errors.New("not tried")
	if os.Getenv("EDGERELAY_TEST_DISK_FULL") != "rlimit" {
		out, err = exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput()
	}
	if err != nil {
		t.Logf("no tmpfs (%v: %s): a file size limit instead", err, bytes.TrimSpace(out))
		fileSizeLimitDrill(t, path)
		return
	}
	t.Cleanup(func() { unmount(t, dir) })
	var logs syncBuffer
	s, err := Open(context.Background(), path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked, err := fillUntil(s)
	t.Logf("%d events accepted, then: %v", acked, err)
	if acked == 0 || err == nil || !strings.Contains(err.Error(), "database "+path+": disk full (") || codeOf(err)&0xff != 13 {
		t.Fatalf("%d accepted, then %v; want some accepted, then the file named as full, SQLITE_FULL underneath", acked, err)
	}
	ctx := context.Background()
	for _, when := range []string{"while full", "again while full"} {
		if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), "database "+path+": disk full (") {
			t.Fatalf("Ping %s: %v", when, err)
		}
	}
	if out, err := exec.Command("mount", "-o", "remount,size=16m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with the space back but nothing written yet: nil; the episode ends with a write")
	}
	// The failure is the failed write's caller's to report (a command's
	// error is one line): nothing logged so far.
	if l := logs.String(); l != "" {
		t.Errorf("logged while full:\n%s\nwant nothing", l)
	}
	if err := acceptOne(s, "after", 10); err != nil {
		t.Fatalf("accept with the space back: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after a write committed: %v", err)
	}
	// Logged: the WAL kept short from now on, the WAL copied into the file
	// and truncated before the write, and the episode's end.
	want := []string{"the disk was full: checkpointing the WAL", "copied the WAL into the database file and truncated it", "database writes succeed again"}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(want) {
		t.Errorf("logged:\n%s\nwant %q", logs.String(), want)
	}
	for i := range min(len(lines), len(want)) {
		if !strings.Contains(lines[i], want[i]) {
			t.Errorf("log line %d: %s; want %q", i+1, lines[i], want[i])
		}
	}
	s.Close()
	checkStored(t, path, acked+1)
}

// fillUntil accepts 32 KiB events until one fails.
func fillUntil(s *Store) (int, error) {
	for i := range 400 {
		if err := acceptOne(s, fmt.Sprintf("fill-%03d", i), 32<<10); err != nil {
			return i, err
		}
	}
	return 400, nil
}

// checkStored opens path afresh: intact, with want events.
func checkStored(t *testing.T, path string, want int) {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var res string
	if err := s.rdb.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
	if n := count(t, s, "SELECT count(*) FROM events"); n != want {
		t.Fatalf("%d events stored, want %d (every acknowledged one)", n, want)
	}
}

func fileSizeLimitDrill(t *testing.T, path string) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no tmpfs and no sh to set a file size limit")
	}
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// 2048 blocks: 1 MiB or 2 MiB, as the shell counts them.
	cmd := exec.Command(sh, "-c", `ulimit -f 2048 && exec "$@"`, "sh", os.Args[0], "-test.run=^TestDiskFullHealth$", "-test.v")
	cmd.Env = append(os.Environ(), fsizeChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	t.Logf("child under RLIMIT_FSIZE:\n%s", bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var acked int
	for _, l := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "acked %d", &acked); err == nil {
			break
		}
	}
	if acked == 0 {
		t.Fatal("the child reported no accepted events")
	}
	// The limit went with the child: the space is back.
	s, err = Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after reopening: %v", err)
	}
	if err := acceptOne(s, "after", 10); err != nil {
		t.Fatalf("accept after reopening: %v", err)
	}
	s.Close()
	checkStored(t, path, acked+1)
}

// fillUntilFailure runs in the child, under the file size limit.
func fillUntilFailure(t *testing.T, path string) {
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked, err := fillUntil(s)
	fmt.Printf("acked %d\n", acked)
	t.Logf("%d events accepted, then: %v", acked, err)
	if err == nil || !strings.Contains(err.Error(), "database "+path+": ") || codeOf(err) == 0 {
		t.Fatalf("the write past the limit: %v; want the file named, SQLite's error underneath", err)
	}
	for _, when := range []string{"while full", "again while full"} {
		if perr := s.Ping(context.Background()); perr == nil || !strings.Contains(perr.Error(), "database "+path+": ") {
			t.Fatalf("Ping %s: %v", when, perr)
		}
	}
}

// Read-only and corrupt are for as long as the store is open: SQLite
// keeps a file it opened read-only so, and a write that happens to touch
// only sound pages does not mend the others. A full disk ends with a write.
func TestHealthStickyCauses(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		what   string
		sticky bool
	}{{" is read-only", true}, {" is corrupt", true}, {": disk full", false}, {": I/O error", false}} {
		var h health
		h.fail(&fileErr{path: "/x.db", what: tc.what, err: errors.New("sqlite says"), sticky: tc.sticky}, now)
		h.fail(errors.New("commit: something else"), now.Add(time.Second))
		h.recover(now.Add(2*time.Second), nil)
		err := h.check("/x.db", now.Add(3*time.Second))
		if tc.sticky {
			if err == nil || !strings.HasPrefix(err.Error(), "database /x.db"+tc.what+" (sqlite says); first seen 3s ago") {
				t.Errorf("%q: after a write committed: %v; want the first cause, still", tc.what, err)
			}
		} else if err != nil {
			t.Errorf("%q: after a write committed: %v; want nil", tc.what, err)
		}
	}
}

// During a failure episode each batch first checkpoints the WAL and
// truncates it (TestDiskFullRecoversWhenSpaceIsFreed in the root package
// shows why, on a real full disk). A reader on an older snapshot (another
// process, or the read pool mid-query) keeps the checkpoint from
// completing: the write then goes on after checkpointWait, not after
// busy_timeout, and the next batch of the episode, once the reader is
// done, truncates the WAL.
func TestEpisodeCheckpointWaitsNotForAReader(t *testing.T) {
	t.Parallel()
	// A busy_timeout of ten minutes: a write that waited for the reader
	// instead of checkpointWait (100 ms) would take that long, which no
	// load on the box makes of 100 ms.
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "relay.db"), Options{BusyTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20 {
		if err := acceptOne(s, fmt.Sprintf("before-%d", i), 2000); err != nil {
			t.Fatal(err)
		}
	}
	walSize := func() int64 {
		fi, err := os.Stat(s.Where() + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	reader, err := sql.Open("sqlite", "file:"+s.Where()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	rtx, err := reader.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rtx.QueryRow("SELECT count(*) FROM events").Scan(&n); err != nil { // the snapshot is taken here
		t.Fatal(err)
	}
	if err := acceptOne(s, "newer", 10); err != nil { // and is old from here
		t.Fatal(err)
	}
	// An episode a commit can end, as a failed write starts one.
	episode := func() {
		s.w.health.fail(&fileErr{path: s.Where(), what: ": I/O error", err: errors.New("injected")}, time.Now())
		if s.Ping(context.Background()) == nil {
			t.Fatal("Ping during the episode: nil")
		}
	}

	episode()
	before := walSize()
	start := time.Now()
	if err := acceptOne(s, "during", 10); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > time.Minute {
		t.Fatalf("a write during an episode, with a reader on an old snapshot, took %s (busy_timeout is 10m)", took)
	}
	if walSize() < before {
		t.Fatalf("the WAL shrank from %d to %d bytes while a reader held an old snapshot", before, walSize())
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after the write committed: %v", err)
	}
	rtx.Rollback()

	episode()
	before = walSize()
	if err := acceptOne(s, "after", 10); err != nil {
		t.Fatal(err)
	}
	if after := walSize(); after >= before/4 {
		t.Fatalf("WAL %d bytes before the episode's write, %d after: not truncated once the reader was done", before, after)
	}
	t.Logf("write with a reader on an old snapshot: %s; WAL %d bytes before the next episode's write, %d after", took.Round(time.Millisecond), before, walSize())
	checkStored(t, s.Where(), 23)
}

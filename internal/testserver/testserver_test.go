package testserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Dir removes the directory of a process that is gone, keeps one of a
// live process, and names its own by this process's pid.
func TestDirSweepsDeadProcesses(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("edgerelay-tstest%d-", time.Now().UnixNano()%1e6)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-x", prefix, dead.Process.Pid))
	live := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-x", prefix, os.Getppid()))
	for _, d := range []string{gone, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(gone); os.RemoveAll(live) })
	dir, err := Dir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("%s%d-", prefix, os.Getpid())) {
		t.Errorf("dir %s is not named by this process", dir)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a gone process's directory is still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's directory was removed: %v", err)
	}
}

// WaitReady gives up as soon as the process exits, quoting its log; it
// returns once ready answers; Stop kills a process that ignores its signal
// after the grace and says so.
func TestProc(t *testing.T) {
	t.Parallel()
	logf := filepath.Join(t.TempDir(), "log")
	os.WriteFile(logf, []byte("FATAL: no config"), 0o644)
	p, err := Start(exec.Command("sh", "-c", "exit 3"), nil, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady("srv", logf, time.Minute, func() error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "srv exited (exit status 3)") || !strings.Contains(err.Error(), "FATAL: no config") {
		t.Fatalf("WaitReady on an exited process: %v", err)
	}

	p, err = Start(exec.Command("sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"), nil, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := p.WaitReady("srv", logf, time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("WaitReady: %v after %d calls", err, n)
	}
	if p.Stop(syscall.SIGTERM, 100*time.Millisecond) {
		t.Fatal("Stop says a process that ignores SIGTERM exited within the grace")
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
}

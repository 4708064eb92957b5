// Package testbin builds the edgerelay binary that tests start as a real
// process, once for all the test binaries of a run: into one path per
// checkout under os.TempDir() (edgerelay-bin-HASH/edgerelay, HASH naming
// the module's directory), under a file lock, with go build, which leaves
// an up-to-date target alone. So the root package's and bench's tests
// share one link (about 4 s of CPU each on two cores), and a later run with
// the same sources links nothing; a run with changed sources relinks
// (go build compares the target's build ID with the sources'). The binary
// stays after the run, as a build cache entry would: one file per
// checkout, replaced, never accumulating. It must never be imported
// outside tests.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Edgerelay returns the path of a binary built from the module's current
// sources (package edgerelay, the module's root).
func Edgerelay(tb testing.TB) string {
	tb.Helper()
	once.Do(func() { path, err = build() })
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

func build() (string, error) {
	mod, err := moduleDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(mod))
	dir := filepath.Join(os.TempDir(), "edgerelay-bin-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testbin: lock: %w", err)
	}
	bin := filepath.Join(dir, "edgerelay")
	// The link goes to go's work directory and is renamed over bin, so a
	// process still running an older bin keeps its file.
	cmd := exec.Command("go", "build", "-o", bin, "github.com/edgerelay/edgerelay")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// moduleDir is the directory of the go.mod above the working directory
// (a package's directory, under go test).
func moduleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testbin: no go.mod above the working directory")
		}
		dir = parent
	}
}

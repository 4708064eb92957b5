package main

import (
	"debug/buildinfo"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/longtest"
)

// --version of the built binary shows its build info: the module version
// and, where the build recorded them, the VCS revision and its time.
func TestVersionIsTheBuildInfo(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "edgerelay version "+info.Main.Version) || strings.Contains(got, "version dev") {
		t.Fatalf("--version says %q; the binary's module version is %q", got, info.Main.Version)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if !strings.Contains(got, "revision "+rev) || !strings.Contains(got, settings["vcs.time"]) ||
			strings.Contains(got, "uncommitted") != (settings["vcs.modified"] == "true") {
			t.Fatalf("--version says %q; the build info has %v", got, settings)
		}
	} else if !strings.Contains(got, "no VCS revision") {
		t.Fatalf("--version says %q for a build without VCS information", got)
	}
	t.Logf("%s (build settings %v)", got, settings)
}

// Built from a git checkout with -ldflags -X main.version, --version shows
// that version with the checkout's revision and commit time. This tree may
// be a git worktree, which go build does not stamp (golang/go#58218): the
// test builds a copy of it committed to a repository of its own, with
// packaging/release.sh, and checks that the binary is stripped. The script
// builds without -trimpath: a -trimpath build misses the cache the test
// builds filled, so it recompiled the standard library and every
// dependency (minutes on a loaded machine).
func TestVersionFromLdflagsAndVCS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary from a copy of the tree")
	}
	longtest.Require(t)
	t.Parallel()
	files, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v)", err)
	}
	src := t.TempDir()
	for _, f := range strings.Split(strings.TrimSpace(string(files)), "\n") {
		if err := copyFile(f, filepath.Join(src, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = src
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "copy")
	rev := git("rev-parse", "HEAD")
	// Built as a release is: packaging/release.sh, stripped.
	bin := filepath.Join(t.TempDir(), "edgerelay")
	build := exec.Command("sh", "packaging/release.sh", "v9.8.7-test", bin)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("packaging/release.sh: %v\n%s", err, out)
	}
	if f, err := elf.Open(bin); err != nil {
		t.Fatal(err)
	} else {
		for _, sec := range f.Sections {
			if sec.Name == ".symtab" || strings.HasPrefix(sec.Name, ".debug_") {
				t.Errorf("the release binary has a %s section: not stripped", sec.Name)
			}
		}
		f.Close()
	}
	if st, err := os.Stat(bin); err == nil {
		t.Logf("release binary: %d bytes", st.Size())
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(string(out))
	ct, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	committed := time.Unix(ct, 0).UTC().Format(time.RFC3339)
	if want := "edgerelay version v9.8.7-test (revision " + rev + ", committed " + committed + ")"; got != want {
		t.Fatalf("--version says\n%q, want\n%q", got, want)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || st.IsDir() {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

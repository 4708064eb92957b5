package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const unitPath = "packaging/edgerelay.service"

// unitKeys reads a unit file's Key=Value lines; a key set twice keeps
// every value.
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not Key=Value: %q", path, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// unitWithBinary is a copy of the unit whose ExecStart runs the binary the
// tests built (systemd-analyze verify checks that it exists).
func unitWithBinary(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "/usr/local/bin/edgerelay", binary(t))
	path := filepath.Join(t.TempDir(), "edgerelay.service")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// systemd-analyze verify passes the unit without a word (it warns on
// stderr and still exits 0, so any output fails), and its offline
// security review rates the hardening "OK" or better.
func TestSystemdUnitVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze on this machine (apt-get install systemd)")
	}
	unit := unitWithBinary(t)
	out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for edgerelay.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: exposure %.1f (0 is best, 10 worst)", level)
	if level > 2.0 {
		t.Errorf("exposure %.1f, want 2.0 or less (systemd calls up to 2.9 OK):\n%s", level, out)
	}
}

// The unit's promises: a dedicated user (the one the sysusers file
// creates), the database in the state directory, SIGTERM and a stop
// timeout longer than serve's drain, restarts on failure, reload by
// SIGHUP; and its ExecStart line runs: serve starts with exactly those
// flags (the directories stood in for) and stops cleanly on SIGTERM.
func TestSystemdUnitPromises(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Parallel()
	k := unitKeys(t, unitPath)
	one := func(key string) string {
		t.Helper()
		if len(k[key]) != 1 {
			t.Fatalf("%s: %d values %q, want one", key, len(k[key]), k[key])
		}
		return k[key][0]
	}
	for key, want := range map[string]string{
		"User": "edgerelay", "Group": "edgerelay", "StateDirectory": "edgerelay", "ConfigurationDirectory": "edgerelay",
		"KillSignal": "SIGTERM", "Restart": "on-failure", "Type": "notify", "ExecReload": "/bin/kill -HUP $MAINPID",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "CapabilityBoundingSet": "", "MemoryDenyWriteExecute": "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
	} {
		if got := one(key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	sysusers, err := os.ReadFile("packaging/edgerelay.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^u edgerelay `).Match(sysusers) {
		t.Errorf("packaging/edgerelay.sysusers does not create the unit's user edgerelay:\n%s", sysusers)
	}

	exec1 := strings.Fields(one("ExecStart"))
	if exec1[0] != "/usr/local/bin/edgerelay" || exec1[1] != "serve" {
		t.Fatalf("ExecStart %q: want /usr/local/bin/edgerelay serve …", exec1)
	}
	flags := map[string]string{}
	for i := 2; i+1 < len(exec1); i += 2 {
		flags[exec1[i]] = exec1[i+1]
	}
	if flags["--db"] != "%S/edgerelay/edgerelay.db" {
		t.Errorf("--db %q: want the state directory, %%S/edgerelay/edgerelay.db", flags["--db"])
	}
	drain, err := time.ParseDuration(flags["--drain-timeout"])
	if err != nil {
		t.Fatalf("ExecStart sets no --drain-timeout: %v", err)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	// The drain's deadline covers requests and calls; recording what it cut
	// off and closing the database take a moment more.
	if stop < drain+10*time.Second {
		t.Errorf("TimeoutStopSec %s: want at least --drain-timeout (%s) + 10s, or systemd's SIGKILL cuts the drain", stop, drain)
	}

	// Run the ExecStart line, with %S and %E in temp directories.
	state, conf := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(state, "edgerelay"), 0o700)
	os.MkdirAll(filepath.Join(conf, "edgerelay"), 0o755)
	os.WriteFile(filepath.Join(conf, "edgerelay", "edgerelay.yaml"), []byte("api:\n  listen: 127.0.0.1:0\n"), 0o640)
	args := strings.NewReplacer("%S", state, "%E", conf).Replace(strings.Join(exec1[1:], " "))
	p := startReloadServe(t, strings.Fields(args)...)
	p.waitNotify(t, "READY=1")
	if _, err := os.Stat(filepath.Join(state, "edgerelay", "edgerelay.db")); err != nil {
		t.Errorf("the database is not in the state directory: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(drain):
		t.Fatalf("serve did not stop within the drain timeout of an idle relay:\n%s", p.output())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM (Restart=on-failure would restart it):\n%s", code, p.output())
	}
}

// The sysusers file creates the user and group, as systemd-sysusers does
// on installation, here on a scratch root.
func TestSysusersCreatesTheUser(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-sysusers"); err != nil {
		t.Skip("no systemd-sysusers on this machine (apt-get install systemd)")
	}
	root := t.TempDir()
	conf := filepath.Join(root, "usr", "lib", "sysusers.d")
	os.MkdirAll(conf, 0o755)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	b, err := os.ReadFile("packaging/edgerelay.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(conf, "edgerelay.conf"), b, 0o644)
	if out, err := exec.Command("systemd-sysusers", "--root="+root).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	group, _ := os.ReadFile(filepath.Join(root, "etc", "group"))
	if !regexp.MustCompile(`(?m)^edgerelay:x:\d+:\d+:[^:]*:/var/lib/edgerelay:/usr/sbin/nologin$`).Match(passwd) {
		t.Errorf("no system user edgerelay, home /var/lib/edgerelay, no login shell:\n%s", passwd)
	}
	if !regexp.MustCompile(`(?m)^edgerelay:x:\d+:`).Match(group) {
		t.Errorf("no group edgerelay:\n%s", group)
	}
}

package pgtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/testserver"
)

// The PgBouncers, one per test process and ignore list, started by the
// first Bouncer call that asks for it.
var (
	bouncersMu sync.Mutex
	bouncers   = map[string]*bouncerStart{}
)

type bouncerStart struct {
	once sync.Once
	b    *pgbouncer
	skip string
	err  error
}

type pgbouncer struct {
	addr string // host:port it listens on
	dir  string
	p    *testserver.Proc
	logf string
}

// Bouncer returns dbURL (from Start, a Pool or Admin) rewritten to reach
// the same database and schema through a PgBouncer in transaction pooling
// mode: consecutive transactions of one client connection may run on
// different server connections, so a session-level setting (a SET, a
// startup parameter, a prepared statement) does not follow the client.
// Callers add default_query_exec_mode=simple_protocol, as PgBouncer users
// must. The bouncer runs with PgBouncer's defaults otherwise: it passes
// only the startup parameters it tracks, and refuses a connection that
// sends another (search_path among them), unless ignore names it: its
// ignore_startup_parameters, which PgBouncer then drops unseen.
//
// Without a pgbouncer binary (Debian: apt-get install pgbouncer) the test
// skips; under CI it fails.
func Bouncer(t testing.TB, dbURL string, ignore ...string) string {
	t.Helper()
	s := get(t)
	key := strings.Join(ignore, ",")
	bouncersMu.Lock()
	bs := bouncers[key]
	if bs == nil {
		bs = &bouncerStart{}
		bouncers[key] = bs
	}
	bouncersMu.Unlock()
	bs.once.Do(func() {
		b, skip, err := startBouncer(s, key)
		bouncersMu.Lock() // BouncerLog reads b
		bs.b, bs.skip, bs.err = b, skip, err
		bouncersMu.Unlock()
	})
	switch {
	case bs.skip != "":
		testserver.Unavailable(t, "pgtest", bs.skip)
	case bs.err != nil:
		t.Fatalf("pgtest: %v", bs.err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: Bouncer: not a URL") // it holds a password: not repeated
	}
	u.Host = bs.b.addr
	return u.String()
}

func bouncerBin() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if executable("/usr/sbin/pgbouncer") { // Debian's, outside a user's PATH
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

func startBouncer(s *server, ignore string) (*pgbouncer, string, error) {
	bin := bouncerBin()
	if bin == "" {
		return nil, "PgBouncer tests skipped: install pgbouncer (Debian: apt-get install pgbouncer)", nil
	}
	password, _ := s.base.User.Password()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-bouncer-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, "", err
	}
	b := &pgbouncer{dir: dir, logf: filepath.Join(dir, "pgbouncer.log")}
	fail := func(err error) (*pgbouncer, string, error) {
		b.stop()
		return nil, "", err
	}
	// PgBouncer refuses to run as root: as root (CI) it runs as the
	// postgres user, as the server does.
	cred, err := testserver.As("postgres", "pgbouncer", dir)
	if err != nil {
		return fail(err)
	}
	srvHost, srvPort, err := net.SplitHostPort(s.base.Host)
	if err != nil {
		return fail(err)
	}
	port, err := testserver.FreePort()
	if err != nil {
		return fail(err)
	}
	b.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	user := s.base.User.Username()
	// The auth file holds the password in clear: PgBouncer logs in to the
	// server with it (SCRAM) and checks clients against it.
	auth := fmt.Sprintf("%q %q\n", user, password)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = transaction
; fewer server connections than the tests have clients, so that
; consecutive transactions of one client do move between them
default_pool_size = 8
max_client_conn = 1000
server_tls_sslmode = disable
logfile = %s
; its console (database pgbouncer), for tests that read its settings
admin_users = %s
ignore_startup_parameters = %s
`, srvHost, srvPort, port, filepath.Join(dir, "userlist.txt"), b.logf, user, ignore)
	for name, text := range map[string]string{"userlist.txt": auth, "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return fail(err)
		}
		if cred != nil {
			if err := os.Chown(filepath.Join(dir, name), int(cred.Uid), int(cred.Gid)); err != nil {
				return fail(err)
			}
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	// SIGTERM when the test process dies: an immediate shutdown.
	if b.p, err = testserver.Start(cmd, cred, syscall.SIGTERM); err != nil {
		return fail(fmt.Errorf("start pgbouncer: %w", err))
	}
	// Ready when it takes TCP connections.
	err = b.p.WaitReady("pgbouncer", b.logf, 20*time.Second, func() error {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	return b, "", nil
}

// BouncerLog is what the bouncers have logged so far, for a test's
// failure message.
func BouncerLog() string {
	bouncersMu.Lock()
	defer bouncersMu.Unlock()
	var out []string
	for _, bs := range bouncers {
		if bs.b != nil {
			log, _ := os.ReadFile(bs.b.logf)
			out = append(out, strings.TrimSpace(string(log)))
		}
	}
	return strings.Join(out, "\n")
}

// stopBouncers stops every bouncer started (from Stop).
func stopBouncers() {
	bouncersMu.Lock()
	defer bouncersMu.Unlock()
	for _, bs := range bouncers {
		if bs.b != nil {
			bs.b.stop()
		}
	}
}

func (b *pgbouncer) stop() {
	if b.p != nil {
		b.p.Stop(syscall.SIGTERM, 10*time.Second) // immediate shutdown
	}
	os.RemoveAll(b.dir)
}

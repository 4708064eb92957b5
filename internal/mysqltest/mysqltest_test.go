package mysqltest_test

import (
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/edgerelay/edgerelay/internal/mysqltest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	mysqltest.Stop()
	os.Exit(code)
}

// Start gives each test its own empty database on a server that takes a
// password over TCP.
func TestStartGivesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	a, b := mysqltest.Start(t), mysqltest.Start(t)
	if a == b {
		t.Fatalf("two tests got one database: %s", a)
	}
	u, err := url.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.User.Password(); !ok || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		t.Fatalf("URL %s: want a password and a loopback host", u.Redacted())
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.Trim(u.Path, "/")
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("new database: %d tables, %v; want 0", n, err)
	}
}

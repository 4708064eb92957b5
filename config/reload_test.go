package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A reload names what it could not apply by its config key, and only
// that: routes, providers and tenants are applied; everything else needs a
// restart.
func TestReloadNeedsRestartKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	load := func(name, body string) *Config {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := load("old.yaml", `db: a.db
routes:
  email: log:///tmp/a.log
tenants:
  acme:
    tokens: [tok_aaaaaaaaaaaaaaaa]
api:
  listen: 127.0.0.1:8025
dispatch:
  workers: 8
`)
	same := load("same.yaml", `db: a.db
routes:
  email: log:///tmp/b.log
  sms: log:///tmp/c.log
tenants:
  acme:
    tokens: [tok_bbbbbbbbbbbbbbbb]
providers:
  hook:
    url: webhook+http://127.0.0.1:1/
api:
  listen: 127.0.0.1:8025
dispatch:
  workers: 8
`)
	if got := NeedsRestart(old, same); len(got) != 0 {
		t.Errorf("routes, tenants and providers changed: %v need a restart, want none", got)
	}
	moved := load("moved.yaml", `db: b.db
routes:
  email: log:///tmp/a.log
tenants:
  acme:
    tokens: [tok_aaaaaaaaaaaaaaaa]
api:
  listen: 127.0.0.1:9000
dispatch:
  workers: 16
limits:
  max_recipients: 5
retry:
  max_attempts: 3
`)
	got := strings.Join(NeedsRestart(old, moved), ",")
	if want := "db,retry.max_attempts,dispatch.workers,limits.max_recipients,api.listen"; got != want {
		t.Errorf("needs a restart: %s, want %s", got, want)
	}
}

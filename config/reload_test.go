package config

import (
	"os"
	"path/filepath"
	"slices"
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

// A reload's log line names the routes added, removed and changed (a
// provider whose options changed changes the routes through it; a --route
// flag replaces the file's route for its channel), the providers whose
// limits changed, and how the tokens changed.
func TestReloadDiff(t *testing.T) {
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
	old := load("old.yaml", `providers:
  hook: {url: 'webhook+http://127.0.0.1:1/', concurrency: 4}
routes:
  email: log:///dev/null
  webhook: hook
  sms: log:///dev/null
tenants:
  acme: {tokens: [tok_aaaaaaaaaaaaaaaa]}
`)
	nu := load("new.yaml", `providers:
  hook: {url: 'webhook+http://127.0.0.1:2/', concurrency: 8}
routes:
  email: log:///dev/null
  webhook: hook
  push: log:///dev/null
tenants:
  acme: {tokens: [tok_bbbbbbbbbbbbbbbb], routes: {email: log:///dev/null}}
`)
	added, removed, changed := DiffRoutes(old, nil, nu, map[string][]string{"email": {"log:///dev/stderr"}})
	if got, want := strings.Join(added, ",")+"|"+strings.Join(removed, ",")+"|"+strings.Join(changed, ","), "acme:email,push|sms|email,webhook"; got != want {
		t.Errorf("added|removed|changed %s, want %s", got, want)
	}
	_, _, ol, err := old.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, nl, err := nu.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := DiffLimits(ol, nl); !slices.Equal(got, []string{"hook"}) {
		t.Errorf("limits changed: %v, want [hook]", got)
	}
	if got := TokenChange(TokenHashes(old), TokenHashes(nu)); got != "1 (1 added, 1 removed)" {
		t.Errorf("tokens: %s", got)
	}
}

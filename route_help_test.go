package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/providers"
)

// The --route help of the commands that deliver lists every provider
// scheme and parameter the registry holds, as New takes them.
func TestRouteHelpNamesEveryProvider(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"dispatch", "serve"} {
		r := runCLI(t, "", cmd, "--help")
		if r.code != 0 {
			t.Fatalf("%s --help: exit %d %s", cmd, r.code, r.stderr)
		}
		for _, k := range providers.Kinds() {
			for _, s := range k.Schemes {
				if !strings.Contains(r.stdout, s+"://") {
					t.Errorf("%s --help does not name scheme %s://", cmd, s)
				}
			}
			for _, p := range k.Params {
				if !strings.Contains(r.stdout, p.Name) {
					t.Errorf("%s --help does not name %s's parameter %s", cmd, k.Name, p.Name)
				}
			}
		}
	}
}

// config check reports a provider URL of an unknown scheme, in a route or
// under providers:, at its line and with every scheme the registry holds.
func TestConfigCheckUnknownScheme(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`providers:
  mail:
    url: mandrill+https://mandrillapp.com/api/1.0
routes:
  email: [mail]
  sms: ftp://sms.example.com/send
`), 0o644)
	var all []string
	for _, k := range providers.Kinds() {
		all = append(all, k.Schemes...)
	}
	supported := "(supported: " + strings.Join(all, ", ") + ")"
	r := runCLI(t, "", "config", "check", bad)
	for _, want := range []string{
		`line 2 (providers.mail): provider URL "mandrill+https://mandrillapp.com/api/1.0?name=mail": unknown scheme "mandrill+https" ` + supported,
		`line 6 (routes.sms): provider URL "ftp://sms.example.com/send": unknown scheme "ftp" ` + supported,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check output lacks\n%s\n%s", want, r.stderr)
		}
	}
	if r.code != exitError {
		t.Errorf("exit %d", r.code)
	}
}

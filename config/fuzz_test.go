package config

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzConfig reads arbitrary bytes as a config file. Whatever the input:
// no panic, and readConfig keeps its contract: an error (an *Error for
// what is not YAML) with nothing else, or a *Config with problems each
// saying something; Load agrees. Seeds are in
// testdata/fuzz/FuzzConfig (full_valid has no problem).
func FuzzConfig(f *testing.F) {
	f.Add([]byte("db: ./edgerelay.db\nroutes:\n  email: log://stdout\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if writesFiles(data) {
			t.Skip("a log:///path provider would create that file")
		}
		path := filepath.Join(dir, "edgerelay.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, problems, err := readConfig(path, nil, false)
		t.Logf("config %v, problems %q, error %v", cfg != nil, problems, err)
		if err != nil {
			var ce *Error
			if cfg != nil || problems != nil || !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("readConfig: %v (%T) with config %v and problems %q", err, err, cfg != nil, problems)
			}
			return
		}
		if cfg == nil {
			t.Fatal("readConfig: no config and no error")
		}
		for i, p := range problems {
			if p == "" {
				t.Fatalf("problem %d of %q is empty", i, problems)
			}
		}
		lcfg, lerr := Load(path, nil)
		switch {
		case len(problems) > 0 && lerr == nil:
			t.Fatalf("Load accepted a file with problems %q", problems)
		case len(problems) == 0 && (lerr != nil || lcfg == nil):
			t.Fatalf("Load refused a file without problems: %v", lerr)
		}
	})
}

// writesFiles reports whether checking the config would build a log
// provider on a file path (building one creates the file): the fuzzer must
// not litter the machine.
func writesFiles(data []byte) bool {
	var cfg Config
	yaml.Unmarshal(data, &cfg) // what decodes is what would be built
	var refs []string
	for _, pc := range cfg.Providers {
		refs = append(refs, pc.URL)
	}
	routes := []map[string]StringList{cfg.Routes}
	for _, tc := range cfg.Tenants {
		routes = append(routes, tc.Routes)
	}
	for _, rs := range routes {
		for _, l := range rs {
			refs = append(refs, l...)
		}
	}
	for _, ref := range refs {
		if v, err := expandEnv(ref); err == nil {
			ref = v
		}
		if u, err := url.Parse(ref); err == nil && strings.EqualFold(u.Scheme, "log") && u.Host == "" {
			return true
		}
	}
	return false
}

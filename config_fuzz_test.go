package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfig reads arbitrary bytes as a config file. Whatever the input:
// no panic, and parseConfig keeps its contract: an error (a *ConfigError
// for what is not YAML) with nothing else, or problems each saying
// something, or a *Config; loadConfig agrees. Seeds are in
// testdata/fuzz/FuzzConfig.
func FuzzConfig(f *testing.F) {
	f.Add([]byte("db: ./edgerelay.db\nroutes:\n  email: log://stdout\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "edgerelay.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, problems, err := parseConfig(path)
		t.Logf("config %v, problems %q, error %v", cfg != nil, problems, err)
		if err != nil {
			var ce *ConfigError
			if cfg != nil || problems != nil || !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("parseConfig: %v (%T) with config %v and problems %q", err, err, cfg != nil, problems)
			}
			return
		}
		for i, p := range problems {
			if p == "" {
				t.Fatalf("problem %d of %q is empty", i, problems)
			}
		}
		if cfg == nil && len(problems) == 0 {
			t.Fatal("parseConfig: no config, no problems and no error")
		}
		lcfg, lerr := loadConfig(path)
		switch {
		case len(problems) > 0 && lerr == nil:
			t.Fatalf("loadConfig accepted a file with problems %q", problems)
		case len(problems) == 0 && (lerr != nil || lcfg == nil):
			t.Fatalf("loadConfig refused a file without problems: %v", lerr)
		}
	})
}

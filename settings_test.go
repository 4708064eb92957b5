package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/config"
)

// mergeFlags lays flags over the file in one place: a flag given (on the
// command line or by its environment variable, before or after the
// command) wins, then the key where the file sets it, then the flag's
// default; from names which one it was.
func TestFlagsOverConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(`db: file.db
dispatch: {workers: 8, lease: 2m}
api:
  listen: 127.0.0.1:9000
  max_body: 4096
  shed_above: 0
  trusted_proxies: [10.0.0.0/8]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGERELAY_MAX_BATCH", "7")
	var got *overrides
	app := &cli.App{Flags: globalFlags(), Commands: []*cli.Command{{
		Name: "serve", Flags: serveFlags(),
		Action: func(c *cli.Context) error { got = mergeFlags(c, cfg); return nil },
	}}}
	if err := app.Run([]string{"edgerelay", "--db", "flag.db", "serve", "--max-body", "100", "--trusted-proxy", "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag      string
		got, want any
		from      string
	}{
		{"db", got.DB, "flag.db", "--db"},                             // a flag before the command
		{"max-body", got.MaxBody, int64(100), "--max-body"},           // a flag over the key
		{"max-batch", got.MaxBatch, 7, "--max-batch"},                 // an environment variable
		{"listen", got.Listen, "127.0.0.1:9000", "api.listen"},        // the key, no flag
		{"shed-above", got.ShedAbove, int64(0), "api.shed_above"},     // a key set to 0 is set
		{"key-ttl", got.KeyTTL, config.DefaultKeyTTL, "--key-ttl"},    // neither: the flag's default
		{"workers", got.Workers, 8, "dispatch.workers"},               // a key serve has no flag for
		{"lease", got.Lease, 2 * time.Minute, "dispatch.lease"},       // a Duration of the file
		{"metrics-listen", got.MetricsListen, "", "--metrics-listen"}, // neither, no default
		{"max-recipients", got.MaxRecipients, 0, "--max-recipients"},  // 0: the relay's default
	} {
		if tc.got != tc.want || got.from[tc.flag] != tc.from {
			t.Errorf("%s = %v from %s, want %v from %s", tc.flag, tc.got, got.from[tc.flag], tc.want, tc.from)
		}
	}
	if want := []string{"192.0.2.1"}; !slices.Equal(got.TrustedProxies, want) || got.from["trusted-proxy"] != "--trusted-proxy" {
		t.Errorf("trusted-proxy = %v from %s, want %v from the flag", got.TrustedProxies, got.from["trusted-proxy"], want)
	}
}

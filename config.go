package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"edgerelay/providers"
	"edgerelay/relay"
)

// Config is the optional config file (YAML). Flags override it; with
// neither, every channel is printed to stdout by the log provider.
type Config struct {
	DB string `yaml:"db"`
	// Routes maps a channel ("email", "sms", … or "*" for the rest) to a
	// provider URL.
	Routes map[string]string `yaml:"routes"`
	// Types sets per-type delivery semantics.
	Types map[string]TypeConfig `yaml:"types"`
	// Retry is the default retry policy; Channels overrides it per channel.
	Retry    PolicyConfig            `yaml:"retry"`
	Channels map[string]PolicyConfig `yaml:"channels"`
	Dispatch struct {
		Workers int      `yaml:"workers"`
		Lease   Duration `yaml:"lease"`
	} `yaml:"dispatch"`
	Limits struct {
		MaxRecipients int `yaml:"max_recipients"`
	} `yaml:"limits"`
	// Tenants lists API tokens per tenant; ${VAR} reads an environment
	// variable, so the file need not hold the secret.
	Tenants map[string]struct {
		Tokens []string `yaml:"tokens"`
	} `yaml:"tenants"`
	API struct {
		Listen   string   `yaml:"listen"`
		MaxBody  int64    `yaml:"max_body"`
		MaxBatch int      `yaml:"max_batch"`
		KeyTTL   Duration `yaml:"key_ttl"`
	} `yaml:"api"`
}

// TypeConfig is what a notification type chooses.
type TypeConfig struct {
	// Delivery: at-least-once (default) or at-most-once.
	Delivery string `yaml:"delivery"`
}

// PolicyConfig is a retry policy as written in the file.
type PolicyConfig struct {
	MaxAttempts int      `yaml:"max_attempts"`
	MaxAge      Duration `yaml:"max_age"`
	BaseDelay   Duration `yaml:"base_delay"`
	MaxDelay    Duration `yaml:"max_delay"`
}

func (p PolicyConfig) policy() relay.Policy {
	return relay.Policy{MaxAttempts: p.MaxAttempts, MaxAge: time.Duration(p.MaxAge),
		BaseDelay: time.Duration(p.BaseDelay), MaxDelay: time.Duration(p.MaxDelay)}
}

// Duration reads "90s", "12h" in YAML.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 90s, 15m, 12h)", n.Line, n.Value)
	}
	if v < 0 {
		return fmt.Errorf("line %d: duration %q is negative", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// loadConfig reads and checks a config file. Unknown keys are errors: a
// misspelt "rotues" must not silently route nothing.
func loadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	for t, tc := range cfg.Tenants {
		for i, tok := range tc.Tokens {
			v, err := expandEnv(tok)
			if err != nil {
				return nil, fmt.Errorf("config %s: tenants.%s.tokens[%d]: %w", path, t, i, err)
			}
			if len(v) < 16 {
				return nil, fmt.Errorf("config %s: tenants.%s.tokens[%d]: shorter than 16 characters", path, t, i)
			}
			tc.Tokens[i] = v
		}
	}
	for t, tc := range cfg.Types {
		if tc.Delivery != "" {
			if _, err := relay.ParseMode(tc.Delivery); err != nil {
				return nil, fmt.Errorf("config %s: types.%s.delivery: %w", path, t, err)
			}
		}
	}
	return &cfg, nil
}

// expandEnv replaces ${VAR} references; an unset variable is an error, not
// an empty secret.
func expandEnv(s string) (string, error) {
	var missing []string
	out := os.Expand(s, func(k string) string {
		v, ok := os.LookupEnv(k)
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

// Flags are made afresh for every app: urfave/cli writes parsed values
// into the flag structs, so shared ones would race between apps (tests).
func flagDB() cli.Flag {
	return &cli.StringFlag{Name: "db", Value: "./edgerelay.db", EnvVars: []string{"EDGERELAY_DB"},
		Usage: "the SQLite database `FILE` (created if missing)"}
}

func flagConfig() cli.Flag {
	return &cli.StringFlag{Name: "config", EnvVars: []string{"EDGERELAY_CONFIG"},
		Usage: "YAML config `FILE` (routes, types, retry policy); optional"}
}

func flagLogLevel() cli.Flag {
	return &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"EDGERELAY_LOG_LEVEL"},
		Usage: "debug, info, warn or error (logs go to stderr)"}
}

func flagRoute() cli.Flag {
	return &cli.StringSliceFlag{Name: "route", EnvVars: []string{"EDGERELAY_ROUTES"},
		Usage: "`CHANNEL=URL`: deliver CHANNEL through the provider at URL (repeatable; CHANNEL * for every other channel). " +
			"URLs: log://stdout, log:///path/file, webhook+http(s)://host/path, " +
			"email-http+http(s)://host/path?from=ADDR; options ?timeout=10s&idempotency=honoured|none"}
}

func flagDelivery() cli.Flag {
	return &cli.StringSliceFlag{Name: "delivery", EnvVars: []string{"EDGERELAY_DELIVERY"},
		Usage: "`TYPE=MODE`: at-least-once (default) or at-most-once for notifications of TYPE (repeatable)"}
}

// globalFlags are accepted before the command and, through commonFlags,
// after it too.
func globalFlags() []cli.Flag { return []cli.Flag{flagDB(), flagConfig(), flagLogLevel()} }

// lookup returns a flag's value from the innermost context where it was
// set (command, then app), else the default.
func lookup(c *cli.Context, name string) string {
	for _, cc := range c.Lineage() {
		if cc.IsSet(name) {
			return cc.String(name)
		}
	}
	return c.String(name)
}

func lookupSlice(c *cli.Context, name string) []string {
	for _, cc := range c.Lineage() {
		if cc.IsSet(name) {
			return cc.StringSlice(name)
		}
	}
	return nil
}

// settings are the resolved config, flags over file.
type settings struct {
	opts   relay.Options
	cfg    *Config
	routes map[string]string // channel → provider URL, built by buildRoutes
}

// loadSettings resolves the database path, config file, routes and
// delivery modes. Every problem is reported, with what to fix.
func loadSettings(c *cli.Context, stderr io.Writer) (*settings, error) {
	cfg := &Config{}
	if path := lookup(c, "config"); path != "" {
		var err error
		if cfg, err = loadConfig(path); err != nil {
			return nil, err
		}
	}
	db := lookup(c, "db")
	if !isSet(c, "db") && cfg.DB != "" {
		db = cfg.DB
	}
	log, err := newLogger(lookup(c, "log-level"), stderr)
	if err != nil {
		return nil, err
	}
	opts := relay.Options{
		Path: db, Logger: log, Retry: cfg.Retry.policy(), ChannelRetry: map[string]relay.Policy{},
		Delivery: map[string]relay.Mode{}, Routes: map[string]providers.Provider{},
		Workers: cfg.Dispatch.Workers, Lease: time.Duration(cfg.Dispatch.Lease), MaxRecipients: cfg.Limits.MaxRecipients,
	}
	for ch, p := range cfg.Channels {
		opts.ChannelRetry[ch] = p.policy()
	}
	for t, tc := range cfg.Types {
		if tc.Delivery != "" {
			opts.Delivery[t] = relay.Mode(tc.Delivery)
		}
	}
	routes := map[string]string{}
	for ch, u := range cfg.Routes {
		routes[ch] = u
	}
	for _, r := range lookupSlice(c, "route") {
		ch, u, ok := strings.Cut(r, "=")
		if !ok || ch == "" || u == "" {
			return nil, cli.Exit(fmt.Sprintf("--route %q: want CHANNEL=URL, e.g. email=email-http+http://127.0.0.1:9099/v1/emails?from=relay@example.com", r), exitUsage)
		}
		routes[strings.TrimSpace(ch)] = strings.TrimSpace(u)
	}
	for _, d := range lookupSlice(c, "delivery") {
		t, m, ok := strings.Cut(d, "=")
		mode, err := relay.ParseMode(m)
		if !ok || t == "" || err != nil {
			return nil, cli.Exit(fmt.Sprintf("--delivery %q: want TYPE=at-least-once or TYPE=at-most-once", d), exitUsage)
		}
		opts.Delivery[t] = mode
	}
	return &settings{opts: opts, cfg: cfg, routes: routes}, nil
}

// deliverySettings are the settings of a command that delivers, with its
// providers built.
func deliverySettings(c *cli.Context) (*settings, error) {
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return nil, err
	}
	return s, s.buildRoutes()
}

// buildRoutes makes the providers of the routes. Only commands that deliver
// call it: building a provider may open a file.
func (s *settings) buildRoutes() error {
	chans := make([]string, 0, len(s.routes))
	for ch := range s.routes {
		chans = append(chans, ch)
	}
	sort.Strings(chans)
	for _, ch := range chans {
		p, err := providers.New(s.routes[ch])
		if err != nil {
			return fmt.Errorf("route %s: %w", ch, err)
		}
		s.opts.Routes[ch] = p
	}
	return nil
}

func isSet(c *cli.Context, name string) bool {
	for _, cc := range c.Lineage() {
		if cc.IsSet(name) {
			return true
		}
	}
	return false
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, cli.Exit(fmt.Sprintf("--log-level %q: want debug, info, warn or error", level), exitUsage)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// openExisting resolves settings and opens a database that must already
// exist: commands that only read or amend (show, status, retry) must not
// create an empty database for a mistyped path and report on it.
func openExisting(c *cli.Context) (*relay.Relay, error) {
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(s.opts.Path); err != nil {
		return nil, fmt.Errorf("database %s: %w (send or dispatch creates it; check --db)", s.opts.Path, errors.Unwrap(err))
	}
	return openRelayWith(c, s)
}

func openRelayWith(c *cli.Context, s *settings) (*relay.Relay, error) {
	return relay.Open(c.Context, s.opts)
}

// commonFlags returns the global flags (so they work after the command
// name too) followed by the command's own.
func commonFlags(own ...cli.Flag) []cli.Flag {
	return append(globalFlags(), own...)
}

// usageErr makes a command's flag errors exit with exitUsage.
func usageErr(c *cli.Context, err error, _ bool) error {
	return cli.Exit(err.Error()+" (see --help)", exitUsage)
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func validName(s string) bool { return tenantName.MatchString(s) }

func timeNow() time.Time { return time.Now() }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// openRelay resolves settings and opens (creating if needed) the database.
func openRelay(c *cli.Context, stderr io.Writer) (*relay.Relay, *settings, error) {
	s, err := loadSettings(c, stderr)
	if err != nil {
		return nil, nil, err
	}
	r, err := openRelayWith(c, s)
	return r, s, err
}

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/store/open"
)

// Flags are made afresh for every app: urfave/cli writes parsed values
// into the flag structs, so shared ones would race between apps (tests).
func flagDB() cli.Flag {
	return &cli.StringFlag{Name: "db", Value: "./edgerelay.db", EnvVars: []string{"EDGERELAY_DB"},
		Usage: "the SQLite database `FILE` (commands that accept or deliver create it; the others refuse a missing one), or a postgres:// URL"}
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
			"Providers by scheme:" + providerHelp()}
}

// providerHelp lists every provider kind from the registry that New reads,
// so the help cannot name a scheme New refuses or miss one. Each line
// starts with a tab: the help's column alignment then puts it under the
// flag's usage.
func providerHelp() string {
	var b strings.Builder
	line := func(indent, text string) { b.WriteString("\n\t" + indent + plainText(text)) }
	for _, k := range providers.Kinds() {
		urls := strings.Join(k.URLs, "  ")
		var also []string
		for _, s := range k.Schemes {
			if !strings.Contains(urls, s+"://") {
				also = append(also, s+"://")
			}
		}
		if len(also) > 0 {
			urls += "  (also " + strings.Join(also, ", ") + ")"
		}
		var names []string
		for _, p := range k.Params {
			names = append(names, p.Name)
		}
		line("", urls)
		line("    ", k.Summary)
		line("    ", "parameters: "+strings.Join(names, ", ")+"; keys honoured: "+k.Keys)
	}
	line("", "Parameters shared by several providers:")
	for _, p := range providers.SharedParams() {
		line("    ", p.Name+": "+p.Doc)
	}
	return b.String()
}

// markdownLink matches [text](url) in the registry's Markdown.
var markdownLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// plainText turns the registry's Markdown into help text: links keep their
// text, code loses its backquotes.
func plainText(md string) string {
	return strings.ReplaceAll(markdownLink.ReplaceAllString(md, "$1"), "`", "")
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
	opts       relay.Options
	cfg        *config.Config
	flagRoutes map[string][]string // channel → providers by name or URL, from --route
	flags      *overrides          // the values that a flag and a config key both set
}

// loadSettings resolves the database path, config file, routes and
// delivery modes. Every problem is reported, with what to fix.
func loadSettings(c *cli.Context, stderr io.Writer) (*settings, error) {
	flagRoutes, err := routeFlags(c)
	if err != nil {
		return nil, err
	}
	cfg := &config.Config{}
	if path := lookup(c, "config"); path != "" {
		if cfg, err = config.Load(path, flagRoutes); err != nil {
			return nil, err
		}
	}
	flags := mergeFlags(c, cfg)
	log, err := newLogger(lookup(c, "log-level"), stderr)
	if err != nil {
		return nil, err
	}
	opts := cfg.RelayOptions()
	opts.Logger, opts.Hooks = log, crashHooks()
	opts.Workers, opts.Lease, opts.MaxRecipients = flags.Workers, flags.Lease, flags.MaxRecipients
	for _, d := range lookupSlice(c, "delivery") {
		t, m, ok := strings.Cut(d, "=")
		mode, err := relay.ParseMode(m)
		if !ok || t == "" || err != nil {
			return nil, cli.Exit(fmt.Sprintf("--delivery %q: want TYPE=at-least-once or TYPE=at-most-once", d), exitUsage)
		}
		opts.Delivery[t] = mode
	}
	return &settings{opts: opts, cfg: cfg, flagRoutes: flagRoutes, flags: flags}, nil
}

// overrides are the settings that a flag and a config key (its tag) both
// set. mergeFlags merges them, for every command in one place: a flag
// given (on the command line or by its environment variable) wins;
// otherwise the key, where the file sets it; otherwise the flag's default.
// A command without the flag takes the key's value.
type overrides struct {
	DB               string        `flag:"db" key:"db"`
	Workers          int           `flag:"workers" key:"dispatch.workers"`
	Lease            time.Duration `flag:"lease" key:"dispatch.lease"`
	MaxRecipients    int           `flag:"max-recipients" key:"limits.max_recipients"`
	Listen           string        `flag:"listen" key:"api.listen"`
	MetricsListen    string        `flag:"metrics-listen" key:"api.metrics_listen"`
	ConsoleListen    string        `flag:"console-listen" key:"api.console_listen"`
	TrustedProxies   []string      `flag:"trusted-proxy" key:"api.trusted_proxies"`
	MaxBody          int64         `flag:"max-body" key:"api.max_body"`
	MaxBatch         int           `flag:"max-batch" key:"api.max_batch"`
	KeyTTL           time.Duration `flag:"key-ttl" key:"api.key_ttl"`
	BodyTimeout      time.Duration `flag:"body-timeout" key:"api.body_timeout"`
	MaxConns         int           `flag:"max-conns" key:"api.max_conns"`
	ShedAbove        int64         `flag:"shed-above" key:"api.shed_above"`
	ShedBehind       time.Duration `flag:"shed-behind" key:"api.shed_behind"`
	StreamsPerUser   int           `flag:"streams-per-user" key:"api.streams_per_user"`
	StreamsPerTenant int           `flag:"streams-per-tenant" key:"api.streams_per_tenant"`
	StreamHeartbeat  time.Duration `flag:"stream-heartbeat" key:"api.stream_heartbeat"`
	StreamSweep      time.Duration `flag:"stream-sweep" key:"api.stream_sweep"`
	MetricsToken     string        `flag:"metrics-token" key:"api.metrics_token"`

	// from names where each value came from, by flag name, for messages:
	// "--listen", or "api.listen" where the file's value is used.
	from map[string]string
}

// mergeFlags resolves the overrides of the command c over cfg. Load
// checked cfg: a key it holds is in range, so a zero value is one the
// file does not set.
func mergeFlags(c *cli.Context, cfg *config.Config) *overrides {
	o := &overrides{from: map[string]string{}}
	v := reflect.ValueOf(o).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, key := f.Tag.Get("flag"), f.Tag.Get("key")
		if name == "" {
			continue
		}
		if file, ok := fileValue(cfg, key); ok && !isSet(c, name) {
			v.Field(i).Set(file.Convert(f.Type))
			o.from[name] = key
			continue
		}
		o.from[name] = "--" + name
		flagValue(c, name, v.Field(i))
	}
	return o
}

// fileValue is the value of a config key (its dotted path of YAML names)
// and whether the file sets it: a pointer is set when not nil (shed_above:
// 0 is set), any other value when not zero.
func fileValue(cfg *config.Config, key string) (reflect.Value, bool) {
	v := reflect.ValueOf(cfg).Elem()
	for _, name := range strings.Split(key, ".") {
		i := slices.IndexFunc(slices.Collect(v.Type().Fields()), func(f reflect.StructField) bool {
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			return tag == name
		})
		if i < 0 {
			panic("overrides: no config key " + key)
		}
		v = v.Field(i)
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		return v.Elem(), true
	}
	return v, !v.IsZero()
}

// flagValue sets dst to the flag's value in the innermost context where it
// was set (command, then app), else to its default; to nothing where the
// command has no such flag.
func flagValue(c *cli.Context, name string, dst reflect.Value) {
	cc := c
	for _, l := range c.Lineage() {
		if l.IsSet(name) {
			cc = l
			break
		}
	}
	switch val := cc.Value(name); {
	case val == nil:
	case dst.Kind() == reflect.Slice:
		dst.Set(reflect.ValueOf(cc.StringSlice(name)))
	default:
		dst.Set(reflect.ValueOf(val).Convert(dst.Type()))
	}
}

// routeFlags reads --route CHANNEL=URL (or CHANNEL=NAME) flags; repeated
// for a channel, they are its failover order.
func routeFlags(c *cli.Context) (map[string][]string, error) {
	flagRoutes := map[string][]string{}
	for _, r := range lookupSlice(c, "route") {
		ch, u, ok := strings.Cut(r, "=")
		if !ok || strings.TrimSpace(ch) == "" || strings.TrimSpace(u) == "" {
			return nil, cli.Exit(fmt.Sprintf("--route %q: want CHANNEL=URL (or CHANNEL=NAME of a configured provider), e.g. email=email-http+http://127.0.0.1:9099/v1/emails?from=relay@example.com", r), exitUsage)
		}
		ch = strings.TrimSpace(ch)
		flagRoutes[ch] = append(flagRoutes[ch], strings.TrimSpace(u))
	}
	return flagRoutes, nil
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
	routes, tenants, limits, err := s.cfg.Build(s.flagRoutes)
	if fe := (*config.FlagError)(nil); errors.As(err, &fe) {
		return cli.Exit(err.Error(), exitUsage)
	}
	if err != nil {
		return err
	}
	s.opts.Routes, s.opts.TenantRoutes, s.opts.Limits = routes, tenants, limits
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
// exist: commands that only read or amend (show, status, retry, prune,
// backup) must not create an empty database for a mistyped path and report
// on it.
func openExisting(c *cli.Context) (*relay.Relay, error) {
	return openExistingFor(c, false)
}

// openExistingFor is openExisting; readOnly is for commands that only read,
// which work on a database file they cannot write.
func openExistingFor(c *cli.Context, readOnly bool) (*relay.Relay, error) {
	r, _, err := openExistingSettings(c, readOnly)
	return r, err
}

// openExistingSettings is openExistingFor, with the settings it read.
func openExistingSettings(c *cli.Context, readOnly bool) (*relay.Relay, *settings, error) {
	s, err := loadSettings(c, c.App.ErrWriter)
	if err != nil {
		return nil, nil, err
	}
	s.opts.ReadOnly = readOnly
	if err := dbExists(s.flags.DB); err != nil {
		return nil, nil, err
	}
	r, err := openRelayWith(c, s)
	return r, s, err
}

// dbExists says, naming the path, why a database file cannot be opened
// without creating it. A database URL (postgres://) is not a file: the
// store says whether it can be reached.
func dbExists(path string) error {
	if isDBURL(path) {
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("database %s: no such file (send or dispatch creates it; check --db)", path)
	case err != nil:
		return fmt.Errorf("database %s: %w", path, errors.Unwrap(err))
	case st.IsDir():
		return fmt.Errorf("database %s: is a directory, not a database file (check --db)", path)
	}
	return nil
}

// dbDirExists says, naming it, that a database file cannot be created
// because its directory is missing (SQLite's word for it is "unable to
// open database file (14)").
func dbDirExists(path string) error {
	if isDBURL(path) {
		return nil
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("database %s: is a directory, not a database file (check --db)", path)
		}
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("database %s: directory %s does not exist (create it, or check --db)", path, dir)
	case err == nil && !st.IsDir():
		return fmt.Errorf("database %s: %s is not a directory (check --db)", path, dir)
	}
	return nil // anything else (permissions) the store reports
}

// isDBURL reports whether --db names a database server (postgres://…),
// not a file.
func isDBURL(path string) bool {
	scheme, _, ok := strings.Cut(path, "://")
	return ok && scheme != "" && !strings.ContainsAny(scheme, `/\.`)
}

func openRelayWith(c *cli.Context, s *settings) (*relay.Relay, error) {
	if err := dbDirExists(s.flags.DB); err != nil {
		return nil, err
	}
	st, err := open.Store(c.Context, s.flags.DB, open.Options{Logger: s.opts.Logger, ReadOnly: s.opts.ReadOnly})
	if err != nil {
		return nil, err
	}
	return relay.New(c.Context, st, s.opts)
}

// commonFlags returns the global flags (so they work after the command
// name too) followed by the command's own.
func commonFlags(own ...cli.Flag) []cli.Flag {
	return append(globalFlags(), own...)
}

// usageErr makes a command's flag errors exit with exitUsage. Flags may
// come before or after arguments (flagsFirst), so a word that starts with
// - is taken for a flag wherever it is: one meant as an argument goes
// after --.
func usageErr(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	if strings.HasPrefix(msg, "flag provided but not defined") {
		msg += " (an argument that starts with - goes after --)"
	}
	return cli.Exit(msg+" (see --help)", exitUsage)
}

// openRelay resolves settings and opens (creating if needed) the database.
func openRelay(c *cli.Context, stderr io.Writer) (*relay.Relay, *settings, error) {
	s, err := loadSettings(c, stderr)
	if err != nil {
		return nil, nil, err
	}
	r, err := openRelayWith(c, s)
	return r, s, err
}

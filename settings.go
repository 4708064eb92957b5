package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/providers"
	"edgerelay/relay"
	"edgerelay/store/open"
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
	db         string // a SQLite file or a postgres:// URL (store/open)
	opts       relay.Options
	cfg        *Config
	flagRoutes map[string][]string // channel → providers by name or URL, from --route
}

// loadSettings resolves the database path, config file, routes and
// delivery modes. Every problem is reported, with what to fix.
func loadSettings(c *cli.Context, stderr io.Writer) (*settings, error) {
	flagRoutes, err := routeFlags(c)
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	if path := lookup(c, "config"); path != "" {
		if cfg, err = loadConfig(path, flagRoutes); err != nil {
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
		Logger: log, Retry: cfg.Retry.policy(), ChannelRetry: map[string]relay.Policy{}, Hooks: crashHooks(),
		Delivery: map[string]relay.Mode{},
		Workers:  cfg.Dispatch.Workers, Lease: time.Duration(cfg.Dispatch.Lease), MaxRecipients: cfg.Limits.MaxRecipients,
		HardBounceTTL: time.Duration(cfg.Suppression.HardBounceTTL), SoftBounceTTL: time.Duration(cfg.Suppression.SoftBounceTTL),
		Templates: cfg.templates,
	}
	if opts.HardBounceTTL == 0 {
		opts.HardBounceTTL = time.Duration(cfg.Dispatch.InvalidAddressTTL) // its old name
	}
	for ch, p := range cfg.Channels {
		opts.ChannelRetry[ch] = p.policy()
	}
	cfg.categoryOptions(&opts)
	opts.PublicURL = cfg.API.PublicURL
	opts.TypeRetry = map[string]relay.Policy{}
	for t, tc := range cfg.Types {
		if tc.Delivery != "" {
			opts.Delivery[t] = relay.Mode(tc.Delivery)
		}
		if tc.Retry != nil {
			opts.TypeRetry[t] = tc.Retry.policy()
		}
	}
	for _, d := range lookupSlice(c, "delivery") {
		t, m, ok := strings.Cut(d, "=")
		mode, err := relay.ParseMode(m)
		if !ok || t == "" || err != nil {
			return nil, cli.Exit(fmt.Sprintf("--delivery %q: want TYPE=at-least-once or TYPE=at-most-once", d), exitUsage)
		}
		opts.Delivery[t] = mode
	}
	return &settings{db: db, opts: opts, cfg: cfg, flagRoutes: flagRoutes}, nil
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

// dispatchFlags applies --workers and --lease, which commands that deliver
// take over the config's dispatch section.
func (s *settings) dispatchFlags(c *cli.Context) {
	if c.IsSet("workers") {
		s.opts.Workers = c.Int("workers")
	}
	if c.IsSet("lease") {
		s.opts.Lease = c.Duration("lease")
	}
}

// buildRoutes makes the providers of the routes. Only commands that deliver
// call it: building a provider may open a file.
func (s *settings) buildRoutes() error {
	routes, tenants, limits, err := s.cfg.build(s.flagRoutes)
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
	if err := dbExists(s.db); err != nil {
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
	if err := dbDirExists(s.db); err != nil {
		return nil, err
	}
	st, err := open.Store(c.Context, s.db, open.Options{Logger: s.opts.Logger, ReadOnly: s.opts.ReadOnly})
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

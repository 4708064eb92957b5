package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"edgerelay/providers"
	"edgerelay/relay"
	"edgerelay/schedule"
	"edgerelay/store"
)

// Config is the optional config file (YAML; testdata/edgerelay.yaml is a
// commented example). Flags override it; with neither, every channel is
// printed to stdout by the log provider.
type Config struct {
	DB string `yaml:"db"`
	// Providers names providers: a provider URL, options that would be
	// awkward in it, and limits.
	Providers map[string]ProviderConfig `yaml:"providers"`
	// Routes maps a channel ("email", "sms", … or "*" for the rest) to
	// providers, by name or URL, in failover order.
	Routes map[string]StringList `yaml:"routes"`
	// Types sets per-type delivery semantics.
	Types map[string]TypeConfig `yaml:"types"`
	// Retry is the default retry policy; Channels overrides it per channel.
	Retry    PolicyConfig            `yaml:"retry"`
	Channels map[string]PolicyConfig `yaml:"channels"`
	Dispatch struct {
		Workers int      `yaml:"workers"`
		Lease   Duration `yaml:"lease"`
		// InvalidAddressTTL is how long an address a provider declared
		// dead stays marked (per tenant and channel). Default 30 days.
		InvalidAddressTTL Duration `yaml:"invalid_address_ttl"`
	} `yaml:"dispatch"`
	Limits struct {
		MaxRecipients int `yaml:"max_recipients"`
	} `yaml:"limits"`
	// Tenants: API tokens and routes of their own.
	Tenants map[string]TenantConfig `yaml:"tenants"`
	// Jobs are scheduled jobs, run by serve (and by `edgerelay cron run`).
	// Without a prune job, serve prunes daily what finished 30 days ago.
	Jobs map[string]JobConfig `yaml:"jobs"`
	// Tail lists outbox tables that serve relays (edgerelay tail does one).
	Tail []TailConfig `yaml:"tail"`
	API  struct {
		Listen   string   `yaml:"listen"`
		MaxBody  int64    `yaml:"max_body"`
		MaxBatch int      `yaml:"max_batch"`
		KeyTTL   Duration `yaml:"key_ttl"`
		// BodyTimeout bounds how long a request body may take to arrive.
		BodyTimeout Duration `yaml:"body_timeout"`
		// MaxConns bounds the connections open at once.
		MaxConns int `yaml:"max_conns"`
		// MetricsListen serves GET /metrics, without a token, on an
		// address of its own.
		MetricsListen string `yaml:"metrics_listen"`
		// MetricsToken opens GET /metrics on the API's address; ${VAR}
		// reads an environment variable.
		MetricsToken string `yaml:"metrics_token"`
	} `yaml:"api"`

	path string
	root *yaml.Node // for the line numbers of problems
}

// ProviderConfig is one named provider.
type ProviderConfig struct {
	// URL is a provider URL (edgerelay dispatch --help lists the schemes).
	URL string `yaml:"url"`
	// Options are added to the URL's query: a place for secrets
	// (token: ${RESEND_TOKEN}) and values awkward to escape in a URL.
	Options map[string]string `yaml:"options"`
	// Concurrency, Rate (calls per second) and Burst bound the calls to
	// this provider; 0 is unbounded.
	Concurrency int     `yaml:"concurrency"`
	Rate        float64 `yaml:"rate"`
	Burst       int     `yaml:"burst"`
}

// JobConfig is one scheduled job: a schedule and exactly one kind of work.
type JobConfig struct {
	// Schedule is a cron expression: five fields, or six with seconds
	// first, or @daily, @every 1h …
	Schedule string `yaml:"schedule"`
	// Timezone of the schedule (default UTC), e.g. Europe/Berlin.
	Timezone string `yaml:"timezone"`
	// Missed: skip (default) or run-once: what to do on start about runs
	// missed while nothing ran the schedule.
	Missed string          `yaml:"missed"`
	Digest *DigestJob      `yaml:"digest"`
	Prune  *PruneJob       `yaml:"prune"`
	Batch  *BatchJobConfig `yaml:"batch"`
}

// DigestJob sends each member of an audience their unread feed items.
type DigestJob struct {
	Tenant   string `yaml:"tenant"`
	Audience string `yaml:"audience"`
	Channel  string `yaml:"channel"`
	Subject  string `yaml:"subject"`
	Template string `yaml:"template"`
	MaxItems int    `yaml:"max_items"`
}

// PruneJob deletes what finished long ago.
type PruneJob struct {
	OlderThan string `yaml:"older_than"` // 30d, 2w, 720h
}

// BatchJobConfig sends a batch file on a schedule.
type BatchJobConfig struct {
	File string `yaml:"file"`
}

// TailConfig is one outbox table to relay.
type TailConfig struct {
	Source string   `yaml:"source"` // sqlite:///path/app.db?table=edgerelay_outbox
	Poll   Duration `yaml:"poll"`   // default 1s
}

// TenantConfig is what one tenant configures.
type TenantConfig struct {
	// Tokens authenticate the tenant's API calls; ${VAR} reads an
	// environment variable, so the file need not hold the secret.
	Tokens []string `yaml:"tokens"`
	// Routes override the default routes for this tenant's notifications.
	Routes map[string]StringList `yaml:"routes"`
}

// TypeConfig is what a notification type (or purpose) chooses.
type TypeConfig struct {
	// Delivery: at-least-once (default) or at-most-once, for providers
	// that do not honour idempotency keys.
	Delivery string `yaml:"delivery"`
	// Retry overrides the retry policy for this type.
	Retry *PolicyConfig `yaml:"retry"`
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

// StringList reads one string or a list of them.
type StringList []string

func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = StringList{n.Value}
		return nil
	}
	var xs []string
	if err := n.Decode(&xs); err != nil {
		return err
	}
	*l = xs
	return nil
}

// ConfigError lists every problem found in a config file, each with its
// place, so one run of `edgerelay config check` shows them all.
type ConfigError struct {
	Path     string
	Problems []string
}

func (e *ConfigError) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("config %s: %s", e.Path, e.Problems[0])
	}
	return fmt.Sprintf("config %s: %d problems:\n  %s", e.Path, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// loadConfig reads and checks a config file: unknown keys, bad values,
// unset ${VAR}s, routes to providers that do not exist. Provider URLs are
// checked when they are built (see build).
func loadConfig(path string) (*Config, error) {
	cfg, problems, err := parseConfig(path)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Path: path, Problems: problems}
	}
	return cfg, nil
}

// parseConfig reads a config file and lists its problems. The error is for
// a file that cannot be read or is not YAML; cfg is nil only then or when
// the YAML does not fit the format.
func parseConfig(path string) (*Config, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	cfg := &Config{path: path, root: &yaml.Node{}}
	if err := yaml.Unmarshal(b, cfg.root); err != nil {
		return nil, nil, &ConfigError{Path: path, Problems: []string{err.Error()}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelt "rotues" must not silently route nothing
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, te.Errors, nil
		}
		return nil, nil, &ConfigError{Path: path, Problems: []string{err.Error()}}
	}
	var problems []string
	add := func(keys []string, format string, args ...any) {
		problems = append(problems, cfg.at(keys...)+": "+fmt.Sprintf(format, args...))
	}
	for _, t := range sortedKeys(cfg.Tenants) {
		if !validName(t) {
			add([]string{"tenants", t}, "tenant name %q: use 1 to 64 letters, digits, '.', '_' or '-'", t)
		}
		for i, tok := range cfg.Tenants[t].Tokens {
			v, err := expandEnv(tok)
			switch {
			case err != nil:
				add([]string{"tenants", t, "tokens"}, "tokens[%d]: %v", i, err)
			case len(v) < 16:
				add([]string{"tenants", t, "tokens"}, "tokens[%d]: shorter than 16 characters", i)
			default:
				cfg.Tenants[t].Tokens[i] = v
			}
		}
		cfg.checkRoutes(cfg.Tenants[t].Routes, add, "tenants", t, "routes")
	}
	cfg.checkRoutes(cfg.Routes, add, "routes")
	for _, t := range sortedKeys(cfg.Types) {
		if d := cfg.Types[t].Delivery; d != "" {
			if _, err := relay.ParseMode(d); err != nil {
				add([]string{"types", t, "delivery"}, "%v", err)
			}
		}
	}
	for _, name := range sortedKeys(cfg.Jobs) {
		jc := cfg.Jobs[name]
		at := []string{"jobs", name}
		if _, err := schedule.Parse(jc.Schedule, jc.Timezone); err != nil {
			add(at, "%v", err)
		}
		switch schedule.Missed(jc.Missed) {
		case "", schedule.MissedSkip, schedule.MissedRunOnce:
		default:
			add(at, "missed %q: want skip or run-once", jc.Missed)
		}
		kinds := 0
		for _, set := range []bool{jc.Digest != nil, jc.Prune != nil, jc.Batch != nil} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			add(at, "a job does exactly one of digest, prune or batch")
		}
		if d := jc.Digest; d != nil && (d.Audience == "" || d.Channel == "") {
			add(append(at, "digest"), "a digest needs an audience and a channel")
		}
		if p := jc.Prune; p != nil {
			if _, err := relay.ParseAge(p.OlderThan); err != nil {
				add(append(at, "prune"), "older_than: %v", err)
			}
		}
		if b := jc.Batch; b != nil && b.File == "" {
			add(append(at, "batch"), "a batch job needs a file")
		}
	}
	for i, tc := range cfg.Tail {
		if tc.Source == "" {
			add([]string{"tail"}, "tail[%d]: source is required", i)
		} else if _, err := expandEnv(tc.Source); err != nil {
			add([]string{"tail"}, "tail[%d]: %v", i, err)
		}
	}
	cfg.checkAPI(add)
	for _, name := range sortedKeys(cfg.Providers) {
		pc := cfg.Providers[name]
		if pc.URL == "" {
			add([]string{"providers", name}, "provider %q has no url", name)
		}
		if pc.Concurrency < 0 || pc.Rate < 0 || pc.Burst < 0 {
			add([]string{"providers", name}, "concurrency, rate and burst cannot be negative")
		}
	}
	return cfg, problems, nil
}

// checkAPI checks the api: section: a size, count or duration that is set
// must be positive (zero is not "the default": leave the key out for that),
// an address must be host:port, a metrics token long enough to guess at
// no better than an API token.
func (cfg *Config) checkAPI(add func([]string, string, ...any)) {
	a := &cfg.API
	for _, n := range []struct {
		key string
		bad bool
	}{
		{"max_body", a.MaxBody <= 0}, {"max_batch", a.MaxBatch <= 0}, {"key_ttl", a.KeyTTL <= 0},
		{"body_timeout", a.BodyTimeout <= 0}, {"max_conns", a.MaxConns <= 0},
	} {
		if n.bad && cfg.has("api", n.key) {
			add([]string{"api", n.key}, "%s must be positive (leave it out for the default)", n.key)
		}
	}
	for _, n := range []struct{ key, addr string }{{"listen", a.Listen}, {"metrics_listen", a.MetricsListen}} {
		if _, _, err := net.SplitHostPort(n.addr); err != nil && cfg.has("api", n.key) {
			add([]string{"api", n.key}, "%s %q: want HOST:PORT (%v)", n.key, n.addr, err)
		}
	}
	if cfg.has("api", "metrics_token") {
		v, err := expandEnv(a.MetricsToken)
		switch {
		case err != nil:
			add([]string{"api", "metrics_token"}, "metrics_token: %v", err)
		case len(v) < 16:
			add([]string{"api", "metrics_token"}, "metrics_token: shorter than 16 characters")
		default:
			a.MetricsToken = v
		}
	}
}

// has reports whether the file sets the key at keys.
func (cfg *Config) has(keys ...string) bool {
	n := cfg.root
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n != nil
}

// checkRoutes checks that each route names known providers or URLs.
func (cfg *Config) checkRoutes(routes map[string]StringList, add func([]string, string, ...any), at ...string) {
	for _, ch := range sortedKeys(routes) {
		keys := append(append([]string{}, at...), ch)
		if len(routes[ch]) == 0 {
			add(keys, "route %q lists no provider", ch)
		}
		for _, ref := range routes[ch] {
			if _, ok := cfg.Providers[ref]; !ok && !strings.Contains(ref, "://") {
				add(keys, "route %q: no provider named %q (define it under providers:, or give a provider URL)", ch, ref)
			}
		}
	}
}

// at describes a place in the file: "line 12 (routes.email)".
func (cfg *Config) at(keys ...string) string {
	n := cfg.root
	line := 0
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			break
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line, next = n.Content[i].Line, n.Content[i+1]
				break
			}
		}
		n = next
	}
	where := strings.Join(keys, ".")
	if line > 0 {
		return fmt.Sprintf("line %d (%s)", line, where)
	}
	return where
}

// build makes the providers the config and the flag routes name, each once,
// and resolves the routes. flagRoutes (channel → providers by name or URL)
// replace the file's route for their channels.
func (cfg *Config) build(flagRoutes map[string][]string) (relay.Routes, map[string]relay.Routes, map[string]relay.Limit, error) {
	made := map[string]providers.Provider{}
	limits := map[string]relay.Limit{}
	var problems []string
	tried := map[string]bool{} // each provider is built (and its problem reported) once
	provider := func(ref string, at []string) providers.Provider {
		if tried[ref] {
			return made[ref]
		}
		tried[ref] = true
		if _, named := cfg.Providers[ref]; !named && !strings.Contains(ref, "://") {
			return nil // neither a provider name nor a URL: loadConfig reports it
		}
		var p providers.Provider
		var err error
		if pc, ok := cfg.Providers[ref]; ok {
			p, err = newNamedProvider(ref, pc)
			at = []string{"providers", ref}
			if err == nil {
				limits[p.Name()] = relay.Limit{Concurrency: pc.Concurrency, Rate: pc.Rate, Burst: pc.Burst}
			}
		} else {
			var u string
			if u, err = expandEnv(ref); err == nil {
				p, err = providers.New(u)
			}
		}
		if err != nil {
			problems = append(problems, cfg.at(at...)+": "+err.Error())
			return nil
		}
		made[ref] = p
		return p
	}
	resolve := func(routes map[string]StringList, at ...string) relay.Routes {
		out := relay.Routes{}
		for _, ch := range sortedKeys(routes) {
			for _, ref := range routes[ch] {
				if p := provider(ref, append(append([]string{}, at...), ch)); p != nil {
					out[ch] = append(out[ch], p)
				}
			}
		}
		return out
	}
	file := map[string]StringList{}
	for ch, refs := range cfg.Routes {
		file[ch] = refs
	}
	for ch, refs := range flagRoutes {
		file[ch] = refs // a flag replaces the file's route for its channel
	}
	routes := resolve(file, "routes")
	tenants := map[string]relay.Routes{}
	for _, t := range sortedKeys(cfg.Tenants) {
		if rs := cfg.Tenants[t].Routes; len(rs) > 0 {
			tenants[t] = resolve(rs, "tenants", t, "routes")
		}
	}
	// Providers defined but used by no route are built too, so that `config
	// check` finds their problems before a route starts using them.
	for _, name := range sortedKeys(cfg.Providers) {
		provider(name, []string{"providers", name})
	}
	if len(problems) > 0 {
		return nil, nil, nil, &ConfigError{Path: cfg.path, Problems: problems}
	}
	return routes, tenants, limits, nil
}

// newNamedProvider builds a provider from its config: ${VAR}s expanded,
// options added to the URL's query, and the provider's name set to its
// config name (receipts are posted to /v1/receipts/NAME, and status
// counts are kept by it).
func newNamedProvider(name string, pc ProviderConfig) (providers.Provider, error) {
	raw, err := expandEnv(pc.URL)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url: %s", providers.Redact(raw))
	}
	q := u.Query()
	for _, k := range sortedKeys(pc.Options) {
		v, err := expandEnv(pc.Options[k])
		if err != nil {
			return nil, fmt.Errorf("options.%s: %w", k, err)
		}
		q.Set(k, v)
	}
	if !q.Has("name") {
		q.Set("name", name)
	}
	u.RawQuery = q.Encode()
	return providers.New(u.String())
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// defaultPrune is the prune serve runs when the config declares none.
var defaultPrune = JobConfig{Schedule: "@daily", Prune: &PruneJob{OlderThan: "30d"}}

// serveJobs are the jobs serve runs: the config's, plus the daily prune
// when the config has no prune job.
func (cfg *Config) serveJobs(r *relay.Relay) ([]*schedule.Job, error) {
	for _, jc := range cfg.Jobs {
		if jc.Prune != nil {
			return cfg.jobs(r)
		}
	}
	c := *cfg
	c.Jobs = map[string]JobConfig{"default-prune": defaultPrune}
	for k, v := range cfg.Jobs {
		c.Jobs[k] = v
	}
	return c.jobs(r)
}

// jobs builds the scheduled jobs of the config for r.
func (cfg *Config) jobs(r *relay.Relay) ([]*schedule.Job, error) {
	var out []*schedule.Job
	for _, name := range sortedKeys(cfg.Jobs) {
		jc := cfg.Jobs[name]
		sched, err := schedule.Parse(jc.Schedule, jc.Timezone)
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", name, err)
		}
		j := &schedule.Job{Name: name, Schedule: sched, Missed: schedule.Missed(jc.Missed)}
		switch {
		case jc.Digest != nil:
			d := jc.Digest
			if j.Run, err = schedule.Digest(r, name, schedule.DigestConfig{Tenant: d.Tenant, Audience: d.Audience, Channel: d.Channel,
				Subject: d.Subject, Template: d.Template, MaxItems: d.MaxItems}); err != nil {
				return nil, err
			}
		case jc.Prune != nil:
			age, err := relay.ParseAge(jc.Prune.OlderThan)
			if err != nil {
				return nil, fmt.Errorf("job %s: %w", name, err)
			}
			j.Run = func(ctx context.Context, _ store.JobRun) (schedule.Outcome, error) {
				res, err := r.Prune(ctx, age)
				return schedule.Outcome{Note: fmt.Sprintf("pruned what finished more than %s ago: %d notifications, %d events, %d feed items",
					res.OlderThan, res.Notifications, res.Events, res.FeedItems)}, err
			}
		case jc.Batch != nil:
			j.Run = batchJob(r, name, jc.Batch.File)
		}
		out = append(out, j)
	}
	return out, nil
}

package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
	"github.com/edgerelay/edgerelay/templates"
	"github.com/edgerelay/edgerelay/workflow"
)

// Config is the optional config file (YAML; the repository's
// testdata/edgerelay.yaml is a commented example). The commands' flags
// override it; with neither, every channel is printed to stdout by the log
// provider.
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
	// Categories and TenantCategories: see categories.go.
	Categories       map[string]CategoryConfig            `yaml:"categories"`
	TenantCategories map[string]map[string]CategoryConfig `yaml:"tenant_categories"`
	// Retry is the default retry policy; Channels overrides it per channel.
	Retry    PolicyConfig            `yaml:"retry"`
	Channels map[string]PolicyConfig `yaml:"channels"`
	Dispatch struct {
		Workers int      `yaml:"workers"`
		Lease   Duration `yaml:"lease"`
		// InvalidAddressTTL is the old name of suppression.hard_bounce_ttl,
		// still read so that older files keep working.
		InvalidAddressTTL Duration `yaml:"invalid_address_ttl"`
	} `yaml:"dispatch"`
	// Suppression: how long entries of the tenants' suppression lists
	// last. HardBounceTTL (hard bounces, complaints): 0, until removed;
	// SoftBounceTTL: default 72h.
	Suppression struct {
		HardBounceTTL Duration `yaml:"hard_bounce_ttl"`
		SoftBounceTTL Duration `yaml:"soft_bounce_ttl"`
	} `yaml:"suppression"`
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
		Listen string `yaml:"listen"`
		// PublicURL is where providers and recipients reach the API
		// (https://relay.example.com): receipt signatures cover it, and
		// recipients' links (unsubscribe, preferences) point under it.
		PublicURL string   `yaml:"public_url"`
		MaxBody   int64    `yaml:"max_body"`
		MaxBatch  int      `yaml:"max_batch"`
		KeyTTL    Duration `yaml:"key_ttl"`
		// BodyTimeout bounds how long a request body may take to arrive.
		BodyTimeout Duration `yaml:"body_timeout"`
		// MaxConns bounds the connections open at once.
		MaxConns int `yaml:"max_conns"`
		// MetricsListen serves GET /metrics, without a token, on an
		// address of its own.
		MetricsListen string `yaml:"metrics_listen"`
		// ConsoleListen serves the console on an address of its own too
		// (it is always at /console on the API's address).
		ConsoleListen string `yaml:"console_listen"`
		// TrustedProxies are the proxies in front of serve (CIDRs or
		// addresses): their X-Forwarded-Proto and X-Forwarded-For are
		// believed (the console's Secure cookie, the client's address).
		TrustedProxies []string `yaml:"trusted_proxies"`
		// MetricsToken opens GET /metrics on the API's address; ${VAR}
		// reads an environment variable.
		MetricsToken string `yaml:"metrics_token"`
		// ShedAbove refuses new events (503 overloaded) while more than
		// this many notifications are due and unclaimed; 0 turns it off.
		ShedAbove *int64 `yaml:"shed_above"`
		// ShedBehind refuses new events the same way while delivery is
		// further behind than this (what it claims had been due longer);
		// 0 turns it off.
		ShedBehind *Duration `yaml:"shed_behind"`
		// StreamsPerUser and StreamsPerTenant bound the feed streams open
		// on one process; StreamHeartbeat and StreamSweep are their
		// periods (serve's --streams-per-user … flags).
		StreamsPerUser   int      `yaml:"streams_per_user"`
		StreamsPerTenant int      `yaml:"streams_per_tenant"`
		StreamHeartbeat  Duration `yaml:"stream_heartbeat"`
		StreamSweep      Duration `yaml:"stream_sweep"`
	} `yaml:"api"`

	// Templates render the messages of events that bring no subject or
	// body (the templates package; README "Templates").
	Templates TemplatesConfig `yaml:"templates"`
	// Workflows are workflows per event type (docs/workflows.md), each
	// for one tenant; the API cannot change these.
	Workflows []WorkflowConfig `yaml:"workflows"`

	path      string
	templates *templates.Set                // loaded and compiled by validate
	shape     *shape                        // where each key is, for the line numbers of problems
	made      map[string]providers.Provider // by reference (a provider name, or a URL in a route): built once
	tailSpecs []*sources.Spec               // TailSpecs; nil where the URL is a problem
}

// WorkflowConfig is one workflow of the file: package workflow's
// Definition, for a tenant ("default" when not set).
type WorkflowConfig struct {
	Tenant    string          `yaml:"tenant"`
	Type      string          `yaml:"type"`
	CancelKey string          `yaml:"cancel_key"`
	Steps     []workflow.Step `yaml:"steps"`
}

func (w WorkflowConfig) definition() workflow.Definition {
	return workflow.Definition{Type: w.Type, CancelKey: w.CancelKey, Steps: w.Steps}
}

func (w WorkflowConfig) tenant() string {
	if w.Tenant == "" {
		return "default"
	}
	return w.Tenant
}

// TemplatesConfig names the directory of message templates
// (DIR/NAME/LOCALE/CHANNEL.PART.tmpl) and the locale of recipients that
// have no translation of their own.
type TemplatesConfig struct {
	// Dir is relative to the config file's directory.
	Dir           string `yaml:"dir"`
	DefaultLocale string `yaml:"default_locale"`
	// Refresh is how often serve looks for templates stored over the API
	// by another process (one read of one row): the bound on how long a
	// change takes to reach this node's accepts. Default 1 s.
	Refresh Duration `yaml:"refresh"`
}

// ProviderConfig is one named provider.
type ProviderConfig struct {
	// URL is a provider URL (edgerelay dispatch --help lists the schemes).
	URL string `yaml:"url"`
	// Options are added to the URL's query: a place for secrets
	// (token: ${RESEND_TOKEN}) and values awkward to escape in a URL.
	Options map[string]string `yaml:"options"`
	// Concurrency is the ceiling of the provider's window of calls in
	// flight (0: its kind's default, providers.Concurrency); Rate (calls
	// per second) and Burst bound its calls per second (0: unbounded).
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
	// Commercial marks the type's email as commercial (a newsletter, an
	// offer; not a receipt): smtp providers give it List-Unsubscribe and
	// List-Unsubscribe-Post (their list_unsubscribe=). Commercial mail is
	// named here, by type: a category says whether recipients may turn it
	// off, not whether it is commercial.
	Commercial bool `yaml:"commercial"`
	// Category names the type's category (categories:), which decides
	// whether recipients may turn it off.
	Category string `yaml:"category"`
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

// UnmarshalYAML returns a *yaml.TypeError so that the decoder goes on to
// the rest of the file; the walk in yaml.go reports the problem
// with its place.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write e.g. 90s, 15m, 12h)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return v, nil
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

// Error lists every problem found in a config file, each with its place,
// so one run of `edgerelay config check` shows them all.
type Error struct {
	Path     string
	Problems []string
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("config %s: %s", e.Path, e.Problems[0])
	}
	return fmt.Sprintf("config %s: %d problems:\n  %s", e.Path, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// Load reads a config file and validates it completely: every command
// that reads the config calls it, so what one refuses the others refuse
// too. flagRoutes are the --route flags (channel → providers): they count
// as routes when a channel's route is checked. It reaches no tail:
// source's database (their URLs are checked; serve opens them). A file
// with problems is an *Error that lists them all.
func Load(path string, flagRoutes map[string][]string) (*Config, error) {
	return load(path, flagRoutes, false)
}

// Check is Load for config check: it also opens each tail: source
// (reachTails), a failure a problem of the file.
func Check(path string) (*Config, error) {
	return load(path, nil, true)
}

func load(path string, flagRoutes map[string][]string, reach bool) (*Config, error) {
	cfg, problems, err := readConfig(path, flagRoutes, reach)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &Error{Path: path, Problems: problems}
	}
	return cfg, nil
}

// readConfig reads a config file and lists every problem, in line order:
// unknown keys and values of the wrong kind (yaml.go), then what validate
// finds in the values, then (with reach) the tail: sources that cannot be
// opened. The error is for a file that cannot be read or is not YAML (an
// *Error with the one problem); otherwise cfg is what could be decoded.
func readConfig(path string, flagRoutes map[string][]string, reach bool) (*Config, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	notYAML := func(err error) error {
		return &Error{Path: path, Problems: []string{strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, notYAML(err)
	}
	cfg := &Config{path: path, shape: newShape(), made: map[string]providers.Provider{}}
	sh := cfg.shape
	partial := false
	if len(root.Content) > 0 {
		// The decoder first: it refuses what the walk must not meet (an
		// alias that contains itself, excessive aliasing). Values that do
		// not fit are left unset and reported by the walk.
		var te *yaml.TypeError
		if err := root.Decode(cfg); err != nil && !errors.As(err, &te) {
			// A value that refused its text (a workflow's duration)
			// stops the decoder: the walk says where, and nothing is
			// checked of a config decoded part way.
			sh.walk(root.Content[0], reflect.TypeFor[Config](), nil)
			if len(sh.problems) == 0 {
				return nil, nil, notYAML(err)
			}
			partial = true
		} else {
			sh.walk(root.Content[0], reflect.TypeFor[Config](), nil)
		}
		if te != nil && len(sh.problems) == 0 {
			// The walk should have found these; never let one pass.
			for _, e := range te.Errors {
				sh.problems = append(sh.problems, problem{msg: strings.TrimPrefix(e, "yaml: ")})
			}
		}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		sh.problems = append(sh.problems, problem{line: line, msg: "a second YAML document (after ---) would be ignored: keep the config in one"})
	case !errors.Is(err, io.EOF):
		sh.problems = append(sh.problems, problem{msg: strings.TrimPrefix(err.Error(), "yaml: ")})
	}
	all := sh.problems
	if !partial {
		all = append(all, cfg.validate(flagRoutes)...)
	}
	if reach && !partial {
		all = append(all, cfg.reachTails(context.Background())...)
	}
	// In line order; problems with no line (none expected) last.
	sort.SliceStable(all, func(i, j int) bool {
		li, lj := all[i].line, all[j].line
		return li != lj && (lj == 0 || (li != 0 && li < lj))
	})
	problems := make([]string, len(all))
	for i, p := range all {
		problems[i] = p.String()
	}
	return cfg, problems, nil
}

// Build resolves the routes: the file's, with flagRoutes (channel →
// providers by name or URL, from --route) replacing the file's route for
// their channels. The file's providers were built by validate; a URL in a
// flag is built here, once.
func (cfg *Config) Build(flagRoutes map[string][]string) (relay.Routes, map[string]relay.Routes, map[string]relay.Limit, error) {
	if cfg.made == nil {
		cfg.made = map[string]providers.Provider{}
	}
	var problems []error
	resolve := func(routes map[string]StringList, fromFlag bool) relay.Routes {
		out := relay.Routes{}
		for _, ch := range sortedKeys(routes) {
			for _, ref := range routes[ch] {
				p, ok := cfg.made[ref]
				switch {
				case ok:
				case !fromFlag:
					continue // validate refused the file: Load does not return it
				case !strings.Contains(ref, "://"):
					problems = append(problems, fmt.Errorf("--route %s=%s: no provider named %q (define it under providers: in --config, or give a provider URL)", ch, ref, ref))
					continue
				default:
					u, err := expandEnv(ref)
					if err == nil {
						p, err = providers.New(u)
					}
					if err != nil {
						problems = append(problems, fmt.Errorf("--route %s: %w", ch, err))
						continue
					}
					cfg.made[ref] = p // a URL given twice is one provider
				}
				out[ch] = append(out[ch], p)
			}
		}
		return out
	}
	routes := resolve(cfg.Routes, false)
	flags := map[string]StringList{}
	for ch, refs := range flagRoutes {
		flags[ch] = refs
	}
	for ch, ps := range resolve(flags, true) {
		routes[ch] = ps // a flag replaces the file's route for its channel
	}
	tenants := map[string]relay.Routes{}
	for _, t := range sortedKeys(cfg.Tenants) {
		if rs := cfg.Tenants[t].Routes; len(rs) > 0 {
			tenants[t] = resolve(rs, false)
		}
	}
	if len(problems) > 0 { // every one so far is a --route's
		return nil, nil, nil, &FlagError{errors.Join(problems...)}
	}
	if problems := cfg.markCommercial(); len(problems) > 0 {
		return nil, nil, nil, errors.Join(problems...)
	}
	limits := map[string]relay.Limit{}
	for _, name := range sortedKeys(cfg.Providers) {
		if p := cfg.made[name]; p != nil {
			pc := cfg.Providers[name]
			limits[p.Name()] = relay.Limit{Concurrency: pc.Concurrency, Rate: pc.Rate, Burst: pc.Burst}
		}
	}
	return routes, tenants, limits, nil
}

// commercialTypes are the types (or purposes) marked commercial, sorted.
func (cfg *Config) commercialTypes() []string {
	var out []string
	for _, t := range sortedKeys(cfg.Types) {
		if cfg.Types[t].Commercial {
			out = append(out, t)
		}
	}
	return out
}

// markCommercial tells every built provider that marks commercial mail
// which types are commercial. One without a List-Unsubscribe for them is
// an error: validate refuses the file's, so here it is a --route flag's.
func (cfg *Config) markCommercial() []error {
	types := cfg.commercialTypes()
	var problems []error
	for _, ref := range sortedKeys(cfg.made) {
		cs, ok := cfg.made[ref].(providers.CommercialSender)
		if !ok {
			continue
		}
		cs.SetCommercial(types)
		if len(types) > 0 && !cs.Unsubscribes() {
			problems = append(problems, errors.New(noUnsubscribe(types[0], cs.Name())))
		}
	}
	return problems
}

// noUnsubscribe says that provider would send commercial mail without a
// way to unsubscribe.
func noUnsubscribe(typ, provider string) string {
	return fmt.Sprintf("type %q is commercial, but provider %q would send it without List-Unsubscribe "+
		"(set list_unsubscribe=https://…/{key} in its URL; RFC 8058)", typ, provider)
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

// FlagError is a --route that names no provider or a provider URL that
// cannot be made: a mistake in the command line (exit 2), not in the file.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

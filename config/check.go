package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgerelay/edgerelay/batch"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
	"github.com/edgerelay/edgerelay/sources"
	"github.com/edgerelay/edgerelay/templates"
	"github.com/edgerelay/edgerelay/workflow"
)

// Defaults of the api: keys, which are serve's flag defaults too: the
// message for a key refused at zero says what leaving it out gives.
const (
	DefaultMaxBody     = 1 << 20
	DefaultMaxBatch    = 100
	DefaultKeyTTL      = 24 * time.Hour
	DefaultBodyTimeout = 10 * time.Second
	DefaultMaxConns    = 1024
	DefaultShedAbove   = 100000
	DefaultShedBehind  = 5 * time.Second
)

// Defaults of the other keys refused at zero: the dispatch and limits ones
// are relay.New's.
const (
	defaultWorkers       = relay.DefaultWorkers
	defaultLease         = time.Minute
	defaultMaxRecipients = 10000
	defaultDigestItems   = 50
	defaultTailPoll      = time.Second
)

// standardChannels have an address field of their own in a recipient
// (relay.Recipient): a retry policy may name them without a route.
var standardChannels = []string{"email", "sms", "push", "webhook"}

// checker collects the problems of a decoded config.
type checker struct {
	cfg        *Config
	sh         *shape
	flagRoutes map[string][]string
	problems   []problem
}

// validate checks a decoded config completely: values in range (a value
// the config cannot hold is refused, not replaced by a default), names and
// cross-references (routes to providers, channels with routes, one kind
// per job), schedules and time zones, digest templates (parsed and run on
// a sample), batch files (present, readable, of a known format), tail
// sources (their URLs; reachTails opens them), and every provider
// built (each once; Build reuses them). Problems under a value the walk
// found of the wrong kind are not reported twice.
func (cfg *Config) validate(flagRoutes map[string][]string) []problem {
	c := &checker{cfg: cfg, sh: cfg.shape, flagRoutes: flagRoutes}
	if c.has("db") && cfg.DB == "" {
		c.add(keyPath{"db"}, "db is empty (leave it out for ./edgerelay.db)")
	}
	c.providers()
	c.routes(cfg.Routes, keyPath{"routes"})
	c.tenants()
	c.commercial()
	c.categories()
	for _, t := range sortedKeys(cfg.Types) {
		at := keyPath{"types", t}
		tc := cfg.Types[t]
		if tc.Delivery != "" {
			if _, err := relay.ParseMode(tc.Delivery); err != nil {
				c.add(at.with("delivery"), "%v", err)
			}
		}
		if tc.Retry != nil {
			c.policy(*tc.Retry, at.with("retry"))
		}
	}
	c.policy(cfg.Retry, keyPath{"retry"})
	for _, ch := range sortedKeys(cfg.Channels) {
		at := keyPath{"channels", ch}
		if known := c.channelNames(); !slices.Contains(known, ch) {
			msg := fmt.Sprintf("no route serves channel %q", ch)
			if m, ok := closest(ch, known); ok {
				msg += fmt.Sprintf(" (did you mean `%s`?)", m)
			} else {
				msg += " (give it a route of its own under routes:)"
			}
			c.add(at, "%s", msg)
		}
		c.policy(cfg.Channels[ch], at)
	}
	d := cfg.Dispatch
	c.positive(keyPath{"dispatch", "workers"}, d.Workers <= 0, d.Workers, defaultWorkers)
	c.positive(keyPath{"dispatch", "lease"}, d.Lease <= 0, time.Duration(d.Lease), defaultLease)
	c.positive(keyPath{"dispatch", "invalid_address_ttl"}, d.InvalidAddressTTL <= 0, time.Duration(d.InvalidAddressTTL), "suppression.hard_bounce_ttl's")
	if sp := cfg.Suppression; sp.HardBounceTTL < 0 {
		c.add(keyPath{"suppression", "hard_bounce_ttl"}, "%s: want 0 (until removed) or a positive duration", time.Duration(sp.HardBounceTTL))
	}
	c.positive(keyPath{"suppression", "soft_bounce_ttl"}, cfg.Suppression.SoftBounceTTL <= 0, time.Duration(cfg.Suppression.SoftBounceTTL), relay.DefaultSoftBounceTTL)
	c.positive(keyPath{"limits", "max_recipients"}, cfg.Limits.MaxRecipients <= 0, cfg.Limits.MaxRecipients, defaultMaxRecipients)
	c.jobs()
	c.tail()
	c.api()
	c.templates()
	c.workflows()
	return c.problems
}

// fieldPath is a workflow problem's field ("delay.until", "channels[1]")
// as key path elements.
func fieldPath(f string) []string {
	var out []string
	for _, part := range strings.Split(f, ".") {
		if name, idx, ok := strings.Cut(part, "["); ok {
			out = append(out, name, "["+idx)
			continue
		}
		out = append(out, part)
	}
	return out
}

// workflows checks each workflow as the API checks one (relay's
// CheckWorkflowDefinition) against the channels the file and the flags
// route, each problem at its step and field; a tenant's type is defined
// once.
func (c *checker) workflows() {
	seen := map[string]int{}
	for i, w := range c.cfg.Workflows {
		at := keyPath{"workflows", "[" + strconv.Itoa(i) + "]"}
		if w.Tenant != "" && !ValidName(w.Tenant) {
			c.add(at.with("tenant"), "%q: use 1 to 64 letters, digits, '.', '_' or '-'", w.Tenant)
			continue
		}
		k := w.tenant() + "\x00" + w.Type
		if j, dup := seen[k]; dup && w.Type != "" {
			c.add(at.with("type"), "%q is defined for tenant %s by workflows[%d] already", w.Type, w.tenant(), j)
			continue
		}
		seen[k] = i
		opts := workflow.Options{Channels: []string{relay.InAppChannel}}
		for _, ch := range c.channelNames() {
			if ok, _ := c.routed(w.tenant(), ch); ok {
				opts.Channels = append(opts.Channels, ch)
			}
		}
		for _, st := range w.Steps {
			for _, ch := range st.Channels {
				if ok, _ := c.routed(w.tenant(), ch); ok && !slices.Contains(opts.Channels, ch) {
					opts.Channels = append(opts.Channels, ch) // a "*" route serves it
				}
			}
		}
		_, err := relay.CheckWorkflowDefinition(w.definition(), opts)
		var we *relay.WorkflowError
		if !errors.As(err, &we) {
			if err != nil {
				c.add(at, "%v", err)
			}
			continue
		}
		for _, p := range we.Problems {
			where := at
			if p.Step >= 0 {
				where = at.with("steps", "["+strconv.Itoa(p.Step)+"]")
			}
			c.add(where.with(fieldPath(p.Field)...), "%s", p.Msg)
		}
	}
}

// templates loads and compiles every message template: a file that does
// not parse is named with its line.
func (c *checker) templates() {
	tc := c.cfg.Templates
	at := keyPath{"templates"}
	if tc.Dir == "" {
		if tc.DefaultLocale != "" {
			// No files, but stored templates (the API's) use the locale.
			set, err := templates.NewSet(tc.DefaultLocale, nil)
			if err != nil {
				c.add(at.with("default_locale"), "%v", err)
				return
			}
			c.cfg.templates = set
		}
		return
	}
	dir := tc.Dir
	if !filepath.IsAbs(dir) && c.cfg.path != "" {
		dir = filepath.Join(filepath.Dir(c.cfg.path), dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		c.add(at.with("dir"), "%s is not a directory (relative to the config file's)", dir)
		return
	}
	set, err := templates.LoadDir(dir, tc.DefaultLocale)
	if err != nil {
		c.add(at.with("dir"), "%v", err)
		return
	}
	c.cfg.templates = set
}

// add records a problem at a place; the line is the key's, or its
// nearest enclosing key's when the key is missing. Nothing is added under a
// value that was of the wrong kind, or under a key that a misspelt one was
// taken for: the walk said so already.
func (c *checker) add(at keyPath, format string, args ...any) {
	for i := len(at); i > 0; i-- {
		if id := at[:i].id(); c.sh.bad[id] || c.sh.meant[id] {
			return
		}
	}
	c.problems = append(c.problems, problem{line: c.line(at), path: at.String(), msg: fmt.Sprintf(format, args...)})
}

func (c *checker) line(at keyPath) int {
	for i := len(at); i > 0; i-- {
		if l, ok := c.sh.lines[at[:i].id()]; ok {
			return l
		}
	}
	return 0
}

// has reports whether the file sets the key at path.
func (c *checker) has(path ...string) bool {
	_, ok := c.sh.lines[keyPath(path).id()]
	return ok
}

// positive refuses a key that is set to a value the config cannot hold:
// zero is not "the default" (leave the key out for that).
func (c *checker) positive(at keyPath, bad bool, got, def any) {
	if bad && c.has(at...) {
		c.add(at, "%s must be positive, got %v (leave it out for the default, %v)", at[len(at)-1], got, def)
	}
}

func (c *checker) policy(p PolicyConfig, at keyPath) {
	def := relay.DefaultPolicy
	c.positive(at.with("max_attempts"), p.MaxAttempts <= 0, p.MaxAttempts, def.MaxAttempts)
	c.positive(at.with("max_age"), p.MaxAge <= 0, time.Duration(p.MaxAge), def.MaxAge)
	c.positive(at.with("base_delay"), p.BaseDelay <= 0, time.Duration(p.BaseDelay), def.BaseDelay)
	c.positive(at.with("max_delay"), p.MaxDelay <= 0, time.Duration(p.MaxDelay), def.MaxDelay)
	base := def.BaseDelay
	if p.BaseDelay > 0 {
		base = time.Duration(p.BaseDelay)
	}
	if p.MaxDelay > 0 && time.Duration(p.MaxDelay) < base {
		c.add(at.with("max_delay"), "max_delay %s is below base_delay %s", time.Duration(p.MaxDelay), base)
	}
}

// providers builds every named provider, so that a problem with one is
// found before a route starts using it.
func (c *checker) providers() {
	for _, name := range sortedKeys(c.cfg.Providers) {
		at := keyPath{"providers", name}
		pc := c.cfg.Providers[name]
		for _, n := range []struct {
			key, zero string
			neg       bool
		}{{"concurrency", "the default of the provider's kind", pc.Concurrency < 0}, {"rate", "unbounded", pc.Rate < 0}, {"burst", "unbounded", pc.Burst < 0}} {
			if n.neg {
				c.add(at.with(n.key), "%s cannot be negative (0 is %s)", n.key, n.zero)
			}
		}
		if pc.Burst > 0 && pc.Rate == 0 {
			c.add(at.with("burst"), "burst has no effect without rate")
		}
		if pc.URL == "" {
			c.add(at.with("url"), "provider %q has no url", name)
			continue
		}
		if c.sh.badUnder(at) {
			continue
		}
		p, err := newNamedProvider(name, pc)
		if err != nil {
			c.add(at, "%v", err)
			continue
		}
		c.made(name, p, at)
	}
}

// commercial refuses a commercial type while a provider that marks
// commercial mail has no List-Unsubscribe to give it: routes are per
// channel, not per type, so any such provider may carry that mail.
func (c *checker) commercial() {
	types := c.cfg.commercialTypes()
	if len(types) == 0 {
		return
	}
	at := keyPath{"types", types[0], "commercial"}
	for _, ref := range sortedKeys(c.cfg.made) {
		if cs, ok := c.cfg.made[ref].(providers.CommercialSender); ok && !cs.Unsubscribes() {
			c.add(at, "%s", noUnsubscribe(types[0], cs.Name()))
		}
	}
}

// made keeps a built provider, refusing a second provider with the same
// name: receipts, limits and status counts find a provider by its name
// (the relay refuses it too, at start).
func (c *checker) made(ref string, p providers.Provider, at keyPath) {
	for other, q := range c.cfg.made {
		if q.Name() == p.Name() {
			where := "routes"
			if _, ok := c.cfg.Providers[other]; ok {
				where = "providers." + other
			}
			c.add(at, "provider name %q is taken by %s: give each its own name (name= in its URL)", p.Name(), where)
			return
		}
	}
	c.cfg.made[ref] = p
}

// routes checks that each route names providers that exist, and builds
// the provider URLs it holds.
func (c *checker) routes(routes map[string]StringList, at keyPath) {
	for _, ch := range sortedKeys(routes) {
		here := at.with(ch)
		if len(routes[ch]) == 0 {
			c.add(here, "route %q lists no provider", ch)
		}
		for _, ref := range routes[ch] {
			if _, ok := c.cfg.Providers[ref]; ok {
				continue // built (or refused) under providers:
			}
			if !strings.Contains(ref, "://") {
				hint := "define it under providers:, or give a provider URL"
				if m, ok := closest(ref, sortedKeys(c.cfg.Providers)); ok {
					hint = fmt.Sprintf("did you mean `%s`?", m)
				}
				c.add(here, "route %q: no provider named %q (%s)", ch, ref, hint)
				continue
			}
			if _, ok := c.cfg.made[ref]; ok {
				continue // the same URL in another route: one provider
			}
			u, err := expandEnv(ref)
			var p providers.Provider
			if err == nil {
				p, err = providers.New(u)
			}
			if err != nil {
				c.add(here, "%v", err)
				continue
			}
			c.made(ref, p, here)
		}
	}
}

func (c *checker) tenants() {
	owner := map[string]string{} // token → tenant
	for _, t := range sortedKeys(c.cfg.Tenants) {
		at := keyPath{"tenants", t}
		if !ValidName(t) {
			c.add(at, "tenant name %q: use 1 to 64 letters, digits, '.', '_' or '-'", t)
		}
		tokens := c.cfg.Tenants[t].Tokens
		for i, tok := range tokens {
			v, err := expandEnv(tok)
			switch {
			case err != nil:
				c.add(at.with("tokens"), "tokens[%d]: %v", i, err)
			case len(v) < 16:
				c.add(at.with("tokens"), "tokens[%d]: shorter than 16 characters", i)
			case owner[v] != "":
				// One token, two tenants: whichever serve read last
				// would win.
				c.add(at.with("tokens"), "tokens[%d]: tenant %s has the same token", i, owner[v])
			default:
				owner[v] = t
				tokens[i] = v
			}
		}
		c.routes(c.cfg.Tenants[t].Routes, at.with("routes"))
	}
}

// channelNames are the channels a retry policy may name: the standard
// ones, and every channel a route names.
func (c *checker) channelNames() []string {
	names := slices.Clone(standardChannels)
	add := func(chs []string) {
		for _, ch := range chs {
			if ch != "*" && !slices.Contains(names, ch) {
				names = append(names, ch)
			}
		}
	}
	add(sortedKeys(c.cfg.Routes))
	add(sortedKeys(c.flagRoutes))
	for _, t := range sortedKeys(c.cfg.Tenants) {
		add(sortedKeys(c.cfg.Tenants[t].Routes))
	}
	return names
}

// routed reports whether a tenant's channel has a route, as the relay
// resolves one: the tenant's own, the default (file and --route), or a
// "*" route; with no default route at all, the log provider serves every
// channel. It returns the routes' channels for the message.
func (c *checker) routed(tenant, channel string) (bool, []string) {
	def := sortedKeys(c.cfg.Routes)
	for _, ch := range sortedKeys(c.flagRoutes) {
		if !slices.Contains(def, ch) {
			def = append(def, ch)
		}
	}
	own := sortedKeys(c.cfg.Tenants[tenant].Routes)
	if len(def) == 0 {
		return true, nil
	}
	for _, chs := range [][]string{own, def} {
		if slices.Contains(chs, channel) || slices.Contains(chs, "*") {
			return true, nil
		}
	}
	all := slices.Clone(def)
	for _, ch := range own {
		if !slices.Contains(all, ch) {
			all = append(all, ch)
		}
	}
	slices.Sort(all)
	return false, all
}

func (c *checker) jobs() {
	for _, name := range sortedKeys(c.cfg.Jobs) {
		at := keyPath{"jobs", name}
		jc := c.cfg.Jobs[name]
		tz := jc.Timezone
		if tz != "" {
			if _, err := time.LoadLocation(tz); err != nil {
				c.add(at.with("timezone"), "time zone %q: %v", tz, err)
				tz = "" // the schedule is still checked, in UTC
			}
		}
		if jc.Schedule == "" {
			c.add(at.with("schedule"), "a job needs a schedule: a cron expression, @daily, or @every 1h")
		} else if _, err := schedule.Parse(jc.Schedule, tz); err != nil {
			c.add(at.with("schedule"), "%v", err)
		}
		switch schedule.Missed(jc.Missed) {
		case "", schedule.MissedSkip, schedule.MissedRunOnce:
		default:
			c.add(at.with("missed"), "missed %q: want skip or run-once", jc.Missed)
		}
		var kinds []string
		for _, k := range []struct {
			name string
			set  bool
		}{{"digest", jc.Digest != nil}, {"prune", jc.Prune != nil}, {"batch", jc.Batch != nil}} {
			if k.set {
				kinds = append(kinds, k.name)
			}
		}
		if len(kinds) != 1 {
			has := "none"
			if len(kinds) > 1 {
				has = strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
			}
			c.add(at, "a job does exactly one of digest, prune or batch; this one has %s", has)
		}
		if d := jc.Digest; d != nil {
			c.digest(name, d, at.with("digest"))
		}
		if p := jc.Prune; p != nil {
			if p.OlderThan == "" {
				c.add(at.with("prune", "older_than"), "a prune job needs older_than (e.g. 30d)")
			} else if _, err := relay.ParseAge(p.OlderThan); err != nil {
				c.add(at.with("prune", "older_than"), "%v", err)
			}
		}
		if b := jc.Batch; b != nil {
			if b.File == "" {
				c.add(at.with("batch", "file"), "a batch job needs a file")
			} else if err := checkBatchFile(b.File); err != nil {
				c.add(at.with("batch", "file"), "%v", err)
			}
		}
	}
}

func (c *checker) digest(job string, d *DigestJob, at keyPath) {
	tenant := d.Tenant
	if tenant == "" {
		tenant = "default"
	} else if !ValidName(tenant) {
		c.add(at.with("tenant"), "tenant name %q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant)
	}
	if d.Audience == "" {
		c.add(at.with("audience"), "a digest needs an audience")
	}
	if d.Channel == "" {
		c.add(at.with("channel"), "a digest needs a channel")
	} else if ok, routes := c.routed(tenant, d.Channel); !ok {
		c.add(at.with("channel"), "channel %q has no route (routes: %s; add one under routes:, or a \"*\" route)", d.Channel, strings.Join(routes, ", "))
	}
	c.positive(at.with("max_items"), d.MaxItems <= 0, d.MaxItems, defaultDigestItems)
	if err := schedule.CheckDigest(job, schedule.DigestConfig{Tenant: d.Tenant, Audience: d.Audience, Channel: d.Channel,
		Subject: d.Subject, Template: d.Template, MaxItems: d.MaxItems}); err != nil {
		c.add(at.with("template"), "%v", err)
	}
}

// checkBatchFile opens a scheduled batch file as its runs will: known
// format, a file that can be read, a CSV header that names known columns.
func checkBatchFile(path string) error {
	format, err := batch.FormatFor(path)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a file", path)
	}
	if _, err := batch.NewReader(f, format); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// tail checks each source's URL (sources.Parse) without reaching its
// database: a command that tails nothing must work while the
// application's database is down. The specs are kept for serve and
// status, which open them (Config.TailSpecs).
func (c *checker) tail() {
	c.cfg.tailSpecs = make([]*sources.Spec, len(c.cfg.Tail))
	for i, tc := range c.cfg.Tail {
		at := tailKey(i)
		c.positive(at.with("poll"), tc.Poll <= 0, time.Duration(tc.Poll), defaultTailPoll)
		if tc.Source == "" {
			c.add(at.with("source"), "source is required")
			continue
		}
		u, err := expandEnv(tc.Source)
		if err != nil {
			c.add(at.with("source"), "%v", err)
			continue
		}
		spec, err := sources.Parse(u)
		if err != nil {
			c.add(at.with("source"), "%v", err)
			continue
		}
		c.cfg.tailSpecs[i] = spec
	}
}

func tailKey(i int) keyPath { return keyPath{"tail", "[" + strconv.Itoa(i) + "]"} }

// reachTimeout bounds opening one tail: source for config check.
const reachTimeout = 30 * time.Second

// reachTails opens each tail: source as serve will (its database reached,
// the table and its columns checked, write access with mark_processed),
// all at once, and closes it: what config check adds to the checks of
// every command. A source that cannot be opened is a problem at its line.
func (cfg *Config) reachTails(ctx context.Context) []problem {
	found := make([]error, len(cfg.tailSpecs))
	var wg sync.WaitGroup
	for i, spec := range cfg.tailSpecs {
		if spec == nil {
			continue // its URL is a problem already
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, reachTimeout)
			defer cancel()
			src, err := spec.Open(ctx)
			if err == nil {
				src.Close()
			}
			found[i] = err
		})
	}
	wg.Wait()
	c := &checker{cfg: cfg, sh: cfg.shape}
	for i, err := range found {
		if err != nil {
			// On one line: a driver's error may span several.
			c.add(tailKey(i).with("source"), "%s", oneLine(err.Error(), 500))
		}
	}
	return c.problems
}

// api checks the api: section: sizes, counts and durations positive, each
// address HOST:PORT, a metrics token long enough to guess at no better
// than an API token.
func (c *checker) api() {
	a := &c.cfg.API
	at := keyPath{"api"}
	c.positive(at.with("max_body"), a.MaxBody <= 0, a.MaxBody, DefaultMaxBody)
	c.positive(at.with("max_batch"), a.MaxBatch <= 0, a.MaxBatch, DefaultMaxBatch)
	c.positive(at.with("key_ttl"), a.KeyTTL <= 0, time.Duration(a.KeyTTL), DefaultKeyTTL)
	c.positive(at.with("body_timeout"), a.BodyTimeout <= 0, time.Duration(a.BodyTimeout), DefaultBodyTimeout)
	c.positive(at.with("max_conns"), a.MaxConns <= 0, a.MaxConns, DefaultMaxConns)
	if a.ShedAbove != nil && *a.ShedAbove < 0 {
		c.add(at.with("shed_above"), "shed_above %d: want 0 (never shed) or a number of due notifications, e.g. %d", *a.ShedAbove, DefaultShedAbove)
	}
	c.positive(at.with("streams_per_user"), a.StreamsPerUser <= 0, a.StreamsPerUser, 5)
	c.positive(at.with("streams_per_tenant"), a.StreamsPerTenant <= 0, a.StreamsPerTenant, 500)
	c.positive(at.with("stream_heartbeat"), a.StreamHeartbeat <= 0, time.Duration(a.StreamHeartbeat), 15*time.Second)
	c.positive(at.with("stream_sweep"), a.StreamSweep <= 0, time.Duration(a.StreamSweep), 10*time.Second)
	if a.ShedBehind != nil && *a.ShedBehind < 0 {
		c.add(at.with("shed_behind"), "shed_behind %s: want 0 (never shed) or how far behind delivery may fall, e.g. %s", time.Duration(*a.ShedBehind), DefaultShedBehind)
	}
	for _, n := range []struct{ key, addr string }{{"listen", a.Listen}, {"metrics_listen", a.MetricsListen}, {"console_listen", a.ConsoleListen}} {
		if c.has("api", n.key) {
			if msg := checkAddress(n.addr); msg != "" {
				c.add(at.with(n.key), "%s %q: %s", n.key, n.addr, msg)
			}
		}
	}
	if c.has("api", "listen") && c.has("api", "metrics_listen") && a.Listen == a.MetricsListen {
		c.add(at.with("metrics_listen"), "metrics_listen %q is the API's address: give metrics an address of their own, or use metrics_token", a.MetricsListen)
	}
	if c.has("api", "listen") && c.has("api", "console_listen") && a.Listen == a.ConsoleListen {
		c.add(at.with("console_listen"), "console_listen %q is the API's address, where the console is served at /console already: give it an address of its own, or leave it out", a.ConsoleListen)
	}
	if c.has("api", "metrics_listen") && c.has("api", "console_listen") && a.MetricsListen == a.ConsoleListen {
		c.add(at.with("console_listen"), "console_listen %q is the metrics address: give each an address of its own", a.ConsoleListen)
	}
	if c.has("api", "trusted_proxies") {
		if _, err := ParseProxies(a.TrustedProxies); err != nil {
			c.add(at.with("trusted_proxies"), "trusted_proxies: %v", err)
		}
	}
	if c.has("api", "metrics_token") {
		v, err := expandEnv(a.MetricsToken)
		switch {
		case err != nil:
			c.add(at.with("metrics_token"), "metrics_token: %v", err)
		case len(v) < 16:
			c.add(at.with("metrics_token"), "metrics_token: shorter than 16 characters")
		default:
			a.MetricsToken = v
		}
	}
}

// checkAddress says what is wrong with a listen address, "" if nothing.
// It resolves no name: the host is the listener's to find.
func checkAddress(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want HOST:PORT, e.g. 127.0.0.1:8025"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "the port must be a number from 0 to 65535"
	}
	return ""
}

// NearMiss says, for a channel a route names that is not a standard one,
// the standard channel it is one slip away from ("emial": "email"), so
// config check can point at a likely typo that is still a valid name of a
// channel of one's own.
func NearMiss(channel string) (string, bool) {
	if channel == "*" || slices.Contains(standardChannels, channel) {
		return "", false
	}
	return closest(channel, standardChannels)
}

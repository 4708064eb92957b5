package config

import (
	"cmp"
	"fmt"
	"net/url"
	"time"

	"github.com/edgerelay/edgerelay/relay"
)

// Categories: a tenant's kinds of notification, each required
// or optional with a default, with optional quiet hours and a throttle; a
// type names its category. They live at the top level (categories:, and
// tenant_categories: for tenants with a set of their own), not under
// tenants:, because a reload applies tenants: and the dispatcher reads
// categories only at start: a change to them is logged as needing a
// restart.

// CategoryConfig is one category as written in the file.
type CategoryConfig struct {
	// Required: cannot be turned off; ignores quiet hours and throttles.
	Required bool `yaml:"required"`
	// Default of an optional category: on (default) or off.
	Default string `yaml:"default"`
	// QuietHours, "21:00-08:00", for recipients who set none, in their
	// time zone (UTC if they set none).
	QuietHours string `yaml:"quiet_hours"`
	// Throttle: at most max per recipient per per.
	Throttle *ThrottleYAML `yaml:"throttle"`
}

// ThrottleYAML is a category's throttle as written in the file.
type ThrottleYAML struct {
	Max int      `yaml:"max"`
	Per Duration `yaml:"per"`
	// Excess is what becomes of a notification over the throttle: skip
	// (the default) or digest, folded into the digest job named by Digest.
	Excess string `yaml:"excess"`
	Digest string `yaml:"digest"`
}

// Excesses of a throttle.
const (
	excessSkip   = "skip"
	excessDigest = "digest"
)

// category converts a checked category; jobs are the config's, where a
// throttle's digest is found.
func (cc CategoryConfig) category(jobs map[string]JobConfig) relay.Category {
	cat := relay.Category{Required: cc.Required, Off: cc.Default == "off"}
	if w, err := relay.ParseQuietWindow(cc.QuietHours); err == nil {
		cat.Quiet = &w
	}
	if th := cc.Throttle; th != nil {
		cat.Throttle = relay.Throttle{Max: th.Max, Per: time.Duration(th.Per)}
		if d := jobs[th.Digest].Digest; th.Excess == excessDigest && d != nil {
			cat.Throttle.Digest = &relay.FoldDigest{Job: th.Digest, Tenant: cmp.Or(d.Tenant, "default"), Audience: d.Audience, Channel: d.Channel}
		}
	}
	return cat
}

func categorySet(m map[string]CategoryConfig, jobs map[string]JobConfig) map[string]relay.Category {
	out := make(map[string]relay.Category, len(m))
	for name, cc := range m {
		out[name] = cc.category(jobs)
	}
	return out
}

// categoryOptions fills the relay's categories from the file.
func (cfg *Config) categoryOptions(opts *relay.Options) {
	opts.Categories = categorySet(cfg.Categories, cfg.Jobs)
	opts.TenantCategories = map[string]map[string]relay.Category{}
	for t, m := range cfg.TenantCategories {
		opts.TenantCategories[t] = categorySet(m, cfg.Jobs)
	}
	opts.TypeCategory = map[string]string{}
	for t, tc := range cfg.Types {
		if tc.Category != "" {
			opts.TypeCategory[t] = tc.Category
		}
	}
}

// categories checks the categories and the types' references to them.
func (c *checker) categories() {
	// tenant is the tenant of a tenant_categories set ("" for categories:).
	check := func(m map[string]CategoryConfig, at keyPath, tenant string) {
		for _, name := range sortedKeys(m) {
			cc, at := m[name], at.with(name)
			if !ValidName(name) {
				c.add(at, "category name %q: use 1 to 64 letters, digits, '.', '_' or '-'", name)
			}
			switch cc.Default {
			case "", "on", "off":
			default:
				c.add(at.with("default"), "default %q: want on or off", cc.Default)
			}
			if cc.QuietHours != "" {
				if _, err := relay.ParseQuietWindow(cc.QuietHours); err != nil {
					c.add(at.with("quiet_hours"), "quiet_hours %v", err)
				}
			}
			if th := cc.Throttle; th != nil {
				if th.Max <= 0 {
					c.add(at.with("throttle", "max"), "throttle max must be positive, got %d", th.Max)
				}
				if th.Per <= 0 {
					c.add(at.with("throttle", "per"), "throttle per must be a positive duration (24h, 7d), got %v", time.Duration(th.Per))
				}
				c.throttleDigest(name, th, at.with("throttle"), tenant)
			}
			if cc.Required && (cc.Default == "off" || cc.QuietHours != "" || cc.Throttle != nil) {
				c.add(at, "category %q is required: it is always on and ignores quiet hours and throttles (drop default: off, quiet_hours and throttle, or make it optional)", name)
			}
		}
	}
	if u := c.cfg.API.PublicURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" || pu.RawQuery != "" {
			c.add(keyPath{"api", "public_url"}, "public_url %q: want the scheme and host recipients and providers reach the API at, e.g. https://relay.example.com", u)
		}
	}
	check(c.cfg.Categories, keyPath{"categories"}, "")
	for _, t := range sortedKeys(c.cfg.TenantCategories) {
		check(c.cfg.TenantCategories[t], keyPath{"tenant_categories", t}, t)
	}
	for _, typ := range sortedKeys(c.cfg.Types) {
		name := c.cfg.Types[typ].Category
		if name == "" {
			continue
		}
		at := keyPath{"types", typ, "category"}
		if _, ok := c.cfg.Categories[name]; !ok {
			msg := fmt.Sprintf("type %q names category %q, which categories: does not define", typ, name)
			if m, ok := closest(name, sortedKeys(c.cfg.Categories)); ok {
				msg += fmt.Sprintf(" (did you mean `%s`?)", m)
			}
			c.add(at, "%s", msg)
		}
		// A tenant's own set must define it too: else that tenant's
		// notifications of the type would escape every preference.
		for _, t := range sortedKeys(c.cfg.TenantCategories) {
			if _, ok := c.cfg.TenantCategories[t][name]; !ok {
				c.add(keyPath{"tenant_categories", t}, "tenant %q's categories do not define category %q, which type %q belongs to", t, name, typ)
			}
		}
	}
}

// throttleDigest checks where a throttle's excess goes: skip, or digest
// with a digest job that can carry the category's notifications: a digest
// job of the tenant whose notifications they are, whose own messages are
// not of the category (a throttled digest would fold into the next one).
// Its audience is in the database: a recipient it does not list is
// skipped at claim, saying so (relay: unfoldable).
func (c *checker) throttleDigest(category string, th *ThrottleYAML, at keyPath, tenant string) {
	switch th.Excess {
	case "", excessSkip:
		if th.Digest != "" {
			c.add(at.with("digest"), "digest %q is where the excess goes with excess: digest; this throttle's excess is skipped (add excess: digest, or drop digest)", th.Digest)
		}
		return
	case excessDigest:
	default:
		c.add(at.with("excess"), "excess %q: want skip (the default) or digest", th.Excess)
		return
	}
	if th.Digest == "" {
		c.add(at, "excess: digest needs digest: the name of a digest job under jobs:")
		return
	}
	at = at.with("digest")
	jc, ok := c.cfg.Jobs[th.Digest]
	if !ok {
		msg := fmt.Sprintf("no job %q under jobs: to fold the excess into", th.Digest)
		if m, ok := closest(th.Digest, sortedKeys(c.cfg.Jobs)); ok {
			msg += fmt.Sprintf(" (did you mean `%s`?)", m)
		}
		c.add(at, "%s", msg)
		return
	}
	d := jc.Digest
	if d == nil {
		c.add(at, "job %q is not a digest job: the excess can only be folded into a digest", th.Digest)
		return
	}
	jobTenant := cmp.Or(d.Tenant, "default")
	switch _, own := c.cfg.TenantCategories[jobTenant]; {
	case tenant != "" && jobTenant != tenant:
		c.add(at, "digest job %q is tenant %s's: tenant %s's excess can only be folded into a digest of tenant %s", th.Digest, jobTenant, tenant, tenant)
	case tenant == "" && own:
		c.add(at, "digest job %q is tenant %s's, which has categories of its own (tenant_categories: %s): this category never applies to its notifications", th.Digest, jobTenant, jobTenant)
	}
	for _, typ := range []string{"digest", th.Digest} {
		if c.cfg.Types[typ].Category == category {
			c.add(at, "digest job %q's own messages (type digest, purpose %s) belong to category %q: a throttled digest would be folded into the next one (give type %q another category)", th.Digest, th.Digest, category, typ)
		}
	}
}

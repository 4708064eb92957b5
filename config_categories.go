package main

import (
	"fmt"
	"net/url"
	"time"

	"edgerelay/relay"
)

// Categories (issue 17): a tenant's kinds of notification, each required
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
}

// category converts a checked category.
func (cc CategoryConfig) category() relay.Category {
	cat := relay.Category{Required: cc.Required, Off: cc.Default == "off"}
	if w, err := relay.ParseQuietWindow(cc.QuietHours); err == nil {
		cat.Quiet = &w
	}
	if cc.Throttle != nil {
		cat.Throttle = relay.Throttle{Max: cc.Throttle.Max, Per: time.Duration(cc.Throttle.Per)}
	}
	return cat
}

func categorySet(m map[string]CategoryConfig) map[string]relay.Category {
	out := make(map[string]relay.Category, len(m))
	for name, cc := range m {
		out[name] = cc.category()
	}
	return out
}

// categoryOptions fills the relay's categories from the file.
func (cfg *Config) categoryOptions(opts *relay.Options) {
	opts.Categories = categorySet(cfg.Categories)
	opts.TenantCategories = map[string]map[string]relay.Category{}
	for t, m := range cfg.TenantCategories {
		opts.TenantCategories[t] = categorySet(m)
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
	check := func(m map[string]CategoryConfig, at keyPath) {
		for _, name := range sortedKeys(m) {
			cc, at := m[name], at.with(name)
			if !validName(name) {
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
	check(c.cfg.Categories, keyPath{"categories"})
	for _, t := range sortedKeys(c.cfg.TenantCategories) {
		check(c.cfg.TenantCategories[t], keyPath{"tenant_categories", t})
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

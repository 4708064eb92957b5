package config

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// RelayOptions are the relay's options that the file sets: retry policies,
// delivery modes, dispatch, limits, suppression, categories, templates.
// The caller adds what is not the file's (the database, the logger) and
// what flags override.
func (cfg *Config) RelayOptions() relay.Options {
	opts := relay.Options{
		Retry: cfg.Retry.policy(), ChannelRetry: map[string]relay.Policy{}, TypeRetry: map[string]relay.Policy{},
		Delivery: map[string]relay.Mode{},
		Workers:  cfg.Dispatch.Workers, Lease: time.Duration(cfg.Dispatch.Lease), MaxRecipients: cfg.Limits.MaxRecipients,
		HardBounceTTL: time.Duration(cfg.Suppression.HardBounceTTL), SoftBounceTTL: time.Duration(cfg.Suppression.SoftBounceTTL),
		Templates: cfg.templates, PublicURL: cfg.API.PublicURL,
	}
	for _, w := range cfg.Workflows {
		opts.Workflows = append(opts.Workflows, relay.FileWorkflow{Tenant: w.tenant(), Definition: w.definition()})
	}
	if opts.HardBounceTTL == 0 {
		opts.HardBounceTTL = time.Duration(cfg.Dispatch.InvalidAddressTTL) // its old name
	}
	for ch, p := range cfg.Channels {
		opts.ChannelRetry[ch] = p.policy()
	}
	cfg.categoryOptions(&opts)
	for t, tc := range cfg.Types {
		if tc.Delivery != "" {
			opts.Delivery[t] = relay.Mode(tc.Delivery)
		}
		if tc.Retry != nil {
			opts.TypeRetry[t] = tc.Retry.policy()
		}
	}
	return opts
}

// TailSpecs are the tail: sources, by index, their URLs checked and their
// databases not reached: serve and status open them, each when it needs
// it.
func (cfg *Config) TailSpecs() []*sources.Spec { return cfg.tailSpecs }

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName reports whether s may name a tenant: 1 to 64 letters, digits,
// '.', '_' or '-', starting with a letter or digit.
func ValidName(s string) bool { return tenantName.MatchString(s) }

// ParseProxies reads trusted proxies (api.trusted_proxies, serve's
// --trusted-proxy): CIDRs or single addresses, each entry possibly a
// comma-separated list.
func ParseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range list {
		for _, v := range strings.Split(e, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			if p, err := netip.ParsePrefix(v); err == nil {
				out = append(out, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8) or an address (10.0.0.5)", v)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out, nil
}

// oneLine folds an error onto one line, cut at max bytes, its control
// characters shown.
func oneLine(s string, max int) string {
	s = relay.ShowControls(strings.Join(strings.Fields(s), " "))
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/edgerelay/edgerelay/relay"
)

// A running serve reloads its config on SIGHUP: routes (with their
// providers), provider limits, the tenants' tokens and templates. What
// changed is logged in these terms; every other key that changed needs a
// restart (NeedsRestart).

// TokenHashes maps the hex SHA-256 of each config token to its
// tenant, as the API looks tokens up.
func TokenHashes(cfg *Config) map[string]string {
	out := map[string]string{}
	for tenant, tc := range cfg.Tenants {
		for _, tok := range tc.Tokens {
			sum := sha256.Sum256([]byte(tok))
			out[hex.EncodeToString(sum[:])] = tenant
		}
	}
	return out
}

// TokenChange says how the config's tokens changed: "2 (1 added, 1 removed)".
func TokenChange(old, nu map[string]string) string {
	var add, rm int
	for h := range nu {
		if _, ok := old[h]; !ok {
			add++
		}
	}
	for h := range old {
		if _, ok := nu[h]; !ok {
			rm++
		}
	}
	return fmt.Sprintf("%d (%d added, %d removed)", len(nu), add, rm)
}

// routeSpecs describes each route as configured, with flagRoutes (--route)
// replacing the file's route for their channels: channel (or
// TENANT:CHANNEL) → its providers, each by URL or by name with its config,
// so that a provider whose URL or options changed changes its routes.
func routeSpecs(cfg *Config, flagRoutes map[string][]string) map[string]string {
	out := map[string]string{}
	describe := func(refs []string) string {
		var parts []string
		for _, ref := range refs {
			if pc, ok := cfg.Providers[ref]; ok {
				parts = append(parts, fmt.Sprintf("%s=%#v", ref, pc))
			} else {
				parts = append(parts, ref)
			}
		}
		return strings.Join(parts, " ")
	}
	for ch, refs := range cfg.Routes {
		out[ch] = describe(refs)
	}
	for ch, refs := range flagRoutes {
		out[ch] = describe(refs) // a flag replaces the file's route
	}
	for t, tc := range cfg.Tenants {
		for ch, refs := range tc.Routes {
			out[t+":"+ch] = describe(refs)
		}
	}
	return out
}

// DiffRoutes names the routes (channel, or TENANT:CHANNEL) that a reload
// from old to nu adds, removes or changes; each config goes with its
// --route flags.
func DiffRoutes(old *Config, oldFlags map[string][]string, nu *Config, nuFlags map[string][]string) (added, removed, changed []string) {
	a, b := routeSpecs(old, oldFlags), routeSpecs(nu, nuFlags)
	for k, v := range b {
		switch w, ok := a[k]; {
		case !ok:
			added = append(added, k)
		case w != v:
			changed = append(changed, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			removed = append(removed, k)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	sort.Strings(changed)
	return added, removed, changed
}

// DiffLimits names the providers whose limit changed (set, dropped or
// different).
func DiffLimits(old, nu map[string]relay.Limit) []string {
	var out []string
	for name, l := range nu {
		if old[name] != l {
			out = append(out, name)
		}
	}
	for name, l := range old {
		if _, ok := nu[name]; !ok && l != (relay.Limit{}) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// reloaded are the config keys a reload applies; every other key that
// changed needs a restart.
var reloaded = map[string]bool{"providers": true, "routes": true, "tenants": true, "templates": true}

// NeedsRestart lists the config keys that changed and that a reload does
// not apply, one level deep ("api.listen", "jobs").
func NeedsRestart(old, nu *Config) []string {
	var out []string
	a, b := reflect.ValueOf(old).Elem(), reflect.ValueOf(nu).Elem()
	typ := a.Type()
	for i := range typ.NumField() {
		f := typ.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || reloaded[key] || !f.IsExported() {
			continue
		}
		av, bv := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 && f.Type.Field(0).Tag.Get("yaml") != "" {
			for j := range f.Type.NumField() {
				sub, _, _ := strings.Cut(f.Type.Field(j).Tag.Get("yaml"), ",")
				if sub == "" || sub == "-" || !f.Type.Field(j).IsExported() {
					continue
				}
				if !reflect.DeepEqual(av.Field(j).Interface(), bv.Field(j).Interface()) {
					out = append(out, key+"."+sub)
				}
			}
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			out = append(out, key)
		}
	}
	return out
}

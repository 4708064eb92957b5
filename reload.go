package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"edgerelay/api"
	"edgerelay/providers"
	"edgerelay/relay"
)

// A running serve reloads its config on SIGHUP: routes (with their
// providers), provider limits and the tenants' tokens. The listeners stay
// open, so no request is dropped; what a reload cannot change (listen
// addresses, the database, the dispatcher's and the API's settings, jobs,
// tails) is logged as needing a restart.

// catchReload makes SIGHUP ask for a reload from now on, instead of ending
// the process (its default). serve calls it first thing, so a SIGHUP that
// comes during startup waits in the channel (one is kept: a reload reads
// the file as it is then, so two pending SIGHUPs need only one).
func catchReload() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}

// reloader applies config reloads to a running serve, one at a time.
type reloader struct {
	c   *cli.Context
	log *slog.Logger
	r   *relay.Relay
	api *api.Server
	cur *settings // what runs now
}

// run reloads on each SIGHUP until ctx ends. A SIGHUP that arrives during
// a reload is kept in the channel and starts the next one.
func (rl *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			rl.reload()
		}
	}
}

// reload reads the config again with the checks serve makes at start; a
// config that fails them is logged and the running one kept.
func (rl *reloader) reload() {
	sdNotify("RELOADING=1")
	defer sdNotify("READY=1")
	path := lookup(rl.c, "config")
	next, err := deliverySettings(rl.c)
	if err != nil {
		rl.log.Error("config reload refused: the running config stays", "config", path, "err", err)
		return
	}
	if err := rl.r.SetRoutes(next.opts.Routes, next.opts.TenantRoutes, next.opts.Limits); err != nil {
		closeProviders(next.opts)
		rl.log.Error("config reload refused: the running config stays", "config", path, "err", err)
		return
	}
	oldTokens, newTokens := configTokenHashes(rl.cur.cfg), configTokenHashes(next.cfg)
	rl.api.SetTokenHashes(newTokens)
	// Events accepted from now on render with the new templates; those
	// accepted already keep the messages rendered then.
	rl.r.SetTemplates(next.opts.Templates)

	added, removed, changed := diffRoutes(rl.cur, next)
	attrs := []any{"config", path,
		"routes_added", strings.Join(added, ","), "routes_removed", strings.Join(removed, ","),
		"routes_changed", strings.Join(changed, ","),
		"tokens", tokenChange(oldTokens, newTokens), "limits_changed", strings.Join(diffLimits(rl.cur.opts.Limits, next.opts.Limits), ",")}
	restart := needsRestart(rl.cur.cfg, next.cfg)
	if len(restart) > 0 {
		attrs = append(attrs, "needs_a_restart", strings.Join(restart, ","))
	}
	rl.log.Info("config reloaded", attrs...)
	if len(restart) > 0 {
		rl.log.Warn("config reload: these settings changed but only apply after a restart (needs a restart)", "keys", strings.Join(restart, ","))
	}
	rl.cur = next
}

// closeProviders closes the providers built for routes that were refused
// (their files, their idle connections).
func closeProviders(opts relay.Options) {
	seen := map[providers.Provider]bool{}
	close := func(rs relay.Routes) {
		for _, route := range rs {
			for _, p := range route {
				if c, ok := p.(io.Closer); ok && !seen[p] {
					seen[p] = true
					c.Close()
				}
			}
		}
	}
	close(opts.Routes)
	for _, rs := range opts.TenantRoutes {
		close(rs)
	}
}

// configTokenHashes maps the hex SHA-256 of each config token to its
// tenant, as the API looks tokens up.
func configTokenHashes(cfg *Config) map[string]string {
	out := map[string]string{}
	for tenant, tc := range cfg.Tenants {
		for _, tok := range tc.Tokens {
			sum := sha256.Sum256([]byte(tok))
			out[hex.EncodeToString(sum[:])] = tenant
		}
	}
	return out
}

// tokenChange says how the config's tokens changed: "2 (1 added, 1 removed)".
func tokenChange(old, nu map[string]string) string {
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

// routeSpecs describes each route as configured: channel (or
// TENANT:CHANNEL) → its providers, each by URL or by name with its config,
// so that a provider whose URL or options changed changes its routes.
func routeSpecs(s *settings) map[string]string {
	out := map[string]string{}
	describe := func(refs []string) string {
		var parts []string
		for _, ref := range refs {
			if pc, ok := s.cfg.Providers[ref]; ok {
				parts = append(parts, fmt.Sprintf("%s=%#v", ref, pc))
			} else {
				parts = append(parts, ref)
			}
		}
		return strings.Join(parts, " ")
	}
	for ch, refs := range s.cfg.Routes {
		out[ch] = describe(refs)
	}
	for ch, refs := range s.flagRoutes {
		out[ch] = describe(refs) // a flag replaces the file's route
	}
	for t, tc := range s.cfg.Tenants {
		for ch, refs := range tc.Routes {
			out[t+":"+ch] = describe(refs)
		}
	}
	return out
}

func diffRoutes(old, nu *settings) (added, removed, changed []string) {
	a, b := routeSpecs(old), routeSpecs(nu)
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

// diffLimits names the providers whose limit changed (set, dropped or
// different).
func diffLimits(old, nu map[string]relay.Limit) []string {
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

// needsRestart lists the config keys that changed and that a reload does
// not apply, one level deep ("api.listen", "jobs").
func needsRestart(old, nu *Config) []string {
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

// sdNotify tells systemd (Type=notify) about serve's state: READY=1 once
// it serves, RELOADING=1 while it reloads, STOPPING=1 when it drains. It
// does nothing outside systemd (no NOTIFY_SOCKET), and a failure to tell
// is not serve's failure.
func sdNotify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write([]byte(state))
}

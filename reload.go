package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// A running serve reloads its config on SIGHUP: routes (with their
// providers), provider limits, the tenants' tokens and the templates. The
// listeners stay open, so no request is dropped; what a reload cannot
// change (listen addresses, the database, the dispatcher's and the API's
// settings, jobs, tails) is logged as needing a restart
// (config.NeedsRestart).

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
	oldTokens, newTokens := config.TokenHashes(rl.cur.cfg), config.TokenHashes(next.cfg)
	rl.api.SetTokenHashes(newTokens)
	// Events accepted from now on render with the new templates; those
	// accepted already keep the messages rendered then.
	rl.r.SetTemplates(next.opts.Templates)

	added, removed, changed := config.DiffRoutes(rl.cur.cfg, rl.cur.flagRoutes, next.cfg, next.flagRoutes)
	attrs := []any{"config", path,
		"routes_added", strings.Join(added, ","), "routes_removed", strings.Join(removed, ","),
		"routes_changed", strings.Join(changed, ","),
		"tokens", config.TokenChange(oldTokens, newTokens), "limits_changed", strings.Join(config.DiffLimits(rl.cur.opts.Limits, next.opts.Limits), ",")}
	restart := config.NeedsRestart(rl.cur.cfg, next.cfg)
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

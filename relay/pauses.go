package relay

import (
	"context"
	"time"
)

// Pauses are shared: a provider's Retry-After heard by one process is
// written to the store (PauseProvider), and every dispatcher on the store
// reads the live pauses at claim time, at most every pausesEvery, into its
// gates of that provider's name. Another process therefore stops claiming
// for a paused provider within pausesEvery of the 429; calls it started
// before then still go out (at most its free workers' worth). The read is
// one small SELECT (a row per provider that ever paused).
const pausesEvery = 500 * time.Millisecond

// readPauses applies the pauses other processes heard to this dispatcher's
// gates, when the last read is older than pausesEvery. It runs on the
// dispatcher's goroutine (the gates are its own). A failed read is
// skipped: the local pauses still hold, and the claim that follows fails
// the same way if the store is down.
func (d *dispatcher) readPauses(ctx context.Context, now time.Time) {
	if since := now.Sub(d.pausesRead); since >= 0 && since < pausesEvery {
		return
	}
	d.pausesRead = now
	m, err := d.r.store.ProviderPauses(ctx, now)
	if err != nil || len(m) == 0 {
		return
	}
	for p, g := range d.r.router.gates {
		if until, ok := m[p.Name()]; ok {
			g.pause(until)
		}
	}
}

// sharePause keeps a pause this process heard for every other one. The
// local gate is paused already; a failed write only narrows the pause to
// this process, so it is logged, not retried.
func (d *dispatcher) sharePause(ctx context.Context, provider string, until time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.r.store.PauseProvider(ctx, provider, until); err != nil && ctx.Err() == nil {
		d.r.log.Warn("could not share a provider's pause with the other processes; it holds in this one", "provider", provider, "until", until, "err", err)
	}
}

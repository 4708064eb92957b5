package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// One process at a time: work that must not run twice at once among the
// processes sharing a store (the schedules, each tailed source) runs only
// while its process holds a lease on the work's name. The holder renews the
// lease every third of its TTL and stops the work when it can no longer
// renew in time; a process that dies stops renewing, and another takes the
// lease over once it lapses: within SingletonTTL plus a third of it.
//
// The work itself is still keyed by its identity (a scheduled run by job and
// time, a tailed row by its event): a takeover that repeats some of it
// repeats nothing in effect.

// holderID names this process among a store's lease holders: host, pid and
// a random part (a restarted process with the same pid is another holder).
func holderID() string {
	host, _ := os.Hostname()
	b := make([]byte, 6)
	rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Singly runs work while this process holds the lease name, until ctx
// ends; work's context ends when the lease is lost. If another process
// holds it, Singly waits and tries again. It returns when ctx ends.
func (r *Relay) Singly(ctx context.Context, name string, work func(ctx context.Context)) {
	ttl := r.opts.SingletonTTL
	every := ttl / 3
	log := r.log.With("lease", name, "holder", r.holder)
	waiting := false
	for ctx.Err() == nil {
		at := r.now()
		held, err := r.store.HoldLease(ctx, name, r.holder, at, ttl)
		if err != nil || !held {
			if err != nil && ctx.Err() == nil {
				log.Warn("could not take the lease; trying again", "err", err)
			} else if !waiting && err == nil {
				log.Info("another process holds the lease; waiting to take it over", "ttl", ttl)
				waiting = true
			}
			if !sleepCtx(ctx, every) {
				return
			}
			continue
		}
		waiting = false
		r.holding(ctx, name, work, at.Add(ttl), ttl, every)
	}
}

// holding runs work while the lease is renewed, and gives the lease up
// when it ends. The lease ends where the write that took or renewed it
// says (until: the time asked for plus the TTL, not the time the answer
// came), and the work stops a third of the TTL before that unless a
// renewal moved it on: a write slowed past the TTL (a loaded box, a slow
// store) never leaves the work running on a lease another process may
// have taken over meanwhile.
func (r *Relay) holding(ctx context.Context, name string, work func(ctx context.Context), until time.Time, ttl, every time.Duration) {
	log := r.log.With("lease", name, "holder", r.holder)
	left := func(until time.Time) time.Duration { return until.Sub(r.now()) - every }
	if left(until) <= 0 {
		log.Warn("took the lease too late to run on it (the write took most of its TTL); trying again", "ttl", ttl)
		r.dropLease(name, log)
		return
	}
	log.Info("holding the lease: running", "ttl", ttl)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.AfterFunc(left(until), func() {
		log.Error("could not renew the lease in time: stopping")
		cancel()
	})
	defer deadline.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(wctx)
	}()
	t := time.NewTicker(every)
	defer t.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-wctx.Done():
			break loop
		case <-t.C:
		}
		at := r.now()
		held, err := r.store.HoldLease(ctx, name, r.holder, at, ttl)
		switch {
		case err == nil && held:
			if wctx.Err() == nil {
				deadline.Reset(left(at.Add(ttl)))
			}
		case err == nil:
			log.Warn("lost the lease (another process took it over): stopping")
			break loop
		default:
			// The deadline stops the work if no renewal comes in time.
			log.Warn("could not renew the lease; trying again", "err", err)
		}
	}
	cancel()
	<-done
	r.dropLease(name, log)
}

// dropLease gives the lease up, if this process still holds it.
func (r *Relay) dropLease(name string, log *slog.Logger) {
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	if err := r.store.DropLease(dctx, name, r.holder); err != nil {
		log.Warn("could not give the lease up (it lapses by itself)", "err", err)
	}
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// FailoverBound is how long after its holder dies a singleton lease can
// take to move to a live process: the lease lapses at most SingletonTTL
// after its last renewal, and a waiting process tries every third of it.
// (Add the difference between the processes' clocks: lease ends are
// written by one process's clock and read by another's.)
func (r *Relay) FailoverBound() time.Duration {
	return r.opts.SingletonTTL + r.opts.SingletonTTL/3
}

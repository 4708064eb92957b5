package api

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/edgerelay/edgerelay/relay"
)

// Shedding: past what the relay can deliver, new events are refused (503
// overloaded, with Retry-After) rather than queued without bound. Two
// rules, either of which sheds:
//   - ShedBehind: delivery through a provider the event goes to is
//     further behind than this (the notifications last claimed for it had
//     been due longer; relay.Relay.Behind).
//     This is the rule that acts first when ingest outruns delivery: it
//     bounds how late a notification accepted now will be.
//   - ShedAbove: more notifications are due and unclaimed than this, as a
//     loop (ShedLoop, run by serve) reads once a second. It bounds the
//     backlog where the lag says little (a dispatcher backing off after a
//     store error claims nothing, so measures nothing).
//
// The size is checked before the body is read, the lag once the events are
// decoded: an event is refused only when a provider its channels go to is
// behind, so a slow provider does not get the others' events refused.
// Neither costs an accept more than a few atomic loads and locks. Only
// accepts are shed; a
// repeat of a request under its Idempotency-Key is shed too while the
// backlog lasts, and replayed once it is below the limit.

// shedState is the backlog as last read.
type shedState struct {
	due  atomic.Int64
	read atomic.Bool // the loop has read it at least once
}

// shedding reports whether accepts are refused now by the backlog's
// size, for how long a client should wait, and why.
func (s *Server) shedding() (bool, int, string) {
	if s.opts.ShedAbove <= 0 || !s.shed.read.Load() {
		return false, 0, ""
	}
	if s.shed.due.Load() <= s.opts.ShedAbove {
		return false, 0, ""
	}
	return true, 5, "the delivery backlog is above its limit (" + strconv.FormatInt(s.opts.ShedAbove, 10) + " notifications due)"
}

// behind is the answer that refuses events while delivery to a provider
// one of them goes to is further behind than ShedBehind; nil to go on.
func (s *Server) behind(evs ...relay.Event) *response {
	d := s.opts.ShedBehind
	if d <= 0 {
		return nil
	}
	for _, ev := range evs {
		lag, who := s.r.Behind(ev.Tenant, ev.Channels)
		if lag <= d {
			continue
		}
		what := "delivery"
		if who != "" {
			what = "delivery through " + who
		}
		p := s.overloaded(what+" is "+lag.Round(time.Second/10).String()+" behind, more than its limit ("+d.String()+")",
			retryAfterSeconds(lag-d))
		return &p
	}
	return nil
}

// retryAfterSeconds is the wait to suggest for a lag this far past its
// limit: about the time to catch up by that much, from 1 to 30 s.
func retryAfterSeconds(past time.Duration) int {
	return min(max(int(past.Seconds()+0.999), 1), 30)
}

// overloaded is the 503 that sheds an accept: why, that nothing was
// stored, and when to retry.
func (s *Server) overloaded(why string, wait int) response {
	if s.opts.Metrics != nil {
		s.opts.Metrics.shed()
	}
	p := problem(http.StatusServiceUnavailable, probOverloaded, "Overloaded",
		why+"; nothing was stored: retry after "+strconv.Itoa(wait)+" s, with the same Idempotency-Key, if any")
	p.retryAfter = strconv.Itoa(wait)
	return p
}

// unlessShedding answers 503 overloaded instead of h while the backlog is
// above its size limit (before the body is read: it does not depend on
// the events).
func (s *Server) unlessShedding(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		if shed, wait, why := s.shedding(); shed {
			return s.overloaded(why, wait)
		}
		return h(w, r, c)
	}
}

// ShedLoop reads the backlog every interval until ctx ends (serve runs it
// when ShedAbove is set).
func (s *Server) ShedLoop(ctx context.Context, every time.Duration) {
	if s.opts.ShedAbove <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if due, _, _, err := s.st.Live(ctx, s.r.Now()); err == nil {
			s.shed.due.Store(due)
			s.shed.read.Store(true)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

package api

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Shedding: above a backlog of due notifications, new events are refused
// (503 overloaded, with Retry-After) rather than queued without bound. The
// backlog is the number of notifications due now and not yet claimed; a
// loop (ShedLoop, run by serve) reads it once a second, so an accept pays
// nothing but an atomic load. Only accepts are shed; a repeat of a request
// under its Idempotency-Key is shed too while the backlog lasts, and
// replayed once it is below the limit.

// shedState is the backlog as last read.
type shedState struct {
	due  atomic.Int64
	read atomic.Bool // the loop has read it at least once
}

// shedding reports whether accepts are refused now, and for how long a
// client should wait.
func (s *Server) shedding() (bool, int) {
	if s.opts.ShedAbove <= 0 || !s.shed.read.Load() {
		return false, 0
	}
	due := s.shed.due.Load()
	if due <= s.opts.ShedAbove {
		return false, 0
	}
	return true, 5
}

// unlessShedding answers 503 overloaded instead of h while the backlog is
// above the limit.
func (s *Server) unlessShedding(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, c caller) response {
		if shed, wait := s.shedding(); shed {
			if s.opts.Metrics != nil {
				s.opts.Metrics.shed()
			}
			p := problem(http.StatusServiceUnavailable, probOverloaded, "Overloaded",
				"the delivery backlog is above its limit ("+strconv.FormatInt(s.opts.ShedAbove, 10)+
					" notifications due); nothing was stored: retry after a few seconds, with the same Idempotency-Key, if any")
			p.retryAfter = strconv.Itoa(wait)
			return p
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

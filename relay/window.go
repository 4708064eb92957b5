package relay

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// window is how many calls one provider may have in flight, found the way
// TCP finds how much data a path can hold: it starts at the provider's
// ceiling (its Limit's Concurrency, else the default of its kind:
// providers.Concurrency), is halved when the provider says it is
// overloaded (HTTP 429 or 503, SMTP 421 or 451, any Retry-After), at most
// once per call time, since the calls in flight together all hear the same
// overload, and grows back by one call per window of calls that end without
// such an answer (additive increase, multiplicative decrease). An HTTP API
// that answers in 100 ms thus gets hundreds of calls at once and hides its
// latency; an SMTP relay gets a few connections; a provider that pushes
// back gets fewer until it stops.
//
// A ceiling of 0 is unbounded: the dispatcher's workers bound the calls.
type window struct {
	mu       sync.Mutex
	ceiling  int
	size     float64 // the current bound, 1 … ceiling
	inflight int
	lastCut  time.Time
}

func newWindow(ceiling int) *window {
	return &window{ceiling: ceiling, size: float64(ceiling)}
}

// bounded reports whether the window can refuse a call.
func (w *window) bounded() bool { return w.ceiling > 0 }

// free is how many calls could enter now.
func (w *window) free() int {
	if w.ceiling == 0 {
		return math.MaxInt
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(int(w.size)-w.inflight, 0)
}

// enter takes a place for a call, if there is one.
func (w *window) enter() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ceiling > 0 && w.inflight >= int(w.size) {
		return false
	}
	w.inflight++
	return true
}

// cancel gives back a place taken by enter for a call that was not made.
func (w *window) cancel() {
	w.mu.Lock()
	w.inflight--
	w.mu.Unlock()
}

// leave gives back the place of a call that took took and ended at now;
// overloaded says the provider asked to be called less.
func (w *window) leave(took time.Duration, overloaded bool, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	if w.ceiling == 0 {
		return
	}
	switch {
	case overloaded && now.Sub(w.lastCut) >= took:
		w.size = max(1, math.Floor(w.size/2))
		w.lastCut = now
	case !overloaded:
		w.size = min(float64(w.ceiling), w.size+1/w.size)
	}
}

// current is the window's bound now (0: unbounded).
func (w *window) current() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.size)
}

// Window is one provider's window as Windows reports it.
type Window struct {
	Provider string
	// InFlight is the calls to it now; Size what its window allows now;
	// Ceiling what the window starts at and never passes.
	InFlight, Size, Ceiling int
}

// Windows reports the window of every routed provider whose calls are
// bounded (not the log provider's), by provider name: a Size below its
// Ceiling says the provider pushed back lately.
func (r *Relay) Windows() []Window {
	t := r.router.published()
	var out []Window
	for name, p := range t.named {
		w := t.gates[p].win
		if !w.bounded() {
			continue
		}
		w.mu.Lock()
		out = append(out, Window{Provider: name, InFlight: w.inflight, Size: int(w.size), Ceiling: w.ceiling})
		w.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Window) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}

package console

import (
	"net/netip"
	"sync"
	"time"
)

// Failed sign-ins are throttled per client address, in each process (a
// cluster of n nodes behind a balancer allows up to n times as many
// guesses; an API token has 256 bits, so guessing is hopeless anyway and
// the throttle is there to keep the log and the store quiet). Each address
// has a bucket of Options.LoginFailures tries, one more every
// Options.LoginRefill; a token login takes one, and gives it back if it
// succeeds. An empty bucket is answered 429 with Retry-After. IPv6
// addresses are counted by their /64, which one host usually holds whole.

// maxThrottled bounds the addresses remembered. When it is reached, the
// buckets that have filled up again are forgotten (a full bucket is a new
// one), and if none has, an arbitrary one: an attacker with that many
// addresses can reset another address's count, but each of its own
// addresses still has only its tries.
const maxThrottled = 10_000

type throttle struct {
	burst float64
	every time.Duration

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newThrottle(burst int, every time.Duration) *throttle {
	return &throttle{burst: float64(burst), every: every, buckets: map[netip.Addr]*bucket{}}
}

// level is b's tokens at now.
func (t *throttle) level(b *bucket, now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		return min(t.burst, b.tokens+float64(d)/float64(t.every))
	}
	return b.tokens
}

// loginTry is one sign-in that took a try; refund gives it back.
type loginTry struct {
	t   *throttle
	key netip.Addr
}

// try takes one try for addr at now: the try, or how long until the
// address has one.
func (t *throttle) try(addr string, now time.Time) (*loginTry, time.Duration) {
	key := throttleKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[key]
	if b == nil {
		if len(t.buckets) >= maxThrottled {
			t.evict(now)
		}
		b = &bucket{tokens: t.burst, at: now}
		t.buckets[key] = b
	}
	b.tokens, b.at = t.level(b, now), now
	if b.tokens < 1 {
		return nil, time.Duration((1 - b.tokens) * float64(t.every))
	}
	b.tokens--
	return &loginTry{t: t, key: key}, 0
}

// refund gives the try back: the sign-in succeeded.
func (l *loginTry) refund(now time.Time) {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.buckets[l.key]; b != nil {
		b.tokens, b.at = min(t.burst, t.level(b, now)+1), now
	}
}

func (t *throttle) evict(now time.Time) {
	for k, b := range t.buckets {
		if t.level(b, now) >= t.burst {
			delete(t.buckets, k)
		}
	}
	for k := range t.buckets {
		if len(t.buckets) < maxThrottled {
			break
		}
		delete(t.buckets, k)
	}
}

// throttleKey is what an address is counted under: itself, its /64 for
// IPv6, or the zero address for one that does not parse (all such share a
// bucket).
func throttleKey(addr string) netip.Addr {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Addr{}
	}
	if a = a.Unmap(); a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

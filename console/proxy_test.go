package console

import (
	"net/netip"
	"testing"
	"time"
)

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}

func addr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}

// A request is HTTPS when TLS ends here, or a trusted proxy says so; the
// header from anyone else is only the client's word.
func TestServedOverHTTPS(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tls   bool
		peer  string
		proto []string
		want  bool
	}{
		{"TLS here", true, "192.0.2.1", nil, true},
		{"plain, no proxy", false, "192.0.2.1", nil, false},
		{"an untrusted address saying https", false, "192.0.2.1", []string{"https"}, false},
		{"a trusted proxy saying https", false, "10.1.2.3", []string{"https"}, true},
		{"a trusted proxy over IPv6", false, "fd00::5", []string{"HTTPS"}, true},
		{"a trusted proxy saying http", false, "10.1.2.3", []string{"http"}, false},
		{"a trusted proxy, no header", false, "10.1.2.3", nil, false},
		{"the nearest proxy's value counts: http after a client's https", false, "10.1.2.3", []string{"https, http"}, false},
		{"the nearest proxy's value counts: repeated header", false, "10.1.2.3", []string{"http", "https"}, true},
		{"no peer address", false, "", []string{"https"}, false},
	} {
		if got := servedOverHTTPS(tc.tls, addr(tc.peer), tc.proto, proxies); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The client is the connection's address, or behind trusted proxies the
// nearest X-Forwarded-For entry that is not one: what a client writes
// into the header itself is never believed.
func TestClientAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer string
		xff  []string
		want string
	}{
		{"no proxy", "192.0.2.1", nil, "192.0.2.1"},
		{"an untrusted address sending X-Forwarded-For", "192.0.2.1", []string{"198.51.100.9"}, "192.0.2.1"},
		{"one trusted proxy", "10.0.0.1", []string{"198.51.100.9"}, "198.51.100.9"},
		{"a client's forged entry left of the real one", "10.0.0.1", []string{"1.2.3.4, 198.51.100.9"}, "198.51.100.9"},
		{"two trusted proxies", "10.0.0.1", []string{"198.51.100.9, 10.0.0.2"}, "198.51.100.9"},
		{"the header repeated", "10.0.0.1", []string{"1.2.3.4", "198.51.100.9"}, "198.51.100.9"},
		{"an entry with a port", "10.0.0.1", []string{"198.51.100.9:4711"}, "198.51.100.9"},
		{"garbage stops at the last trusted hop", "10.0.0.1", []string{"198.51.100.9, junk, 10.0.0.2"}, "10.0.0.2"},
		{"a trusted proxy without the header", "10.0.0.1", nil, "10.0.0.1"},
		{"IPv4 in IPv6", "::ffff:10.0.0.1", []string{"::ffff:198.51.100.9"}, "198.51.100.9"},
	} {
		if got := clientAddress(addr(tc.peer).Unmap(), tc.xff, proxies); got != addr(tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, got, tc.want)
		}
	}
}

// The throttle: burst tries, one back per refill, a good login's try
// given back, IPv6 counted by /64, and never more than maxThrottled
// addresses remembered.
func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	th := newThrottle(2, time.Minute)
	for i := range 2 {
		if _, wait := th.try("192.0.2.1", t0); wait != 0 {
			t.Fatalf("try %d waits %s", i+1, wait)
		}
	}
	if _, wait := th.try("192.0.2.1", t0); wait != time.Minute {
		t.Fatalf("the third try waits %s, want 1m", wait)
	}
	if _, wait := th.try("192.0.2.2", t0); wait != 0 {
		t.Fatalf("another address waits %s", wait)
	}
	if _, wait := th.try("192.0.2.1", t0.Add(45*time.Second)); wait != 15*time.Second {
		t.Fatalf("45 s later the wait is %s, want 15s", wait)
	}
	try, wait := th.try("192.0.2.1", t0.Add(time.Minute))
	if wait != 0 {
		t.Fatalf("a refill later the wait is %s", wait)
	}
	try.refund(t0.Add(time.Minute))
	if _, wait := th.try("192.0.2.1", t0.Add(time.Minute)); wait != 0 {
		t.Fatalf("after a refund the wait is %s", wait)
	}

	th = newThrottle(1, time.Minute)
	th.try("2001:db8:1:2::1", t0)
	if _, wait := th.try("2001:db8:1:2:ffff::9", t0); wait == 0 {
		t.Fatal("two addresses of one /64 have a try each")
	}
	if _, wait := th.try("2001:db8:1:3::1", t0); wait != 0 {
		t.Fatal("another /64 shares the first's tries")
	}

	for i := range maxThrottled + 500 {
		th.try(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), t0)
	}
	if n := len(th.buckets); n > maxThrottled {
		t.Fatalf("%d addresses remembered, want at most %d", n, maxThrottled)
	}
}

package config

import (
	"net/netip"
	"reflect"
	"testing"
)

// Trusted proxies (api.trusted_proxies, --trusted-proxy) are CIDRs and
// addresses, repeated or comma-separated.
func TestParseProxies(t *testing.T) {
	got, err := ParseProxies([]string{"10.0.0.0/8, 192.0.2.7", "fd00::1/8", "::ffff:127.0.0.1"})
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("127.0.0.1/32")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseProxies = %v, %v; want %v", got, err, want)
	}
	if _, err := ParseProxies([]string{"proxy.local"}); err == nil {
		t.Fatal("a host name was taken as a proxy")
	}
}

package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/relay"
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

// The file's settings reach the relay's options: retry policies by
// channel and type, delivery modes, categories, and the suppression TTLs,
// dispatch.invalid_address_ttl read as the hard-bounce TTL it was.
func TestRelayOptions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(`routes: {"*": log:///dev/null}
retry: {max_attempts: 4}
channels:
  sms: {max_attempts: 2}
types:
  otp: {delivery: at-most-once, retry: {max_age: 5m}, category: security}
categories:
  security: {required: true}
dispatch: {workers: 8, lease: 2m, invalid_address_ttl: 240h}
limits: {max_recipients: 50}
api: {public_url: 'https://relay.example.com'}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.RelayOptions()
	switch {
	case o.Retry.MaxAttempts != 4 || o.ChannelRetry["sms"].MaxAttempts != 2 || o.TypeRetry["otp"].MaxAge != 5*time.Minute:
		t.Errorf("retry %+v, channels %+v, types %+v", o.Retry, o.ChannelRetry, o.TypeRetry)
	case o.Delivery["otp"] != relay.Mode("at-most-once") || o.TypeCategory["otp"] != "security" || !o.Categories["security"].Required:
		t.Errorf("delivery %v, type categories %v, categories %+v", o.Delivery, o.TypeCategory, o.Categories)
	case o.Workers != 8 || o.Lease != 2*time.Minute || o.MaxRecipients != 50 || o.HardBounceTTL != 240*time.Hour:
		t.Errorf("workers %d, lease %s, max recipients %d, hard bounce TTL %s", o.Workers, o.Lease, o.MaxRecipients, o.HardBounceTTL)
	case o.PublicURL != "https://relay.example.com":
		t.Errorf("public URL %q", o.PublicURL)
	}
}

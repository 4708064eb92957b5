package main

import (
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/providers"
)

// webpush keygen writes a private key only the owner reads and prints its
// public key, which public-key prints again from the file and which a
// webpush route signs with; it never replaces a key (every subscription
// is bound to one).
func TestWebPushKeygen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vapid.pem")
	r := runCLI(t, "", "webpush", "keygen", "--key", path)
	if r.code != 0 {
		t.Fatalf("keygen: exit %d: %s", r.code, r.stderr)
	}
	public := strings.TrimSpace(r.stdout)
	raw, err := base64.RawURLEncoding.DecodeString(public)
	if err != nil || len(raw) != 65 || raw[0] != 4 {
		t.Fatalf("keygen printed %q: want the URL-safe base64 of an uncompressed P-256 point (%v)", public, err)
	}
	if !strings.Contains(r.stderr, "applicationServerKey") {
		t.Errorf("keygen's stderr does not say what the key is for: %s", r.stderr)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v mode %v, want 0600", err, fi.Mode())
	}
	before, _ := os.ReadFile(path)

	if r := runCLI(t, "", "webpush", "public-key", "--key", path); r.code != 0 || strings.TrimSpace(r.stdout) != public {
		t.Errorf("public-key: exit %d, %q %s; want %q", r.code, r.stdout, r.stderr, public)
	}
	if _, err := providers.New("webpush+https://push?subject=mailto:ops%40example.com&vapid_key=" + url.QueryEscape(path)); err != nil {
		t.Errorf("a route with the key: %v", err)
	}

	r = runCLI(t, "", "webpush", "keygen", "--key", path)
	if after, _ := os.ReadFile(path); r.code != exitError || !strings.Contains(r.stderr, "exists") || string(after) != string(before) {
		t.Errorf("keygen over an existing key: exit %d %s; the file changed: %v", r.code, r.stderr, string(after) != string(before))
	}
	if r := runCLI(t, "", "webpush", "keygen"); r.code != exitUsage || !strings.Contains(r.stderr, "--key FILE") {
		t.Errorf("keygen without --key: exit %d %s", r.code, r.stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("nope"), 0o600)
	if r := runCLI(t, "", "webpush", "public-key", "--key", bad); r.code != exitError || !strings.Contains(r.stderr, "not a PEM file") {
		t.Errorf("public-key of a bad file: exit %d %s", r.code, r.stderr)
	}
}

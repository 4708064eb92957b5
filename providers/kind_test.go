package providers

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the provider table in ../docs/providers.md from the registry")

// The registry's entries are whole: each kind has its text, shows URLs of
// its own schemes, and no scheme or parameter is claimed twice (New would
// silently pick the first).
func TestKindsAreWhole(t *testing.T) {
	t.Parallel()
	owner := map[string]string{}
	names := map[string]bool{}
	for _, k := range Kinds() {
		if k.Name == "" || k.Summary == "" || k.Keys == "" || k.Example == "" || len(k.URLs) == 0 || len(k.Schemes) == 0 {
			t.Errorf("kind %q lacks a field: %+v", k.Name, k)
		}
		if names[k.Name] {
			t.Errorf("kind name %q registered twice", k.Name)
		}
		names[k.Name] = true
		for _, s := range k.Schemes {
			if o, dup := owner[s]; dup {
				t.Errorf("scheme %q claimed by %s and %s", s, o, k.Name)
			}
			owner[s] = k.Name
			if s != k.Name && !strings.HasPrefix(s, k.Name) {
				t.Errorf("kind %s: scheme %q does not start with the kind's name", k.Name, s)
			}
		}
		for _, shape := range k.URLs {
			scheme, _, _ := strings.Cut(shape, "://")
			if !slices.Contains(k.Schemes, scheme) {
				t.Errorf("kind %s shows %q, not one of its schemes %v", k.Name, shape, k.Schemes)
			}
		}
		seen := map[string]bool{}
		for _, p := range k.Params {
			if p.Name == "" || p.Doc == "" || seen[p.Name] {
				t.Errorf("kind %s: parameter %+v is unnamed, undocumented or listed twice", k.Name, p)
			}
			seen[p.Name] = true
		}
	}
}

// The email-http kind's keys column says yes for exactly the presets that
// honour keys.
func TestEmailKeysMatchPresets(t *testing.T) {
	t.Parallel()
	keys := strings.ToLower(emailHTTPKind.Keys)
	for _, name := range presetNames {
		if says := strings.Contains(keys, name+" yes"); says != emailPresets[name].honours {
			t.Errorf("email-http keys %q: says %s honours keys %v, the preset says %v", emailHTTPKind.Keys, name, says, emailPresets[name].honours)
		}
		if !strings.Contains(keys, name) {
			t.Errorf("email-http keys %q do not mention preset %s", emailHTTPKind.Keys, name)
		}
	}
}

// Every registered scheme reaches its kind, and a scheme outside the
// registry is refused with the registry's whole list.
func TestNewKnowsEveryKind(t *testing.T) {
	t.Parallel()
	var all []string
	for _, k := range Kinds() {
		all = append(all, k.Schemes...)
		for _, s := range k.Schemes {
			// A bare URL of the scheme: whatever is wrong with it, it is
			// not the scheme.
			_, err := New(s + "://")
			if err == nil || strings.Contains(err.Error(), "scheme") {
				t.Errorf("New(%q) = %v, want the %s kind's own complaint", s+"://", err, k.Name)
			}
		}
	}
	want := "(supported: " + strings.Join(all, ", ") + ")"
	for _, raw := range []string{"ftp://x", "webhook+ftp://x", "SMTP2://x", "//x"} {
		_, err := New(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%q) = %v, want an error ending %s", raw, err, want)
		}
	}
}

// httpRecorder is a loopback HTTP server that answers every provider's
// send with a 200 its classification reads as sent, and a token endpoint
// at /token for those that need one.
type httpRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string // Idempotency-Key of each send
}

func startRecorder(t *testing.T) *httpRecorder {
	h := &httpRecorder{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/token" {
			fmt.Fprint(w, `{"access_token":"tok-1","expires_in":3600,"token_type":"Bearer"}`)
			return
		}
		h.mu.Lock()
		h.keys = append(h.keys, r.Header.Get("Idempotency-Key"))
		h.mu.Unlock()
		w.Header().Set("X-Message-Id", "msg-1")
		fmt.Fprint(w, `{"id":"msg-1","sid":"SM1","name":"projects/demo/messages/1","MessageID":"msg-1"}`)
	}))
	t.Cleanup(h.Close)
	return h
}

// loopbackFix points a kind's example at loopback where moving its host is
// not enough (a file to write or read, a TLS server to trust), and checks
// what arrived. Kinds without an entry are HTTP kinds: their host moves to
// the recorder and the recorder must see the key.
type loopbackFix struct {
	adapt func(t *testing.T, u *url.URL, rec *httpRecorder) (ready func(Provider), check func(t *testing.T, key string))
	// address, if set, is the recipient's address for the kind (one that
	// names the recorder), instead of testMessage's.
	address func(t *testing.T, rec *httpRecorder) string
}

var loopbackFixes = map[string]loopbackFix{
	"log": {adapt: func(t *testing.T, u *url.URL, _ *httpRecorder) (func(Provider), func(*testing.T, string)) {
		path := filepath.Join(t.TempDir(), "out.log")
		u.Path = path
		return nil, func(t *testing.T, key string) {
			b, err := os.ReadFile(path)
			if err != nil || bytes.Count(b, []byte("\n")) != 1 || !bytes.Contains(b, []byte(`"key":"`+key+`"`)) {
				t.Errorf("log file %q (%v), want one line with key %s", b, err, key)
			}
		}
	}},
	"smtp": {adapt: func(t *testing.T, u *url.URL, _ *httpRecorder) (func(Provider), func(*testing.T, string)) {
		pass, _ := u.User.Password()
		s := startSMTP(t, smtpServerOpts{tls: startTLSSMTP, user: u.User.Username(), pass: pass})
		u.Host = s.addr
		return func(p Provider) { p.(*SMTP).tlsConfig = &tls.Config{RootCAs: s.roots} },
			func(t *testing.T, key string) {
				if r := s.one(t); !bytes.Contains(r.data, []byte("X-Edgerelay-Key: "+key)) || !r.tls || r.authUser == "" {
					t.Errorf("SMTP server took %q (tls %v, auth %q), want the key over TLS, authenticated", r.data, r.tls, r.authUser)
				}
			}
	}},
	// ses reads its region from the host, which moving it to loopback loses.
	"ses": {adapt: func(t *testing.T, u *url.URL, _ *httpRecorder) (func(Provider), func(*testing.T, string)) {
		q := u.Query()
		q.Set("region", "us-east-1")
		u.RawQuery = q.Encode()
		return nil, nil
	}},
	"fcm": {adapt: func(t *testing.T, u *url.URL, rec *httpRecorder) (func(Provider), func(*testing.T, string)) {
		q := u.Query()
		q.Set("credentials", writeServiceAccount(t, map[string]string{"token_uri": rec.URL + "/token"}))
		u.RawQuery = q.Encode()
		return nil, nil
	}},
	"webpush": {
		adapt: func(t *testing.T, u *url.URL, _ *httpRecorder) (func(Provider), func(*testing.T, string)) {
			q := u.Query()
			key, _ := writeVAPIDKey(t)
			q.Set("vapid_key", key)
			q.Set("allow_private", "true") // the recorder is on loopback
			u.RawQuery = q.Encode()
			return nil, nil
		},
		address: func(t *testing.T, rec *httpRecorder) string { return newBrowserSub(t, rec.URL+"/push/1").json },
	},
	"apns": {
		adapt: func(t *testing.T, u *url.URL, _ *httpRecorder) (func(Provider), func(*testing.T, string)) {
			b := newAPNsBundle(t)
			q := u.Query()
			q.Set("key", b.p8)
			q.Set("ca", b.ca)
			u.RawQuery = q.Encode()
			u.Host = b.srv.Listener.Addr().String()
			return func(p Provider) { p.(*APNs).now = b.clock.Now }, func(t *testing.T, key string) {
				if reqs := b.requests(); len(reqs) != 1 || reqs[0].header.Get("apns-id") != apnsID(key) {
					t.Errorf("the APNs stand-in saw %+v, want one request with the key's apns-id", reqs)
				}
			}
		},
		address: func(*testing.T, *httpRecorder) string { return apnsToken },
	},
}

// Every registered kind builds from its example URL, pointed at a loopback
// server, and delivers one message there carrying the key: the registry's
// examples are real, and every kind is wired into New.
func TestEveryKindSendsFromItsExample(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(k.Example)
			if err != nil {
				t.Fatal(err)
			}
			rec := startRecorder(t)
			var ready func(Provider)
			var check func(*testing.T, string)
			m := testMessage("er1_example_" + k.Name)
			if fix, ok := loopbackFixes[k.Name]; ok {
				ready, check = fix.adapt(t, u, rec)
				if fix.address != nil {
					m.Address = fix.address(t, rec)
				}
			}
			if check == nil {
				if !slices.Contains(k.Schemes, u.Scheme) || !strings.HasSuffix(u.Scheme, "+https") {
					t.Fatalf("kind %s: example %q is not an HTTP URL; give it an entry in loopbackFixes", k.Name, k.Example)
				}
				u.Scheme = strings.TrimSuffix(u.Scheme, "s")
				u.Host = rec.Listener.Addr().String()
				check = func(t *testing.T, key string) {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					if len(rec.keys) != 1 || rec.keys[0] != key {
						t.Errorf("server saw keys %q, want one send with %q", rec.keys, key)
					}
				}
			}
			p := newProvider(t, u.String())
			if ready != nil {
				ready(p)
			}
			if r := send(p, m); r.Outcome != Sent {
				t.Fatalf("%s: %+v", Redact(u.String()), r)
			}
			check(t, m.Key)
		})
	}
}

// The provider table of docs/providers.md is rendered from the registry;
// go test ./providers -run TestDocsProviderTable -update rewrites it.
func TestDocsProviderTable(t *testing.T) {
	t.Parallel()
	const path = "../docs/providers.md"
	const begin, end = "<!-- providers:begin -->\n", "<!-- providers:end -->\n"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(readme), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	got := before + begin + providerTable(Kinds()) + end + after
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != string(readme) {
		t.Fatalf("docs/providers.md's provider table differs from the registry; run go test ./providers -run TestDocsProviderTable -update\n%s", providerTable(Kinds()))
	}
}

// providerTable renders the docs section: one row per kind, then the
// shared parameters.
func providerTable(kinds []Kind) string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	code := func(s string) string { return "`" + s + "`" }
	shared := SharedParams()
	var b strings.Builder
	b.WriteString("<!-- Generated from the registry (providers.Kinds) by `go test ./providers -run TestDocsProviderTable -update`. -->\n\n")
	b.WriteString("| URL | provider | parameters | keys |\n|---|---|---|---|\n")
	for _, k := range kinds {
		urls := make([]string, len(k.URLs))
		for i, u := range k.URLs {
			urls[i] = code(u)
		}
		var own, common []string
		for _, p := range k.Params {
			if slices.Contains(shared, p) {
				common = append(common, code(p.Name))
			} else {
				own = append(own, code(p.Name)+": "+p.Doc)
			}
		}
		params := strings.Join(own, "; ")
		if len(common) > 0 {
			if params != "" {
				params += "; and "
			}
			params += strings.Join(common, ", ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(strings.Join(urls, ", ")), cell(k.Summary), cell(params), cell(k.Keys))
	}
	b.WriteString("\nThe shared parameters, where a provider takes them:\n\n")
	for _, p := range shared {
		fmt.Fprintf(&b, "- `%s`: %s.\n", p.Name, p.Doc)
	}
	b.WriteString("\n")
	return b.String()
}

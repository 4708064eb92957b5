package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"code.dny.dev/ssrf"
	"golang.org/x/net/dns/dnsmessage"
)

// fakeDNS answers A and AAAA queries for hosts from a UDP socket on
// loopback, and returns a resolver that asks it and nothing else: a test
// decides what a name resolves to without touching the network.
func fakeDNS(t *testing.T, hosts map[string][]netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if msg, ok := dnsAnswer(buf[:n], hosts); ok {
				pc.WriteTo(msg, from)
			}
		}
	})
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

func dnsAnswer(query []byte, hosts map[string][]netip.Addr) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	addrs, known := hosts[strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: rcode})
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, false
		}
	}
	msg, err := b.Finish()
	return msg, err == nil
}

// hookServer is a recipient's endpoint on loopback that records what it
// was sent.
type hookServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func startHook(t *testing.T, h http.HandlerFunc) *hookServer {
	t.Helper()
	s := &hookServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Clone(context.Background()))
		s.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		fmt.Fprint(w, `{"id":"hook-1"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *hookServer) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.reqs...)
}

func (s *hookServer) port() string {
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	return port
}

// recipientWebhook builds a to=recipient webhook whose names resolve
// through hosts only.
func recipientWebhook(t *testing.T, query string, hosts map[string][]netip.Addr) *Webhook {
	t.Helper()
	p := newProvider(t, "webhook+http://customers?to=recipient&"+query).(*Webhook)
	endpoint(p).dialer.Resolver = fakeDNS(t, hosts)
	return p
}

var loopback4 = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// With to=recipient, the POST goes to the recipient's own URL, not the
// route's, when the allow-list admits it, signed with the route's secret.
func TestWebhookToRecipientPosts(t *testing.T) {
	t.Parallel()
	hook := startHook(t, nil)
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// allow_private: httptest listens on 127.0.0.1.
	p := recipientWebhook(t, "allow=*.customer.example&allow_private=true&secret="+secret,
		map[string][]netip.Addr{"hooks.customer.example": loopback4})
	m := testMessage("er1_abc")
	m.Channel, m.Address = "webhook", "http://hooks.customer.example:"+hook.port()+"/in?customer=42#frag"
	if err := p.CheckAddress(m.Channel, m.Address); err != nil {
		t.Fatalf("CheckAddress: %v", err)
	}
	r := send(p, m)
	if r.Outcome != Sent || r.MessageID != "hook-1" {
		t.Fatalf("got %s %q (%s)", r.Outcome, r.MessageID, r.Detail)
	}
	reqs := hook.requests()
	if len(reqs) != 1 {
		t.Fatalf("the recipient's endpoint saw %d requests, want 1", len(reqs))
	}
	req := reqs[0]
	if req.Host != "hooks.customer.example:"+hook.port() || req.URL.Path != "/in" || req.URL.RawQuery != "customer=42" {
		t.Errorf("POST went to %s %s?%s", req.Host, req.URL.Path, req.URL.RawQuery)
	}
	if req.Header.Get("Idempotency-Key") != "er1_abc" || req.Header.Get("webhook-id") != "er1_abc" || req.Header.Get("Authorization") != "" {
		t.Errorf("headers %v", req.Header)
	}
	if !strings.HasPrefix(req.Header.Get("webhook-signature"), "v1,") {
		t.Errorf("webhook-signature %q: the route's secret signs recipient POSTs too", req.Header.Get("webhook-signature"))
	}
}

// Without allow_private, a name the allow-list admits but that resolves to
// loopback is refused when the connection is made (the check is on the
// resolved address, so DNS rebinding cannot get past it), for good, with a
// detail that says why; the endpoint sees nothing.
func TestWebhookToRecipientRefusesPrivateAtDial(t *testing.T) {
	t.Parallel()
	hook := startHook(t, nil)
	for _, addrs := range [][]netip.Addr{loopback4, {netip.MustParseAddr("::1")}} {
		p := recipientWebhook(t, "allow=hooks.customer.example", map[string][]netip.Addr{"hooks.customer.example": addrs})
		m := testMessage("k")
		m.Channel, m.Address = "webhook", "http://hooks.customer.example:"+hook.port()+"/in"
		// At accept the name is all there is to judge, and it is allowed.
		if err := p.CheckAddress(m.Channel, m.Address); err != nil {
			t.Fatalf("CheckAddress: %v", err)
		}
		r := send(p, m)
		if r.Outcome != Refused || !r.Permanent || !strings.Contains(r.Detail, "the relay refused to connect") ||
			!strings.Contains(r.Detail, addrs[0].String()) || !strings.Contains(r.Detail, "allow_private=true") {
			t.Errorf("%v: got %s permanent=%v (%s), want a permanent refusal naming the address", addrs, r.Outcome, r.Permanent, r.Detail)
		}
	}
	if n := len(hook.requests()); n != 0 {
		t.Fatalf("the loopback endpoint saw %d requests", n)
	}
}

// A literal loopback address is refused already at accept, even when the
// allow-list names it, unless allow_private=true.
func TestWebhookToRecipientLiteralLoopback(t *testing.T) {
	t.Parallel()
	hook := startHook(t, nil)
	target := hook.URL + "/in" // http://127.0.0.1:PORT/in
	strict := recipientWebhook(t, "allow=127.0.0.1", nil)
	if err := strict.CheckAddress("webhook", target); err == nil || !strings.Contains(err.Error(), "not a public address") {
		t.Errorf("CheckAddress(%s) = %v, want a refusal", target, err)
	}
	m := testMessage("k")
	m.Channel, m.Address = "webhook", target
	if r := send(strict, m); r.Outcome != Refused || !r.Permanent {
		t.Errorf("send without allow_private: %s permanent=%v (%s)", r.Outcome, r.Permanent, r.Detail)
	}
	if n := len(hook.requests()); n != 0 {
		t.Fatalf("the endpoint saw %d requests without allow_private", n)
	}
	open := recipientWebhook(t, "allow=127.0.0.1&allow_private=true", nil)
	if r := send(open, m); r.Outcome != Sent {
		t.Errorf("send with allow_private: %s (%s)", r.Outcome, r.Detail)
	}
	if n := len(hook.requests()); n != 1 {
		t.Fatalf("the endpoint saw %d requests with allow_private, want 1", n)
	}
}

// A recipient's endpoint that redirects is not followed: the POST is not
// re-sent to wherever it points.
func TestWebhookToRecipientRefusesRedirects(t *testing.T) {
	t.Parallel()
	elsewhere := startHook(t, nil)
	hook := startHook(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/stolen", http.StatusTemporaryRedirect)
	})
	p := recipientWebhook(t, "allow=127.0.0.1&allow_private=true", nil)
	m := testMessage("k")
	m.Channel, m.Address = "webhook", hook.URL+"/in"
	r := send(p, m)
	if r.Outcome != Refused || !r.Permanent || r.HTTPStatus != http.StatusTemporaryRedirect || !strings.Contains(r.Detail, "redirects are not followed") {
		t.Errorf("got %s permanent=%v %d (%s)", r.Outcome, r.Permanent, r.HTTPStatus, r.Detail)
	}
	if len(hook.requests()) != 1 || len(elsewhere.requests()) != 0 {
		t.Errorf("requests: recipient %d, redirect target %d; want 1 and 0", len(hook.requests()), len(elsewhere.requests()))
	}
}

// What the allow-list admits, at accept and again at send.
func TestWebhookAllowList(t *testing.T) {
	t.Parallel()
	hosts := recipientWebhook(t, "allow=hooks.example.com,*.customer.example", nil)
	prefixes := newProvider(t, "webhook+https://customers?to=recipient&allow_prefix=https://api.example.com/hooks,https://h.example.com:8443/c/").(*Webhook)
	anyHost := recipientWebhook(t, "allow=*", nil)
	tests := []struct {
		p    *Webhook
		url  string
		want string // "" when admitted
	}{
		{hosts, "https://hooks.example.com/in", ""},
		{hosts, "http://HOOKS.example.com.:8080/in", ""},
		{hosts, "https://a.customer.example/in", ""},
		{hosts, "https://a.b.customer.example/in", ""},
		{hosts, "https://customer.example/in", "allow-list"},
		{hosts, "https://evilcustomer.example/in", "allow-list"},
		{hosts, "https://hooks.example.com.evil.test/in", "allow-list"},
		{hosts, "https://user:pw@hooks.example.com/in", "userinfo"},
		{hosts, "https://hooks.example.com/a/../admin", `".."`},
		{hosts, "https://hooks.example.com/a/%2e%2e/admin", `".."`},
		{hosts, "ftp://hooks.example.com/in", "http(s)"},
		{hosts, "not a url", "http(s)"},
		{hosts, "https://10.0.0.1/in", "allow-list"},
		{prefixes, "https://api.example.com/hooks", ""},
		{prefixes, "https://api.example.com:443/hooks/c42", ""},
		{prefixes, "https://api.example.com/hooks-evil", "allow-list"},
		{prefixes, "https://api.example.com/other", "allow-list"},
		{prefixes, "http://api.example.com/hooks/c42", "https only"},
		{prefixes, "https://h.example.com:8443/c/42", ""},
		{prefixes, "https://h.example.com/c/42", "allow-list"},
		{prefixes, "https://h.example.com:8443/c", "allow-list"},
		{anyHost, "https://anything.example.net/x", ""},
		{anyHost, "http://localhost:8080/x", "loopback"},
		{anyHost, "http://169.254.169.254/latest/meta-data", "not a public address"},
		{anyHost, "http://[::1]/x", "not a public address"},
		{anyHost, "http://[fd00::1]/x", "not a public address"},
		{anyHost, "http://[::ffff:127.0.0.1]/x", "not a public address"},
	}
	for _, tc := range tests {
		err := tc.p.CheckAddress("webhook", tc.url)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: CheckAddress(%s) = %v, want %q", tc.p.Name(), tc.url, err, tc.want)
		}
		if tc.want == "" {
			continue
		}
		m := testMessage("k")
		m.Address = tc.url
		if r := send(tc.p, m); r.Outcome != Refused || !r.Permanent || !strings.Contains(r.Detail, "recipient URL refused") {
			t.Errorf("send to %s: %s permanent=%v (%s)", tc.url, r.Outcome, r.Permanent, r.Detail)
		}
	}
}

// A webhook without to=recipient posts to its own URL: a recipient URL it
// would ignore is refused at accept; other addresses travel in the body.
func TestWebhookFixedURLRefusesRecipientURLs(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "webhook+https://hooks.example.com/notify").(*Webhook)
	if err := p.CheckAddress("webhook", "https://customer.example/hook"); err == nil || !strings.Contains(err.Error(), "to=recipient") {
		t.Errorf("a recipient URL: %v", err)
	}
	for _, a := range []string{"ada@example.com", "+15550100", "#ops"} {
		if err := p.CheckAddress("email", a); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

// The guard refuses every non-public range, whatever resolves to it (a
// unit check: these addresses are never dialled in tests).
func TestPublicOnlyGuard(t *testing.T) {
	t.Parallel()
	e := &httpEndpoint{timeout: time.Second}
	newClient(e)
	e.publicOnly()
	for _, a := range []string{"127.0.0.1:80", "10.1.2.3:443", "172.16.0.1:80", "192.168.1.1:80", "169.254.169.254:80",
		"100.64.0.1:80", "0.0.0.0:80", "[::1]:80", "[fc00::1]:80", "[fe80::1]:80", "[::ffff:10.0.0.1]:80", "[64:ff9b::7f00:1]:80"} {
		err := e.dialer.Control("tcp"+map[bool]string{true: "6", false: "4"}[strings.HasPrefix(a, "[")], a, nil)
		var refused dialRefused
		if !errors.As(err, &refused) || !errors.Is(err, ssrf.ErrProhibitedIP) {
			t.Errorf("%s: %v, want a refusal", a, err)
		}
	}
	for _, a := range []string{"93.184.215.14:443", "[2606:4700::1111]:8443"} {
		if err := e.dialer.Control("tcp"+map[bool]string{true: "6", false: "4"}[strings.HasPrefix(a, "[")], a, nil); err != nil {
			t.Errorf("%s: %v, want allowed", a, err)
		}
	}
}

// A to=recipient webhook must say what it may call, and must not hand the
// route's credentials to every recipient.
func TestWebhookRecipientURLErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"webhook+https://c?to=recipient", `needs parameter "allow"`},
		{"webhook+https://c?allow=a.example", `"allow" applies only with to=recipient`},
		{"webhook+https://c?allow_private=true", `"allow_private" applies only with to=recipient`},
		{"webhook+https://c?to=everyone", `"to": "everyone" is neither route nor recipient`},
		{"webhook+https://c?to=recipient&allow=a.example&token=t", "token or userinfo"},
		{"webhook+https://u:p@c?to=recipient&allow=a.example", "token or userinfo"},
		{"webhook+https://c?to=recipient&allow=https://a.example", `"https://a.example" is not a host name`},
		{"webhook+https://c?to=recipient&allow=a.example:8080", "is not a host name"},
		{"webhook+https://c?to=recipient&allow=a.example,", `"" is not a host name`},
		{"webhook+https://c?to=recipient&allow_prefix=http://a.example/", "is http on a webhook+https route"},
		{"webhook+https://c?to=recipient&allow_prefix=a.example/x", "not an absolute http(s) URL"},
		{"webhook+https://c?to=recipient&allow_prefix=https://a.example/x?y=1", "scheme, host, port and path only"},
		{"webhook+https://c?to=recipient&allow=a.example&allow_private=yes", `"yes" is neither true nor false`},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q) = %v, want …%s…", c.url, err, c.want)
		}
	}
}

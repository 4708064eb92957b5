package providers

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// rcptBehaviour is what the test server does with a message to one
// recipient.
type rcptBehaviour int

const (
	accept             rcptBehaviour = iota
	reject550                        // RCPT: 550 5.1.1, no such user
	reject450                        // RCPT: 450 4.2.1, try later
	reject451                        // RCPT: 451 4.7.1, a rate limit: send less
	rejectData452                    // end of DATA: 452 4.3.1
	dropAfterData                    // take the message, close without a reply
	hangAfterData                    // take the message, never reply
	dropFirstAfterData               // as dropAfterData for the first message, then accept
)

// smtpTLS is how the test server offers TLS.
type smtpTLS int

const (
	plainSMTP    smtpTLS = iota // no TLS at all
	startTLSSMTP                // STARTTLS advertised
	implicitSMTP                // TLS from the first byte (smtps)
)

// received is one message the test server took.
type received struct {
	from, to string
	data     []byte
	tls      bool // the message came over TLS
	authUser string
}

// smtpServer is an in-process go-smtp server on a loopback port.
type smtpServer struct {
	addr  string
	roots *x509.CertPool // trusts the server's certificate

	user, pass string                   // AUTH PLAIN required when user is set
	behave     map[string]rcptBehaviour // by recipient; read-only once serving
	got        chan received            // every message taken
	release    chan struct{}            // closed at the end of the test: hangs end

	mu    sync.Mutex
	taken map[string]int // messages taken, by recipient
	conns []*gosmtp.Conn // every connection, in the order they came
}

// connections is how many connections the server has had.
func (s *smtpServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// hangUp closes every connection, as a server does with idle sessions.
func (s *smtpServer) hangUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

type smtpServerOpts struct {
	tls        smtpTLS
	user, pass string
	behave     map[string]rcptBehaviour
}

// startSMTP runs a test SMTP server until the end of the test.
func startSMTP(t *testing.T, o smtpServerOpts) *smtpServer {
	t.Helper()
	cert, roots := testCert(t)
	s := &smtpServer{
		roots: roots, user: o.user, pass: o.pass, behave: o.behave,
		got: make(chan received, 16), release: make(chan struct{}), taken: map[string]int{},
	}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(c *gosmtp.Conn) (gosmtp.Session, error) {
		s.mu.Lock()
		if !slices.Contains(s.conns, c) { // a session starts again on its connection after STARTTLS
			s.conns = append(s.conns, c)
		}
		s.mu.Unlock()
		return &smtpSession{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	switch o.tls {
	case startTLSSMTP:
		srv.TLSConfig = cfg
	case implicitSMTP:
		ln = tls.NewListener(ln, cfg)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() {
		close(s.release)
		srv.Close()
		// Close misses the listener when Serve has not registered it yet.
		ln.Close()
		wg.Wait()
	})
	return s
}

// one waits for the next message the server takes.
func (s *smtpServer) one(t *testing.T) received {
	t.Helper()
	select {
	case r := <-s.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the server received no message")
		return received{}
	}
}

// none checks that the server took no message. Call it after Send has
// returned: the server records a message before it replies.
func (s *smtpServer) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.got:
		t.Errorf("the server received a message for %s, want none", r.to)
	default:
	}
}

type smtpSession struct {
	s        *smtpServer
	conn     *gosmtp.Conn
	authUser string
	from     string
	to       []string
}

var _ gosmtp.AuthSession = (*smtpSession)(nil)

func (ss *smtpSession) AuthMechanisms() []string {
	if ss.s.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *smtpSession) Auth(mech string) (sasl.Server, error) {
	if ss.s.user == "" || mech != sasl.Plain {
		return nil, gosmtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != ss.s.user || pass != ss.s.pass {
			return gosmtp.ErrAuthFailed
		}
		ss.authUser = user
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *gosmtp.MailOptions) error {
	if ss.s.user != "" && ss.authUser == "" {
		return gosmtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	switch ss.s.behave[to] {
	case reject550:
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	case reject450:
		return &gosmtp.SMTPError{Code: 450, EnhancedCode: gosmtp.EnhancedCode{4, 2, 1}, Message: "mailbox busy, try later"}
	case reject451:
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "rate limited, slow down"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(ss.to) != 1 {
		return &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 5, 3}, Message: "one recipient per message"}
	}
	b := ss.s.behave[ss.to[0]]
	if b == rejectData452 {
		return &gosmtp.SMTPError{Code: 452, EnhancedCode: gosmtp.EnhancedCode{4, 3, 1}, Message: "insufficient system storage"}
	}
	_, isTLS := ss.conn.TLSConnectionState()
	ss.s.mu.Lock()
	ss.s.taken[ss.to[0]]++
	first := ss.s.taken[ss.to[0]] == 1
	ss.s.mu.Unlock()
	ss.s.got <- received{from: ss.from, to: ss.to[0], data: data, tls: isTLS, authUser: ss.authUser}
	switch {
	case b == dropAfterData, b == dropFirstAfterData && first:
		ss.conn.Conn().Close()
	case b == hangAfterData:
		<-ss.s.release
	}
	return nil
}

func (ss *smtpSession) Reset()        { ss.from, ss.to = "", nil }
func (ss *smtpSession) Logout() error { return nil }

var testCertOnce = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "edgerelay test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
})

// testCert is a self-signed certificate for 127.0.0.1 and a pool that
// trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	cert, err := testCertOnce()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	return cert, roots
}

// newSMTP builds the SMTP provider rawURL describes; trust, when set,
// replaces the system roots.
func newSMTP(t *testing.T, rawURL string, trust *x509.CertPool) *SMTP {
	t.Helper()
	p, ok := newProvider(t, rawURL).(*SMTP)
	if !ok {
		t.Fatalf("New(%q) is not *SMTP", Redact(rawURL))
	}
	if trust != nil {
		p.tlsConfig = &tls.Config{RootCAs: trust}
	}
	return p
}

// parsedMail is what a test reads back from a received message.
type parsedMail struct {
	header     mail.Header
	text, html string
}

func parseMail(t *testing.T, data []byte) parsedMail {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("received message does not parse: %v\n%s", err, data)
	}
	pm := parsedMail{header: m.Header}
	mediaType, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("Content-Type: %v", err)
	}
	if !strings.HasPrefix(mediaType, "multipart/") {
		pm.text = decodeBody(t, m.Header.Get("Content-Transfer-Encoding"), m.Body)
		return pm
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return pm
		}
		if err != nil {
			t.Fatal(err)
		}
		// NextPart has already undone quoted-printable.
		body := decodeBody(t, part.Header.Get("Content-Transfer-Encoding"), part)
		switch ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type")); ct {
		case "text/plain":
			pm.text = body
		case "text/html":
			pm.html = body
		}
	}
}

func decodeBody(t *testing.T, cte string, r io.Reader) string {
	t.Helper()
	if strings.EqualFold(cte, "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(string(b), "\r\n")
}

func smtpURL(scheme, userinfo, addr, extra string) string {
	u := scheme + "://"
	if userinfo != "" {
		u += userinfo + "@"
	}
	u += addr + "?from=Relay+%3Crelay%40example.com%3E"
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func TestSMTPSend(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)

	m := testMessage("er1_0123abcd")
	m.Subject = "Paid: €12"
	m.Body = "Thanks, Ada.\nYour receipt is attached."
	m.HTML = "<p>Thanks, <b>Ada</b>.</p>"
	res := send(p, m)
	if res.Outcome != Sent || res.Permanent || res.HTTPStatus != 0 {
		t.Fatalf("Send = %+v, want Sent", res)
	}
	if !strings.HasPrefix(res.Response, "250 ") || !strings.HasPrefix(res.Detail, "250 ") {
		t.Errorf("Response %q, Detail %q: want the server's 250 reply", res.Response, res.Detail)
	}
	got := s.one(t)
	if got.from != "relay@example.com" || got.to != "ada@example.com" {
		t.Errorf("envelope %s -> %s, want relay@example.com -> ada@example.com", got.from, got.to)
	}
	pm := parseMail(t, got.data)
	const wantID = "<er1_0123abcd@example.com>"
	if id := pm.header.Get("Message-Id"); id != wantID || res.MessageID != wantID {
		t.Errorf("Message-ID %q, Result.MessageID %q, want %q", id, res.MessageID, wantID)
	}
	if k := pm.header.Get("X-Edgerelay-Key"); k != m.Key {
		t.Errorf("X-Edgerelay-Key = %q, want %q", k, m.Key)
	}
	from, err := pm.header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Address != "relay@example.com" || from[0].Name != "Relay" {
		t.Errorf("From = %v (%v), want Relay <relay@example.com>", from, err)
	}
	to, err := pm.header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Address != m.Address {
		t.Errorf("To = %v (%v), want %s", to, err, m.Address)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(pm.header.Get("Subject"))
	if err != nil || subject != m.Subject {
		t.Errorf("Subject = %q (%v), want %q", subject, err, m.Subject)
	}
	if pm.text != strings.ReplaceAll(m.Body, "\n", "\r\n") || pm.html != m.HTML {
		t.Errorf("bodies text %q, html %q; want %q, %q", pm.text, pm.html, m.Body, m.HTML)
	}

	// The same key gives the same Message-ID on every attempt; another key
	// another one. A text-only message has a single part.
	m.HTML = ""
	m.Attempt = 2
	if res := send(p, m); res.Outcome != Sent || res.MessageID != wantID {
		t.Fatalf("second Send = %+v, want Sent with %s", res, wantID)
	}
	again := parseMail(t, s.one(t).data)
	if id := again.header.Get("Message-Id"); id != wantID {
		t.Errorf("second attempt's Message-ID = %q, want %q", id, wantID)
	}
	if again.html != "" || again.text != strings.ReplaceAll(m.Body, "\n", "\r\n") {
		t.Errorf("text-only message: text %q, html %q", again.text, again.html)
	}
	if res := send(p, testMessage("er1_ffff")); res.Outcome != Sent || res.MessageID != "<er1_ffff@example.com>" {
		t.Fatalf("Send with another key = %+v", res)
	}
	if id := parseMail(t, s.one(t).data).header.Get("Message-Id"); id != "<er1_ffff@example.com>" {
		t.Errorf("another key's Message-ID = %q", id)
	}
}

func TestSMTPStartTLSAuth(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{tls: startTLSSMTP, user: "relay", pass: "p@ss:w%rd"})
	// starttls=required is the default.
	p := newSMTP(t, smtpURL("smtp", "relay:p%40ss%3Aw%25rd", s.addr, ""), s.roots)
	if res := send(p, testMessage("er1_tls")); res.Outcome != Sent {
		t.Fatalf("Send = %+v, want Sent", res)
	}
	if got := s.one(t); !got.tls || got.authUser != "relay" {
		t.Errorf("message arrived with tls %v, authenticated as %q; want TLS and relay", got.tls, got.authUser)
	}

	bad := newSMTP(t, smtpURL("smtp", "relay:wrong", s.addr, ""), s.roots)
	res := send(bad, testMessage("er1_tls"))
	if res.Outcome != Refused || !res.Permanent || !strings.HasPrefix(res.Detail, "authentication failed: 535") {
		t.Errorf("wrong password: %+v, want a permanent Refused, authentication failed: 535", res)
	}
	if !strings.HasPrefix(res.Response, "535 ") {
		t.Errorf("wrong password: Response %q, want the server's reply, its code first", res.Response)
	}
	if strings.Contains(res.Response+res.Detail, "wrong") {
		t.Errorf("the result quotes the password: %+v", res)
	}
	s.none(t)

	// The server's certificate is not trusted without the test's roots.
	untrusted := newSMTP(t, smtpURL("smtp", "relay:p%40ss%3Aw%25rd", s.addr, ""), nil)
	if res := send(untrusted, testMessage("er1_tls")); res.Outcome != Refused || res.Permanent ||
		!strings.HasPrefix(res.Detail, "tls handshake failed") {
		t.Errorf("untrusted certificate: %+v, want Refused, tls handshake failed", res)
	}
	s.none(t)
}

func TestSMTPImplicitTLS(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{tls: implicitSMTP, user: "relay", pass: "secret"})
	p := newSMTP(t, smtpURL("smtps", "relay:secret", s.addr, ""), s.roots)
	if res := send(p, testMessage("er1_smtps")); res.Outcome != Sent {
		t.Fatalf("Send = %+v, want Sent", res)
	}
	if got := s.one(t); !got.tls || got.authUser != "relay" {
		t.Errorf("message arrived with tls %v, authenticated as %q; want TLS and relay", got.tls, got.authUser)
	}

	untrusted := newSMTP(t, smtpURL("smtps", "relay:secret", s.addr, ""), nil)
	if res := send(untrusted, testMessage("er1_smtps")); res.Outcome != Refused || res.Permanent ||
		!strings.HasPrefix(res.Detail, "tls handshake failed") {
		t.Errorf("untrusted certificate: %+v, want Refused, tls handshake failed", res)
	}
	s.none(t)
}

func TestSMTPStartTLSMissing(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{tls: plainSMTP})
	for _, extra := range []string{"", "starttls=required"} {
		p := newSMTP(t, smtpURL("smtp", "", s.addr, extra), s.roots)
		res := send(p, testMessage("er1_plain"))
		// A configuration mistake: failed for good, not retried.
		if res.Outcome != Refused || !res.Permanent || !strings.Contains(res.Detail, "STARTTLS") {
			t.Errorf("%q against a server without STARTTLS: %+v, want a permanent Refused naming STARTTLS", extra, res)
		}
		if err := p.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "does not offer STARTTLS") {
			t.Errorf("%q: Probe against a server without STARTTLS: %v, want it named", extra, err)
		}
		s.none(t)
	}
	// Opportunistic goes ahead in clear text.
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=opportunistic"), s.roots)
	if res := send(p, testMessage("er1_plain")); res.Outcome != Sent {
		t.Fatalf("opportunistic: %+v, want Sent", res)
	}
	if got := s.one(t); got.tls {
		t.Error("opportunistic against a server without STARTTLS: message came over TLS?")
	}
	if err := p.Probe(context.Background()); err != nil {
		t.Errorf("opportunistic: Probe: %v, want nil", err)
	}
	s.none(t) // a probe sends nothing
}

func TestSMTPRefusals(t *testing.T) {
	t.Parallel()
	behave := map[string]rcptBehaviour{
		"gone@example.com": reject550,
		"busy@example.com": reject450,
		"slow@example.com": reject451,
		"full@example.com": rejectData452,
		"drop@example.com": dropAfterData,
		"hang@example.com": hangAfterData,
	}
	cases := []struct {
		to        string
		outcome   Outcome
		permanent bool
		invalid   bool
		detail    string
		delivered bool // the server took the message
		// overloaded: the reply asks the relay to send less (its window
		// for this server shrinks).
		overloaded bool
	}{
		{"gone@example.com", Refused, true, true, "550 5.1.1 no such user", false, false},
		{"busy@example.com", Refused, false, false, "450 4.2.1 mailbox busy, try later", false, false},
		{"slow@example.com", Refused, false, false, "451 4.7.1 rate limited, slow down", false, true},
		{"full@example.com", Refused, false, false, "452 4.3.1 insufficient system storage", false, false},
		{"drop@example.com", Unknown, false, false, "connection lost after the message was sent", true, false},
		{"hang@example.com", Unknown, false, false, "timeout after the message was sent", true, false},
	}
	for _, c := range cases {
		t.Run(c.to, func(t *testing.T) {
			t.Parallel()
			s := startSMTP(t, smtpServerOpts{behave: behave})
			p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&timeout=1s"), nil)
			m := testMessage("er1_" + c.to)
			m.Address = c.to
			res := send(p, m)
			if res.Outcome != c.outcome || res.Permanent != c.permanent || res.InvalidAddress != c.invalid ||
				res.Detail != c.detail || res.HTTPStatus != 0 || res.Overloaded != c.overloaded {
				t.Errorf("Send = %+v\nwant %s, permanent %v, invalid address %v, detail %q, overloaded %v",
					res, c.outcome, c.permanent, c.invalid, c.detail, c.overloaded)
			}
			if c.outcome == Refused && !strings.HasPrefix(c.detail, "connection") && !strings.HasPrefix(res.Response, c.detail) {
				t.Errorf("Response = %q, want the server's reply %q", res.Response, c.detail)
			}
			if c.delivered {
				// Unknown is the truth here: the server has the message.
				if got := s.one(t); got.to != c.to {
					t.Errorf("server took a message for %s, want %s", got.to, c.to)
				}
			}
		})
	}
	t.Run("cancelled while waiting for the reply", func(t *testing.T) {
		t.Parallel()
		s := startSMTP(t, smtpServerOpts{behave: behave})
		p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
		m := testMessage("er1_cancel")
		m.Address = "hang@example.com"
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan Result, 1)
		go func() { done <- p.Send(ctx, m) }()
		if got := s.one(t); got.to != m.Address {
			t.Fatalf("server took a message for %s", got.to)
		}
		cancel()
		if res := <-done; res.Outcome != Unknown || res.Detail != "cancelled after the message was sent" {
			t.Errorf("Send = %+v, want Unknown, cancelled after the message was sent", res)
		}
	})
}

// lostDotConn loses the connection on the write that ends DATA, having
// sent all of it but the final ".\r\n": the way a reset met mid-write
// leaves it.
type lostDotConn struct{ net.Conn }

func (c lostDotConn) Write(p []byte) (int, error) {
	if !bytes.HasSuffix(p, []byte("\r\n.\r\n")) {
		return c.Conn.Write(p)
	}
	n, _ := c.Conn.Write(p[:len(p)-3])
	c.Conn.Close()
	return n, net.ErrClosed
}

// go-mail ignores a failed write of the end of DATA and reports only the
// failed read that follows; the message did not go, and that is Refused.
func TestSMTPLostBeforeEndOfData(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return lostDotConn{c}, nil
	}
	res := send(p, testMessage("er1_lost"))
	if res.Outcome != Refused || res.Permanent || res.Detail != "connection lost while the message was being sent" {
		t.Errorf("Send = %+v, want Refused, connection lost while the message was being sent", res)
	}
	s.none(t)
}

func TestSMTPNoConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newSMTP(t, smtpURL("smtp", "", addr, "starttls=none"), nil)
	if res := send(p, testMessage("er1_x")); res.Outcome != Refused || res.Permanent || res.Detail != "connection refused" {
		t.Errorf("closed port: %+v, want Refused, connection refused", res)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res := p.Send(ctx, testMessage("er1_x")); res.Outcome != Refused || res.Detail != "cancelled before the message was sent" {
		t.Errorf("cancelled context: %+v, want Refused, cancelled before the message was sent", res)
	}

	s := startSMTP(t, smtpServerOpts{})
	p = newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	for _, m := range []*Message{{Key: "", Address: "a@example.com"}, {Key: "k"}} {
		if res := send(p, m); res.Outcome != Refused || !res.Permanent {
			t.Errorf("Send(%+v) = %+v, want a permanent Refused", m, res)
		}
	}
	m := testMessage("er1_x")
	m.Address = "not an address"
	if res := send(p, m); res.Outcome != Refused || !res.Permanent || !res.InvalidAddress {
		t.Errorf("bad address: %+v, want a permanent Refused for an invalid address", res)
	}
	s.none(t)
}

// return_path makes each message's envelope sender name its key (VERP),
// as a bounce report is addressed to it; KeyFromMessageID reads the key
// back from either, whatever bytes it holds.
func TestSMTPReturnPathVERP(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&return_path=bounces%40example.com"), nil)
	key := "k/1 +%é"
	res := send(p, testMessage(key))
	if res.Outcome != Sent {
		t.Fatalf("Send = %+v", res)
	}
	got := s.one(t)
	local, domain, _ := strings.Cut(got.from, "@")
	if domain != "example.com" || !strings.HasPrefix(local, "bounces+") {
		t.Fatalf("envelope sender %q, want bounces+KEY@example.com", got.from)
	}
	for _, id := range []string{res.MessageID, "<" + strings.TrimPrefix(local, "bounces+") + "@x>"} {
		if k, ok := KeyFromMessageID(id); !ok || k != key {
			t.Errorf("KeyFromMessageID(%q) = %q, %v; want %q", id, k, ok, key)
		}
	}
	if _, ok := KeyFromMessageID("<sha256.abc@example.com>"); ok {
		t.Error("a hashed key was read back")
	}
	// A key too long for the local part: the envelope sender is return_path.
	long := strings.Repeat("k", 80)
	if res := send(p, testMessage(long)); res.Outcome != Sent || s.one(t).from != "bounces@example.com" {
		t.Errorf("long key: %+v", res)
	}
	for _, bad := range []string{"nobody", "a+b%40example.com", "Bounces+%3Cb%40example.com%3E"} {
		if _, err := New("smtp://mail.example.com?from=a%40example.com&return_path=" + bad); err == nil || !strings.Contains(err.Error(), `parameter "return_path"`) {
			t.Errorf("return_path=%s: %v", bad, err)
		}
	}
}

func TestSMTPURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, name string }{
		{"smtp://mail.example.com?from=relay%40example.com", "smtp://mail.example.com:587"},
		{"smtps://u:hunter2@mail.example.com?from=relay%40example.com", "smtps://mail.example.com:465"},
		{"smtp://u:hunter2@mail.example.com:2525?from=relay%40example.com&starttls=opportunistic&timeout=3s", "smtp://mail.example.com:2525"},
		{"smtp://[::1]:25?from=relay%40example.com&starttls=none&name=local", "local"},
	} {
		p, err := New(c.url)
		if err != nil {
			t.Errorf("New(%q): %v", Redact(c.url), err)
			continue
		}
		if p.Name() != c.name || p.HonoursKeys() {
			t.Errorf("New(%q): Name() %q, HonoursKeys() %v; want %q, false", Redact(c.url), p.Name(), p.HonoursKeys(), c.name)
		}
	}
	p := newSMTP(t, "smtp://u:hunter2@[::1]:2525?from=relay%40example.com&timeout=3s", nil)
	if p.addr != "[::1]:2525" || p.timeout != 3*time.Second || p.user != "u" || p.pass != "hunter2" || p.policy != 0 {
		t.Errorf("parsed %+v", p)
	}

	for _, c := range []struct{ url, want string }{
		{"smtp://u:hunter2@mail.example.com", `missing parameter "from"`},
		{"smtp://u:hunter2@mail.example.com?from=nobody", `parameter "from": "nobody" is not an email address`},
		{"smtp://u:hunter2@mail.example.com?from=a%40b.c&starttls=maybe", `parameter "starttls": "maybe" is not required, opportunistic or none`},
		{"smtp://u:hunter2@mail.example.com?from=a%40b.c&pasword=hunter2", `unknown parameter "pasword" (supported: concurrency, dkim_domain, dkim_key, dkim_selector, from, list_unsubscribe, name, return_path, starttls, timeout)`},
		{"smtps://u:hunter2@mail.example.com?from=a%40b.c&starttls=required", `parameter "starttls" applies to smtp:// only`},
		{"smtp://u:hunter2@mail.example.com?from=a%40b.c&timeout=soon", `parameter "timeout": "soon" is not a positive Go duration`},
		{"smtp://u:hunter2@mail.example.com?from=a%40b.c&starttls=none", `clear text`},
		{"smtp://u:hunter2@mail.example.com:0?from=a%40b.c", `invalid port "0"`},
		{"smtp://u:hunter2@mail.example.com/x?from=a%40b.c", `smtp URLs take no path`},
		{"smtp://:hunter2@mail.example.com?from=a%40b.c", `userinfo without a user name`},
		{"smtp://u:hunter2@?from=a%40b.c", `missing host`},
		{"smtp://u:hunt#er2@mail.example.com?from=a%40b.c", `provider URL`},
	} {
		_, err := New(c.url)
		if err == nil {
			t.Errorf("New(%q) succeeded, want %s", Redact(c.url), c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want %s", Redact(c.url), err, c.want)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "hunt") {
			t.Errorf("New: error quotes the password: %v", err)
		}
	}
}

func TestMsgIDLeft(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for key, want := range map[string]string{
		"er1_0123abcd": "er1_0123abcd",
		"a.b":          "a.b",
		".a..b.":       "%2Ea.%2Eb%2E",
		"t/e:1 x@y":    "t/e%3A1%20x%40y",
		"100%":         "100%25",
		"100%25":       "100%2525",
		"é":            "%C3%A9",
		"<id>\r\n":     "%3Cid%3E%0D%0A",
	} {
		got := msgIDLeft(key)
		if got != want {
			t.Errorf("msgIDLeft(%q) = %q, want %q", key, got, want)
		}
		if !isDotAtom(got) {
			t.Errorf("msgIDLeft(%q) = %q is not a dot-atom", key, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("msgIDLeft(%q) = msgIDLeft(%q)", key, other)
		}
		seen[got] = key
	}
	long := strings.Repeat("k", 300)
	if got := msgIDLeft(long); !strings.HasPrefix(got, "sha256.") || len(got) != len("sha256.")+64 || got != msgIDLeft(long) {
		t.Errorf("msgIDLeft(300 bytes) = %q", got)
	}
}

// A retry after a lost answer sends the very bytes of the first attempt:
// Date, MIME boundary, List-Unsubscribe and DKIM signature included. The
// Date is the notification's creation (in the past here), not the clock.
func TestSMTPRetrySendsTheSameBytes(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{behave: map[string]rcptBehaviour{"ada@example.com": dropFirstAfterData}})
	k := dkimKeys(t)[0]
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&timeout=2s&dkim_selector=sel&dkim_key="+
		url.QueryEscape(keyFile(t, k.pkcs8))+"&list_unsubscribe="+url.QueryEscape("https://relay.example.com/u/{key}")), nil)
	p.SetCommercial([]string{"newsletter"})
	m := testMessage("er1_retry")
	m.Type, m.Body, m.HTML = "newsletter", "", "<p>Spring offers, <b>Ada</b>.</p>"
	m.Created = time.Date(2026, 3, 1, 10, 30, 0, 0, time.FixedZone("CET", 3600))

	if res := send(p, m); res.Outcome != Unknown {
		t.Fatalf("first attempt = %+v, want Unknown (the answer was lost)", res)
	}
	first := s.one(t).data
	m.Attempt = 2
	if res := send(p, m); res.Outcome != Sent {
		t.Fatalf("second attempt = %+v, want Sent", res)
	}
	second := s.one(t).data
	if !bytes.Equal(first, second) {
		t.Errorf("the retry sent other bytes:\n--- first\n%s\n--- second\n%s", first, second)
	}
	pm := parseMail(t, second)
	if d := pm.header.Get("Date"); d != "Sun, 01 Mar 2026 09:30:00 +0000" {
		t.Errorf("Date = %q, want the creation time in UTC", d)
	}
	if ct := pm.header.Get("Content-Type"); !strings.HasPrefix(ct, "multipart/alternative") {
		t.Errorf("Content-Type = %q, want multipart/alternative", ct)
	}
	if err := msgauthVerify(second, k.record); err != nil {
		t.Errorf("the retry's signature: %v", err)
	}
}

// Every message says it is automatic and carries a text part; commercial
// mail carries List-Unsubscribe, one-click when it is https.
func TestSMTPHeaders(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	https := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&list_unsubscribe="+
		url.QueryEscape("https://relay.example.com/u/{key}?list=news")), nil)
	mailto := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&list_unsubscribe="+
		url.QueryEscape("mailto:unsubscribe@example.com?subject={key}")), nil)
	none := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	for _, p := range []*SMTP{https, mailto, none} {
		p.SetCommercial([]string{"newsletter", "promo"})
	}
	if !https.Unsubscribes() || none.Unsubscribes() {
		t.Errorf("Unsubscribes: %v with list_unsubscribe, %v without", https.Unsubscribes(), none.Unsubscribes())
	}
	const html = `<div style="display:none">preview</div><p>Your receipt, <a href="https://example.com/r/1">online</a>.</p><ul><li>Tea €3</li></ul>`
	for _, c := range []struct {
		name          string
		p             *SMTP
		typ, purpose  string
		key           string
		body          string
		unsubscribe   string // List-Unsubscribe, "" for none
		post          bool   // List-Unsubscribe-Post
		text          string // the text part
		multipartWant bool
	}{
		{name: "transactional", p: https, typ: "invoice.paid", purpose: "receipt", key: "er1_a",
			text: "Your receipt, online (https://example.com/r/1).\r\n\r\n- Tea €3", multipartWant: true},
		{name: "commercial type, https", p: https, typ: "newsletter", purpose: "newsletter", key: "er1_b/c d",
			unsubscribe: "<https://relay.example.com/u/er1_b%2Fc%20d?list=news>", post: true,
			text: "Your receipt, online (https://example.com/r/1).\r\n\r\n- Tea €3", multipartWant: true},
		{name: "commercial purpose, mailto", p: mailto, typ: "offer.sent", purpose: "promo", key: "er1_e",
			unsubscribe: "<mailto:unsubscribe@example.com?subject=er1_e>", body: "Spring offers.",
			text: "Spring offers.", multipartWant: true},
		{name: "commercial without list_unsubscribe", p: none, typ: "newsletter", key: "er1_f", body: "Hi.", text: "Hi."},
	} {
		m := testMessage(c.key)
		m.Type, m.Purpose, m.Body, m.HTML = c.typ, c.purpose, c.body, html
		m.Created = time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
		if c.name == "commercial without list_unsubscribe" {
			m.HTML = ""
		}
		if res := send(c.p, m); res.Outcome != Sent {
			t.Fatalf("%s: Send = %+v", c.name, res)
		}
		pm := parseMail(t, s.one(t).data)
		h := pm.header
		if got := h.Get("Auto-Submitted"); got != "auto-generated" {
			t.Errorf("%s: Auto-Submitted = %q, want auto-generated", c.name, got)
		}
		if got := h.Get("Date"); got != "Sun, 01 Mar 2026 09:30:00 +0000" {
			t.Errorf("%s: Date = %q", c.name, got)
		}
		if got := h.Get("List-Unsubscribe"); got != c.unsubscribe {
			t.Errorf("%s: List-Unsubscribe = %q, want %q", c.name, got, c.unsubscribe)
		}
		if got, want := h.Get("List-Unsubscribe-Post"), map[bool]string{true: "List-Unsubscribe=One-Click"}[c.post]; got != want {
			t.Errorf("%s: List-Unsubscribe-Post = %q, want %q", c.name, got, want)
		}
		if pm.text != c.text {
			t.Errorf("%s: text part %q, want %q", c.name, pm.text, c.text)
		}
		if multipart := pm.html != ""; multipart != c.multipartWant {
			t.Errorf("%s: html part %q", c.name, pm.html)
		}
	}

	base := smtpURL("smtp", "", "mail.example.com", "starttls=none&list_unsubscribe=")
	for _, c := range []struct{ tmpl, want string }{
		{"https://relay.example.com/u", "has no {key}"},
		{"http://relay.example.com/u/{key}", "neither an https URL nor a mailto: address"},
		{"https:///u/{key}", "neither an https URL nor a mailto: address"},
		{"mailto:{key}", "neither an https URL nor a mailto: address"},
		{"https://relay.example.com/u/{key}>", `byte '>' is not allowed`},
		{"https://relay.example.com/ü/{key}", `is not allowed (percent-encode it)`},
		{"", "has no {key}"},
	} {
		_, err := New(base + url.QueryEscape(c.tmpl))
		if err == nil || !strings.Contains(err.Error(), `parameter "list_unsubscribe": `) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("list_unsubscribe=%q: %v, want %s", c.tmpl, err, c.want)
		}
	}
}

// Messages share sessions: one after another they go on one connection,
// with one handshake (here STARTTLS and AUTH), and each is taken once.
func TestSMTPSessionsCarryManyMessages(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{tls: startTLSSMTP, user: "relay", pass: "secret"})
	p := newSMTP(t, smtpURL("smtp", "relay:secret", s.addr, ""), s.roots)
	for i := range 20 {
		m := testMessage(fmt.Sprint("er1_many", i))
		m.Address = fmt.Sprintf("u%d@example.com", i)
		if res := send(p, m); res.Outcome != Sent {
			t.Fatalf("message %d: %+v", i, res)
		}
		if got := s.one(t); got.to != m.Address || !got.tls || got.authUser != "relay" {
			t.Fatalf("message %d: the server took %+v", i, got)
		}
	}
	if n := s.connections(); n != 1 {
		t.Errorf("20 messages took %d connections, want 1", n)
	}
}

// A session the server closed while it waited in the pool costs nothing:
// the message goes on a fresh session, in the same call, once.
func TestSMTPStaleSessionIsReplaced(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	first := testMessage("er1_first")
	if res := send(p, first); res.Outcome != Sent {
		t.Fatalf("first: %+v", res)
	}
	s.one(t)
	s.hangUp()
	second := testMessage("er1_second")
	second.Address = "ben@example.com"
	if res := send(p, second); res.Outcome != Sent {
		t.Fatalf("after the server hung up the idle session: %+v, want Sent on a fresh one", res)
	}
	if got := s.one(t); got.to != "ben@example.com" {
		t.Errorf("the server took %+v", got)
	}
	s.none(t)
	if n := s.connections(); n != 2 {
		t.Errorf("%d connections, want 2: the first, closed by the server, and a fresh one", n)
	}
}

// A session carries at most smtpMaxMessages messages, then is closed: some
// servers limit messages per connection.
func TestSMTPSessionCarriesAtMostItsShare(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	for i := range smtpMaxMessages + 1 {
		m := testMessage(fmt.Sprint("er1_share", i))
		if res := send(p, m); res.Outcome != Sent {
			t.Fatalf("message %d: %+v", i, res)
		}
		s.one(t)
	}
	if n := s.connections(); n != 2 {
		t.Errorf("%d messages took %d connections, want 2: %d on the first, one on a fresh one", smtpMaxMessages+1, n, smtpMaxMessages)
	}
}

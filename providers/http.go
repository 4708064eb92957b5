package providers

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// httpEndpoint is what the HTTP providers share: where to POST, with which
// credentials, over which client. Each provider has its own client, so one
// slow remote cannot exhaust another's connections.
type httpEndpoint struct {
	name    string
	url     string // the URL actually called: no userinfo, no query
	timeout time.Duration
	// concurrency is the most calls in flight (Concurrency).
	concurrency int
	honours     bool
	token       string
	user        string
	pass        string
	basic       bool
	client      *http.Client

	// dial opens the TCP connection and tlsConfig (nil for the defaults)
	// configures TLS; tests swap them to inject faults and trust a test CA.
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig *tls.Config
	// dialer is what dial calls: guard (publicOnly) sets its Control, and
	// tests give it a Resolver of their own.
	dialer *net.Dialer
}

func (e *httpEndpoint) Name() string      { return e.name }
func (e *httpEndpoint) HonoursKeys() bool { return e.honours }
func (e *httpEndpoint) Concurrency() int  { return e.concurrency }

// Close drops idle connections. Calls in flight are unaffected.
func (e *httpEndpoint) Close() error {
	e.client.CloseIdleConnections()
	return nil
}

func newClient(e *httpEndpoint) *http.Client {
	e.dialer = &net.Dialer{Timeout: e.timeout, KeepAlive: 30 * time.Second}
	e.dial = e.dialer.DialContext
	tr := &http.Transport{
		// Never a proxy from the environment: a relay on a host with
		// HTTP_PROXY set must still reach loopback and private endpoints
		// directly, and tests must never leave the machine.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := e.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &trackedConn{Conn: c}, nil
		},
		// TLS is dialled here rather than by the transport so that
		// trackedConn sits above TLS: it must see the request's writes, not
		// the close_notify alert written while a broken connection is torn
		// down (that failure would otherwise read as "request not sent").
		// A custom TLS dialer also keeps the transport on HTTP/1.1, whose
		// write path classify.go relies on.
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := e.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cfg := e.tlsConfig.Clone()
			if cfg == nil {
				cfg = &tls.Config{}
			}
			if cfg.ServerName == "" {
				cfg.ServerName, _, _ = net.SplitHostPort(addr)
			}
			cfg.NextProtos = []string{"http/1.1"}
			tc := tls.Client(c, cfg)
			hctx, cancel := context.WithTimeout(ctx, e.timeout)
			defer cancel()
			if err := tc.HandshakeContext(hctx); err != nil {
				c.Close()
				return nil, tlsError{err}
			}
			return &trackedConn{Conn: tc}, nil
		},
		// Keep an idle connection for every call that may run at once (the
		// dispatcher's workers): fewer made a busy relay redial for most
		// calls (7% of its CPU at 128 workers, in BenchmarkDrain's profile).
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		// A provider's request and its answer are a few hundred bytes to a
		// few KB; a larger write goes past the buffer in one call. 1 KB
		// buffers instead of 4 KB each keep a thousand idle connections to
		// 2 MB, not 8 (an answer's header still may be longer: it is read
		// in parts).
		WriteBufferSize: 1 << 10,
		ReadBufferSize:  1 << 10,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   e.timeout,
		// A redirected POST is either dropped to a GET or re-sent elsewhere;
		// neither is a delivery. The redirect is reported instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// publicOnly makes every connection the endpoint opens refuse an address
// that is not public (loopback, private, link-local, shared, reserved,
// multicast, IPv4-mapped …; the IANA special-purpose registries, as
// code.dny.dev/ssrf keeps them). The check runs on the address about to be
// connected, after name resolution (net.Dialer.Control), so a name that
// passed an allow-list cannot be rebound to 127.0.0.1 or a cloud metadata
// address between the check and the call.
func (e *httpEndpoint) publicOnly() {
	g := ssrf.New(ssrf.WithAnyPort())
	e.dialer.Control = func(network, address string, c syscall.RawConn) error {
		if err := g.Safe(network, address, c); err != nil {
			return dialRefused{err}
		}
		return nil
	}
}

// dialRefused is a connection the endpoint's guard would not open: nothing
// was sent, and calling again cannot change that.
type dialRefused struct{ error }

func (e dialRefused) Unwrap() error { return e.error }

// post sends body with the message's idempotency key and classifies the
// exchange; idKeys name the response fields that may hold the message id.
func (e *httpEndpoint) post(ctx context.Context, key string, body []byte, idKeys ...string) Result {
	r, _ := e.postWith(ctx, postSpec{key: key, body: body, idKeys: idKeys})
	return r
}

// keyedRequest builds a POST carrying the message's idempotency key: the one
// place every HTTP provider's request is made, so that none can be replayed
// by the transport. ok is false, with the result to return, when no request
// may be sent.
func keyedRequest(ctx context.Context, target, key, contentType string, body []byte) (req *http.Request, fail Result, ok bool) {
	if key == "" {
		// Every attempt must carry the same key; a message without one is a
		// bug upstream, and sending it would make retries unsafe.
		return nil, Result{Outcome: Refused, Permanent: true, Detail: "message has no idempotency key"}, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot build request"}, false
	}
	// Without GetBody the transport never replays a request by itself.
	// net/http takes an Idempotency-Key header as licence to resend a POST
	// it has already written when a reused connection fails, and to a
	// remote that does not honour keys that resend is a duplicate. One Send
	// is at most one request on the wire; every resend is the relay's call.
	req.GetBody = nil
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "edgerelay")
	req.Header.Set("Idempotency-Key", key)
	return req, Result{}, true
}

package providers

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	// The server answers with a fixed Date, and an HTTP-date Retry-After is
	// read against the server's Date: the wait is exact, however long a
	// loaded machine takes between building the cases and the answer.
	served := time.Now().UTC().Truncate(time.Second)
	date := served.Add(2 * time.Minute).Format(http.TimeFormat)
	cases := []struct {
		status     int
		retryAfter string
		outcome    Outcome
		permanent  bool
		// RetryAfter must fall in [minWait, maxWait].
		minWait, maxWait time.Duration
	}{
		{200, "", Sent, false, 0, 0},
		{201, "", Sent, false, 0, 0},
		{202, "", Sent, false, 0, 0},
		{204, "", Sent, false, 0, 0},
		{301, "", Refused, true, 0, 0},
		{303, "", Unknown, false, 0, 0},
		{307, "", Refused, true, 0, 0},
		{308, "", Refused, true, 0, 0},
		{400, "", Refused, true, 0, 0},
		{401, "", Refused, true, 0, 0},
		{403, "", Refused, true, 0, 0},
		{404, "", Refused, true, 0, 0},
		{408, "", Refused, false, 0, 0},
		{409, "", Refused, false, 0, 0},
		{410, "", Refused, true, 0, 0},
		{413, "", Refused, true, 0, 0},
		{422, "", Refused, true, 0, 0},
		{425, "", Refused, false, 0, 0},
		{429, "", Refused, false, 0, 0},
		{429, "30", Refused, false, 30 * time.Second, 30 * time.Second},
		{429, date, Refused, false, 120 * time.Second, 120 * time.Second},
		{500, "", Unknown, false, 0, 0},
		{501, "", Unknown, false, 0, 0},
		{502, "", Unknown, false, 0, 0},
		{503, "", Refused, false, 0, 0},
		{503, "7", Refused, false, 7 * time.Second, 7 * time.Second},
		{503, date, Refused, false, 120 * time.Second, 120 * time.Second},
		{503, "soon", Refused, false, 0, 0},
		{504, "", Unknown, false, 0, 0},
	}
	for _, k := range httpKinds {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%d/%s", k.name, c.status, c.retryAfter), func(t *testing.T) {
				t.Parallel()
				var requests atomic.Int32
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					w.Header().Set("Date", served.Format(http.TimeFormat))
					if c.retryAfter != "" {
						w.Header().Set("Retry-After", c.retryAfter)
					}
					if c.status >= 300 && c.status < 400 {
						w.Header().Set("Location", "/elsewhere")
					}
					w.WriteHeader(c.status)
					if c.status != 204 {
						fmt.Fprintf(w, `{"id":"msg-%d"}`, c.status)
					}
				}))
				t.Cleanup(srv.Close)
				p := newProvider(t, kindURL(k.scheme, k.params, srv.Listener.Addr().String(), "/send", ""))

				r := send(p, testMessage("key-1"))
				if r.Outcome != c.outcome || r.Permanent != c.permanent || r.HTTPStatus != c.status {
					t.Errorf("got %s permanent=%v status=%d, want %s permanent=%v status=%d (%s)",
						r.Outcome, r.Permanent, r.HTTPStatus, c.outcome, c.permanent, c.status, r.Detail)
				}
				if want := c.status == 429 || c.status == 503; r.Overloaded != want {
					t.Errorf("Overloaded = %v, want %v: 429 and 503 ask the relay to call less", r.Overloaded, want)
				}
				if r.RetryAfter < c.minWait || r.RetryAfter > c.maxWait {
					t.Errorf("RetryAfter = %v, want within [%v, %v]", r.RetryAfter, c.minWait, c.maxWait)
				}
				wantID := ""
				if c.outcome == Sent && c.status != 204 {
					wantID = fmt.Sprintf("msg-%d", c.status)
				}
				if r.MessageID != wantID {
					t.Errorf("MessageID = %q, want %q", r.MessageID, wantID)
				}
				if c.status != 204 && !strings.Contains(r.Response, fmt.Sprintf("msg-%d", c.status)) {
					t.Errorf("Response = %q, want the body", r.Response)
				}
				if !strings.HasPrefix(r.Detail, fmt.Sprint(c.status)) {
					t.Errorf("Detail = %q, want it to start with the status", r.Detail)
				}
				if n := requests.Load(); n != 1 {
					t.Errorf("server saw %d requests, want 1 (redirects and retries are the relay's)", n)
				}
			})
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"120", 2 * time.Minute},
		{" 5 ", 5 * time.Second},
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"later", 0},
		{"99999999999999999999999", math.MaxInt64},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute}, // RFC 850
		{"Sat Mar  1 12:00:30 2025", 30 * time.Second},    // asctime
	}
	for _, c := range cases {
		if got := ParseRetryAfter(c.in, now); got != c.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// forEachKind runs script behind a provider of every HTTP kind.
func forEachKind(t *testing.T, extra string, script func(c net.Conn, done <-chan struct{}), check func(t *testing.T, p Provider)) {
	t.Helper()
	for _, k := range httpKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			addr := rawServer(t, script)
			check(t, newProvider(t, kindURL(k.scheme, k.params, addr, "/send", extra)))
		})
	}
}

func wantResult(t *testing.T, r Result, outcome Outcome, detail string) {
	t.Helper()
	if r.Outcome != outcome || r.Permanent || r.HTTPStatus != 0 || !strings.Contains(r.Detail, detail) {
		t.Errorf("got %s permanent=%v status=%d detail %q, want %s, not permanent, no status, detail %q (response %q)",
			r.Outcome, r.Permanent, r.HTTPStatus, r.Detail, outcome, detail, r.Response)
	}
	if r.Response == "" {
		t.Error("Response is empty, want the transport error")
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, k := range httpKinds {
		p := newProvider(t, kindURL(k.scheme, k.params, addr, "/send", ""))
		wantResult(t, send(p, testMessage("k")), Refused, "connection refused")
	}
}

func TestClosedAfterReadingRequest(t *testing.T) {
	t.Parallel()
	forEachKind(t, "", func(c net.Conn, _ <-chan struct{}) {
		readRequest(bufio.NewReader(c))
	}, func(t *testing.T, p Provider) {
		wantResult(t, send(p, testMessage("k")), Unknown, "connection closed before the answer")
	})
}

func TestResetAfterReadingRequest(t *testing.T) {
	t.Parallel()
	forEachKind(t, "", func(c net.Conn, _ <-chan struct{}) {
		readRequest(bufio.NewReader(c))
		resetOnClose(t, c)
	}, func(t *testing.T, p Provider) {
		wantResult(t, send(p, testMessage("k")), Unknown, "connection closed before the answer")
	})
}

// A reset that arrives before the client writes must be Refused, even for
// a request small enough to sit in the transport's write buffer when
// httptrace reports it written: only the flush meets the reset. The dial
// hook waits for the reset, then hides it from the transport's reader
// until the first write, so the order is certain.
func TestResetBeforeRequestWritten(t *testing.T) {
	t.Parallel()
	for _, k := range httpKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			addr := rawServer(t, func(c net.Conn, _ <-chan struct{}) { resetOnClose(t, c) })
			p := newProvider(t, kindURL(k.scheme, k.params, addr, "/send", ""))
			endpoint(p).dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a guard, not a wait
				if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("waiting for the reset: %v", err)
				}
				c.SetReadDeadline(time.Time{})
				return &writeFirstConn{Conn: c, wrote: make(chan struct{})}, nil
			}
			r := send(p, testMessage("k"))
			if r.Outcome != Refused || r.Permanent {
				t.Errorf("got %s permanent=%v (%s: %s), want Refused, not permanent", r.Outcome, r.Permanent, r.Detail, r.Response)
			}
		})
	}
}

// writeFirstConn holds reads back until the first write (or Close), so
// the transport cannot notice a dead connection before it writes to it.
type writeFirstConn struct {
	net.Conn
	once  sync.Once
	wrote chan struct{}
}

func (c *writeFirstConn) Write(p []byte) (int, error) {
	defer c.once.Do(func() { close(c.wrote) })
	return c.Conn.Write(p)
}

func (c *writeFirstConn) Read(p []byte) (int, error) {
	<-c.wrote
	return c.Conn.Read(p)
}

func (c *writeFirstConn) Close() error {
	c.once.Do(func() { close(c.wrote) })
	return c.Conn.Close()
}

// A server that closes on accept races the client's write: either answer
// is right as long as it matches what happened to the write.
func TestClosedOnAccept(t *testing.T) {
	t.Parallel()
	forEachKind(t, "", func(net.Conn, <-chan struct{}) {}, func(t *testing.T, p Provider) {
		r := send(p, testMessage("k"))
		switch r.Outcome {
		case Refused:
			if r.Permanent || !strings.Contains(r.Detail, "before the request was written") {
				t.Errorf("Refused permanent=%v detail %q", r.Permanent, r.Detail)
			}
		case Unknown:
			if r.Detail != "connection closed before the answer" {
				t.Errorf("Unknown with detail %q", r.Detail)
			}
		default:
			t.Errorf("got %s (%s), want Refused or Unknown", r.Outcome, r.Detail)
		}
	})
}

func TestTimeoutAfterRequestWritten(t *testing.T) {
	t.Parallel()
	forEachKind(t, "timeout=200ms", func(c net.Conn, done <-chan struct{}) {
		readRequest(bufio.NewReader(c))
		<-done
	}, func(t *testing.T, p Provider) {
		wantResult(t, send(p, testMessage("k")), Unknown, "timeout after the request was written")
	})
}

func TestCancelAfterRequestWritten(t *testing.T) {
	t.Parallel()
	for _, k := range httpKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr := rawServer(t, func(c net.Conn, done <-chan struct{}) {
				readRequest(bufio.NewReader(c))
				cancel() // the request is in; the caller gives up waiting
				<-done
			})
			p := newProvider(t, kindURL(k.scheme, k.params, addr, "/send", ""))
			wantResult(t, p.Send(ctx, testMessage("k")), Unknown, "cancelled after the request was written")
		})
	}
}

func TestCancelledBeforeSend(t *testing.T) {
	t.Parallel()
	forEachKind(t, "", func(c net.Conn, _ <-chan struct{}) {
		t.Error("the server was reached")
	}, func(t *testing.T, p Provider) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantResult(t, p.Send(ctx, testMessage("k")), Refused, "cancelled before the request was written")
	})
}

func TestTruncatedSuccess(t *testing.T) {
	t.Parallel()
	forEachKind(t, "", func(c net.Conn, _ <-chan struct{}) {
		readRequest(bufio.NewReader(c))
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"abc")
	}, func(t *testing.T, p Provider) {
		r := send(p, testMessage("k"))
		if r.Outcome != Sent || r.HTTPStatus != 200 || r.MessageID != "" || !strings.Contains(r.Detail, "unreadable") {
			t.Errorf("got %s status=%d id=%q detail %q, want Sent, 200, no id, a note", r.Outcome, r.HTTPStatus, r.MessageID, r.Detail)
		}
		if r.Response != `{"id":"abc` {
			t.Errorf("Response = %q, want the partial body", r.Response)
		}
	})
}

func TestSuccessWithoutJSON(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("ok ", 3000)) // also longer than Response keeps
	}))
	t.Cleanup(srv.Close)
	p := newProvider(t, "webhook+"+srv.URL)
	r := send(p, testMessage("k"))
	if r.Outcome != Sent || r.MessageID != "" || !strings.Contains(r.Detail, "not JSON") || len(r.Response) != maxResponse {
		t.Errorf("got %s id=%q detail %q len(Response)=%d", r.Outcome, r.MessageID, r.Detail, len(r.Response))
	}
}

// Go's transport resends a POST carrying an Idempotency-Key by itself when
// a reused connection fails after the request was written. A provider must
// not: the second request here is written once and ends Unknown.
func TestNoTransparentReplay(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	addr := rawServer(t, func(c net.Conn, _ <-chan struct{}) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			if requests.Add(1) == 2 {
				resetOnClose(t, c)
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	p := newProvider(t, "webhook+http://"+addr+"/send")
	if r := send(p, testMessage("k1")); r.Outcome != Sent {
		t.Fatalf("first send: %s (%s)", r.Outcome, r.Detail)
	}
	var writes atomic.Int32
	var reused atomic.Bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if info.Reused {
				reused.Store(true)
			}
		},
		WroteRequest: func(httptrace.WroteRequestInfo) { writes.Add(1) },
	})
	r := p.Send(ctx, testMessage("k2"))
	if r.Outcome != Unknown || writes.Load() != 1 {
		t.Errorf("got %s (%s) after %d writes, want Unknown after 1", r.Outcome, r.Detail, writes.Load())
	}
	if !reused.Load() {
		t.Log("the connection was not reused this time, so no replay was possible")
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"tls-1"}`)
	}))
	t.Cleanup(srv.Close)
	hostport := srv.Listener.Addr().String()

	t.Run("untrusted", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, "webhook+https://"+hostport+"/send")
		wantResult(t, send(p, testMessage("k")), Refused, "tls handshake failed")
	})
	t.Run("reset after reading", func(t *testing.T) {
		// Tearing down the TLS connection writes a close_notify alert that
		// fails on the reset socket; that write must not count against the
		// request, which was written whole.
		t.Parallel()
		reset := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			resetOnClose(t, c.(*tls.Conn).NetConn())
			c.(*tls.Conn).NetConn().Close()
		}))
		t.Cleanup(reset.Close)
		p := newProvider(t, "webhook+https://"+reset.Listener.Addr().String()+"/send")
		roots := x509.NewCertPool()
		roots.AddCert(reset.Certificate())
		endpoint(p).tlsConfig.RootCAs = roots
		wantResult(t, send(p, testMessage("k")), Unknown, "connection closed before the answer")
	})
	t.Run("trusted", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, "webhook+https://"+hostport+"/send")
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		endpoint(p).tlsConfig.RootCAs = roots
		if r := send(p, testMessage("k")); r.Outcome != Sent || r.MessageID != "tls-1" {
			t.Errorf("got %s id=%q (%s: %s)", r.Outcome, r.MessageID, r.Detail, r.Response)
		}
	})
}

// The written/not-written decision for errors no loopback test produces.
func TestTransportResult(t *testing.T) {
	t.Parallel()
	dns := &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}
	cases := []struct {
		err     error
		written bool
		outcome Outcome
		detail  string
	}{
		{dns, false, Refused, "dns lookup failed"},
		{context.DeadlineExceeded, false, Refused, "timeout before the request was written"},
		{errors.New("weird"), false, Refused, "connection failed before the request was written"},
		{errors.New("malformed HTTP response"), true, Unknown, "no valid answer after the request was written"},
		{context.DeadlineExceeded, true, Unknown, "timeout after the request was written"},
	}
	for _, c := range cases {
		if r := transportResult(c.err, c.written); r.Outcome != c.outcome || r.Detail != c.detail {
			t.Errorf("transportResult(%v, %v) = %s %q, want %s %q", c.err, c.written, r.Outcome, r.Detail, c.outcome, c.detail)
		}
	}
}

// endpoint reaches the shared HTTP part of a provider, giving it a
// tlsConfig to edit.
func endpoint(p Provider) *httpEndpoint {
	var e *httpEndpoint
	switch p := p.(type) {
	case *Webhook:
		e = p.httpEndpoint
	case *EmailHTTP:
		e = p.httpEndpoint
	}
	if e.tlsConfig == nil {
		e.tlsConfig = new(tls.Config)
	}
	return e
}

// A call that got no answer keeps the transport's error in
// Result.Response (the audit trail), without the URL net/http quotes: a
// chat webhook's path is its credential.
func TestTransportErrorHidesTheURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	reset := rawServer(t, func(c net.Conn, _ <-chan struct{}) {
		readRequest(bufio.NewReader(c))
		resetOnClose(t, c)
	})
	for _, c := range []struct{ url, detail string }{
		{"slack+http://" + refused + slackPath, "connection refused"},
		{"discord+http://" + refused + discordPath, "connection refused"},
		{"slack+http://" + reset + slackPath, "connection closed before the answer"},
		{"discord+http://" + reset + discordPath, "connection closed before the answer"},
	} {
		r := send(newProvider(t, c.url), testMessage("k"))
		if !strings.Contains(r.Detail, c.detail) || !strings.HasPrefix(r.Response, "Post: ") {
			t.Errorf("%s: detail %q, response %q; want %q and the error after Post:", Redact(c.url), r.Detail, r.Response, c.detail)
		}
		if strings.Contains(r.Response, "XXXXsecretXXXX") {
			t.Errorf("%s: the response quotes the URL's secret: %q", Redact(c.url), r.Response)
		}
	}
}

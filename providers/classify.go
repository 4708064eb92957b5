package providers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	// maxResponse is how much of an answer Result.Response keeps.
	maxResponse = 4 << 10
	// maxRead bounds the body read: enough to find a message id and to
	// drain ordinary answers so the connection is reused; a larger body is
	// abandoned with its connection.
	maxRead = 64 << 10
)

// doHTTP performs one HTTP exchange and classifies it. It is the only place
// where an HTTP answer, or its absence, becomes an Outcome:
//
//   - 2xx: Sent, whatever the body holds.
//   - 408, 409, 425, 429, 503: Refused, retryable, with Retry-After;
//     429 and 503 are Overloaded too.
//   - 3xx (but 303) and other 4xx: Refused, permanent.
//   - 303 and 5xx (but 503): Unknown.
//   - no answer: Refused if the request never fully left, Unknown if it did.
func doHTTP(ctx context.Context, client *http.Client, req *http.Request, idKeys ...string) Result {
	if client.Timeout > 0 {
		// The client's timeout as the request's deadline: the same bound,
		// without the two goroutines net/http starts per request to
		// enforce Client.Timeout (a relay with a thousand calls in flight
		// kept 16 MB of stacks for them).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, client.Timeout)
		defer cancel()
		c := *client
		c.Timeout = 0
		client = &c
	}
	var x exchange
	req = req.WithContext(httptrace.WithClientTrace(ctx, x.trace()))
	resp, err := client.Do(req)
	if err != nil {
		// On error the transport has finished with the request's writes
		// (it waits for its write loop), so x is final here.
		return transportResult(err, x.written())
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxRead))
	return responseResult(resp, body, readErr, idKeys)
}

// exchange records whether one request left the client whole. httptrace's
// WroteRequest alone cannot say: it fires once the request is in the
// transport's buffer, before the buffer is flushed to the socket, so a
// reset that arrived first (the flush fails) would pass for a sent
// request. The connection's failed writes settle it.
type exchange struct {
	wrote        atomic.Bool // WroteRequest reported no error
	conn         atomic.Pointer[trackedConn]
	failedBefore atomic.Int64 // conn's failed writes when the request got it
}

func (x *exchange) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if c, ok := info.Conn.(*trackedConn); ok {
				x.failedBefore.Store(c.failedWrites.Load())
				x.conn.Store(c)
			}
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				x.wrote.Store(true)
			}
		},
	}
}

// written reports whether every byte of the request reached the socket.
func (x *exchange) written() bool {
	c := x.conn.Load()
	return x.wrote.Load() && c != nil && c.failedWrites.Load() == x.failedBefore.Load()
}

// trackedConn counts failed writes, the evidence exchange needs. It embeds
// net.Conn (not *net.TCPConn) so that no ReadFrom can bypass Write.
type trackedConn struct {
	net.Conn
	failedWrites atomic.Int64
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.failedWrites.Add(1)
	}
	return n, err
}

// tlsError marks a failed TLS handshake: nothing of the request was sent.
type tlsError struct{ error }

func (e tlsError) Unwrap() error { return e.error }

// transportResult classifies a call that got no HTTP answer.
func transportResult(err error, written bool) Result {
	text := err.Error()
	if ue, ok := err.(*url.Error); ok {
		// net/http quotes the whole URL, and a URL can hold a credential
		// (a chat webhook's path, a bot token): the audit trail keeps what
		// failed, not where.
		text = ue.Op + ": " + ue.Err.Error()
	}
	r := Result{Response: truncate([]byte(text))}
	var netErr net.Error
	timeout := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
	cancelled := errors.Is(err, context.Canceled)
	if !written {
		r.Outcome = Refused
		var dnsErr *net.DNSError
		var tlsErr tlsError
		var refused dialRefused
		switch {
		case errors.As(err, &refused):
			r.Permanent = true
			r.Detail = "the relay refused to connect: " + refused.Error() +
				" (allow_private=true on the route permits non-public addresses)"
		case errors.As(err, &dnsErr):
			r.Detail = "dns lookup failed"
		case errors.Is(err, syscall.ECONNREFUSED):
			r.Detail = "connection refused"
		case errors.As(err, &tlsErr):
			r.Detail = "tls handshake failed"
		case timeout:
			r.Detail = "timeout before the request was written"
		case cancelled:
			r.Detail = "cancelled before the request was written"
		default:
			r.Detail = "connection failed before the request was written"
		}
		return r
	}
	r.Outcome = Unknown
	switch {
	case timeout:
		r.Detail = "timeout after the request was written"
	case cancelled:
		r.Detail = "cancelled after the request was written"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		r.Detail = "connection closed before the answer"
	default:
		r.Detail = "no valid answer after the request was written"
	}
	return r
}

// responseResult classifies an HTTP answer. body is what could be read of
// it and readErr why the rest could not.
func responseResult(resp *http.Response, body []byte, readErr error, idKeys []string) Result {
	code := resp.StatusCode
	r := Result{HTTPStatus: code, Response: truncate(body), Detail: resp.Status}
	if r.Detail == "" {
		r.Detail = strconv.Itoa(code) + " " + http.StatusText(code)
	}
	switch {
	case code >= 200 && code < 300:
		// The provider said yes: a body that is cut short or not JSON
		// changes nothing but the missing message id.
		r.Outcome = Sent
		switch id, isJSON := messageID(body, idKeys); {
		case readErr != nil:
			r.Detail += "; body unreadable (" + readErr.Error() + "), no message id"
		case !isJSON && len(body) > 0:
			r.Detail += "; body is not JSON, no message id"
		default:
			r.MessageID = id
		}
		return r
	case code == http.StatusSeeOther:
		// After a POST, 303 conventionally points at the result of an
		// action already performed.
		r.Outcome = Unknown
		r.Detail += " (redirects are not followed"
		if loc := resp.Header.Get("Location"); loc != "" {
			r.Detail += "; result at " + loc
		}
		r.Detail += ")"
	case code >= 300 && code < 400:
		// Moved: the request was not processed here.
		r.Outcome, r.Permanent = Refused, true
		r.Detail += " (redirects are not followed; point the URL at the final location"
		if loc := resp.Header.Get("Location"); loc != "" {
			r.Detail += ": " + loc
		}
		r.Detail += ")"
	case code == http.StatusTooManyRequests, code == http.StatusServiceUnavailable:
		r.Outcome, r.Overloaded = Refused, true
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly:
		r.Outcome = Refused
	case code == http.StatusConflict:
		// Idempotency-Key draft: a request with this key is still being
		// processed. Asking again later gets its answer.
		r.Outcome = Refused
	case code >= 400 && code < 500:
		r.Outcome, r.Permanent = Refused, true
	default:
		// 500, 502, 504 … and anything outside the known classes: the
		// remote may have acted before failing.
		r.Outcome = Unknown
	}
	// Relative to the server's own clock when it sent one, so clock skew
	// between us does not stretch or shrink an HTTP-date.
	now := time.Now()
	if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		now = t
	}
	r.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	return r
}

// ParseRetryAfter reads a Retry-After value, delta-seconds or HTTP-date,
// as a wait from now (the time the answer was given). It returns 0 when v
// is absent, invalid or in the past; a delay beyond time.Duration's range
// is clamped to its maximum.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > math.MaxInt64/uint64(time.Second) {
			return math.MaxInt64
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}

// messageID finds the first of keys in a JSON object body, as a string
// or a number. isJSON reports whether body was a JSON object at all.
func messageID(body []byte, keys []string) (id string, isJSON bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return "", false
	}
	for _, k := range keys {
		raw, ok := obj[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s, true
		}
		var n json.Number
		if json.Unmarshal(raw, &n) == nil && n != "" && raw[0] != '"' {
			return n.String(), true
		}
	}
	return "", true
}

// truncate keeps the first maxResponse bytes of b, cut on a rune boundary
// so the audit trail stores valid UTF-8.
func truncate(b []byte) string {
	if len(b) <= maxResponse {
		return string(b)
	}
	i := maxResponse
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	return string(b[:i])
}

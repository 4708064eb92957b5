package providers

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	gomail "github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// An SMTP relay is a server of the operator's: the smtp provider keeps a
// few sessions open (its window's worth, Concurrency) and sends message
// after message on each, as a mail server does, instead of paying a TCP
// and TLS handshake, EHLO and AUTH for every message. After a message the
// server took (250 to the end of DATA) the session can carry the next
// transaction at once (RFC 5321 §3.3); after any other outcome it is closed,
// so a session in the pool is always between transactions.
//
// A pooled session may have been closed by the server while it was idle.
// When its first command (MAIL) fails without a reply, nothing of the
// message was sent: Send tries again once on a fresh session, so an idle
// timeout never costs a notification an attempt.
const (
	// smtpMaxIdle is how long a session waits in the pool: below the
	// 5 minutes RFC 5321 §4.5.3.2.7 asks servers to wait, and below the
	// shorter timeouts busy relays use.
	smtpMaxIdle = 30 * time.Second
	// smtpMaxMessages is how many messages one session carries before it
	// is closed: some servers limit messages per connection.
	smtpMaxMessages = 100
)

// pooledSession is one open connection, authenticated and ready for MAIL.
type pooledSession struct {
	client *gomail.Client
	sc     *smtp.Client
	conn   *trackedConn // below TLS: its failed writes tell a sent "." from one that was not
	idle   time.Time    // when it went back to the pool
	sent   int          // messages it carried
	reused bool         // it carried a message before this one
}

// smtpPool holds idle sessions, newest last.
type smtpPool struct {
	mu     sync.Mutex
	idle   []*pooledSession
	closed bool
}

// get returns an idle session, or nil when none is fresh enough.
func (pl *smtpPool) get(now time.Time) *pooledSession {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for len(pl.idle) > 0 {
		s := pl.idle[len(pl.idle)-1]
		pl.idle = pl.idle[:len(pl.idle)-1]
		if now.Sub(s.idle) < smtpMaxIdle {
			s.reused = true
			return s
		}
		go s.quit() // stale, and so is every older one below it: they go too
	}
	return nil
}

// put gives a session back after a message the server took, unless the
// pool is closed, full (keep) or the session has carried its share.
func (pl *smtpPool) put(s *pooledSession, keep int, now time.Time) {
	pl.mu.Lock()
	if pl.closed || len(pl.idle) >= keep || s.sent >= smtpMaxMessages {
		pl.mu.Unlock()
		s.quit()
		return
	}
	s.idle = now
	pl.idle = append(pl.idle, s)
	pl.mu.Unlock()
}

// close quits every idle session; sessions in use are quit when they come
// back.
func (pl *smtpPool) close() {
	pl.mu.Lock()
	idle := pl.idle
	pl.idle, pl.closed = nil, true
	pl.mu.Unlock()
	for _, s := range idle {
		s.quit()
	}
}

// quit ends the session politely (QUIT), then closes its connection.
func (s *pooledSession) quit() {
	_ = s.client.CloseWithSMTPClient(s.sc)
	s.conn.Close()
}

// open dials a session: TCP, TLS (implicit or STARTTLS), EHLO and AUTH.
// ctx bounds the dial; the connection outlives it.
func (p *SMTP) open(ctx context.Context) (*pooledSession, *Result) {
	var conn atomic.Pointer[trackedConn] // set while dialling, read by the AfterFunc below
	dial := func(dctx context.Context, network, _ string) (net.Conn, error) {
		// go-mail's address is host:port unbracketed, wrong for IPv6.
		raw, err := p.dial(dctx, network, p.addr)
		if err != nil {
			return nil, err
		}
		// trackedConn sits below TLS, where a failed write means the bytes
		// (or the TLS record holding them) never reached the server.
		tc := &trackedConn{Conn: raw}
		conn.Store(tc)
		if ctx.Err() != nil {
			tc.Close() // the AfterFunc may have run before the Store
		}
		if !p.implicitTLS {
			return tc, nil
		}
		// A *tls.Conn, so that go-mail's SMTP client knows it is encrypted.
		c := tls.Client(tc, p.tls())
		if err := c.HandshakeContext(dctx); err != nil {
			tc.Close()
			return nil, tlsError{err}
		}
		return c, nil
	}
	opts := []gomail.Option{
		gomail.WithPort(p.port),
		gomail.WithTimeout(p.timeout),
		gomail.WithTLSConfig(p.tls()),
		gomail.WithDialContextFunc(dial),
		// A session in the pool is between transactions (see above): no
		// NOOP before MAIL, no RSET after a message.
		gomail.WithoutNoop(),
		gomail.WithoutRset(),
	}
	if p.implicitTLS {
		opts = append(opts, gomail.WithSSL())
	} else {
		opts = append(opts, gomail.WithTLSPolicy(p.policy))
	}
	if p.user != "" {
		opts = append(opts, gomail.WithUsername(p.user), gomail.WithPassword(p.pass),
			gomail.WithOpportunisticSMTPAuth(smtpAuthPreference...))
	}
	// A client per session: go-mail's Client changes its own auth settings
	// while dialling, so one cannot be shared between concurrent calls.
	client, err := gomail.NewClient(p.host, opts...)
	if err != nil {
		return nil, &Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot configure the smtp client"}
	}
	// Closing the connection when ctx ends bounds the handshake's steps,
	// which go-mail times with its own timeout, not ctx.
	stop := context.AfterFunc(ctx, func() {
		if tc := conn.Load(); tc != nil {
			tc.Close()
		}
	})
	sc, err := client.DialToSMTPClientWithContext(ctx)
	stop()
	if err != nil {
		if tc := conn.Load(); tc != nil {
			tc.Close() // go-mail may leave it open after a failed handshake
		}
		r := smtpDialResult(ctx, err)
		return nil, &r
	}
	return &pooledSession{client: client, sc: sc, conn: conn.Load()}, nil
}

// sendOn sends msg on s and classifies the outcome; stale says s was a
// pooled session the server had closed before the message began (nothing
// was sent: Send tries a fresh one). s goes back to the pool after a message
// the server took, and is closed after anything else.
func (p *SMTP) sendOn(ctx context.Context, s *pooledSession, msg *gomail.Msg, id string) (res Result, stale bool) {
	// go-mail bounds each step with its own timeout; closing the connection
	// when ctx ends bounds the rest.
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	before := s.conn.failedWrites.Load()
	err := s.client.SendWithSMTPClient(s.sc, msg)
	failedWrites := s.conn.failedWrites.Load() - before // before QUIT, whose own write may fail
	intact := stop()                                    // ctx did not close the connection
	if msg.IsDelivered() {
		// The server answered 250 to the end of DATA; an error after that
		// (the connection dropping) changes nothing.
		s.sent++
		if intact && err == nil {
			p.pool.put(s, p.concurrency, time.Now())
		} else {
			s.quit()
		}
		reply := "250 " + msg.ServerResponse()
		return Result{Outcome: Sent, MessageID: "<" + id + ">", Response: truncate([]byte(reply)), Detail: firstLine(reply)}, false
	}
	s.quit()
	var se *gomail.SendError
	if s.reused && ctx.Err() == nil && errors.As(err, &se) && se.ErrorCode() == 0 &&
		(se.Reason == gomail.ErrSMTPMailFrom || se.Reason == gomail.ErrConnCheck) {
		return Result{}, true
	}
	return smtpSendResult(ctx, err, failedWrites), false
}

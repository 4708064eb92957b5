package providers

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/textproto"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	gomail "github.com/wneessen/go-mail"
)

var _ Provider = (*SMTP)(nil)

var smtpKind = &Kind{
	Name: "smtp", Schemes: []string{"smtp", "smtps"},
	URLs: []string{"smtp://user:pass@host:587?from=ADDR[&starttls=required|opportunistic|none]", "smtps://…:465"},
	Summary: "real SMTP (go-mail) with STARTTLS or TLS from the first byte, and AUTH with the URL's userinfo; " +
		"sessions stay open between messages (up to `concurrency` of them, 100 messages each, 30 s idle)",
	Params: append(append([]Param{
		{"from", "the sender, an address with or without a display name (percent-encoded); its domain ends every Message-ID"},
		{"starttls", "`required` (the default), `opportunistic` or `none`; `smtp://` only"}},
		dkimParams...),
		paramListUnsubscribe,
		Param{"return_path", "`bounces@example.com`: VERP: each message's envelope sender is `bounces+KEY@example.com`, " +
			"so a bounce report names its notification even without the original's Message-ID (`POST /v1/bounces`)"},
		paramConcurrency, paramName, paramTimeout),
	Keys: "no: SMTP has none; `Message-ID: <KEY@sender-domain>` and `X-Edgerelay-Key` are the same on every attempt, " +
		"and so is the whole message (Date, MIME boundary, DKIM signature) when the notification's creation time is known, " +
		"so a receiving system can recognise a repeat",
	Example: "smtp://relay:secret@mail.example.com:587?from=Relay+%3Crelay%40example.com%3E",
	build:   newSMTPURL,
}

// Default ports: submission with STARTTLS (RFC 6409) and submissions,
// TLS from the first byte (RFC 8314).
const (
	smtpPort  = 587
	smtpsPort = 465
)

// smtpAuthPreference is go-mail's own auto-discovery order without NTLM
// (which needs a Windows domain the URL cannot carry). go-mail's
// auto-discovery cannot be used as is: with a dial function of our own it
// does not know that an smtps connection is encrypted and refuses PLAIN and
// LOGIN there. PLAIN and LOGIN still refuse to send the password over a
// connection without TLS (except to localhost).
var smtpAuthPreference = []gomail.SMTPAuthType{
	gomail.SMTPAuthSCRAMSHA256PLUS, gomail.SMTPAuthSCRAMSHA256,
	gomail.SMTPAuthSCRAMSHA1PLUS, gomail.SMTPAuthSCRAMSHA1,
	gomail.SMTPAuthCramMD5, gomail.SMTPAuthPlain, gomail.SMTPAuthLogin,
}

// SMTP delivers email to a mail server (smtp://, smtps://) through go-mail,
// one connection and one message per Send. Build it with New:
//
//	smtp://user:pass@mail.example.com:587?from=relay%40example.com&starttls=required
//	smtps://user:pass@mail.example.com:465?from=relay%40example.com
//
// SMTP has no idempotency key, so HonoursKeys is false: a server that lost
// its connection after taking the message will take a retry as a second
// message. Every attempt carries the same Message-ID, <KEY@sender-domain>,
// and an X-Edgerelay-Key header, so that a receiving system (or a human
// reading two copies) can recognise the repeat.
type SMTP struct {
	name        string
	host        string // for certificate checks and AUTH
	addr        string // host:port, as dialled
	port        int
	implicitTLS bool // smtps://
	policy      gomail.TLSPolicy
	user, pass  string // user is "" without userinfo
	from        string
	idDomain    string // the right-hand side of Message-IDs
	timeout     time.Duration
	concurrency int         // the most connections at once (Concurrency)
	dkim        *dkimConfig // nil: no signature
	// unsub gives commercial mail its List-Unsubscribe (SetCommercial,
	// list_unsubscribe=) and the relay's link its place.
	unsub listUnsubscribe
	// returnLocal and returnDomain are return_path's parts ("": the
	// envelope sender is from): a VERP envelope sender per message.
	returnLocal, returnDomain string

	// dial opens the TCP connection and tlsConfig (nil for the defaults)
	// configures TLS; tests swap them to inject faults and trust a test CA.
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig *tls.Config

	pool smtpPool // sessions between messages
}

func (p *SMTP) Name() string { return p.name }

// HonoursKeys is false: SMTP has no idempotency key, and no server
// deduplicates by Message-ID at submission.
func (p *SMTP) HonoursKeys() bool { return false }

// Concurrency is the most messages in flight at once, each on a session of
// its own; as many sessions stay open between messages (smtppool.go).
func (p *SMTP) Concurrency() int { return p.concurrency }

// Close quits the idle sessions; those in use are quit when their message
// is done.
func (p *SMTP) Close() error {
	p.pool.close()
	return nil
}

func newSMTPURL(u *url.URL, q url.Values) (Provider, string) {
	host := u.Hostname()
	if host == "" {
		return nil, "missing host"
	}
	if u.Path != "" && u.Path != "/" {
		return nil, "smtp URLs take no path"
	}
	p := &SMTP{host: host, implicitTLS: u.Scheme == "smtps", port: smtpPort, timeout: defaultTimeout}
	if p.implicitTLS {
		p.port = smtpsPort
	}
	if s := u.Port(); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Sprintf("invalid port %q", s)
		}
		p.port = n
	}
	p.addr = net.JoinHostPort(host, strconv.Itoa(p.port))
	p.name = u.Scheme + "://" + p.addr
	if q.Has("name") {
		if p.name = q.Get("name"); p.name == "" {
			return nil, `parameter "name" is empty`
		}
	}

	p.from = q.Get("from")
	if p.from == "" {
		return nil, `missing parameter "from" (the sender, e.g. from=relay%40example.com)`
	}
	addr, err := mail.ParseAddress(p.from)
	if err != nil {
		return nil, fmt.Sprintf(`parameter "from": %q is not an email address: %v`, p.from, err)
	}
	p.idDomain = addr.Address[strings.LastIndexByte(addr.Address, '@')+1:]
	if !isDotAtom(p.idDomain) {
		// An internationalised or literal domain cannot stand in a
		// Message-ID as it is; any fixed domain keeps ids deterministic.
		p.idDomain = "edgerelay.invalid"
	}

	switch v := q.Get("starttls"); {
	case q.Has("starttls") && p.implicitTLS:
		return nil, `parameter "starttls" applies to smtp:// only (smtps:// is TLS from the first byte)`
	case v == "" || v == "required":
		p.policy = gomail.TLSMandatory
	case v == "opportunistic":
		p.policy = gomail.TLSOpportunistic
	case v == "none":
		p.policy = gomail.NoTLS
	default:
		return nil, fmt.Sprintf(`parameter "starttls": %q is not required, opportunistic or none`, v)
	}

	if v := q.Get("timeout"); q.Has("timeout") {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Sprintf(`parameter "timeout": %q is not a positive Go duration (try 10s or 1500ms)`, v)
		}
		p.timeout = d
	}
	var problem string
	if p.concurrency, problem = parseConcurrency(q, SMTPConcurrency); problem != "" {
		return nil, problem
	}
	if p.dkim, problem = parseDKIM(q, addr.Address[strings.LastIndexByte(addr.Address, '@')+1:]); problem != "" {
		return nil, problem
	}
	if v := q.Get("return_path"); q.Has("return_path") {
		var local, domain string
		a, err := mail.ParseAddress(v)
		if err == nil {
			local, domain, _ = strings.Cut(a.Address, "@")
		}
		if err != nil || a.Name != "" || strings.Contains(local, "+") || !isDotAtom(local) || domain == "" {
			return nil, fmt.Sprintf(`parameter "return_path": %q: want a bare address without "+" (bounces@example.com), to which the key is added as bounces+KEY@example.com`, v)
		}
		p.returnLocal, p.returnDomain = local, domain
	}
	if problem := p.unsub.parse(q); problem != "" {
		return nil, problem
	}

	if u.User != nil {
		if p.user = u.User.Username(); p.user == "" {
			return nil, "userinfo without a user name"
		}
		p.pass, _ = u.User.Password()
		if !p.implicitTLS && p.policy == gomail.NoTLS {
			return nil, "credentials with starttls=none would cross the network in clear text (use starttls=required or smtps://)"
		}
	}
	p.dial = (&net.Dialer{Timeout: p.timeout, KeepAlive: 30 * time.Second}).DialContext
	return p, ""
}

// Send delivers m in one SMTP transaction and classifies how it ended:
//
//   - 250 to the end of DATA: Sent, MessageID is the Message-ID header.
//   - A 4xx reply to MAIL, RCPT or DATA, or to the end of DATA: Refused.
//     A 5xx reply: Refused, permanent (552 to RCPT excepted, RFC 5321
//     4.5.3.1.10); with an address status X.1.1, X.1.2, X.1.3, X.1.6 or
//     X.1.10 to RCPT, the address is marked invalid.
//   - Any failure before the end of DATA went out (DNS, refused
//     connection, TLS, no STARTTLS where required, AUTH, a connection lost
//     mid-way): Refused; permanent when the server answered 5xx (a
//     rejected password, as HTTP's 401) or offers no STARTTLS where the
//     URL requires it (a configuration mistake).
//   - The end of DATA went out whole and no reply came (timeout, lost
//     connection, cancelled ctx): Unknown, the server may have queued it.
func (p *SMTP) Send(ctx context.Context, m *Message) Result {
	if m.Key == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "message has no idempotency key"}
	}
	if m.Address == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "no recipient address"}
	}
	msg, id, refused := p.compose(m)
	if refused != nil {
		return *refused
	}

	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	for try := 1; ; try++ {
		s := p.pool.get(time.Now())
		if s == nil {
			var refused *Result
			if s, refused = p.open(ctx); refused != nil {
				return *refused
			}
		}
		res, stale := p.sendOn(ctx, s, msg, id)
		if stale && try == 1 {
			continue // a session the server closed while it was idle: nothing was sent
		}
		return res
	}
}

// compose builds the message m becomes, the same bytes on every attempt:
// nothing in it comes from the clock (when m has Created) or from chance.
// Date is m.Created; Message-ID and List-Unsubscribe follow from the key,
// the MIME boundary from the key and the parts; go-mail writes generic
// headers sorted; the DKIM signature's t= is the Date, and RSA PKCS#1 v1.5
// and Ed25519 signatures are deterministic.
func (p *SMTP) compose(m *Message) (*gomail.Msg, string, *Result) {
	text := textPart(m)
	// One multipart level (text and HTML), so one boundary serves. A hash
	// of the parts it separates: no part can hold it (that would take a
	// SHA-256 fixed point), and go-mail writes it unquoted, so it is
	// letters, digits and a dash.
	h := sha256.New()
	for _, part := range []string{m.Key, text, m.HTML} {
		fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent(), gomail.WithEncoding(gomail.EncodingQP),
		gomail.WithBoundary("er-"+hex.EncodeToString(h.Sum(nil)[:20])))
	if err := msg.From(p.from); err != nil {
		return nil, "", &Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "invalid sender"}
	}
	if err := msg.To(m.Address); err != nil {
		return nil, "", &Result{Outcome: Refused, Permanent: true, InvalidAddress: true, Response: err.Error(),
			Detail: fmt.Sprintf("recipient %q is not an email address", m.Address)}
	}
	msg.Subject(m.Subject)
	// The notification's creation, not this attempt's time: it is fixed
	// before the first attempt (a retry after a crash that lost the first
	// attempt's record still sees it), and with a message composed at
	// accept it is when the message was "complete and ready to enter the
	// mail delivery system" (RFC 5322 3.6.1). UTC, so that the bytes do not
	// depend on the host's zone.
	at := m.Created
	if at.IsZero() {
		at = time.Now() // a caller that does not know it: retries then differ in Date
	}
	at = at.UTC().Truncate(time.Second)
	msg.SetDateWithValue(at)
	id := msgIDLeft(m.Key) + "@" + p.idDomain
	msg.SetMessageIDWithValue(id)
	msg.SetGenHeader("X-Edgerelay-Key", m.Key)
	if from := p.verp(m.Key); from != "" {
		if err := msg.EnvelopeFrom(from); err != nil {
			return nil, "", &Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "invalid return path " + from}
		}
	}
	// Auto-Submitted and List-Unsubscribe, as every mail provider adds
	// them. Through SetGenHeader (written sorted), not go-mail's
	// SetListUnsubscribe*, whose preformatted headers come out in map order.
	for _, h := range p.unsub.headers(m) {
		msg.SetGenHeader(gomail.Header(h.name), h.value)
	}
	msg.SetBodyString(gomail.TypeTextPlain, text)
	if m.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	}
	if p.dkim != nil {
		if err := p.dkim.sign(msg, at); err != nil {
			return nil, "", &Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot sign the message (dkim)"}
		}
	}
	return msg, id, nil
}

var _ CommercialSender = (*SMTP)(nil)

func (p *SMTP) SetCommercial(types []string) { p.unsub.SetCommercial(types) }
func (p *SMTP) Unsubscribes() bool           { return p.unsub.Unsubscribes() }

// tls returns the TLS configuration for one connection.
func (p *SMTP) tls() *tls.Config {
	cfg := p.tlsConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = p.host
	}
	return cfg
}

// Probe opens a session as a message would (TCP, TLS or STARTTLS, EHLO,
// AUTH) and quits it without sending anything: config check --connect.
// The error is what a message's attempt would have recorded.
func (p *SMTP) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	s, refused := p.open(ctx)
	if refused != nil {
		if refused.Permanent {
			return errors.New(refused.Detail)
		}
		return fmt.Errorf("%s (temporary: a message would be retried)", refused.Detail)
	}
	s.quit()
	return nil
}

// smtpDialResult classifies a failure while connecting, greeting, starting
// TLS or authenticating: the message was not sent.
func smtpDialResult(ctx context.Context, err error) Result {
	r := Result{Outcome: Refused, Response: truncate([]byte(err.Error()))}
	var reply *textproto.Error
	var dnsErr *net.DNSError
	msg := err.Error()
	auth := strings.Contains(msg, "SMTP AUTH") || errors.Is(err, gomail.ErrNoSupportedAuthDiscovered)
	switch {
	case errors.As(err, &reply):
		// The reply as it came, its code first, as a transaction's
		// refusal is recorded (show prints the code).
		r.Response = truncate([]byte(replyString(reply)))
		r.Permanent, r.Overloaded = reply.Code >= 500, smtpOverloaded(reply.Code)
		r.Detail = "refused before the message was sent: " + firstLine(replyString(reply))
		if auth {
			r.Detail = "authentication failed: " + firstLine(replyString(reply))
		}
	case auth:
		// The server offers no mechanism go-mail can use here (or only
		// PLAIN/LOGIN without TLS): a configuration problem.
		r.Detail = "authentication not possible: " + msg
	case errors.Is(ctx.Err(), context.DeadlineExceeded), isTimeout(err):
		r.Detail = "timeout before the message was sent"
	case errors.Is(ctx.Err(), context.Canceled):
		r.Detail = "cancelled before the message was sent"
	case errors.As(err, &dnsErr):
		r.Detail = "dns lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		r.Detail = "connection refused"
	case isTLSFailure(err):
		r.Detail = "tls handshake failed: " + msg
	case strings.Contains(msg, "does not support STARTTLS"):
		// go-mail has no sentinel for this; its message is matched. A
		// configuration mistake, not a passing refusal: the server will
		// not start offering it between retries, so the notification
		// fails now rather than spending them.
		r.Permanent = true
		r.Detail = "server does not offer STARTTLS, and the URL requires it (starttls=required, the default): " +
			"use smtps:// if the server takes TLS from the first byte, or starttls=opportunistic to send without it"
	default:
		r.Detail = "connection failed before the message was sent"
	}
	return r
}

// smtpSendResult classifies a failed transaction from go-mail's SendError:
// its Reason says which step failed, its ErrorCode the server's reply
// code (0 when there was no reply). failedWrites counts the connection's
// failed writes by the time the transaction ended.
func smtpSendResult(ctx context.Context, err error, failedWrites int64) Result {
	var se *gomail.SendError
	if !errors.As(err, &se) {
		// SendWithSMTPClient returns nothing else; should that change, the
		// safe reading of an unrecognised failure is that it may have sent.
		return Result{Outcome: Unknown, Response: truncate([]byte(err.Error())), Detail: "unrecognised smtp client error"}
	}
	reply := replyText(se)
	r := Result{Outcome: Refused, Response: truncate([]byte(reply))}
	code := se.ErrorCode()
	switch se.Reason {
	case gomail.ErrSMTPMailFrom, gomail.ErrSMTPRcptTo, gomail.ErrSMTPData, gomail.ErrSMTPDataClose:
		if code >= 400 {
			// The server answered, even to the end of DATA: a 4xx or 5xx
			// there means it did not take responsibility for the message.
			r.Detail = firstLine(reply)
			rcpt := se.Reason == gomail.ErrSMTPRcptTo
			r.Permanent = code >= 500 && !(rcpt && code == 552)
			r.Overloaded = smtpOverloaded(code)
			r.InvalidAddress = r.Permanent && rcpt && deadMailbox.MatchString(reply)
			return r
		}
	}
	// No reply. go-mail cannot tell a terminating "." that never left from
	// a reply that never came (it ignores the write error and reports the
	// failed read); the connection's failed writes can. A write fails when
	// the kernel or TLS did not take all of it, so the "." at its end never
	// reached the server.
	if se.Reason == gomail.ErrSMTPDataClose && failedWrites == 0 {
		r.Outcome = Unknown
		r.Detail = lostDetail(ctx, reply, "after the message was sent")
		return r
	}
	switch se.Reason {
	case gomail.ErrWriteContent, gomail.ErrSMTPDataClose:
		r.Detail = lostDetail(ctx, reply, "while the message was being sent")
	default:
		r.Detail = lostDetail(ctx, reply, "before the message was sent")
	}
	return r
}

// smtpOverloaded reports whether a reply code asks the client to send
// less: 421 (service not available, often "too many connections") and 451
// (local error, often a rate limit or greylisting).
func smtpOverloaded(code int) bool { return code == 421 || code == 451 }

// deadMailbox matches the address statuses (RFC 3463) that say the
// recipient's address itself is bad: mailbox or system unknown, address
// syntax, mailbox moved, domain accepts no mail.
var deadMailbox = regexp.MustCompile(`^5\d\d[ -]5\.1\.(1|2|3|6|10)\b`)

// lostDetail says why no reply came, and when.
func lostDetail(ctx context.Context, reply, when string) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), strings.Contains(reply, "i/o timeout"):
		return "timeout " + when
	case errors.Is(ctx.Err(), context.Canceled):
		return "cancelled " + when
	}
	return "connection lost " + when
}

// replyText is the server's reply (or the transport error) inside a
// SendError. SendError keeps its errors unexported and has no Unwrap, so
// the text is cut out of its Error: "<reason>: <errors>, affected
// recipient(s): …, affected message ID: …". Should the format change, the
// whole text is kept.
func replyText(se *gomail.SendError) string {
	s := se.Error()
	rest, ok := strings.CutPrefix(s, se.Reason.String()+": ")
	if !ok {
		return s
	}
	if i := strings.Index(rest, ", affected "); i >= 0 {
		rest = rest[:i]
	}
	return unquoteReply(rest)
}

// unquoteReply undoes the quoting net/textproto (since Go 1.26) puts
// around a reply's text in its errors: `550 "5.1.1 no such user"` becomes
// 550 5.1.1 no such user, a multi-line reply one line per line.
func unquoteReply(s string) string {
	if len(s) < 5 || s[3] != ' ' || s[4] != '"' || strings.Trim(s[:3], "0123456789") != "" {
		return s
	}
	quoted, err := strconv.QuotedPrefix(s[4:])
	if err != nil {
		return s
	}
	text, err := strconv.Unquote(quoted)
	if err != nil {
		return s
	}
	return s[:4] + text + s[4+len(quoted):]
}

// replyString is a server's reply as it came, without textproto's quoting.
func replyString(e *textproto.Error) string {
	return fmt.Sprintf("%03d %s", e.Code, e.Msg)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// isTLSFailure recognises a failed handshake, implicit (tlsError) or after
// STARTTLS, where go-mail returns crypto/tls's error as it is.
func isTLSFailure(err error) bool {
	var (
		tlsErr    tlsError
		verifyErr *tls.CertificateVerificationError
		alert     tls.AlertError
		record    tls.RecordHeaderError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &tlsErr) || errors.As(err, &verifyErr) || errors.As(err, &alert) ||
		errors.As(err, &record) || errors.As(err, &authority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || strings.HasPrefix(err.Error(), "tls: ")
}

// msgIDLeft turns an idempotency key into the left-hand side of a
// Message-ID (RFC 5322 dot-atom-text), the same on every attempt. Bytes
// outside atext, "%" itself and dots where a dot-atom allows none are
// percent-encoded, so distinct keys give distinct ids; a key too long for
// a header line is replaced by its SHA-256.
func msgIDLeft(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		dotOK := c == '.' && i > 0 && i < len(key)-1 && key[i-1] != '.'
		if c != '%' && isAtext(c) || dotOK {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > 200 {
		sum := sha256.Sum256([]byte(key))
		return "sha256." + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// verp is the envelope sender for the message with this key under
// return_path (LOCAL+KEY@domain, KEY encoded as in a Message-ID), or "":
// none set, or a key that would make the local part longer than SMTP's
// 64 octets (that message's envelope sender is return_path itself).
func (p *SMTP) verp(key string) string {
	if p.returnLocal == "" {
		return ""
	}
	local := p.returnLocal + "+" + msgIDLeft(key)
	if len(local) > 64 {
		local = p.returnLocal
	}
	return local + "@" + p.returnDomain
}

// KeyFromMessageID is the idempotency key a Message-ID of this provider
// names (<KEY@domain>, as msgIDLeft encoded it), or false: not one of
// ours, or a key too long that was replaced by its hash. A bounce report
// returns the Message-ID, and so names the notification.
func KeyFromMessageID(id string) (string, bool) {
	id = strings.TrimSpace(id)
	if !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, ">") {
		return "", false
	}
	left, _, ok := strings.Cut(id[1:len(id)-1], "@")
	if !ok || left == "" || strings.HasPrefix(left, "sha256.") {
		return "", false
	}
	return unescapeKey(left)
}

// unescapeKey undoes msgIDLeft's percent-encoding.
func unescapeKey(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// isAtext reports whether c is an RFC 5322 atext character.
func isAtext(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

// isDotAtom reports whether s is RFC 5322 dot-atom-text.
func isDotAtom(s string) bool {
	if s == "" {
		return false
	}
	for atom := range strings.SplitSeq(s, ".") {
		if atom == "" {
			return false
		}
		for i := 0; i < len(atom); i++ {
			if !isAtext(atom[i]) {
				return false
			}
		}
	}
	return true
}

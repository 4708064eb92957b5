// Package bounce reads the reports mail systems send back about a message:
// delivery status notifications (RFC 3464, "bounces") and complaint
// feedback reports (ARF, RFC 5965). Both are multipart/report messages;
// the standard library's net/mail, mime and mime/multipart read them.
package bounce

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"regexp"
	"strings"
)

// Kinds of report.
const (
	DSN = "dsn" // a delivery status notification (RFC 3464)
	ARF = "arf" // a complaint feedback report (RFC 5965)
)

// Report is what a DSN or an ARF report says about one message.
type Report struct {
	Kind string // DSN or ARF
	// MessageID is the original message's Message-ID, with its angle
	// brackets, from the returned message or headers; "" if the report
	// returned none.
	MessageID string
	// Recipients are the DSN's per-recipient fields; for an ARF report,
	// one, the complaining recipient (Original-Rcpt-To, if given).
	Recipients []Recipient
	// FeedbackType is the ARF report's Feedback-Type (abuse, fraud …).
	FeedbackType string
	// EnvelopeTo are the addresses the report itself was delivered to
	// (Delivered-To, X-Original-To, To): with VERP, the return path of the
	// original message, which names it.
	EnvelopeTo []string
}

// Recipient is one recipient's fields of a DSN.
type Recipient struct {
	Address    string // Final-Recipient (else Original-Recipient), without its address type
	Action     string // failed, delayed, delivered, relayed or expanded, in lower case
	Status     string // the RFC 3463 status code: 5.1.1
	Diagnostic string // Diagnostic-Code, without its type: "550 5.1.1 no such user"
}

// Classes of bounce a recipient's fields add up to.
const (
	None = ""     // not a bounce, or one that says nothing about the address
	Hard = "hard" // the address is bad for good
	Soft = "soft" // refused for now: a full mailbox, a temporary failure the sender gave up on
)

// hardStatus are the address statuses (RFC 3463) that say the address
// itself is bad, as the SMTP provider reads them in a refusal: mailbox or
// system unknown, address syntax, mailbox moved, domain accepts no mail.
var hardStatus = regexp.MustCompile(`^5\.1\.(1|2|3|6|10)$`)

// Class says what the recipient's fields mean for the address: Hard for a
// failed delivery with a bad-address status, Soft for a failed one with a
// mailbox (5.2.x) or temporary (4.x.x) status, None otherwise (delayed,
// delivered, or a refusal about the sender, such as a 5.7.x policy block).
func (r Recipient) Class() string {
	if r.Action != "failed" {
		return None
	}
	switch {
	case hardStatus.MatchString(r.Status):
		return Hard
	case strings.HasPrefix(r.Status, "5.2."), strings.HasPrefix(r.Status, "4."):
		return Soft
	}
	return None
}

// ErrNotReport: the message is not a DSN or an ARF report.
var ErrNotReport = errors.New("not a delivery status notification or a complaint report (want multipart/report; report-type=delivery-status or feedback-report)")

// maxPart bounds one part read into memory.
const maxPart = 1 << 20

// Parse reads one DSN or ARF report: a whole message, headers and body.
func Parse(raw []byte) (*Report, error) {
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not a mail message: %w", err)
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["boundary"] == "" {
		return nil, ErrNotReport
	}
	rep := &Report{}
	switch strings.ToLower(params["report-type"]) {
	case "delivery-status", "global-delivery-status":
		rep.Kind = DSN
	case "feedback-report":
		rep.Kind = ARF
	default:
		return nil, fmt.Errorf("%w: report-type %q", ErrNotReport, params["report-type"])
	}
	for _, h := range []string{"Delivered-To", "X-Original-To", "To"} {
		for _, v := range m.Header[textproto.CanonicalMIMEHeaderKey(h)] {
			if as, err := mail.ParseAddressList(v); err == nil {
				for _, a := range as {
					rep.EnvelopeTo = append(rep.EnvelopeTo, a.Address)
				}
			}
		}
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	sawStatus := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read report: %w", err)
		}
		body, err := partBody(p)
		if err != nil {
			return nil, err
		}
		pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch pt {
		case "message/delivery-status", "message/global-delivery-status":
			if rep.Kind != DSN {
				continue
			}
			sawStatus = true
			if rep.Recipients, err = deliveryStatus(body); err != nil {
				return nil, err
			}
		case "message/feedback-report":
			if rep.Kind != ARF {
				continue
			}
			sawStatus = true
			h, err := fields(body)
			if err != nil || len(h) == 0 {
				return nil, fmt.Errorf("read feedback report: %v", orEmpty(err))
			}
			rep.FeedbackType = strings.ToLower(strings.TrimSpace(h.Get("Feedback-Type")))
			rep.Recipients = []Recipient{{Address: addrOf(h.Get("Original-Rcpt-To")), Action: "complained"}}
		case "message/rfc822", "text/rfc822-headers", "message/rfc822-headers", "message/global", "message/global-headers":
			// The returned message, or its headers only: a part that ends
			// in its headers gets the blank line that ends them.
			orig, err := mail.ReadMessage(io.MultiReader(bytes.NewReader(body), strings.NewReader("\r\n\r\n")))
			if err == nil {
				rep.MessageID = strings.TrimSpace(orig.Header.Get("Message-Id"))
			}
		}
	}
	if !sawStatus {
		return nil, fmt.Errorf("%w: no %s part", ErrNotReport, map[string]string{DSN: "message/delivery-status", ARF: "message/feedback-report"}[rep.Kind])
	}
	return rep, nil
}

func orEmpty(err error) string {
	if err == nil {
		return "no fields"
	}
	return err.Error()
}

// partBody reads a part, decoding base64 (multipart already decodes
// quoted-printable).
func partBody(p *multipart.Part) ([]byte, error) {
	var r io.Reader = io.LimitReader(p, maxPart)
	if strings.EqualFold(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding")), "base64") {
		r = base64.NewDecoder(base64.StdEncoding, r)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read report part %q: %w", p.Header.Get("Content-Type"), err)
	}
	return b, nil
}

// deliveryStatus reads a message/delivery-status body: the per-message
// fields, then a block of fields per recipient, blocks apart by blank lines.
func deliveryStatus(body []byte) ([]Recipient, error) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(body)))
	var out []Recipient
	first := true
	for {
		h, err := tp.ReadMIMEHeader()
		if len(h) > 0 && !first {
			r := Recipient{
				Address:    addrOf(h.Get("Final-Recipient")),
				Action:     strings.ToLower(strings.TrimSpace(h.Get("Action"))),
				Status:     firstWord(h.Get("Status")),
				Diagnostic: typed(h.Get("Diagnostic-Code")),
			}
			if r.Address == "" {
				r.Address = addrOf(h.Get("Original-Recipient"))
			}
			out = append(out, r)
		}
		if len(h) > 0 {
			first = false
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read delivery status: %w", err)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("read delivery status: no per-recipient fields (Final-Recipient, Action, Status)")
	}
	return out, nil
}

// fields reads one block of fields.
func fields(body []byte) (textproto.MIMEHeader, error) {
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(body))).ReadMIMEHeader()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return h, err
}

// typed drops a field's type: "rfc822; a@b" is "a@b", "smtp; 550 …" is "550 …".
func typed(v string) string {
	if _, rest, ok := strings.Cut(v, ";"); ok {
		v = rest
	}
	return strings.TrimSpace(v)
}

// addrOf is the address of an address field, typed or not, without angle
// brackets.
func addrOf(v string) string {
	v = typed(v)
	if a, err := mail.ParseAddress(v); err == nil {
		return a.Address
	}
	return strings.Trim(v, "<>")
}

func firstWord(v string) string {
	f := strings.Fields(v)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

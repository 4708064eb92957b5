package providers

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// dkimParams are the smtp provider's DKIM parameters.
var dkimParams = []Param{
	{"dkim_key", "signs every message with DKIM (RFC 6376): a PEM private key, RSA of 1024 bits or more " +
		"(2048 is the norm) or Ed25519 (RFC 8463), PKCS#8 or PKCS#1; a file path, or the PEM itself " +
		"(a config provider's `options: {dkim_key: ${DKIM_KEY}}`)"},
	{"dkim_selector", "with `dkim_key`: the selector, whose `SELECTOR._domainkey.DOMAIN` TXT record holds the public key"},
	{"dkim_domain", "with `dkim_key`: the signing domain, `d=` (default: the domain of `from`, which DMARC aligns with)"},
}

// dkimSigned are the header fields a signature covers, in the order of its
// h= tag: what a reader sees and trusts, and the headers RFC 8058 requires
// a signature to cover. A field the message lacks is still listed: it is
// signed as absent, so that none can be added in transit.
var dkimSigned = []string{
	"From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Content-Type", "Content-Transfer-Encoding",
	"Reply-To", "List-Unsubscribe", "List-Unsubscribe-Post", "Auto-Submitted", "X-Edgerelay-Key",
}

// dkimOversigned are listed a second time: a second From or Subject added
// in transit (which a reader's client might show instead of the first)
// breaks the signature.
var dkimOversigned = []string{"From", "To", "Subject", "Date", "Message-ID"}

// dkimConfig is one provider's signing identity.
type dkimConfig struct {
	domain, selector string
	key              crypto.Signer
}

// parseDKIM reads the DKIM parameters; fromDomain is the sender's domain.
// It returns nil without dkim_key.
func parseDKIM(q url.Values, fromDomain string) (*dkimConfig, string) {
	if !q.Has("dkim_key") {
		for _, name := range []string{"dkim_selector", "dkim_domain"} {
			if q.Has(name) {
				return nil, fmt.Sprintf(`parameter %q needs "dkim_key" (the private key to sign with)`, name)
			}
		}
		return nil, ""
	}
	d := &dkimConfig{selector: q.Get("dkim_selector"), domain: q.Get("dkim_domain")}
	if d.selector == "" {
		return nil, `parameter "dkim_key" needs "dkim_selector" (the selector of the DNS record that holds the public key)`
	}
	if !isDNSName(d.selector) {
		return nil, fmt.Sprintf(`parameter "dkim_selector": %q is not a DNS label or name`, d.selector)
	}
	if !q.Has("dkim_domain") {
		d.domain = fromDomain
	}
	if !isDNSName(d.domain) || !strings.Contains(d.domain, ".") {
		what := `parameter "dkim_domain"`
		if !q.Has("dkim_domain") {
			what = `the domain of "from" (set dkim_domain)`
		}
		return nil, fmt.Sprintf("%s: %q is not a domain name a DKIM key can be published under", what, d.domain)
	}
	key, err := loadDKIMKey(q.Get("dkim_key"))
	if err != nil {
		return nil, `parameter "dkim_key": ` + err.Error()
	}
	d.key = key
	return d, ""
}

// loadDKIMKey reads a private key given as PEM text or as the path of a
// PEM file. Errors never quote the value, which may be the key itself.
func loadDKIMKey(v string) (crypto.Signer, error) {
	pemText := []byte(v)
	if !strings.HasPrefix(strings.TrimSpace(v), "-----BEGIN") {
		if v == "" {
			return nil, fmt.Errorf("empty (a PEM file's path, or the PEM text)")
		}
		b, err := os.ReadFile(v)
		if err != nil {
			return nil, err
		}
		pemText = b
	}
	key, err := gomail.PrivKeyFromPEM(pemText)
	if err != nil {
		return nil, fmt.Errorf("not an RSA or Ed25519 private key in PEM (PKCS#8 or PKCS#1): %v", err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		// RFC 8301 3.2: verifiers refuse shorter keys.
		if n := k.N.BitLen(); n < 1024 {
			return nil, fmt.Errorf("an RSA key of %d bits: DKIM needs 1024 or more (RFC 8301; 2048 is the norm)", n)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T (want RSA or Ed25519)", key)
}

// sign adds msg's DKIM-Signature, over msg as go-mail writes it, with t=
// set to at, the message's Date, so that every attempt carries the same
// signature: RSA PKCS#1 v1.5 and Ed25519 signatures are deterministic, so
// the same bytes, key and time sign alike.
//
// The signature goes in as a header of msg (go-mail writes it after the
// other generic headers, where a verifier finds it as well as at the top),
// so the bytes sent are the bytes signed with that one header added: a
// second rendering of msg writes what the first did, as every retry relies
// on, and the tests verify what the server received.
//
// The signing is go-mail's: github.com/emersion/go-msgauth stamps t= with
// its own clock, which nothing can set, so a retry's signature would
// differ. go-mail's signer is not used through Msg.SetDKIM because it
// folds long tags anywhere (h= mid-name) while it signs the unfolded
// value, and under relaxed canonicalization such a fold's space changes
// what a verifier hashes: the signature would not verify. refold folds
// where that changes nothing.
func (d *dkimConfig) sign(msg *gomail.Msg, at time.Time) error {
	var buf bytes.Buffer
	if _, err := msg.WriteTo(&buf); err != nil {
		return err
	}
	headers, body := buf.Bytes(), []byte(nil)
	if i := bytes.Index(headers, []byte("\r\n\r\n")); i >= 0 {
		headers, body = headers[:i+2], headers[i+4:]
	}
	// A signer per message: go-mail's Signer is not safe for concurrent
	// use (Sign sets a field).
	s := gomail.NewDKIMSigner(d.domain, d.selector, d.key)
	s.NowFunc = func() time.Time { return at }
	s.HeaderCanonicalization(gomail.CanonicalizationRelaxed)
	s.BodyCanonicalization(gomail.CanonicalizationRelaxed)
	s.SignHeaders(dkimSigned...)
	s.OversignHeaders(dkimOversigned...)
	sig, err := s.Sign(headers, body)
	if err != nil {
		return err
	}
	value, err := refold(sig)
	if err != nil {
		return err
	}
	msg.SetGenHeaderPreformatted("DKIM-Signature", value)
	return nil
}

// refold takes go-mail's "DKIM-Signature: …\r\n" line and returns its
// value folded only between tags and inside b= (whose value a verifier
// deletes before hashing): h= stays on one line, however long (a few
// hundred bytes, within RFC 5322's 998).
func refold(header string) (string, error) {
	v, ok := strings.CutPrefix(header, "DKIM-Signature: ")
	if !ok {
		return "", fmt.Errorf("dkim: unexpected signature header %.30q", header)
	}
	// go-mail folds by inserting CRLF and a space; no tag value holds one.
	v = strings.ReplaceAll(strings.TrimSuffix(v, "\r\n"), "\r\n ", "")
	tags := strings.Split(v, "; ")
	if !strings.HasPrefix(tags[len(tags)-1], "b=") {
		return "", fmt.Errorf("dkim: the signature does not end with b=")
	}
	const width = 76
	var b strings.Builder
	col := len("DKIM-Signature: ")
	for i, tag := range tags {
		if i > 0 {
			b.WriteByte(';')
			col++
			if col+1+len(tag) > width || i == len(tags)-1 {
				b.WriteString("\r\n")
				col = 0
			}
			b.WriteByte(' ')
			col++
		}
		if i < len(tags)-1 {
			b.WriteString(tag)
			col += len(tag)
			continue
		}
		for rest := tag; rest != ""; {
			n := min(len(rest), width-col)
			b.WriteString(rest[:n])
			if rest = rest[n:]; rest != "" {
				b.WriteString("\r\n ")
				col = 1
			}
		}
	}
	return b.String(), nil
}

// isDNSName reports whether s is a DNS name of LDH labels (underscores
// allowed, as selectors use them), at most 253 bytes.
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

package providers

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"
)

// snsVerifier checks Amazon SNS messages as AWS documents it: the
// signing certificate is fetched over https from a host of SNS's (the
// URL's host, checked before any request), and the message's fields, in
// their documented order, must carry its RSA signature (SHA1 for
// SignatureVersion 1, SHA256 for 2).
type snsVerifier struct {
	topic    string // sns_topic_arn, "" when receipts are refused
	certHost string // host patterns, comma-separated, "*" one label
	client   *http.Client
	// tlsConfig, nil for the system's roots, is what the certificate and
	// subscription fetches trust: sns_ca's CAs (a stand-in for SNS).
	tlsConfig *tls.Config

	mu    sync.Mutex
	certs map[string]*x509.Certificate // by URL
}

func (v *snsVerifier) parse(q url.Values, timeout time.Duration) string {
	// SNS's own hosts, the China regions' under amazonaws.com.cn, as
	// AWS's message validators allow.
	v.certHost = "sns.*.amazonaws.com,sns.*.amazonaws.com.cn"
	if q.Has("sns_cert_host") {
		v.certHost = q.Get("sns_cert_host")
		for _, h := range strings.Split(v.certHost, ",") {
			if h == "" || strings.ContainsAny(h, "/:@ ") {
				return `parameter "sns_cert_host": want host names such as sns.*.amazonaws.com, comma-separated`
			}
		}
	}
	if q.Has("sns_topic_arn") {
		if v.topic = q.Get("sns_topic_arn"); !strings.HasPrefix(v.topic, "arn:") || strings.Count(v.topic, ":") < 5 {
			return `parameter "sns_topic_arn": not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)`
		}
	}
	if q.Has("sns_ca") {
		pemBytes, err := os.ReadFile(q.Get("sns_ca"))
		if err != nil {
			return `parameter "sns_ca": ` + err.Error()
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return `parameter "sns_ca": no PEM certificate in the file`
		}
		v.tlsConfig = &tls.Config{RootCAs: pool}
	}
	v.client = &http.Client{
		Timeout: timeout,
		// Never a proxy from the environment, as for the sends.
		Transport: &http.Transport{Proxy: nil},
		// A redirect could lead off SNS's hosts.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return ""
}

// hostOK reports whether host matches one of the certificate host
// patterns.
func (v *snsVerifier) hostOK(host string) bool {
	got := strings.Split(strings.ToLower(host), ".")
	for _, pattern := range strings.Split(v.certHost, ",") {
		if hostMatches(strings.Split(strings.ToLower(pattern), "."), got) {
			return true
		}
	}
	return false
}

func hostMatches(want, got []string) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i] != "*" && want[i] != got[i] || got[i] == "" {
			return false
		}
	}
	return true
}

// snsURL checks that raw is an https URL on an SNS host.
func (v *snsVerifier) snsURL(raw, what string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || !v.hostOK(u.Hostname()) {
		return nil, fmt.Errorf("%w: %s %q is not an https URL on %s", ErrBadSignature, what, raw, v.certHost)
	}
	return u, nil
}

// get fetches u over https with the verifier's trust. The calls are rare
// (a certificate once, a subscription once), so each has its transport.
func (v *snsVerifier) get(ctx context.Context, u *url.URL) ([]byte, error) {
	c := *v.client
	tr := c.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = v.tlsConfig
	c.Transport = tr
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s://%s%s: %s", u.Scheme, u.Host, u.Path, resp.Status)
	}
	return body, nil
}

// cert returns the signing certificate at raw, fetched once.
func (v *snsVerifier) cert(ctx context.Context, raw string) (*x509.Certificate, error) {
	u, err := v.snsURL(raw, "SigningCertURL")
	if err != nil {
		return nil, err
	}
	if path.Ext(u.Path) != ".pem" {
		return nil, fmt.Errorf("%w: SigningCertURL %q is not a .pem", ErrBadSignature, raw)
	}
	v.mu.Lock()
	c := v.certs[raw]
	v.mu.Unlock()
	if c != nil && time.Now().Before(c.NotAfter) {
		return c, nil
	}
	body, err := v.get(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("sns signing certificate: %w", err)
	}
	block, _ := pem.Decode(body)
	if block == nil {
		return nil, errors.New("sns signing certificate: not PEM")
	}
	if c, err = x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("sns signing certificate: %w", err)
	}
	if now := time.Now(); now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return nil, fmt.Errorf("%w: the SNS signing certificate is not valid now", ErrBadSignature)
	}
	v.mu.Lock()
	if v.certs == nil {
		v.certs = map[string]*x509.Certificate{}
	}
	v.certs[raw] = c
	v.mu.Unlock()
	return c, nil
}

// snsMessage is an SNS HTTP(S) delivery.
type snsMessage struct {
	Type             string
	MessageID        string `json:"MessageId"`
	Token            string
	TopicArn         string
	Subject          *string
	Message          string
	Timestamp        string
	SignatureVersion string
	Signature        string
	SigningCertURL   string
	SubscribeURL     string
}

// stringToSign is the fields SNS signs, each name and value on a line of
// its own, in the order AWS documents for the message's type.
func (m *snsMessage) stringToSign() (string, error) {
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	switch m.Type {
	case "Notification":
		add("Message", m.Message)
		add("MessageId", m.MessageID)
		if m.Subject != nil {
			add("Subject", *m.Subject)
		}
		add("Timestamp", m.Timestamp)
		add("TopicArn", m.TopicArn)
		add("Type", m.Type)
	case "SubscriptionConfirmation", "UnsubscribeConfirmation":
		add("Message", m.Message)
		add("MessageId", m.MessageID)
		add("SubscribeURL", m.SubscribeURL)
		add("Timestamp", m.Timestamp)
		add("Token", m.Token)
		add("TopicArn", m.TopicArn)
		add("Type", m.Type)
	default:
		return "", fmt.Errorf("sns message: unknown Type %q", m.Type)
	}
	return b.String(), nil
}

// verify reads body as an SNS message from the verifier's topic and
// checks its signature.
func (v *snsVerifier) verify(ctx context.Context, body []byte, who string) (*snsMessage, error) {
	if v.topic == "" {
		return nil, fmt.Errorf("%w: %s takes no receipts without sns_topic_arn (the SNS topic SES publishes to), since unsigned ones could come from anyone", ErrBadSignature, who)
	}
	var m snsMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("sns message: not JSON: %w", err)
	}
	if m.Type == "" {
		// With raw message delivery on, SNS posts the bare message,
		// unsigned.
		return nil, fmt.Errorf("%w: not an SNS message (no Type, no signature): turn raw message delivery off for this subscription, so that SNS signs what it posts", ErrBadSignature)
	}
	if m.TopicArn != v.topic {
		return nil, fmt.Errorf("%w: the message is from topic %q, not %s", ErrBadSignature, m.TopicArn, v.topic)
	}
	toSign, err := m.stringToSign()
	if err != nil {
		return nil, err
	}
	var h crypto.Hash
	var sum []byte
	switch m.SignatureVersion {
	case "1":
		s := sha1.Sum([]byte(toSign))
		h, sum = crypto.SHA1, s[:]
	case "2":
		s := sha256.Sum256([]byte(toSign))
		h, sum = crypto.SHA256, s[:]
	default:
		return nil, fmt.Errorf("%w: SignatureVersion %q (want 1 or 2)", ErrBadSignature, m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) == 0 {
		return nil, ErrBadSignature
	}
	cert, err := v.cert(ctx, m.SigningCertURL)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: the SNS signing certificate's key is not RSA", ErrBadSignature)
	}
	if rsa.VerifyPKCS1v15(pub, h, sum, sig) != nil {
		return nil, ErrBadSignature
	}
	return &m, nil
}

// sesEvent is what SES publishes through SNS: a notification
// (notificationType) or an event of a configuration set (eventType).
type sesEvent struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Mail             struct {
		MessageID string              `json:"messageId"`
		Tags      map[string][]string `json:"tags"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"`
		BounceSubType     string `json:"bounceSubType"`
		Timestamp         string `json:"timestamp"`
		BouncedRecipients []struct {
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
	} `json:"bounce"`
	Complaint *struct {
		Timestamp             string `json:"timestamp"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
	} `json:"complaint"`
	Delivery *struct {
		Timestamp    string `json:"timestamp"`
		SMTPResponse string `json:"smtpResponse"`
	} `json:"delivery"`
}

// ParseReceipts reads one SNS message from the URL's sns_topic_arn,
// verified by its signature. A SubscriptionConfirmation is confirmed (a GET
// of its SubscribeURL, on an SNS host too) and yields no receipt; a
// Notification carries one SES notification or event: Bounce (Permanent a
// hard bounce, Transient a soft one, Undetermined a failure), Complaint,
// Delivery, and the events Send, DeliveryDelay (progress), Reject and
// Rendering Failure (failures), Open and Click (delivered).
func (p *SES) ParseReceipts(r *http.Request, body []byte, _ string) ([]Receipt, error) {
	m, err := p.sns.verify(r.Context(), body, p.Name())
	if err != nil {
		return nil, err
	}
	switch m.Type {
	case "SubscriptionConfirmation":
		u, err := p.sns.snsURL(m.SubscribeURL, "SubscribeURL")
		if err != nil {
			return nil, err
		}
		if _, err := p.sns.get(r.Context(), u); err != nil {
			return nil, fmt.Errorf("sns: confirming the subscription: %w", err)
		}
		return []Receipt{}, nil
	case "UnsubscribeConfirmation":
		return []Receipt{}, nil
	}
	var ev sesEvent
	if err := json.Unmarshal([]byte(m.Message), &ev); err != nil {
		return nil, fmt.Errorf("ses receipt: the SNS message is not an SES notification: %w", err)
	}
	kind := ev.EventType
	if kind == "" {
		kind = ev.NotificationType
	}
	rc := Receipt{ID: m.MessageID, MessageID: ev.Mail.MessageID, Detail: kind}
	if keys := ev.Mail.Tags[sesKeyTag]; len(keys) == 1 {
		rc.Key = keys[0]
	}
	if rc.MessageID == "" && rc.Key == "" {
		return nil, errors.New("ses receipt: the notification names no message (no mail.messageId)")
	}
	at := ""
	switch kind {
	case "Bounce":
		if ev.Bounce == nil {
			return nil, errors.New(`ses receipt: a Bounce without "bounce"`)
		}
		at = ev.Bounce.Timestamp
		rc.Detail += " " + ev.Bounce.BounceType + " " + ev.Bounce.BounceSubType
		if len(ev.Bounce.BouncedRecipients) > 0 {
			if d := ev.Bounce.BouncedRecipients[0].DiagnosticCode; d != "" {
				rc.Detail += ": " + d
			}
		}
		switch ev.Bounce.BounceType {
		case "Permanent":
			rc.Status, rc.Bounce = ReceiptBounced, BounceHard
		case "Transient":
			// SES gave up for now (a full mailbox, a message too large):
			// the address may take mail later.
			rc.Status, rc.Bounce = ReceiptBounced, BounceSoft
		default: // Undetermined
			rc.Status, rc.Bounce = ReceiptFailed, BounceNone
		}
	case "Complaint":
		rc.Status = ReceiptComplained
		if ev.Complaint != nil {
			at = ev.Complaint.Timestamp
			if ev.Complaint.ComplaintFeedbackType != "" {
				rc.Detail += " " + ev.Complaint.ComplaintFeedbackType
			}
		}
	case "Delivery":
		rc.Status = ReceiptDelivered
		if ev.Delivery != nil {
			at = ev.Delivery.Timestamp
			if ev.Delivery.SMTPResponse != "" {
				rc.Detail += ": " + ev.Delivery.SMTPResponse
			}
		}
	case "Open", "Click":
		rc.Status = ReceiptDelivered
	case "Reject", "Rendering Failure", "RenderingFailure":
		// SES documents the event type as "Rendering Failure", with a
		// space; its API's enum spells it without.
		rc.Status, rc.Bounce = ReceiptFailed, BounceNone
	default: // Send, DeliveryDelay, Subscription …
		rc.Status = ReceiptSent
	}
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		rc.At = t
	}
	return []Receipt{rc}, nil
}

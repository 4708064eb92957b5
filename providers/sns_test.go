package providers

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const snsTopic = "arn:aws:sns:eu-west-1:123456789012:ses-events"

// snsStandIn plays SNS's side on loopback over TLS: it serves the signing
// certificate, takes subscription confirmations, and signs messages the
// way AWS documents (written out here, not taken from sns.go).
type snsStandIn struct {
	srv  *httptest.Server
	key  *rsa.PrivateKey
	mu   sync.Mutex
	hits map[string]int // path → requests
}

func newSNSStandIn(t *testing.T) *snsStandIn {
	t.Helper()
	s := &snsStandIn{hits: map[string]int{}}
	var err error
	if s.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &s.key.PublicKey, s.key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		switch r.URL.Path {
		case "/SimpleNotificationService-0123.pem":
			w.Write(certPEM)
		case "/confirm":
			if r.URL.Query().Get("Token") != "tok-1" {
				http.Error(w, "bad token", http.StatusBadRequest)
				return
			}
			w.Write([]byte("<ConfirmSubscriptionResponse/>"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *snsStandIn) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// sign returns m, a map of the message's fields, with SignatureVersion,
// SigningCertURL and Signature set: RSA over each signed field's name and
// value on lines of their own, in AWS's order for the type.
func (s *snsStandIn) sign(t *testing.T, m map[string]string, version string, key *rsa.PrivateKey) []byte {
	t.Helper()
	order := []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	if m["Type"] != "Notification" {
		order = []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	}
	var b strings.Builder
	for _, k := range order {
		if v, ok := m[k]; ok {
			b.WriteString(k + "\n" + v + "\n")
		}
	}
	var sig []byte
	var err error
	if version == "1" {
		h := sha1.Sum([]byte(b.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA1, h[:])
	} else {
		h := sha256.Sum256([]byte(b.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, h[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"SignatureVersion": version, "SigningCertURL": s.srv.URL + "/SimpleNotificationService-0123.pem",
		"Signature": base64.StdEncoding.EncodeToString(sig)}
	for k, v := range m {
		out[k] = v
	}
	body, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// notification is an SNS Notification carrying SES's message.
func notification(id, message string) map[string]string {
	return map[string]string{"Type": "Notification", "MessageId": id, "TopicArn": snsTopic,
		"Message": message, "Timestamp": "2026-12-06T23:40:00.000Z", "UnsubscribeURL": "https://sns.example/unsub"}
}

// sesWithSNS is an ses provider that takes receipts from snsTopic, with
// certificates from the stand-in's host.
func sesWithSNS(t *testing.T, s *snsStandIn, extra string) *SES {
	p := newProvider(t, "ses+https://AK:secret@email.eu-west-1.amazonaws.com?from=a%40example.com&sns_cert_host=127.0.0.1"+extra).(*SES)
	pool := x509.NewCertPool()
	pool.AddCert(s.srv.Certificate())
	p.sns.tlsConfig = &tls.Config{RootCAs: pool}
	return p
}

func TestSESReceipts(t *testing.T) {
	t.Parallel()
	s := newSNSStandIn(t)
	p := sesWithSNS(t, s, "&sns_topic_arn="+snsTopic)
	post := func(body []byte) ([]Receipt, error) {
		return p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/v1/receipts/ses", nil), body, "")
	}
	mail := `"mail":{"messageId":"0102018c-aaaa","tags":{"edgerelay-key":["er1_abc"]}}`
	for _, c := range []struct {
		name, message, version string
		want                   Receipt
	}{
		{"permanent bounce", `{"notificationType":"Bounce",` + mail + `,"bounce":{"bounceType":"Permanent","bounceSubType":"General","timestamp":"2026-12-06T23:39:58.5Z",` +
			`"bouncedRecipients":[{"emailAddress":"ada@example.com","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}]}}`, "1",
			Receipt{Status: ReceiptBounced, Bounce: BounceHard, Detail: "Bounce Permanent General: smtp; 550 5.1.1 user unknown", At: time.Date(2026, 12, 6, 23, 39, 58, 5e8, time.UTC)}},
		{"transient bounce", `{"notificationType":"Bounce",` + mail + `,"bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull","timestamp":"2026-12-06T23:39:58Z"}}`, "2",
			Receipt{Status: ReceiptBounced, Bounce: BounceSoft, Detail: "Bounce Transient MailboxFull", At: time.Date(2026, 12, 6, 23, 39, 58, 0, time.UTC)}},
		{"complaint", `{"notificationType":"Complaint",` + mail + `,"complaint":{"timestamp":"2026-12-06T23:39:58Z","complaintFeedbackType":"abuse"}}`, "2",
			Receipt{Status: ReceiptComplained, Detail: "Complaint abuse", At: time.Date(2026, 12, 6, 23, 39, 58, 0, time.UTC)}},
		{"delivery", `{"notificationType":"Delivery",` + mail + `,"delivery":{"timestamp":"2026-12-06T23:39:58Z","smtpResponse":"250 2.0.0 OK"}}`, "1",
			Receipt{Status: ReceiptDelivered, Detail: "Delivery: 250 2.0.0 OK", At: time.Date(2026, 12, 6, 23, 39, 58, 0, time.UTC)}},
		// A configuration set's event destination says eventType.
		{"event publishing", `{"eventType":"Bounce",` + mail + `,"bounce":{"bounceType":"Undetermined","bounceSubType":"Undetermined","timestamp":"2026-12-06T23:39:58Z"}}`, "2",
			Receipt{Status: ReceiptFailed, Bounce: BounceNone, Detail: "Bounce Undetermined Undetermined", At: time.Date(2026, 12, 6, 23, 39, 58, 0, time.UTC)}},
		{"send event", `{"eventType":"Send",` + mail + `}`, "2", Receipt{Status: ReceiptSent, Detail: "Send"}},
		// AWS spells this event type with a space.
		{"rendering failure", `{"eventType":"Rendering Failure",` + mail + `,"failure":{"errorMessage":"Attribute 'name' is not present","templateName":"t"}}`, "2",
			Receipt{Status: ReceiptFailed, Bounce: BounceNone, Detail: "Rendering Failure"}},
	} {
		rs, err := post(s.sign(t, notification("sns-"+c.name, c.message), c.version, s.key))
		if err != nil || len(rs) != 1 {
			t.Errorf("%s: %v, %d receipts", c.name, err, len(rs))
			continue
		}
		c.want.ID, c.want.MessageID, c.want.Key = "sns-"+c.name, "0102018c-aaaa", "er1_abc"
		if rs[0] != c.want {
			t.Errorf("%s: %+v\nwant %+v", c.name, rs[0], c.want)
		}
	}
	if n := s.count("/SimpleNotificationService-0123.pem"); n != 1 {
		t.Errorf("the certificate was fetched %d times, want once", n)
	}

	// A subscription to the topic is confirmed, once its signature holds.
	confirm := map[string]string{"Type": "SubscriptionConfirmation", "MessageId": "sns-sub", "TopicArn": snsTopic, "Token": "tok-1",
		"Message": "You have chosen to subscribe to the topic.", "SubscribeURL": s.srv.URL + "/confirm?Action=ConfirmSubscription&Token=tok-1",
		"Timestamp": "2026-12-06T23:40:00.000Z"}
	if rs, err := post(s.sign(t, confirm, "2", s.key)); err != nil || len(rs) != 0 || s.count("/confirm") != 1 {
		t.Errorf("subscription: %v, %d receipts, %d confirmations", err, len(rs), s.count("/confirm"))
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := notification("sns-x", `{"notificationType":"Delivery",`+mail+`}`)
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	tampered := s.sign(t, good, "2", s.key)
	tampered = []byte(strings.Replace(string(tampered), `Delivery`, `Bounce`, 1))
	offHost := strings.Replace(string(s.sign(t, good, "2", s.key)), "https://127.0.0.1", "https://localhost", 1)
	plainHTTP := strings.Replace(string(s.sign(t, good, "2", s.key)), "https://127.0.0.1", "http://127.0.0.1", 1)
	notPEM := strings.Replace(string(s.sign(t, good, "2", s.key)), "-0123.pem", "-0123.txt", 1)
	badConfirm := s.sign(t, map[string]string{"Type": "SubscriptionConfirmation", "MessageId": "sns-sub2", "TopicArn": snsTopic, "Token": "tok-1",
		"Message": "subscribe", "SubscribeURL": "https://localhost/confirm?Token=tok-1", "Timestamp": "2026-12-06T23:40:00.000Z"}, "2", s.key)
	for _, c := range []struct {
		name string
		p    *SES
		body []byte
	}{
		{"signed with another key", p, s.sign(t, good, "2", other)},
		{"tampered message", p, tampered},
		{"another topic", p, s.sign(t, with("TopicArn", "arn:aws:sns:eu-west-1:999999999999:other"), "2", s.key)},
		{"certificate off the SNS host", p, []byte(offHost)},
		{"certificate over http", p, []byte(plainHTTP)},
		{"certificate not a .pem", p, []byte(notPEM)},
		{"signature version 3", p, []byte(strings.Replace(string(s.sign(t, good, "2", s.key)), `"SignatureVersion":"2"`, `"SignatureVersion":"3"`, 1))},
		{"subscribe URL off the SNS host", p, badConfirm},
		{"no sns_topic_arn", sesWithSNS(t, s, ""), s.sign(t, good, "2", s.key)},
		{"raw message delivery (unsigned)", p, []byte(good["Message"])},
	} {
		if _, err := c.p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/", nil), c.body, ""); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
	if s.count("/confirm") != 1 {
		t.Errorf("%d confirmations: a refused message confirmed a subscription", s.count("/confirm"))
	}
}

func notPEMFile(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The SNS parameters say what is wrong with them.
func TestSESReceiptParams(t *testing.T) {
	t.Parallel()
	base := "ses+https://AK:secret@email.eu-west-1.amazonaws.com?from=a%40example.com"
	for _, c := range []struct{ extra, want string }{
		{"&sns_topic_arn=ses-events", `parameter "sns_topic_arn": not a topic ARN`},
		{"&sns_cert_host=https://sns.example", `parameter "sns_cert_host": want host names`},
		{"&sns_cert_host=sns.example,", `parameter "sns_cert_host": want host names`},
		{"&sns_ca=/nonexistent/ca.pem", `parameter "sns_ca": open /nonexistent/ca.pem`},
		{"&sns_ca=" + notPEMFile(t), `parameter "sns_ca": no PEM certificate in the file`},
	} {
		if _, err := New(base + c.extra); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.extra, err, c.want)
		}
	}
	p := newProvider(t, base).(*SES)
	for host, ok := range map[string]bool{"sns.eu-west-1.amazonaws.com": true, "SNS.us-east-1.amazonaws.com": true,
		"sns.cn-north-1.amazonaws.com.cn": true, "sns.amazonaws.com.cn": false,
		"sns.amazonaws.com": false, "sns.eu-west-1.amazonaws.com.evil.example": false, "evil.example": false, "sns..amazonaws.com": false} {
		if p.sns.hostOK(host) != ok {
			t.Errorf("hostOK(%q) = %v", host, !ok)
		}
	}
}

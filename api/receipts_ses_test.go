package api_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

const sesTopic = "arn:aws:sns:eu-west-1:123456789012:ses-events"

// fakeSES is SES v2's SendEmail on loopback: each send is answered with
// the MessageId ses-N, and the edgerelay-key tag of each is kept.
type fakeSES struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []string
}

func newFakeSES(tb testing.TB) *fakeSES {
	f := &fakeSES{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			EmailTags []struct{ Name, Value string }
		}
		if r.URL.Path != "/v2/email/outbound-emails" || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") ||
			json.NewDecoder(r.Body).Decode(&body) != nil {
			w.Header().Set("X-Amzn-ErrorType", "BadRequestException")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"message":"not a signed SendEmail"}`)
			return
		}
		f.mu.Lock()
		key := ""
		for _, t := range body.EmailTags {
			if t.Name == "edgerelay-key" {
				key = t.Value
			}
		}
		f.keys = append(f.keys, key)
		n := len(f.keys)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"MessageId":"ses-%d"}`, n)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSES) key(tb testing.TB, n int) string {
	tb.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) < n {
		tb.Fatalf("%d sends, want at least %d", len(f.keys), n)
	}
	return f.keys[n-1]
}

// fakeSNS plays SNS over TLS on loopback: it serves its signing
// certificate (a self-signed one for a fresh RSA key) and takes
// subscription confirmations, counting the requests of each path. It signs
// messages as AWS documents, written out here rather than taken from the
// provider: the fields of the message's type, in AWS's order, each name
// and value on a line of its own, RSA PKCS#1 v1.5 over their SHA-1
// (SignatureVersion 1) or SHA-256 (2).
type fakeSNS struct {
	srv  *httptest.Server
	key  *rsa.PrivateKey
	ca   string // the TLS server's certificate, a PEM file, for sns_ca
	mu   sync.Mutex
	hits map[string]int
}

const snsCertPath = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"

func newFakeSNS(tb testing.TB) *fakeSNS {
	f := &fakeSNS{hits: map[string]int{}}
	var err error
	if f.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.key.PublicKey, f.key)
	if err != nil {
		tb.Fatal(err)
	}
	signing := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.URL.Path]++
		f.mu.Unlock()
		switch {
		case r.URL.Path == snsCertPath:
			w.Write(signing)
		case r.URL.Path == "/" && r.URL.Query().Get("Action") == "ConfirmSubscription" && r.URL.Query().Get("Token") == "confirm-token":
			w.Write([]byte(`<ConfirmSubscriptionResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"/>`))
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(f.srv.Close)
	f.ca = filepath.Join(tb.TempDir(), "sns-ca.pem")
	if err := os.WriteFile(f.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

func (f *fakeSNS) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// sign returns the message m as SNS posts it, signed with version's scheme
// and certURL as its SigningCertURL.
func (f *fakeSNS) sign(tb testing.TB, m map[string]string, version, certURL string) string {
	tb.Helper()
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
	h, sum := crypto.SHA256, sha256.Sum256([]byte(b.String()))
	digest := sum[:]
	if version == "1" {
		s1 := sha1.Sum([]byte(b.String()))
		h, digest = crypto.SHA1, s1[:]
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, f.key, h, digest)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{"SignatureVersion": version, "Signature": base64.StdEncoding.EncodeToString(sig), "SigningCertURL": certURL}
	for k, v := range m {
		out[k] = v
	}
	body, err := json.Marshal(out)
	if err != nil {
		tb.Fatal(err)
	}
	return string(body)
}

// sesNotification is an SNS Notification carrying an SES notification of
// kind about SES message id with key as its edgerelay-key tag; detail is
// the kind's own object ("bounce": {…}).
//
// Without a key it is an identity's notification, whose mail object has no
// tags: the message id alone names the send.
func sesNotification(snsID, kind, messageID, key, detail string) map[string]string {
	tags := ""
	if key != "" {
		tags = fmt.Sprintf(`,"tags":{"edgerelay-key":[%q],"ses:configuration-set":["transactional"]}`, key)
	}
	msg := fmt.Sprintf(`{"notificationType":%q,"mail":{"timestamp":"2026-12-07T01:00:00.000Z","source":"billing@example.com",`+
		`"messageId":%q,"destination":["someone@example.com"]%s},%s}`,
		kind, messageID, tags, detail)
	return map[string]string{"Type": "Notification", "MessageId": snsID, "TopicArn": sesTopic, "Message": msg,
		"Timestamp": "2026-12-07T01:00:02.000Z", "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe"}
}

// SES's bounces, complaints and deliveries reach the relay as Amazon SNS
// posts them to /v1/receipts/ses, over real HTTP, signed as SNS signs
// (both signature versions) with a certificate served over TLS by a
// loopback stand-in for SNS. A delivery is delivered; a Permanent bounce
// is bounced and suppresses the address for good; a Transient one is
// bounced and suppresses it for the soft-bounce TTL; a complaint
// suppresses it. The subscription is confirmed; the certificate is
// fetched once. A tampered message, one signed by another key, and one
// whose certificate is on a host that is not SNS's are refused with 401,
// move nothing, and the last is refused without a request.
func TestSESReceipts(t *testing.T) {
	t.Parallel()
	api, sns := newFakeSES(t), newFakeSNS(t)
	ses, err := providers.New("ses+http://AKIDEXAMPLE:secret@" + strings.TrimPrefix(api.srv.URL, "http://") +
		"?region=eu-west-1&from=billing%40example.com&name=ses&sns_topic_arn=" + sesTopic +
		"&sns_cert_host=127.0.0.1&sns_ca=" + url.QueryEscape(sns.ca))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"email": {ses}}}})
	post := func(body string) reply {
		// SNS posts text/plain, with its headers naming the type.
		return b.do(t, "POST", "/v1/receipts/ses", body, "Content-Type", "text/plain; charset=UTF-8",
			"X-Amz-Sns-Message-Type", "Notification", "X-Amz-Sns-Topic-Arn", sesTopic)
	}
	cert := sns.srv.URL + snsCertPath

	// SNS first asks the endpoint to confirm the subscription.
	confirm := map[string]string{"Type": "SubscriptionConfirmation", "MessageId": "sns-sub", "TopicArn": sesTopic, "Token": "confirm-token",
		"Message":      "You have chosen to subscribe to the topic " + sesTopic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		"SubscribeURL": sns.srv.URL + "/?Action=ConfirmSubscription&TopicArn=" + url.QueryEscape(sesTopic) + "&Token=confirm-token",
		"Timestamp":    "2026-12-07T00:59:00.000Z"}
	wantReceived(t, post(sns.sign(t, confirm, "1", cert)), 0, 0)
	if n := sns.count("/"); n != 1 {
		t.Fatalf("the subscription was confirmed %d times, want once", n)
	}

	var ids []string
	for i, addr := range []string{"ada@example.com", "ben@example.com", "cy@example.com", "dan@example.com"} {
		ids = append(ids, b.acceptOne(t, email(fmt.Sprintf("evt_%d", i+1), addr)))
	}
	b.deliver(t)
	for _, id := range ids {
		if n := b.wantState(t, id, model.StatusSent); !strings.HasPrefix(n.ProviderMessageID, "ses-") {
			t.Fatalf("%s: provider message id %q", id, n.ProviderMessageID)
		}
	}
	// ref is the SES message id and key of the i-th notification's send
	// (the sends may run in any order).
	ref := func(i int) (string, string) {
		msg := b.notification(t, ids[i]).ProviderMessageID
		var n int
		if _, err := fmt.Sscanf(msg, "ses-%d", &n); err != nil {
			t.Fatalf("message id %q", msg)
		}
		return msg, api.key(t, n)
	}

	adaMsg, adaKey := ref(0)
	delivery := sesNotification("sns-1", "Delivery", adaMsg, adaKey,
		`"delivery":{"timestamp":"2026-12-07T01:00:01.500Z","processingTimeMillis":1500,"recipients":["ada@example.com"],"smtpResponse":"250 2.0.0 OK"}`)
	good := sns.sign(t, delivery, "1", cert)

	// Forgeries: nothing moves, and a certificate off SNS's hosts is not
	// fetched at all.
	other := &fakeSNS{}
	if other.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	for name, forged := range map[string]string{
		"tampered":               strings.Replace(good, `250 2.0.0 OK`, `250 2.0.0 Okay`, 1),
		"another key":            other.sign(t, delivery, "2", cert),
		"certificate not on SNS": sns.sign(t, delivery, "2", "https://sns.eu-west-1.amazonaws.com.evil.example"+snsCertPath),
		"certificate over http":  sns.sign(t, delivery, "2", strings.Replace(cert, "https://", "http://", 1)),
		// The stand-in itself, by a name that is not an allowed host: a
		// fetch would show in the count below.
		"certificate on localhost": sns.sign(t, delivery, "2", strings.Replace(cert, "127.0.0.1", "localhost", 1)),
		"another topic":            sns.sign(t, map[string]string{"Type": "Notification", "MessageId": "sns-x", "TopicArn": "arn:aws:sns:eu-west-1:999999999999:other", "Message": delivery["Message"], "Timestamp": delivery["Timestamp"]}, "2", cert),
		"signature version blank":  strings.Replace(good, `"SignatureVersion":"1"`, `"SignatureVersion":""`, 1),
	} {
		p := wantProblem(t, post(forged), http.StatusUnauthorized, "bad-signature")
		if p.Detail == "" {
			t.Errorf("%s: 401 without a detail", name)
		}
	}
	if n := sns.count(snsCertPath); n != 1 {
		t.Errorf("the signing certificate was fetched %d times, want once (then cached)", n)
	}
	b.wantState(t, ids[0], model.StatusSent)

	wantReceived(t, post(good), 1, 1)
	b.wantState(t, ids[0], model.StatusDelivered, "ses/"+adaMsg+"/delivered")
	// SNS retries a delivery it thinks failed: the same message adds nothing.
	wantReceived(t, post(good), 1, 0)

	benMsg, benKey := ref(1)
	wantReceived(t, post(sns.sign(t, sesNotification("sns-2", "Bounce", benMsg, benKey,
		`"bounce":{"bounceType":"Permanent","bounceSubType":"General","timestamp":"2026-12-07T01:00:01.000Z","feedbackId":"0100-fb",`+
			`"bouncedRecipients":[{"emailAddress":"ben@example.com","action":"failed","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}]}`),
		"2", cert)), 1, 1)
	b.wantState(t, ids[1], model.StatusBounced, "ses/"+benMsg+"/bounced")

	// An identity's notification (no configuration set, so no tags) is
	// matched by the SES message id the send recorded.
	cyMsg, _ := ref(2)
	wantReceived(t, post(sns.sign(t, sesNotification("sns-3", "Complaint", cyMsg, "",
		`"complaint":{"complainedRecipients":[{"emailAddress":"cy@example.com"}],"timestamp":"2026-12-07T01:05:00.000Z","feedbackId":"0100-fc","complaintFeedbackType":"abuse"}`),
		"2", cert)), 1, 1)

	// A complaint is about mail that arrived.
	b.wantState(t, ids[2], model.StatusDelivered, "ses/"+cyMsg+"/complained")

	danMsg, danKey := ref(3)
	wantReceived(t, post(sns.sign(t, sesNotification("sns-4", "Bounce", danMsg, danKey,
		`"bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull","timestamp":"2026-12-07T01:00:01.000Z","feedbackId":"0100-fd",`+
			`"bouncedRecipients":[{"emailAddress":"dan@example.com","status":"4.2.2","diagnosticCode":"smtp; 452 4.2.2 mailbox full"}]}`),
		"1", cert)), 1, 1)
	b.wantState(t, ids[3], model.StatusBounced, "ses/"+danMsg+"/bounced")

	n := b.notification(t, ids[0])
	marks, err := b.r.Suppressions(context.Background(), model.SuppressionFilter{Tenant: n.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range marks {
		lasts := "for good"
		if m.ExpiresAt != nil {
			lasts = "lapses"
		}
		got[m.Address] = m.Reason + " " + m.Source + " " + m.Provider + " " + lasts
	}
	want := map[string]string{"ben@example.com": "hard_bounce receipt ses for good", "cy@example.com": "complaint receipt ses for good",
		"dan@example.com": "soft_bounce receipt ses lapses"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("suppressions %v, want %v", got, want)
	}
	// ben is not sent to again.
	again := b.acceptOne(t, email("evt_5", "ben@example.com"))
	b.deliver(t)
	b.wantState(t, again, model.StatusSuppressed)
}

package api_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// Suppression lists over HTTP.

// acmeToken and betaToken are api_test.go's.
var (
	asAcme = []string{"Authorization", "Bearer " + acmeToken}
	asBeta = []string{"Authorization", "Bearer " + betaToken}
)

// countingTwilio is Twilio's Messages API on loopback: every send is
// taken, with a sid of its own (SM1, SM2 …), and counted by To number.
type countingTwilio struct {
	srv *httptest.Server
	mu  sync.Mutex
	to  map[string]int
	n   int
}

func newCountingTwilio(t *testing.T) *countingTwilio {
	f := &countingTwilio{to: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		f.mu.Lock()
		f.n++
		f.to[r.PostForm.Get("To")]++
		sid := fmt.Sprintf("SM%d", f.n)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"sid": "`+sid+`", "status": "queued"}`)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *countingTwilio) sends(to string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.to[to]
}

func (f *countingTwilio) provider(t *testing.T) providers.Provider {
	p, err := providers.New("twilio+http://" + twilioSID + ":" + twilioToken + "@" + strings.TrimPrefix(f.srv.URL, "http://") + "?from=%2B15550100&name=twilio")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shownSuppression is an entry as the API shows it: the notification by
// its opaque id. bounced is POST /v1/bounces' answer, likewise.
type (
	shownSuppression struct {
		model.Suppression
		Notification string `json:"notification,omitempty"`
	}
	bounced struct {
		relay.Bounced
		Notification string `json:"notification"`
	}
)

type suppressionPage struct {
	Suppressions []shownSuppression `json:"suppressions"`
	Next         string             `json:"next"`
}

func (b *bundle) suppressions(t *testing.T, as []string) []shownSuppression {
	t.Helper()
	rep := b.do(t, "GET", "/v1/suppressions", "", as...)
	if rep.status != http.StatusOK {
		t.Fatalf("GET /v1/suppressions: %s", rep)
	}
	return decode[suppressionPage](t, rep).Suppressions
}

// acceptAs accepts an event as a tenant's token and returns its one
// notification.
func (b *bundle) acceptAs(t *testing.T, as []string, ev relay.Event) string {
	t.Helper()
	res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev), as...))
	if len(res.Notifications) != 1 {
		t.Fatalf("accept %s: %+v", ev.ID, res)
	}
	return res.Notifications[0].ID
}

func (b *bundle) notificationAs(t *testing.T, as []string, id string) model.Notification {
	t.Helper()
	rep := b.do(t, "GET", "/v1/notifications/"+id, "", as...)
	if rep.status != http.StatusOK {
		t.Fatalf("GET notification %s: %s", id, rep)
	}
	return decode[notification](t, rep).Notification
}

// A bounce receipt (Twilio's 30005, unknown handset) puts the number on
// acme's list only: acme's next SMS to it ends suppressed without a call,
// beta's goes out. retry says why and, with ?lift=true, sends it.
func TestBounceReceiptSuppressesForThatTenantOnly(t *testing.T) {
	t.Parallel()
	tw := newCountingTwilio(t)
	b := setup(t, options{
		Relay:  relay.Options{Routes: relay.Routes{"sms": {tw.provider(t)}}},
		Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"},
	})
	const phone = "+15550111"
	// A handset switched off (30003) bounces the message but not the number.
	off := b.acceptAs(t, asAcme, sms("s0", "+15550199"))
	b.deliver(t)
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM1", "undelivered", "ErrorCode", "30003")), 1, 1)
	if n := b.notificationAs(t, asAcme, off); n.Status != model.StatusBounced {
		t.Fatalf("after 30003: %s, want bounced", n.Status)
	}
	if es := b.suppressions(t, asAcme); len(es) != 0 {
		t.Fatalf("30003 suppressed the number: %+v", es)
	}
	first := b.acceptAs(t, asAcme, sms("s1", phone))
	b.deliver(t)
	if n := b.notificationAs(t, asAcme, first); n.Status != model.StatusSent || n.ProviderMessageID != "SM2" {
		t.Fatalf("first: %s %q", n.Status, n.ProviderMessageID)
	}
	wantReceived(t, b.signedTwilio(t, twilioStatus("SM2", "undelivered", "ErrorCode", "30005")), 1, 1)
	es := b.suppressions(t, asAcme)
	if len(es) != 1 || es[0].Tenant != "acme" || es[0].Channel != "sms" || es[0].Address != phone || es[0].Reason != model.ReasonHardBounce ||
		es[0].Source != model.SourceReceipt || es[0].Provider != "twilio" || es[0].Notification != first || es[0].ExpiresAt != nil ||
		!strings.Contains(es[0].Detail, "30005") {
		t.Fatalf("acme's list: %+v", es)
	}
	if es := b.suppressions(t, asBeta); len(es) != 0 {
		t.Fatalf("beta's list holds acme's entry: %+v", es)
	}

	second := b.acceptAs(t, asAcme, sms("s2", phone))
	theirs := b.acceptAs(t, asBeta, sms("s3", phone))
	b.deliver(t)
	n := b.notificationAs(t, asAcme, second)
	if n.Status != model.StatusSuppressed || n.Attempts != 0 || !strings.Contains(n.Reason, "suppression list: hard_bounce (from twilio's receipt") {
		t.Errorf("acme's second: %s after %d attempts (%s), want suppressed without one", n.Status, n.Attempts, n.Reason)
	}
	if n := b.notificationAs(t, asBeta, theirs); n.Status != model.StatusSent {
		t.Errorf("beta's: %s (%s), want sent", n.Status, n.Reason)
	}
	if got := tw.sends(phone); got != 2 {
		t.Errorf("twilio took %d sends to the number, want 2 (acme's first, beta's)", got)
	}

	// retry says why, and how to lift it; beta cannot lift acme's.
	retry := "/v1/notifications/" + second + "/retry"
	p := wantProblem(t, b.do(t, "POST", retry, "", asAcme...), http.StatusConflict, "suppressed")
	if !strings.Contains(p.Detail, "hard_bounce") || !strings.Contains(p.Detail, "?lift=true") {
		t.Errorf("retry refused with %q, want the reason and the way to lift it", p.Detail)
	}
	wantProblem(t, b.do(t, "POST", retry+"?lift=true", "", asBeta...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "POST", retry+"?lift=yes", "", asAcme...), http.StatusBadRequest, "invalid-query")
	if rep := b.do(t, "POST", retry+"?lift=true", "", asAcme...); rep.status != http.StatusOK {
		t.Fatalf("retry ?lift=true: %s", rep)
	}
	if es := b.suppressions(t, asAcme); len(es) != 0 {
		t.Errorf("entries after lifting: %+v", es)
	}
	b.deliver(t)
	if n := b.notificationAs(t, asAcme, second); n.Status != model.StatusSent || tw.sends(phone) != 3 {
		t.Errorf("after lifting: %s, %d sends; want sent, 3", n.Status, tw.sends(phone))
	}
}

// smtpSink is a go-smtp server on loopback that takes every message and
// counts them by envelope recipient.
type smtpSink struct {
	addr string
	mu   sync.Mutex
	to   map[string]int
	ids  []string
}

func startSink(t *testing.T) *smtpSink {
	s := &smtpSink{to: map[string]int{}}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(*gosmtp.Conn) (gosmtp.Session, error) { return &sinkSession{s: s}, nil }))
	srv.Domain, srv.ErrorLog = "localhost", log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() { srv.Close(); ln.Close(); wg.Wait() })
	return s
}

func (s *smtpSink) count(to string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.to[to]
}

type sinkSession struct {
	s  *smtpSink
	to string
}

func (ss *sinkSession) Mail(string, *gosmtp.MailOptions) error { return nil }
func (ss *sinkSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	ss.to = to
	return nil
}
func (ss *sinkSession) Data(r io.Reader) error {
	m, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	ss.s.to[ss.to]++
	ss.s.ids = append(ss.s.ids, m.Header.Get("Message-Id"))
	return nil
}
func (ss *sinkSession) Reset()        {}
func (ss *sinkSession) Logout() error { return nil }

// A Postfix DSN from testdata (550 5.1.1, returning the headers of the
// message the smtp provider sent) is matched by its Message-ID,
// <KEY@domain>, and suppresses the address for its tenant: the next email
// to it, spelt in other case, ends suppressed without an SMTP delivery.
// The same report again adds nothing; one about no notification is 404.
func TestDSNFileSuppressesByMessageID(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	smtp, err := providers.New(fmt.Sprintf("smtp://%s?from=news%%40example.com&starttls=none&timeout=5s&name=smtp", sink.addr))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{
		Relay:  relay.Options{Routes: relay.Routes{"email": {smtp}}},
		Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"},
	})
	email := func(id, addr string) relay.Event {
		return relay.Event{ID: id, Type: "welcome", Channels: []string{"email"}, Subject: "Welcome", Body: "Hello.",
			Recipients: []relay.Recipient{{ID: "ada", Email: addr}}}
	}
	// The testdata report returns this notification's Message-ID: the key
	// of tenant acme's event evt_dsn to ada by email.
	id := b.acceptAs(t, asAcme, email("evt_dsn", "Ada@Example.com"))
	b.deliver(t)
	n := b.notificationAs(t, asAcme, id)
	if n.Status != model.StatusSent || n.ProviderMessageID != "<"+n.Key+"@example.com>" || sink.count("Ada@Example.com") != 1 {
		t.Fatalf("sent: %s, message id %q, key %s; %d delivered", n.Status, n.ProviderMessageID, n.Key, sink.count("Ada@Example.com"))
	}
	dsn, err := os.ReadFile("../bounce/testdata/dsn-hard-5.1.1.eml")
	if err != nil {
		t.Fatal(err)
	}
	// Another tenant's token finds no notification of its own to match.
	wantProblem(t, b.do(t, "POST", "/v1/bounces", string(dsn), message(asBeta...)...), http.StatusNotFound, "not-found")
	rep := b.do(t, "POST", "/v1/bounces", string(dsn), message(asAcme...)...)
	if rep.status != http.StatusOK {
		t.Fatalf("POST /v1/bounces: %s", rep)
	}
	got := decode[bounced](t, rep)
	if got.Notification != id || got.Bounced != (relay.Bounced{Kind: "dsn", Tenant: "acme", Channel: "email", Address: "Ada@Example.com",
		Status: "bounced", Suppressed: model.ReasonHardBounce, New: true, MatchedBy: "message-id"}) {
		t.Errorf("answer %+v", got)
	}
	if n := b.notificationAs(t, asAcme, id); n.Status != model.StatusBounced || len(n.Receipts) != 1 || n.Receipts[0].Source != "dsn" {
		t.Errorf("after the DSN: %s, receipts %+v; want bounced with the DSN's receipt", n.Status, n.Receipts)
	}
	es := b.suppressions(t, asAcme)
	if len(es) != 1 || es[0].Address != "ada@example.com" || es[0].Reason != model.ReasonHardBounce || es[0].Source != model.SourceDSN ||
		es[0].Provider != "smtp" || es[0].Notification != id || !strings.Contains(es[0].Detail, "5.1.1") {
		t.Fatalf("acme's list: %+v", es)
	}
	again := decode[bounced](t, b.do(t, "POST", "/v1/bounces", string(dsn), message(asAcme...)...))
	if again.New {
		t.Errorf("the same report again is new: %+v", again)
	}

	next := b.acceptAs(t, asAcme, email("evt_dsn_2", "ada@example.com"))
	b.deliver(t)
	if n := b.notificationAs(t, asAcme, next); n.Status != model.StatusSuppressed || n.Attempts != 0 ||
		!strings.Contains(n.Reason, "from smtp's delivery status notification") {
		t.Errorf("the next email: %s after %d attempts (%s), want suppressed without one", n.Status, n.Attempts, n.Reason)
	}
	if c := sink.count("ada@example.com") + sink.count("Ada@Example.com"); c != 1 {
		t.Errorf("the SMTP server took %d messages for ada, want 1 (the first)", c)
	}

	// Not a report: 400 naming why. A report about nobody: 404.
	wantProblem(t, b.do(t, "POST", "/v1/bounces", "Subject: hi\r\n\r\nhello\r\n", message(asAcme...)...), http.StatusBadRequest, "invalid-bounce")
	other := strings.ReplaceAll(string(dsn), n.Key, "er1_0000000000000000000000000000000000000000")
	p := wantProblem(t, b.do(t, "POST", "/v1/bounces", other, message(asAcme...)...), http.StatusNotFound, "not-found")
	if !strings.Contains(p.Detail, "er1_0000") {
		t.Errorf("404 detail %q, want the Message-ID it looked for", p.Detail)
	}
}

// The list over HTTP: add (JSON), import and export (CSV) round-trip,
// remove; bad entries are refused naming the field or line, writing none.
func TestSuppressionsListExportImportRemove(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	add := `{"suppressions": [{"channel": "email", "address": "Bob@Example.com", "detail": "asked by phone"},
		{"channel": "sms", "address": "+15550122", "reason": "soft_bounce", "ttl": "72h"}]}`
	if rep := b.do(t, "POST", "/v1/suppressions", add, asAcme...); rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"written":2`) {
		t.Fatalf("add: %s", rep)
	}
	p := wantProblem(t, b.do(t, "POST", "/v1/suppressions", `{"suppressions": [{"channel": "email", "address": "ok@example.com"},
		{"channel": "email", "address": "not an address"}]}`, asAcme...), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p.Detail, "suppressions[1].address") {
		t.Errorf("bad entry: %q, want the field named", p.Detail)
	}
	wantProblem(t, b.do(t, "POST", "/v1/suppressions", `{"suppressions": [{"channel": "email", "address": "a@example.com", "reason": "bored"}]}`, asAcme...),
		http.StatusBadRequest, "invalid-request")
	wantProblem(t, b.do(t, "POST", "/v1/suppressions?tenant=beta", add, asAcme...), http.StatusForbidden, "tenant-mismatch")

	rep := b.do(t, "GET", "/v1/suppressions?format=csv", "", asAcme...)
	if rep.status != http.StatusOK || !strings.HasPrefix(rep.header.Get("Content-Type"), "text/csv") {
		t.Fatalf("export: %s", rep)
	}
	lines := strings.Split(strings.TrimSpace(string(rep.body)), "\n")
	if len(lines) != 3 || lines[0] != strings.Join(relay.SuppressionCSVHeader, ",") ||
		!strings.HasPrefix(lines[1], "acme,email,bob@example.com,manual,api,,,asked by phone,") || !strings.HasPrefix(lines[2], "acme,sms,+15550122,soft_bounce,api,") {
		t.Fatalf("export:\n%s", rep.body)
	}
	// beta imports acme's export (a tenant column naming another tenant is
	// refused on a tenant's token), then without the column.
	p = wantProblem(t, b.do(t, "POST", "/v1/suppressions", string(rep.body), append([]string{"Content-Type", "text/csv"}, asBeta...)...),
		http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p.Detail, "line 2, column tenant") {
		t.Errorf("import of another tenant's lines: %q", p.Detail)
	}
	csv := "channel,address,reason,expires_at\nemail,carol@example.com,complaint,\nsms,+15550133,,2099-01-01T00:00:00Z\n"
	rep = b.do(t, "POST", "/v1/suppressions", csv, append([]string{"Content-Type", "text/csv"}, asBeta...)...)
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"read":2`) {
		t.Fatalf("import: %s", rep)
	}
	bad := "channel,address\nemail,dee@example.com\nemail,\n"
	p = wantProblem(t, b.do(t, "POST", "/v1/suppressions", bad, append([]string{"Content-Type", "text/csv"}, asBeta...)...), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p.Detail, "line 3, column address") {
		t.Errorf("bad import: %q, want line 3 named", p.Detail)
	}
	es := b.suppressions(t, asBeta)
	if len(es) != 2 || es[0].Address != "carol@example.com" || es[0].Reason != model.ReasonComplaint || es[0].Source != model.SourceImport ||
		es[1].ExpiresAt == nil || es[1].Reason != model.ReasonManual {
		t.Fatalf("beta's list: %+v", es)
	}
	if es := b.suppressions(t, asAcme); len(es) != 2 {
		t.Fatalf("acme's list: %+v", es)
	}
	wantProblem(t, b.do(t, "DELETE", "/v1/suppressions?channel=email&address=bob@example.com", "", asBeta...), http.StatusNotFound, "not-found")
	if rep := b.do(t, "DELETE", "/v1/suppressions?channel=email&address=BOB@example.com", "", asAcme...); rep.status != http.StatusOK {
		t.Fatalf("remove: %s", rep)
	}
	if es := b.suppressions(t, asAcme); len(es) != 1 || es[0].Channel != "sms" {
		t.Errorf("after remove: %+v", es)
	}
}

// An ARF complaint and a DSN matched by its VERP address (no Message-ID
// returned), both from testdata with this run's keys written in: the
// complaint lists the address for good, the soft bounce (552 5.2.2) for
// SoftBounceTTL.
func TestARFAndVERPBounces(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	smtp, err := providers.New(fmt.Sprintf("smtp://%s?from=news%%40example.com&starttls=none&timeout=5s&name=smtp", sink.addr))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{Relay: relay.Options{Routes: relay.Routes{"email": {smtp}}, SoftBounceTTL: time.Hour}})
	email := func(id, rcpt, addr string) string {
		return b.acceptOne(t, relay.Event{ID: id, Type: "news", Channels: []string{"email"}, Subject: "News", Body: "Hello.",
			Recipients: []relay.Recipient{{ID: rcpt, Email: addr}}})
	}
	bob, cy := email("n1", "bob", "bob@example.org"), email("n2", "cy", "cy@example.net")
	b.deliver(t)
	nb, nc := b.notification(t, bob), b.notification(t, cy)
	read := func(name string) string {
		raw, err := os.ReadFile("../bounce/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	arf := strings.ReplaceAll(read("arf-abuse.eml"), "<k%2Fnews%20001@example.com>", nb.ProviderMessageID)
	got := decode[bounced](t, b.do(t, "POST", "/v1/bounces", arf, message()...))
	if got.Kind != "arf" || got.Notification != bob || got.Status != "complained" || got.Suppressed != model.ReasonComplaint || got.MatchedBy != "message-id" {
		t.Errorf("ARF: %+v", got)
	}
	verp := strings.ReplaceAll(read("dsn-soft-verp.eml"), "k%2Fverp-1", nc.Key)
	got = decode[bounced](t, b.do(t, "POST", "/v1/bounces", verp, message()...))
	if got.Kind != "dsn" || got.Notification != cy || got.Status != "bounced" || got.Suppressed != model.ReasonSoftBounce || got.MatchedBy != "verp" {
		t.Errorf("VERP DSN: %+v", got)
	}
	es := b.suppressions(t, nil)
	if len(es) != 2 || es[0].Address != "bob@example.org" || es[0].Reason != model.ReasonComplaint || es[0].Source != model.SourceARF || es[0].ExpiresAt != nil ||
		es[1].Address != "cy@example.net" || es[1].Reason != model.ReasonSoftBounce || es[1].ExpiresAt == nil {
		t.Fatalf("entries %+v", es)
	}
	if ttl := es[1].ExpiresAt.Sub(es[1].CreatedAt); ttl < 59*time.Minute || ttl > time.Hour {
		t.Errorf("the soft bounce lasts %s, want the configured hour", ttl)
	}
	if n := b.notification(t, bob); n.Status != model.StatusDelivered && n.Status != model.StatusSent {
		t.Errorf("after a complaint: %s (a complaint is not a bounce)", n.Status)
	}
}

// An address on the list is suppressed however the next event spells it:
// jörg@example.com listed (NFC) stops jo\u0308rg@example.com (NFD) and
// JÖRG@example.com (non-ASCII capitals), with no SMTP delivery; the list
// shows the entry under its key, and removing it by another spelling works.
func TestSuppressionMatchesOtherSpellings(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	smtp, err := providers.New(fmt.Sprintf("smtp://%s?from=news%%40example.com&starttls=none&timeout=5s&name=smtp", sink.addr))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{
		Relay:  relay.Options{Routes: relay.Routes{"email": {smtp}}},
		Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"},
	})
	if rep := b.do(t, "POST", "/v1/suppressions", `{"suppressions": [{"channel": "email", "address": "jörg@example.com"}]}`, asAcme...); rep.status != http.StatusOK {
		t.Fatalf("add: %s", rep)
	}
	email := func(id, addr string) relay.Event {
		return relay.Event{ID: id, Type: "welcome", Channels: []string{"email"}, Subject: "Welcome", Body: "Hello.",
			Recipients: []relay.Recipient{{ID: "jorg", Email: addr}}}
	}
	spellings := []string{"jo\u0308rg@example.com", "JÖRG@example.com", "JO\u0308RG@EXAMPLE.COM"}
	var ids []string
	for i, a := range spellings {
		ids = append(ids, b.acceptAs(t, asAcme, email(fmt.Sprintf("evt_%d", i), a)))
	}
	control := b.acceptAs(t, asAcme, email("evt_ada", "ada@example.com"))
	b.deliver(t)
	for i, id := range ids {
		if n := b.notificationAs(t, asAcme, id); n.Status != model.StatusSuppressed || n.Attempts != 0 {
			t.Errorf("email to %q: %s after %d attempts (%s), want suppressed without one", spellings[i], n.Status, n.Attempts, n.Reason)
		}
	}
	if n := b.notificationAs(t, asAcme, control); n.Status != model.StatusSent {
		t.Errorf("email to ada: %s (%s), want sent", n.Status, n.Reason)
	}
	for _, a := range spellings {
		if c := sink.count(a); c != 0 {
			t.Errorf("the SMTP server took %d messages for %q", c, a)
		}
	}
	if es := b.suppressions(t, asAcme); len(es) != 1 || es[0].Address != "jörg@example.com" {
		t.Fatalf("acme's list: %+v", es)
	}
	if rep := b.do(t, "DELETE", "/v1/suppressions?channel=email&address=JO%CC%88RG@example.com", "", asAcme...); rep.status != http.StatusOK {
		t.Fatalf("remove by the NFD spelling in capitals: %s", rep)
	}
	if es := b.suppressions(t, asAcme); len(es) != 0 {
		t.Errorf("after remove: %+v", es)
	}
}

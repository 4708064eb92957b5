package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/relay"
)

// The acceptance case once more, through the smtp provider and a real SMTP
// server on loopback instead of the HTTP simulator. SMTP has no idempotency
// key, so this is the "provider ignores keys" half of the demo: the server
// takes ada's first two messages and drops the connection before replying
// (the provider cannot tell whether they went: Unknown), and answers ben's
// first RCPT with 451 (a definite no: Refused, retried).
func TestAcceptanceThroughSMTP(t *testing.T) {
	t.Parallel()
	const ada, ben, cy = "ada@example.com", "ben@example.com", "cy@example.com"
	cases := []struct {
		name     string
		mode     relay.Mode
		received map[string]int    // messages the server took, by To
		status   map[string]string // by event id/recipient
		attempts map[string]int    // provider calls, by event id/recipient
		copies   map[string]int    // messages received with its Message-ID
	}{
		{
			// Ada's outcome is unknown after one message and, receipts being
			// at-most-once, it is not resent.
			name:     "at-most-once",
			mode:     relay.AtMostOnce,
			received: map[string]int{ada: 1, ben: 1, cy: 2},
			status:   map[string]string{"evt_501/ada": "unknown", "evt_502/ben": "sent", "evt_503/cy": "sent", "evt_504/cy": "sent"},
			attempts: map[string]int{"evt_501/ada": 1, "evt_502/ben": 2, "evt_503/cy": 1, "evt_504/cy": 1},
			copies:   map[string]int{"evt_501/ada": 1, "evt_502/ben": 1, "evt_503/cy": 1, "evt_504/cy": 1},
		},
		{
			// Each unknown is retried and each retry is another message:
			// three for ada, all with one Message-ID.
			name:     "at-least-once",
			mode:     relay.AtLeastOnce,
			received: map[string]int{ada: 3, ben: 1, cy: 2},
			status:   map[string]string{"evt_501/ada": "sent", "evt_502/ben": "sent", "evt_503/cy": "sent", "evt_504/cy": "sent"},
			attempts: map[string]int{"evt_501/ada": 3, "evt_502/ben": 2, "evt_503/cy": 1, "evt_504/cy": 1},
			copies:   map[string]int{"evt_501/ada": 3, "evt_502/ben": 1, "evt_503/cy": 1, "evt_504/cy": 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			sink := startSMTPSink(t, map[string]int{ada: 2}, map[string]int{ben: 1})
			key := testDKIMKey(t)
			route := fmt.Sprintf("smtp://%s?from=%s&starttls=none&timeout=2s&dkim_selector=sel&dkim_key=%s",
				sink.addr, url.QueryEscape("billing@example.com"), url.QueryEscape(key.file))
			p, err := providers.New(route)
			if err != nil {
				t.Fatal(err)
			}
			r, err := relaytest.Open(ctx, filepath.Join(t.TempDir(), "relay.db"), relay.Options{
				Routes:   relay.Routes{"email": {p}},
				Delivery: map[string]relay.Mode{"payment.succeeded": c.mode},
				Retry:    relay.Policy{BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
				Poll:     50 * time.Millisecond,
				Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()

			var accepted []relay.AcceptResult
			for _, ev := range demoEvents() {
				acc, err := r.Accept(ctx, ev)
				if err != nil {
					t.Fatal(err)
				}
				accepted = append(accepted, acc)
			}
			if first, again := accepted[0], accepted[4]; first.Duplicate || !again.Duplicate ||
				first.Notifications[0].ID != again.Notifications[0].ID {
				t.Errorf("evt_501 twice: %+v then %+v", first, again)
			}
			sum, err := r.RunUntilIdle(ctx, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("dispatch: %+v", sum)

			got := sink.snapshot()
			t.Logf("received, by To: %v", got.ids)
			for _, prob := range got.problems {
				t.Errorf("server: %s", prob)
			}
			for addr, n := range c.received {
				if len(got.ids[addr]) != n {
					t.Errorf("%s received %d messages %v, want %d", addr, len(got.ids[addr]), got.ids[addr], n)
				}
			}
			if len(got.ids) != len(c.received) {
				t.Errorf("messages to %v, want exactly ada, ben and cy", got.ids)
			}
			if got.rcpt[ben] != 2 {
				t.Errorf("ben's RCPT came %d times, want 2 (refused with 451, then retried)", got.rcpt[ben])
			}

			for _, acc := range accepted[:4] {
				en := acc.Notifications[0]
				name := acc.EventID + "/" + en.Recipient
				n, err := r.Store().Notification(ctx, "", en.ID, "")
				if err != nil {
					t.Fatal(err)
				}
				if n.Status != c.status[name] || n.Attempts != c.attempts[name] {
					t.Errorf("%s is %s after %d attempts, want %s after %d (reason: %s)",
						name, n.Status, n.Attempts, c.status[name], c.attempts[name], n.Reason)
				}
				// Every copy carries the Message-ID derived from the key, so a
				// receiving system can recognise a repeat.
				wantID := "<" + n.Key + "@example.com>"
				if n.Status == "sent" && n.ProviderMessageID != wantID {
					t.Errorf("%s: provider message id %q, want %q", name, n.ProviderMessageID, wantID)
				}
				copies := 0
				for _, id := range got.ids[n.Address] {
					if id == wantID {
						copies++
					}
				}
				if copies != c.copies[name] {
					t.Errorf("%s: %d messages with %s, want %d", name, copies, wantID, c.copies[name])
				}
				if c.mode == relay.AtMostOnce && copies > 1 {
					t.Errorf("%s: %d copies of an at-most-once notification", name, copies)
				}
			}
			// cy's two payments read the same but are two notifications.
			if ids := got.ids[cy]; len(ids) == 2 && ids[0] == ids[1] {
				t.Errorf("cy's two receipts share the Message-ID %s", ids[0])
			}
			// Every message is signed, automatic and, receipts not being
			// commercial, without List-Unsubscribe; every copy of one
			// notification is the same message, byte for byte: its Date is
			// the notification's creation, and so is the signature's time.
			for to, msgs := range got.raw {
				for i, data := range msgs {
					if err := verifyDKIM(data, key.record); err != nil {
						t.Errorf("message %d to %s: DKIM: %v", i+1, to, err)
					}
					m, err := mail.ReadMessage(bytes.NewReader(data))
					if err != nil {
						t.Fatal(err)
					}
					if m.Header.Get("Auto-Submitted") != "auto-generated" || m.Header.Get("List-Unsubscribe") != "" {
						t.Errorf("message %d to %s: Auto-Submitted %q, List-Unsubscribe %q", i+1, to,
							m.Header.Get("Auto-Submitted"), m.Header.Get("List-Unsubscribe"))
					}
					if to == ada && !bytes.Equal(data, msgs[0]) {
						t.Errorf("ada's copy %d differs from the first:\n%s\n---\n%s", i+1, data, msgs[0])
					}
				}
			}
		})
	}
}

// smtpSink is an SMTP server on a loopback port that records the messages
// it takes and injects faults by recipient.
type smtpSink struct {
	addr string

	// Faults, read-only once serving: the first drop[to] messages to a
	// recipient are taken and then the connection is closed without a
	// reply; the first refuse[to] RCPTs are answered 451.
	drop, refuse map[string]int

	mu       sync.Mutex
	rcpt     map[string]int      // RCPT commands, by envelope recipient
	taken    map[string]int      // messages taken, by envelope recipient
	ids      map[string][]string // Message-IDs taken, by To header, in order
	raw      map[string][][]byte // the messages taken, by envelope recipient, in order
	problems []string            // messages that did not read as expected
}

// sinkState is a copy of what a sink recorded.
type sinkState struct {
	rcpt     map[string]int
	ids      map[string][]string
	raw      map[string][][]byte
	problems []string
}

func startSMTPSink(t *testing.T, drop, refuse map[string]int) *smtpSink {
	t.Helper()
	s := &smtpSink{drop: drop, refuse: refuse,
		rcpt: map[string]int{}, taken: map[string]int{}, ids: map[string][]string{}, raw: map[string][][]byte{}}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(c *gosmtp.Conn) (gosmtp.Session, error) {
		return &sinkSession{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	// The dropped connections make go-smtp log failed writes; they are the point.
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() {
		srv.Close()
		// Close misses the listener when Serve has not registered it yet.
		ln.Close()
		wg.Wait()
	})
	return s
}

func (s *smtpSink) snapshot() sinkState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := sinkState{rcpt: map[string]int{}, ids: map[string][]string{}, raw: map[string][][]byte{},
		problems: append([]string(nil), s.problems...)}
	for k, v := range s.rcpt {
		st.rcpt[k] = v
	}
	for k, v := range s.ids {
		st.ids[k] = append([]string(nil), v...)
	}
	for k, v := range s.raw {
		st.raw[k] = append([][]byte(nil), v...)
	}
	return st
}

// take records one message for the envelope recipient to and reports
// whether to drop the connection instead of replying.
func (s *smtpSink) take(to string, data []byte) (drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken[to]++
	s.raw[to] = append(s.raw[to], data)
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		s.problems = append(s.problems, fmt.Sprintf("message to %s does not parse: %v", to, err))
		return s.taken[to] <= s.drop[to]
	}
	hdrTo, err := m.Header.AddressList("To")
	if err != nil || len(hdrTo) != 1 || hdrTo[0].Address != to {
		s.problems = append(s.problems, fmt.Sprintf("envelope to %s, header To %q (%v)", to, m.Header.Get("To"), err))
		return s.taken[to] <= s.drop[to]
	}
	id := m.Header.Get("Message-Id")
	if id == "" {
		s.problems = append(s.problems, "message to "+to+" without a Message-ID")
	}
	s.ids[hdrTo[0].Address] = append(s.ids[hdrTo[0].Address], id)
	return s.taken[to] <= s.drop[to]
}

type sinkSession struct {
	s    *smtpSink
	conn *gosmtp.Conn
	to   []string
}

func (ss *sinkSession) Mail(string, *gosmtp.MailOptions) error { return nil }

func (ss *sinkSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	ss.s.mu.Lock()
	ss.s.rcpt[to]++
	refuse := ss.s.rcpt[to] <= ss.s.refuse[to]
	ss.s.mu.Unlock()
	if refuse {
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "temporary failure, try again later"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *sinkSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(ss.to) != 1 {
		return &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 5, 3}, Message: "one recipient per message"}
	}
	// The message is recorded before any reply: once Send returns, the
	// sink's counts are final for that attempt.
	if ss.s.take(ss.to[0], data) {
		// Taken, but the answer is lost: the 250 go-smtp writes next
		// meets a closed connection.
		ss.conn.Conn().Close()
	}
	return nil
}

func (ss *sinkSession) Reset()        { ss.to = nil }
func (ss *sinkSession) Logout() error { return nil }

// dkimTestKey is an Ed25519 signing key made for one test (none is
// committed): its PEM, a file holding it, and the TXT record that would
// publish it as sel._domainkey.example.com.
type dkimTestKey struct {
	pem, file, record string
}

func testDKIMKey(t *testing.T) dkimTestKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	k := dkimTestKey{
		pem:    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		file:   filepath.Join(t.TempDir(), "dkim.pem"),
		record: "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub),
	}
	if err := os.WriteFile(k.file, []byte(k.pem), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// verifyDKIM checks a message's one signature with go-msgauth.
func verifyDKIM(data []byte, record string) error {
	vs, err := dkim.VerifyWithOptions(bytes.NewReader(data), &dkim.VerifyOptions{
		LookupTXT: func(domain string) ([]string, error) {
			if domain != "sel._domainkey.example.com" {
				return nil, fmt.Errorf("no TXT record for %s", domain)
			}
			return []string{record}, nil
		},
	})
	switch {
	case err != nil:
		return err
	case len(vs) != 1:
		return fmt.Errorf("%d signatures, want 1", len(vs))
	}
	return vs[0].Err
}

// Through the CLI and the config file: a type marked commercial gets
// List-Unsubscribe and its one-click Post header, a receipt does not; the
// DKIM key comes from an environment variable through options:, and
// both messages verify. A commercial type with an smtp provider that has
// no list_unsubscribe is refused by config check, and so is such a
// provider given as a --route.
func TestCommercialMailThroughConfig(t *testing.T) { // not parallel: it sets an environment variable
	sink := startSMTPSink(t, nil, nil)
	key := testDKIMKey(t)
	t.Setenv("EDGERELAY_TEST_DKIM_KEY", key.pem)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edgerelay.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`providers:
  mail:
    url: smtp://%s?from=news%%40example.com&starttls=none
    options:
      dkim_key: ${EDGERELAY_TEST_DKIM_KEY}
      dkim_selector: sel
      list_unsubscribe: https://relay.example.com/u/{key}
routes:
  email: mail
types:
  newsletter:
    commercial: true
`, sink.addr)), 0o644)
	db := filepath.Join(dir, "r.db")
	var sent []acceptedLine
	for _, ev := range []string{
		`{"id": "nl_1", "type": "newsletter", "recipients": [{"id": "ada", "email": "ada@example.com"}],
		  "subject": "Spring", "html": "<p>Spring <b>offers</b>.</p>"}`,
		`{"id": "evt_501", "type": "payment.succeeded", "purpose": "receipt", "recipients": [{"id": "ben", "email": "ben@example.com"}],
		  "subject": "Your receipt", "body": "Thanks."}`,
	} {
		r := runCLI(t, ev, "--db", db, "send")
		if r.code != 0 {
			t.Fatalf("send: exit %d: %s", r.code, r.stderr)
		}
		sent = append(sent, decodeLines(t, r.stdout)...)
	}
	if r := runCLI(t, "", "dispatch", "--db", db, "--config", cfg, "--until-idle", "--log-level", "warn"); r.code != 0 {
		t.Fatalf("dispatch: exit %d: %s", r.code, r.stderr)
	}
	got := sink.snapshot()
	for _, p := range got.problems {
		t.Errorf("server: %s", p)
	}
	for _, c := range []struct {
		to, unsubscribe, post string
	}{
		{"ada@example.com", "<https://relay.example.com/u/" + sent[0].Key + ">", "List-Unsubscribe=One-Click"},
		{"ben@example.com", "", ""},
	} {
		if len(got.raw[c.to]) != 1 {
			t.Fatalf("%s received %d messages, want 1", c.to, len(got.raw[c.to]))
		}
		data := got.raw[c.to][0]
		m, err := mail.ReadMessage(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if u, p := m.Header.Get("List-Unsubscribe"), m.Header.Get("List-Unsubscribe-Post"); u != c.unsubscribe || p != c.post {
			t.Errorf("%s: List-Unsubscribe %q, List-Unsubscribe-Post %q; want %q, %q", c.to, u, p, c.unsubscribe, c.post)
		}
		if err := verifyDKIM(data, key.record); err != nil {
			t.Errorf("%s: DKIM: %v\n%s", c.to, err, data)
		}
		if c.to == "ada@example.com" && !bytes.Contains(data, []byte("Content-Type: text/plain")) {
			t.Errorf("the HTML-only newsletter has no text part:\n%s", data)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(fmt.Sprintf(`providers:
  mail:
    url: smtp://%s?from=news%%40example.com&starttls=none
types:
  newsletter:
    commercial: true
`, sink.addr)), 0o644)
	r := runCLI(t, "", "config", "check", bad)
	if want := `line 6 (types.newsletter.commercial): type "newsletter" is commercial, but provider "mail" would send it without List-Unsubscribe`; r.code != exitError || !strings.Contains(r.stderr, want) {
		t.Errorf("config check: exit %d\n%s\nwant %s", r.code, r.stderr, want)
	}
	onlyTypes := filepath.Join(dir, "types.yaml")
	os.WriteFile(onlyTypes, []byte("types:\n  newsletter:\n    commercial: true\n"), 0o644)
	r = runCLI(t, "", "dispatch", "--db", db, "--config", onlyTypes, "--until-idle",
		"--route", fmt.Sprintf("email=smtp://%s?from=news%%40example.com&starttls=none", sink.addr))
	if r.code == 0 || !strings.Contains(r.stderr, "would send it without List-Unsubscribe") {
		t.Errorf("dispatch --route without list_unsubscribe: exit %d\n%s", r.code, r.stderr)
	}
}

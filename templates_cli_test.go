package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/internal/relaytest"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/templates"
)

// receiptTemplates writes the receipt's templates in English and German
// under dir/templates: English has HTML only (its text part is made from
// it), German has both.
func receiptTemplates(t *testing.T, dir string) string {
	t.Helper()
	files := map[string]string{
		"receipt/en/email.subject.tmpl": "Your receipt, {{.data.name}}",
		"receipt/en/email.html.tmpl":    "<p>Dear {{.data.name}},</p>\n<p>we received {{currency .data.amount .data.currency}} on {{date .data.paid_at \"long\"}}.</p>\n",
		"receipt/de/email.subject.tmpl": "Ihre Quittung, {{.data.name}}",
		"receipt/de/email.text.tmpl":    "Liebe(r) {{.data.name}},\nwir haben {{currency .data.amount .data.currency}} am {{date .data.paid_at \"long\"}} um {{time .data.paid_at}} erhalten.\n",
		"receipt/de/email.html.tmpl":    "<p>Liebe(r) {{.data.name}},</p>\n<p>wir haben {{currency .data.amount .data.currency}} am {{date .data.paid_at \"long\"}} erhalten.</p>\n",
	}
	root := filepath.Join(dir, "templates")
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// receiptEvent is a receipt with data and no wording of its own.
func receiptEvent(id, who, email, locale, tz, name, amount string) string {
	rc := map[string]string{"id": who, "email": email}
	if locale != "" {
		rc["locale"], rc["timezone"] = locale, tz
	}
	b, _ := json.Marshal(map[string]any{"id": id, "type": "payment.succeeded", "purpose": "receipt",
		"recipients": []any{rc},
		"data":       map[string]any{"name": name, "amount": amount, "currency": "EUR", "paid_at": "2026-03-01T23:30:00Z"}})
	return string(b)
}

// mailText is the decoded text of a message's parts, by content type.
func mailText(t *testing.T, data []byte) (subject string, parts map[string]string) {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	subject, err = new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	parts = map[string]string{}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = p
		if p.Header.Get("Content-Transfer-Encoding") == "quoted-printable" {
			r = quotedprintable.NewReader(p)
		}
		b, _ := io.ReadAll(r)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		parts[ct] = string(b)
	}
	return subject, parts
}

type dkimpyCheck struct {
	name string
	msg  []byte
	want bool
}

// runDKIMPy verifies each message with dkimpy against record (handed to it
// through its dnsfunc hook: the tests reach no DNS), as providers'
// dkimpyVerify does; it skips without dkimverify.
func runDKIMPy(t *testing.T, record string, checks []dkimpyCheck) []bool {
	t.Helper()
	bin, err := exec.LookPath("dkimverify")
	if err != nil {
		t.Skip("dkimverify not found: apt-get install python3-dkim to verify with dkimpy")
	}
	python := "python3"
	if b, err := os.ReadFile(bin); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if interp, ok := strings.CutPrefix(strings.TrimSpace(line), "#!"); ok && !strings.Contains(interp, " ") {
			python = interp
		}
	}
	in := make([][2]string, len(checks))
	for i, c := range checks {
		in[i] = [2]string{record, base64.StdEncoding.EncodeToString(c.msg)}
	}
	stdin, _ := json.Marshal(in)
	cmd := exec.CommandContext(t.Context(), python, "-c", `
import base64, json, sys, dkim
def verify(record, msg):
    def dns(name, timeout=5):
        return record.encode() if name.rstrip(b".") == b"sel._domainkey.example.com" else None
    return bool(dkim.verify(base64.b64decode(msg), dnsfunc=dns))
print(json.dumps([verify(r, m) for r, m in json.load(sys.stdin)]))
`)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stderr = t.Output()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dkimpy: %v", err)
	}
	var ok []bool
	if err := json.Unmarshal(out, &ok); err != nil || len(ok) != len(checks) {
		t.Fatalf("dkimpy printed %q (%v)", out, err)
	}
	return ok
}

// Through the CLI, the config and a real SMTP server: ada (English, in
// London), ben (German, de-AT falling back to de, in Vienna) and cy (no
// locale: the default, English) get their receipts rendered from
// templates at accept, each in its language, with the amount and date in
// its locale and zone; every message is DKIM-signed and verifies, and
// fails to verify with one byte of its Subject changed; ada's first
// message is taken and its answer lost, and the retry sends the very same
// bytes; a template edited after the accept changes nothing already
// accepted, and show displays the stored message with the version used.
func TestTemplatedReceiptsThroughSMTP(t *testing.T) { // not parallel: it sets an environment variable
	sink := startSMTPSink(t, map[string]int{"ada@example.com": 1}, nil)
	key := testDKIMKey(t)
	t.Setenv("EDGERELAY_TEST_DKIM_KEY", key.pem)
	dir := t.TempDir()
	root := receiptTemplates(t, dir)
	cfg := filepath.Join(dir, "edgerelay.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`providers:
  mail:
    url: smtp://%s?from=billing%%40example.com&starttls=none&timeout=2s
    options:
      dkim_key: ${EDGERELAY_TEST_DKIM_KEY}
      dkim_selector: sel
routes:
  email: mail
retry:
  base_delay: 10ms
  max_delay: 50ms
templates:
  dir: templates
  default_locale: en
`, sink.addr)), 0o644)
	db := filepath.Join(dir, "r.db")
	var sent []acceptedLine
	for _, ev := range []string{
		receiptEvent("evt_501", "ada", "ada@example.com", "en-GB", "Europe/London", "Ada", "20"),
		receiptEvent("evt_502", "ben", "ben@example.com", "de-AT", "Europe/Vienna", "Ben", "1234.5"),
		receiptEvent("evt_503", "cy", "cy@example.com", "", "", "Cy", "12.00"),
	} {
		r := runCLI(t, ev, "--db", db, "--config", cfg, "send")
		if r.code != 0 {
			t.Fatalf("send: exit %d: %s", r.code, r.stderr)
		}
		sent = append(sent, decodeLines(t, r.stdout)...)
	}
	// An edit after the accept: what was accepted keeps its wording.
	if err := os.WriteFile(filepath.Join(root, "receipt/en/email.subject.tmpl"), []byte("EDITED {{.data.name}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "dispatch", "--db", db, "--config", cfg, "--until-idle", "--log-level", "warn"); r.code != 0 {
		t.Fatalf("dispatch: exit %d: %s", r.code, r.stderr)
	}
	got := sink.snapshot()
	for _, p := range got.problems {
		t.Errorf("server: %s", p)
	}
	want := []struct {
		to, subject, text, html string
	}{
		{"ada@example.com", "Your receipt, Ada", "we received €20.00 on 1 March 2026", "<p>Dear Ada,</p>"},
		// 23:30 UTC is half past midnight on the 2nd in Vienna.
		{"ben@example.com", "Ihre Quittung, Ben", "wir haben €\u00a01.234,50 am 2. März 2026 um 00:30 erhalten.", "<p>Liebe(r) Ben,</p>"},
		{"cy@example.com", "Your receipt, Cy", "we received €12.00 on March 1, 2026", "<p>Dear Cy,</p>"},
	}
	var dkimpy []dkimpyCheck
	for _, w := range want {
		msgs := got.raw[w.to]
		if len(msgs) == 0 {
			t.Errorf("%s received nothing", w.to)
			continue
		}
		for i, data := range msgs {
			if !bytes.Equal(data, msgs[0]) {
				t.Errorf("%s: copy %d differs from the first:\n%s\n---\n%s", w.to, i+1, data, msgs[0])
			}
		}
		data := msgs[0]
		subject, parts := mailText(t, data)
		if subject != w.subject || !strings.Contains(parts["text/plain"], w.text) || !strings.Contains(parts["text/html"], w.html) {
			t.Errorf("%s: subject %q, parts %q; want %q, text with %q, html with %q", w.to, subject, parts, w.subject, w.text, w.html)
		}
		if err := verifyDKIM(data, key.record); err != nil {
			t.Errorf("%s: DKIM: %v\n%s", w.to, err, data)
		}
		tampered := bytes.Replace(data, []byte("Subject: "), []byte("Subject:  "), 1)
		tampered = bytes.Replace(tampered, []byte("Subject:  "), []byte("Subject: X"), 1)
		if err := verifyDKIM(tampered, key.record); err == nil {
			t.Errorf("%s: a changed Subject still verifies", w.to)
		}
		dkimpy = append(dkimpy, dkimpyCheck{w.to, data, true}, dkimpyCheck{w.to + " (Subject changed)", tampered, false})
	}
	// And with a verifier of another codebase: dkimpy, Debian's
	// python3-dkim (.ci/run installs it).
	t.Run("dkimpy", func(t *testing.T) {
		for i, ok := range runDKIMPy(t, key.record, dkimpy) {
			if ok != dkimpy[i].want {
				t.Errorf("dkimpy: %s verifies %v, want %v", dkimpy[i].name, ok, dkimpy[i].want)
			}
		}
	})
	if n := len(got.raw["ada@example.com"]); n != 2 {
		t.Errorf("ada received %d copies, want 2 (the first's answer lost, one retry)", n)
	}

	r := runCLI(t, "", "--db", db, "show", sent[1].Key, "--json")
	if r.code != 0 {
		t.Fatalf("show: exit %d: %s", r.code, r.stderr)
	}
	var shown struct {
		Message struct {
			Subject  string             `json:"subject"`
			Template relay.TemplateUsed `json:"template"`
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil {
		t.Fatalf("show --json: %v\n%s", err, r.stdout)
	}
	if m := shown.Message; m.Subject != "Ihre Quittung, Ben" || m.Template.Name != "receipt" || m.Template.Locale != "de" || m.Template.Version == "" {
		t.Errorf("show: message %+v", m)
	}

	r = runCLI(t, "", "--db", db, "show", sent[1].Key)
	if !strings.Contains(r.stdout, "template   receipt version "+shown.Message.Template.Version+" (de), rendered at accept") ||
		!strings.Contains(r.stdout, "subject    Ihre Quittung, Ben") {
		t.Errorf("show:\n%s", r.stdout)
	}

	// template render shows the edited template now, for ada, without
	// sending.
	rcpt := filepath.Join(dir, "ada.json")
	data := filepath.Join(dir, "data.json")
	os.WriteFile(rcpt, []byte(`{"id": "ada", "email": "ada@example.com", "locale": "en-GB"}`), 0o644)
	os.WriteFile(data, []byte(`{"name": "Ada", "amount": "20", "currency": "EUR", "paid_at": "2026-03-01T23:30:00Z"}`), 0o644)
	r = runCLI(t, "", "--config", cfg, "template", "render", "receipt", "--recipient", rcpt, "--data", data)
	if r.code != 0 || !strings.Contains(r.stdout, `"subject":"EDITED Ada"`) || !strings.Contains(r.stdout, `"locale":"en"`) {
		t.Errorf("template render: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := len(sink.snapshot().raw["ada@example.com"]); n != 2 {
		t.Errorf("template render sent mail: ada has %d messages", n)
	}
}

// A field the data does not have is refused at accept, through the CLI
// (exit 5) and HTTP (400), naming the template, its file and line, and
// the field; nothing is written. The same happens in template render.
func TestTemplateMissingFieldIsRefusedAtAccept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	receiptTemplates(t, dir)
	cfg := filepath.Join(dir, "edgerelay.yaml")
	os.WriteFile(cfg, []byte("templates:\n  dir: templates\n"), 0o644)
	db := filepath.Join(dir, "r.db")
	ev := `{"id": "evt_9", "type": "payment.succeeded", "purpose": "receipt",
	  "recipients": [{"id": "ben", "email": "ben@example.com", "locale": "de"}],
	  "data": {"amount": "5", "currency": "EUR", "paid_at": "2026-03-01T10:00:00Z"}}`
	r := runCLI(t, ev, "--db", db, "--config", cfg, "send")
	for _, want := range []string{`recipients[0]`, `template "receipt"`, "receipt/de/email.subject.tmpl:1:", `"name"`} {
		if r.code != exitRejected || !strings.Contains(r.stderr, want) {
			t.Errorf("send: exit %d, stderr %q; want exit 5 naming %s", r.code, r.stderr, want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		if n := countRows(t, db, "events"); n != 0 {
			t.Errorf("%d events written", n)
		}
	}

	set, err := templates.LoadDir(filepath.Join(dir, "templates"), "en")
	if err != nil {
		t.Fatal(err)
	}
	rl, err := relaytest.Open(context.Background(), db, relay.Options{Templates: set})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	srv := httptest.NewServer(api.New(rl, rl.Store(), api.Options{Open: true}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/events", "application/json", strings.NewReader(ev))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `email.subject.tmpl:1:`) || !strings.Contains(string(body), `\"name\"`) {
		t.Errorf("POST /v1/events: %d %s", resp.StatusCode, body)
	}
	if n := countRows(t, db, "notifications"); n != 0 {
		t.Errorf("%d notifications written", n)
	}
	// With the field, the same event is accepted.
	ok := strings.Replace(ev, `"amount"`, `"name": "Ben", "amount"`, 1)
	resp, err = http.Post(srv.URL+"/v1/events", "application/json", strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("POST /v1/events with the field: %d", resp.StatusCode)
	}
}

// config check refuses a template that does not parse, naming its file
// and line, at the config's templates.dir line.
func TestConfigCheckNamesTemplateLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := receiptTemplates(t, dir)
	os.WriteFile(filepath.Join(root, "receipt/de/email.text.tmpl"), []byte("Hallo,\n{{end}}\n"), 0o644)
	cfg := filepath.Join(dir, "edgerelay.yaml")
	os.WriteFile(cfg, []byte("db: r.db\ntemplates:\n  dir: templates\n"), 0o644)
	r := runCLI(t, "", "config", "check", cfg)
	if want := "line 3 (templates.dir): templates: " + filepath.Join(root, "receipt/de/email.text.tmpl") + ":2:"; r.code != exitError || !strings.Contains(r.stderr, want) {
		t.Errorf("config check: exit %d\n%s\nwant %s", r.code, r.stderr, want)
	}
}

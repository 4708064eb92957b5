package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// template set stores a version from part files named as in templates.dir,
// get prints it back, list and render see it, and send renders with it; a
// part that does not parse is refused with its file, line and column.
func TestTemplateSetGetListRenderThroughTheCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	subject := write("email.subject.tmpl", "Your receipt, {{.data.name}}")
	text := write("email.text.tmpl", "Paid {{currency .data.amount \"EUR\"}}.")
	os.MkdirAll(filepath.Join(dir, "bad"), 0o755)
	bad := write("bad/email.text.tmpl", "Paid\n  {{.data.amount | nope}}")

	// The database is made by the first command that writes.
	r := runCLI(t, "", "--db", db, "template", "set", "receipt", "--channel", "email", "--tenant", "acme", "--file", subject, "--file", text)
	if r.code != 0 || !strings.Contains(r.stdout, "version 1 stored") {
		t.Fatalf("template set: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "--db", db, "template", "set", "receipt", "--channel", "email", "--tenant", "acme", "--file", subject, "--file", bad)
	if want := bad + ": line 2, column 20: function \"nope\" not defined"; r.code != exitRejected || !strings.Contains(r.stderr, want) {
		t.Errorf("template set of a bad part: exit %d %q, want 5 and %q", r.code, r.stderr, want)
	}
	r = runCLI(t, "", "--db", db, "template", "set", "receipt", "--channel", "email", "--tenant", "acme", "--file", subject, "--file", text)
	if r.code != 0 || !strings.Contains(r.stdout, "version 1 unchanged") {
		t.Errorf("template set again: exit %d %s%s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "", "--db", db, "template", "get", "receipt", "--channel", "email", "--tenant", "acme")
	var st model.StoredTemplate
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || st.Version != 1 || st.Parts["subject"] != "Your receipt, {{.data.name}}" || st.Locale != "en" {
		t.Fatalf("template get: exit %d %s%s (%v)", r.code, r.stdout, r.stderr, err)
	}
	r = runCLI(t, "", "--db", db, "template", "get", "receipt", "--channel", "email", "--tenant", "acme", "--part", "text")
	if r.stdout != "Paid {{currency .data.amount \"EUR\"}}." {
		t.Errorf("template get --part text: %q", r.stdout)
	}
	r = runCLI(t, "", "--db", db, "template", "get", "receipt", "--channel", "email", "--tenant", "bravo")
	if r.code != exitError {
		t.Errorf("another tenant's: exit %d %s, want 1", r.code, r.stdout)
	}

	r = runCLI(t, "", "--db", db, "template", "list")
	if r.code != 0 || r.stdout != "TENANT  NAME     CHANNEL  LOCALE  VERSION  SOURCE\nacme    receipt  email    en      1        api\n" {
		t.Errorf("template list: exit %d %q%s", r.code, r.stdout, r.stderr)
	}

	rcpt := write("ada.json", `{"id": "ada", "email": "ada@example.com"}`)
	data := write("data.json", `{"name": "Ada", "amount": "20"}`)
	r = runCLI(t, "", "--db", db, "template", "render", "receipt", "--tenant", "acme", "--recipient", rcpt, "--data", data)
	preview := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.Contains(preview, `"subject":"Your receipt, Ada"`) || !strings.Contains(preview, `"version":"1"`) {
		t.Fatalf("template render: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	ev := `{"id": "evt_1", "tenant": "acme", "type": "receipt", "recipients": [{"id": "ada", "email": "ada@example.com"}], "data": {"name": "Ada", "amount": "20"}}`
	if r = runCLI(t, ev, "--db", db, "send"); r.code != 0 {
		t.Fatalf("send: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	lines := decodeLines(t, r.stdout)
	if len(lines) != 1 {
		t.Fatalf("send: %s", r.stdout)
	}
	r = runCLI(t, "", "--db", db, "show", "--json", lines[0].Key)
	if r.code != 0 || !strings.Contains(r.stdout, `"subject": "Your receipt, Ada"`) || !strings.Contains(r.stdout, `"version": "1"`) {
		t.Errorf("show: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
}

// A running serve picks up a template stored by another process (template
// set on the same database) within templates.refresh, and renders its
// accepts with it: no restart, no reload.
func TestServeUsesATemplateSetByAnotherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real serve")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("templates:\n  refresh: 50ms\n"), 0o644)
	sub := filepath.Join(dir, "email.subject.tmpl")
	text := filepath.Join(dir, "email.text.tmpl")
	os.WriteFile(text, []byte("x"), 0o644)
	set := func(subject string) {
		t.Helper()
		os.WriteFile(sub, []byte(subject), 0o644)
		if r := runCLI(t, "", "--db", db, "template", "set", "receipt", "--channel", "email", "--file", sub, "--file", text); r.code != 0 {
			t.Fatalf("template set: exit %d %s%s", r.code, r.stdout, r.stderr)
		}
	}
	set("one {{.data.name}}")
	p := startAPIServe(t, bin, "--db", db, "--config", cfg, "--route", "email=log:///dev/null")
	preview := `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {"name": "Ada"}}`
	if code, body := call(t, "POST", p.base+"/v1/templates/receipt/email/render", "", preview); code != 200 || !strings.Contains(body, `"subject":"one Ada"`) {
		t.Fatalf("preview: %d %s", code, body)
	}
	set("two {{.data.name}}")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call(t, "POST", p.base+"/v1/templates/receipt/email/render", "", preview)
		if code == 200 && strings.Contains(body, `"subject":"two Ada"`) && strings.Contains(body, `"version":"2"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve still renders %d %s 10 s after version 2 was set\n%s", code, body, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := call(t, "POST", p.base+"/v1/events", "", `{"id": "evt_1", "type": "receipt", "recipients": [{"id": "ada", "email": "ada@example.com"}], "data": {"name": "Ada"}}`)
	if code != 202 {
		t.Fatalf("accept: %d %s", code, body)
	}
	var acc struct {
		Notifications []struct{ ID string } `json:"notifications"`
	}
	json.Unmarshal([]byte(body), &acc)
	if len(acc.Notifications) != 1 {
		t.Fatalf("accept: %s", body)
	}
	if code, body := call(t, "GET", p.base+"/v1/notifications/"+acc.Notifications[0].ID, "", ""); code != 200 || !strings.Contains(body, `"subject":"two Ada"`) || !strings.Contains(body, `"version":"2"`) {
		t.Errorf("the accepted notification: %d %s", code, body)
	}
}

// A stored template that no longer compiles (saved by a laxer version,
// say) is no business of commands that never render: status and show
// neither compile it nor complain. serve compiles the stored templates at
// start and logs that one there; an event naming it is refused.
func TestCommandsThatNeverRenderSkipABrokenStoredTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real serve")
	}
	t.Parallel()
	bin := binary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	sub := filepath.Join(dir, "email.subject.tmpl")
	text := filepath.Join(dir, "email.text.tmpl")
	os.WriteFile(sub, []byte("Hi {{.data.name}}"), 0o644)
	os.WriteFile(text, []byte("x"), 0o644)
	if r := runCLI(t, "", "--db", db, "template", "set", "receipt", "--channel", "email", "--file", sub, "--file", text); r.code != 0 {
		t.Fatalf("template set: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	r := runCLI(t, adaEvent, "--db", db, "send")
	lines := decodeLines(t, r.stdout)
	if r.code != 0 || len(lines) == 0 {
		t.Fatalf("send: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	sdb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	_, err = sdb.Exec(`UPDATE templates SET parts = '{"subject": "Hi {{.data.name", "text": "x"}'`)
	sdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"show", lines[0].Key}} {
		r := runCLI(t, "", append([]string{"--db", db}, args...)...)
		if r.code != 0 || strings.Contains(r.stderr, "template") {
			t.Errorf("%v: exit %d, stderr %q; want 0 and no word of templates", args, r.code, r.stderr)
		}
	}
	p := startAPIServe(t, bin, "--db", db, "--route", "email=log:///dev/null")
	if log := p.stderr.String(); !strings.Contains(log, "stored template does not compile: not used") || !strings.Contains(log, "name=receipt") {
		t.Errorf("serve's log at start does not name the broken template:\n%s", log)
	}
	code, body := call(t, "POST", p.base+"/v1/events", "", `{"id": "evt_2", "type": "receipt", "recipients": [{"id": "ada", "email": "ada@example.com"}], "data": {"name": "Ada"}}`)
	if code != 400 || !strings.Contains(body, "receipt/email/en version 1") {
		t.Errorf("an event naming the broken template: %d %s; want 400 naming it", code, body)
	}
}

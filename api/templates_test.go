package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/templates"
)

const (
	acmeTok  = "tok-acme-templates-0123"
	bravoTok = "tok-bravo-templates-0123"
)

func templateBundle(t *testing.T, o options) *bundle {
	o.Tokens = map[string]string{sha256hex(acmeTok): "acme", sha256hex(bravoTok): "bravo"}
	return setup(t, o)
}

func tplAcme() []string  { return []string{"Authorization", "Bearer " + acmeTok} }
func tplBravo() []string { return []string{"Authorization", "Bearer " + bravoTok} }

func partsBody(t *testing.T, parts map[string]string) string {
	return jsonOf(t, map[string]any{"parts": parts})
}

type storedJSON struct {
	model.StoredTemplate
	Retired bool `json:"retired"`
}

// renderedMessage is a notification's stored message, as GET shows it.
type renderedMessage struct {
	Subject  string `json:"subject"`
	Body     string `json:"body"`
	Template struct {
		Tenant  string `json:"tenant"`
		Name    string `json:"name"`
		Version string `json:"version"`
		Locale  string `json:"locale"`
	} `json:"template"`
}

func templatedEvent(id string) string {
	return fmt.Sprintf(`{"id": %q, "type": "receipt", "channels": ["email"],
		"recipients": [{"id": "ada", "email": "ada@example.com"}], "data": {"name": "Ada"}}`, id)
}

// acceptOne accepts a templated event as acme and returns its one
// notification's id.
func acceptOne(t *testing.T, b *bundle, id string) string {
	t.Helper()
	res := accepted(t, b.do(t, "POST", "/v1/events", templatedEvent(id), tplAcme()...))
	if len(res.Notifications) != 1 {
		t.Fatalf("accept %s: %d notifications, want 1", id, len(res.Notifications))
	}
	return res.Notifications[0].ID
}

func storedMessage(t *testing.T, b *bundle, id string) (renderedMessage, json.RawMessage) {
	t.Helper()
	rep := b.do(t, "GET", "/v1/notifications/"+id, "", tplAcme()...)
	if rep.status != http.StatusOK {
		t.Fatalf("GET %s: %s", id, rep)
	}
	n := decode[notification](t, rep)
	var m renderedMessage
	if err := json.Unmarshal(n.Message, &m); err != nil {
		t.Fatalf("message of %s: %s: %v", id, n.Message, err)
	}
	return m, n.Message
}

// A template PUT over the API renders the accepts after it; a second PUT
// is version 2 and renders the accepts after that, while the notification
// accepted under version 1 keeps version 1's bytes and number; version 1
// stays readable; a DELETE retires it, and an event naming it is refused.
func TestTemplatesVersionsOverHTTP(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	path := "/v1/templates/receipt/email/en"
	v1 := decode[storedJSON](t, b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "Hi {{.data.name}}", "text": "one"}), tplAcme()...))
	if v1.Version != 1 || v1.Tenant != "acme" || v1.Retired {
		t.Fatalf("first PUT = %+v, want acme's version 1", v1)
	}
	first := acceptOne(t, b, "evt_1")
	m1, raw1 := storedMessage(t, b, first)
	if m1.Subject != "Hi Ada" || m1.Body != "one" || m1.Template.Version != "1" || m1.Template.Name != "receipt" {
		t.Fatalf("accepted under version 1: %s", raw1)
	}
	rep := b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "Hello {{.data.name}}", "text": "two"}), tplAcme()...)
	if rep.status != http.StatusCreated {
		t.Fatalf("second PUT: %s, want 201", rep)
	}
	if v2 := decode[storedJSON](t, rep); v2.Version != 2 {
		t.Fatalf("second PUT = %+v, want version 2", v2)
	}
	// The same parts again: no version 3 (a PUT retried after a lost answer).
	if rep := b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "Hello {{.data.name}}", "text": "two"}), tplAcme()...); rep.status != http.StatusOK || decode[storedJSON](t, rep).Version != 2 {
		t.Fatalf("repeated PUT: %s, want 200 and version 2", rep)
	}
	second := acceptOne(t, b, "evt_2")
	if m2, raw := storedMessage(t, b, second); m2.Subject != "Hello Ada" || m2.Template.Version != "2" {
		t.Fatalf("accepted under version 2: %s", raw)
	}
	if again, raw := storedMessage(t, b, first); again.Subject != "Hi Ada" || again.Template.Version != "1" || !bytes.Equal(raw, raw1) {
		t.Fatalf("the first notification after version 2: %s, want %s", raw, raw1)
	}
	for _, p := range []string{path + "?version=1", path + "/versions/1"} {
		got := decode[storedJSON](t, b.do(t, "GET", p, "", tplAcme()...))
		if got.Version != 1 || got.Parts["subject"] != "Hi {{.data.name}}" {
			t.Errorf("GET %s = %+v, want version 1's parts", p, got)
		}
	}
	if got := decode[storedJSON](t, b.do(t, "GET", path, "", tplAcme()...)); got.Version != 2 {
		t.Errorf("GET latest = %+v, want version 2", got)
	}
	vs := decode[struct {
		Versions []storedJSON `json:"versions"`
	}](t, b.do(t, "GET", path+"/versions", "", tplAcme()...))
	if len(vs.Versions) != 2 || vs.Versions[0].Version != 1 || vs.Versions[1].Version != 2 {
		t.Errorf("versions = %+v, want 1 and 2", vs.Versions)
	}
	wantProblem(t, b.do(t, "GET", path+"?version=9", "", tplAcme()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", path+"?version=x", "", tplAcme()...), http.StatusBadRequest, "invalid-query")

	del := decode[storedJSON](t, b.do(t, "DELETE", path, "", tplAcme()...))
	if del.Version != 2 || !del.Retired {
		t.Fatalf("DELETE = %+v, want version 2 retired", del)
	}
	p := wantProblem(t, b.do(t, "POST", "/v1/events", templatedEvent("evt_3"), tplAcme()...), http.StatusBadRequest, "invalid-event")
	if !strings.Contains(p.Detail, `no template "receipt"`) || !strings.Contains(p.Detail, "receipt/email/en version 2") {
		t.Errorf("accept after DELETE: %q, want it to name the deleted template", p.Detail)
	}
	if got := decode[storedJSON](t, b.do(t, "GET", path+"?version=1", "", tplAcme()...)); got.Version != 1 {
		t.Errorf("version 1 after DELETE = %+v, want it readable", got)
	}
	if _, raw := storedMessage(t, b, first); !bytes.Equal(raw, raw1) {
		t.Errorf("the first notification after DELETE: %s, want %s", raw, raw1)
	}
	wantProblem(t, b.do(t, "DELETE", path, "", tplAcme()...), http.StatusNotFound, "not-found")
	// PUT again: version 3, and accepts render again.
	if rep := b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "Back, {{.data.name}}", "text": "three"}), tplAcme()...); rep.status != http.StatusCreated || decode[storedJSON](t, rep).Version != 3 {
		t.Fatalf("PUT after DELETE: %s, want 201 version 3", rep)
	}
	if m, raw := storedMessage(t, b, acceptOne(t, b, "evt_4")); m.Subject != "Back, Ada" || m.Template.Version != "3" {
		t.Errorf("accepted under version 3: %s", raw)
	}
}

// A part that does not parse, uses what a part may not, or is too large is
// refused at PUT with its part, line and column; nothing is stored.
func TestTemplatePutRefusesWhatDoesNotParse(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	path := "/v1/templates/receipt/email/en"
	for _, tc := range []struct {
		parts  map[string]string
		field  string
		detail string
	}{
		{map[string]string{"subject": "Hi", "text": "line one\nDear {{ .data.name | nosuch }}"}, "parts.text", `parts.text: line 2, column 22: function "nosuch" not defined`},
		{map[string]string{"subject": "Hi {{.data.name", "text": "x"}, "parts.subject", "parts.subject: line 1, column 4: unclosed action"},
		{map[string]string{"subject": "Hi", "html": "<p>\n{{if .data.x}}<a href=\"{{end}}</p>"}, "parts.html", "parts.html: line 2, column 1: the branches of an {{if}}, {{with}} or {{range}} end in different places of the HTML"},
		{map[string]string{"subject": "Hi", "text": "{{template \"other\"}}"}, "parts.text", "parts.text: line 1, column 1: {{template \"other\"}} is not allowed"},
		{map[string]string{"subject": "Hi", "text": strings.Repeat("x", 64<<10+1)}, "parts.text", "parts.text: line 1, column 1: 65537 bytes, more than the limit of 65536"},
	} {
		p := wantProblem(t, b.do(t, "PUT", path, partsBody(t, tc.parts), tplAcme()...), http.StatusBadRequest, "template-parse")
		if p.Field != tc.field || !strings.HasPrefix(p.Detail, tc.detail) {
			t.Errorf("%v: field %q detail %q; want %q, %q…", tc.parts, p.Field, p.Detail, tc.field, tc.detail)
		}
	}
	p := wantProblem(t, b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "Hi", "title": "x"}), tplAcme()...), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p.Detail, `no part "title"`) {
		t.Errorf("a part email has not: %q", p.Detail)
	}
	wantProblem(t, b.do(t, "PUT", "/v1/templates/receipt/email/not_a_locale!", partsBody(t, map[string]string{"text": "x"}), tplAcme()...), http.StatusBadRequest, "invalid-request")
	wantProblem(t, b.do(t, "GET", path, "", tplAcme()...), http.StatusNotFound, "not-found")
}

// One tenant's token neither reads nor changes another's templates, and
// its events do not render with them.
func TestTemplatesAreTenantScoped(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	path := "/v1/templates/receipt/email/en"
	if rep := b.do(t, "PUT", path, partsBody(t, map[string]string{"subject": "acme's", "text": "x"}), tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	wantProblem(t, b.do(t, "GET", path, "", tplBravo()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", path+"/versions", "", tplBravo()...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "GET", path+"?tenant=acme", "", tplBravo()...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, b.do(t, "PUT", path+"?tenant=acme", partsBody(t, map[string]string{"subject": "b", "text": "x"}), tplBravo()...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, b.do(t, "DELETE", path+"?tenant=acme", "", tplBravo()...), http.StatusForbidden, "tenant-mismatch")
	wantProblem(t, b.do(t, "DELETE", path, "", tplBravo()...), http.StatusNotFound, "not-found")
	// bravo's event of that type has no template of its own: it goes out
	// with the wording it brings, and without wording is not acme's.
	rep := b.do(t, "POST", "/v1/events", templatedEvent("evt_b"), tplBravo()...)
	res := accepted(t, rep)
	n := decode[notification](t, b.do(t, "GET", "/v1/notifications/"+res.Notifications[0].ID, "", tplBravo()...))
	if strings.Contains(string(n.Message), "acme's") {
		t.Errorf("bravo's notification rendered acme's template: %s", n.Message)
	}
	// Nor does its preview.
	p := wantProblem(t, b.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {}}`, tplBravo()...),
		http.StatusBadRequest, "invalid-event")
	if strings.Contains(p.Detail, "acme") || !strings.Contains(p.Detail, "no template") {
		t.Errorf("bravo's preview of acme's template: %q", p.Detail)
	}
	wantProblem(t, b.do(t, "POST", "/v1/templates/receipt/email/render?tenant=acme", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {}}`, tplBravo()...),
		http.StatusForbidden, "tenant-mismatch")
	list := decode[templateList](t, b.do(t, "GET", "/v1/templates", "", tplBravo()...))
	if len(list.Templates) != 0 {
		t.Errorf("bravo lists %+v, want none", list.Templates)
	}
	list = decode[templateList](t, b.do(t, "GET", "/v1/templates", "", tplAcme()...))
	if len(list.Templates) != 1 || list.Templates[0].Source != "api" || list.Templates[0].Version != "1" {
		t.Errorf("acme lists %+v, want its one stored template", list.Templates)
	}
}

// The preview answers the bytes an accept stores, and writes nothing.
func TestTemplatePreviewMatchesAccept(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	for loc, parts := range map[string]map[string]string{
		"en": {"subject": "Receipt for {{.data.name}}", "html": "<p>{{currency .data.amount \"EUR\"}} &amp; {{.data.note}}</p>"},
		"de": {"subject": "Quittung für {{.data.name}}", "text": "{{currency .data.amount \"EUR\"}}"},
	} {
		if rep := b.do(t, "PUT", "/v1/templates/receipt/email/"+loc, partsBody(t, parts), tplAcme()...); rep.status != http.StatusCreated {
			t.Fatal(rep)
		}
	}
	for _, rc := range []string{`{"id": "ada", "email": "ada@example.com"}`, `{"id": "ben", "email": "ben@example.com", "locale": "de-AT"}`} {
		data := `{"name": "Ada", "amount": "1234.5", "note": "<b>x</b>"}`
		preview := b.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": `+rc+`, "data": `+data+`}`, tplAcme()...)
		if preview.status != http.StatusOK {
			t.Fatalf("preview: %s", preview)
		}
		ev := `{"id": "evt_` + rc[8:11] + `", "type": "receipt", "channels": ["email"], "recipients": [` + rc + `], "data": ` + data + `}`
		res := accepted(t, b.do(t, "POST", "/v1/events", ev, tplAcme()...))
		_, stored := storedMessage(t, b, res.Notifications[0].ID)
		if !bytes.Equal(bytes.TrimSpace(preview.body), stored) {
			t.Errorf("preview %s\nstored  %s", bytes.TrimSpace(preview.body), stored)
		}
	}
	p := wantProblem(t, b.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {}}`, tplAcme()...), http.StatusBadRequest, "invalid-event")
	if !strings.HasPrefix(p.Detail, "recipient: ") || !strings.Contains(p.Detail, `"name"`) {
		t.Errorf("preview without the data: %q, want the missing field named", p.Detail)
	}
	// Nothing written: only the two accepts' notifications.
	if all := b.listAll(t, tplAcme()...); len(all) != 2 {
		t.Errorf("%d notifications after previews, want the 2 accepted", len(all))
	}
}

// Two nodes on one database: a PUT on one reaches the other's accepts
// within its refresh period, without a restart or a reload.
func TestTemplatePutReachesAnotherNode(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	one := templateBundle(t, options{DB: db})
	two := templateBundle(t, options{DB: db})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go two.r.WatchTemplates(ctx, 20*time.Millisecond)
	path := "/v1/templates/receipt/email/en"
	for v, subject := range []string{"first {{.data.name}}", "second {{.data.name}}"} {
		if rep := one.do(t, "PUT", path, partsBody(t, map[string]string{"subject": subject, "text": "x"}), tplAcme()...); rep.status != http.StatusCreated {
			t.Fatal(rep)
		}
		want := fmt.Sprintf(`"version":"%d"`, v+1)
		deadline := time.Now().Add(bound)
		for {
			rep := two.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {"name": "Ada"}}`, tplAcme()...)
			if rep.status == http.StatusOK && strings.Contains(string(rep.body), want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node two still renders %s %s after version %d was PUT on node one", rep, bound, v+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		id := accepted(t, two.do(t, "POST", "/v1/events", templatedEvent(fmt.Sprint("evt_two_", v)), tplAcme()...)).Notifications[0].ID
		if m, raw := storedMessage(t, two, id); m.Template.Version != fmt.Sprint(v+1) {
			t.Errorf("node two accepted %s, want version %d", raw, v+1)
		}
	}
}

type templateList struct {
	Tenant    string               `json:"tenant"`
	Templates []relay.TemplateInfo `json:"templates"`
}

// A template the config's files define cannot be PUT: one source per
// template, and the answer names the file.
func TestTemplatePutOfAFileTemplateConflicts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "@acme", "receipt", "en", "email.subject.tmpl")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("From the file, {{.data.name}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(file), "email.text.tmpl"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := templates.LoadDir(dir, "en")
	if err != nil {
		t.Fatal(err)
	}
	b := templateBundle(t, options{Relay: relay.Options{Templates: set}})
	p := wantProblem(t, b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "api", "text": "x"}), tplAcme()...),
		http.StatusConflict, "template-defined-by-file")
	if !strings.Contains(p.Detail, file) {
		t.Errorf("409 %q does not name %s", p.Detail, file)
	}
	// Another locale is the API's to keep; the file still renders English.
	if rep := b.do(t, "PUT", "/v1/templates/receipt/email/de", partsBody(t, map[string]string{"subject": "API {{.data.name}}", "text": "x"}), tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	if m, raw := storedMessage(t, b, acceptOne(t, b, "evt_f")); m.Subject != "From the file, Ada" {
		t.Errorf("accept: %s, want the file's English", raw)
	}
}

// An open API (no tokens) names the tenant with ?tenant=, as its other
// endpoints do; without one it is "default".
func TestTemplatesOnAnOpenAPINameTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	if rep := b.do(t, "PUT", "/v1/templates/receipt/email/en?tenant=acme", partsBody(t, map[string]string{"subject": "acme", "text": "x"})); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	if got := decode[storedJSON](t, b.do(t, "GET", "/v1/templates/receipt/email/en?tenant=acme", "")); got.Tenant != "acme" || got.Version != 1 {
		t.Errorf("GET ?tenant=acme = %+v", got)
	}
	wantProblem(t, b.do(t, "GET", "/v1/templates/receipt/email/en", ""), http.StatusNotFound, "not-found")
	if got := decode[templateList](t, b.do(t, "GET", "/v1/templates", "")); got.Tenant != "default" || len(got.Templates) != 0 {
		t.Errorf("default's list = %+v, want none", got)
	}
}

// A file added later for a key stored over the API wins (one source per
// template): accepts render the file, the list marks the stored one
// shadowed; taking the file away brings the stored one back.
func TestTemplateFileAddedLaterWins(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	if rep := b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "stored {{.data.name}}", "text": "x"}), tplAcme()...); rep.status != http.StatusCreated {
		t.Fatal(rep)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"email.subject.tmpl": "file {{.data.name}}", "email.text.tmpl": "y"} {
		p := filepath.Join(dir, "@acme", "receipt", "en", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := templates.LoadDir(dir, "en")
	if err != nil {
		t.Fatal(err)
	}
	b.r.SetTemplates(set) // a reload
	if m, raw := storedMessage(t, b, acceptOne(t, b, "evt_1")); m.Subject != "file Ada" {
		t.Errorf("with the file: %s, want the file's", raw)
	}
	list := decode[templateList](t, b.do(t, "GET", "/v1/templates", "", tplAcme()...))
	if len(list.Templates) != 2 || !list.Templates[0].Shadowed && !list.Templates[1].Shadowed {
		t.Errorf("list = %+v, want the file and the stored one shadowed", list.Templates)
	}
	b.r.SetTemplates(nil)
	if m, raw := storedMessage(t, b, acceptOne(t, b, "evt_2")); m.Subject != "stored Ada" || m.Template.Version != "1" {
		t.Errorf("without the file: %s, want stored version 1", raw)
	}
}

// A stored template runs under its budgets wherever it is rendered: the
// html check at PUT, a preview and an accept refuse the two templates that
// took a relay down with a 422 naming the template and the budget.
func TestTemplateBudgetsOverHTTP(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	attacks := map[string]string{
		"memory": `{{$s := "x"}}{{range 30}}{{$s = printf "%s%s" $s $s}}{{end}}{{len $s}}`,
		"loop":   `{{range 100000}}{{range 100000}}{{end}}{{end}}`,
	}
	want := func(what string, rep reply, limit string) {
		t.Helper()
		p := wantProblem(t, rep, http.StatusUnprocessableEntity, "template-budget")
		// The loop attack meets the loop budget first on a quiet machine;
		// where the scheduler is slow (-race, a loaded box) 20,000
		// iterations can take longer than the time budget: either stops it.
		named := strings.Contains(p.Detail, "exceeds the "+limit+" budget") ||
			(limit == "loop" && strings.Contains(p.Detail, "exceeds the time budget"))
		if !strings.Contains(p.Detail, "receipt") || !named {
			t.Errorf("%s: detail %q, want the template and the %s budget named", what, p.Detail, limit)
		}
	}
	for limit, body := range attacks {
		want("PUT html "+limit, b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "s", "html": body}), tplAcme()...), limit)
		// A text part is not run when it is saved: the preview and the
		// accept meet it.
		if rep := b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "s", "text": body}), tplAcme()...); rep.status != http.StatusCreated {
			t.Fatalf("PUT text %s: %s", limit, rep)
		}
		want("preview "+limit, b.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {}}`, tplAcme()...), limit)
		want("accept "+limit, b.do(t, "POST", "/v1/events", templatedEvent("evt_"+limit), tplAcme()...), limit)
	}
	if all := b.listAll(t, tplAcme()...); len(all) != 0 {
		t.Errorf("%d notifications accepted, want none", len(all))
	}
}

// One tenant's template saves and previews run one at a time: while one
// runs, the tenant's next is refused (429), another tenant's is not.
func TestTemplateRendersOnePerTenant(t *testing.T) {
	t.Parallel()
	b := templateBundle(t, options{})
	for _, tok := range [][]string{tplAcme(), tplBravo()} {
		if rep := b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "Hi {{.data.name}}", "text": "x"}), tok...); rep.status != http.StatusCreated {
			t.Fatal(rep)
		}
	}
	preview := func(tok []string) reply {
		return b.do(t, "POST", "/v1/templates/receipt/email/render", `{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {"name": "Ada"}}`, tok...)
	}
	release := b.api.HoldRender("acme")
	rep := preview(tplAcme())
	wantProblem(t, rep, http.StatusTooManyRequests, "template-render-busy")
	if rep.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	wantProblem(t, b.do(t, "PUT", "/v1/templates/receipt/email/en", partsBody(t, map[string]string{"subject": "s", "text": "y"}), tplAcme()...), http.StatusTooManyRequests, "template-render-busy")
	if rep := preview(tplBravo()); rep.status != http.StatusOK {
		t.Fatalf("bravo's preview while acme's runs: %s", rep)
	}
	release()
	if rep := preview(tplAcme()); rep.status != http.StatusOK {
		t.Fatalf("acme's preview after its first answered: %s", rep)
	}
}

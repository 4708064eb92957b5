package templates

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func receiptSet(t *testing.T) *Set {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"receipt/en/email.subject.tmpl": "Your receipt, {{.data.name}}",
		"receipt/en/email.html.tmpl":    "<p>Paid {{currency .data.amount .data.currency}} on {{date .data.paid_at \"long\"}}</p>\n<p>{{.data.note}}</p>",
		"receipt/de/email.subject.tmpl": "Ihre Quittung, {{.data.name}}",
		"receipt/de/email.text.tmpl":    "Bezahlt: {{currency .data.amount .data.currency}} am {{date .data.paid_at \"long\"}} um {{time .data.paid_at}}, {{number .data.items}} Posten",
		"receipt/en/sms.text.tmpl":      "Paid {{.data.amount}}",
	})
	s, err := LoadDir(dir, "en")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRenderLocalised(t *testing.T) {
	t.Parallel()
	s := receiptSet(t)
	data := json.RawMessage(`{"name":"Ada","amount":"1234.5","currency":"EUR","paid_at":"2026-03-01T23:30:00Z","items":12345,"note":"<script>x</script>"}`)
	de, ok := s.Lookup("", "receipt", "email", "de-AT")
	if !ok || de.Source().Locale != "de" {
		t.Fatalf("de-AT chose %v %v, want de", de, ok)
	}
	out, err := de.Render(Input{Data: data, Locale: "de-AT", TimeZone: "Europe/Vienna"})
	if err != nil {
		t.Fatal(err)
	}
	// 23:30 UTC is 00:30 the next day in Vienna.
	if want := "Bezahlt: €\u00a01.234,50 am 2. März 2026 um 00:30, 12\u00a0345 Posten"; out.Body != want {
		t.Errorf("de body %q, want %q", out.Body, want)
	}
	en, ok := s.Lookup("", "receipt", "email", "fr")
	if !ok || en.Source().Locale != "en" {
		t.Fatalf("fr fell back to %v, want en", en)
	}
	out, err = en.Render(Input{Data: data, Locale: "en-US"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Subject != "Your receipt, Ada" || !strings.Contains(out.HTML, "€1,234.50 on March 1, 2026") || !strings.Contains(out.HTML, "&lt;script&gt;") {
		t.Errorf("en: %+v", out)
	}
	again, _ := en.Render(Input{Data: data, Locale: "en-US"})
	if again.Subject != out.Subject || again.HTML != out.HTML || again.Body != out.Body {
		t.Error("two renderings differ")
	}
}

func TestRenderMissingField(t *testing.T) {
	t.Parallel()
	s := receiptSet(t)
	tpl, _ := s.Lookup("", "receipt", "email", "de")
	_, err := tpl.Render(Input{Data: json.RawMessage(`{"amount":"1","currency":"EUR","paid_at":"2026-03-01T10:00:00Z","items":1}`)})
	var re *RenderError
	if !errors.As(err, &re) {
		t.Fatalf("err %v, want a RenderError", err)
	}
	for _, want := range []string{`"receipt"`, "email.subject.tmpl:1:", `"name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
}

func TestLoadDirParseError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, map[string]string{"receipt/en/email.subject.tmpl": "ok", "receipt/en/email.text.tmpl": "line one\n{{.data.x"})
	_, err := LoadDir(dir, "en")
	if err == nil || !strings.Contains(err.Error(), "email.text.tmpl:2:") {
		t.Fatalf("err %v, want the file and line 2", err)
	}
}

// The mistakes a new operator made in a templates folder are each refused
// in the author's words: an unfinished attribute at the end of the HTML
// (no escaper state printed, the place the end), a part the channel does
// not have, and a locale of no known language.
func TestLoadDirSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		files   map[string]string
		want    []string
		notWant string
	}{
		{map[string]string{"receipt/en/email.subject.tmpl": "ok", "receipt/en/email.html.tmpl": `<p>Hi</p>` + "\n" + `<a href="{{.data.url}}>pay</a>`},
			[]string{"email.html.tmpl:2:31:", `ends inside an attribute's value in double quotes: is a closing " missing?`}, "{state"},
		{map[string]string{"receipt/en/sms.html.tmpl": "x"},
			[]string{`the sms channel's templates have no part "html"`, "its parts: text"}, " a sms "},
		{map[string]string{"receipt/en/email.subject.tmpl": "ok", "receipt/en/email.text.tmpl": "t", "receipt/xx-bogus/email.subject.tmpl": "hi", "receipt/xx-bogus/email.text.tmpl": "t"},
			[]string{`locale "xx-bogus"`, `"xx" is well-formed but unknown`}, ""},
	} {
		dir := t.TempDir()
		write(t, dir, c.files)
		_, err := LoadDir(dir, "en")
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want it to say %q", c.files, err, w)
			}
		}
		if c.notWant != "" && err != nil && strings.Contains(err.Error(), c.notWant) {
			t.Errorf("%v: %v says %q", c.files, err, c.notWant)
		}
	}
	// A known language is not refused for being rare.
	dir := t.TempDir()
	write(t, dir, map[string]string{"receipt/en/sms.text.tmpl": "ok", "receipt/de-CH-1996/sms.text.tmpl": "ok", "receipt/tlh/sms.text.tmpl": "ok"})
	if _, err := LoadDir(dir, "en"); err != nil {
		t.Errorf("de-CH-1996 and tlh: %v", err)
	}
}

// Every way an HTML part can end unfinished, and an ambiguous / in a
// script, is said in an author's words, at its place, without the
// escaper's state ({stateURL delimDoubleQuote …}) or a line 0.
func TestHTMLEscaperErrorsSaidPlainly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ html, want string }{
		{`<a href="{{.data.url}}`, `1:23: the HTML ends inside an attribute's value in double quotes: is a closing " missing?`},
		{`<a title='{{.data.t}}`, `1:22: the HTML ends inside an attribute's value in single quotes: is a closing ' missing?`},
		{`<p a=">x</p>`, `1:13: the HTML ends inside an attribute's value in double quotes`},
		{"<p>hi</p>\n<a {{.data.x}}", "2:15: the HTML ends inside a tag: is a closing > missing?"},
		{`<script>var a = 1 {{.data.x}}`, "1:30: the HTML ends inside a <script> element: is </script> missing?"},
		{`<style>p{color:{{.data.x}}`, "1:27: the HTML ends inside a <style> element: is </style> missing?"},
		{`<textarea>{{.data.x}}`, "1:22: the HTML ends inside a <textarea> element: is </textarea> missing?"},
		{`<title>{{.data.x}}`, "1:19: the HTML ends inside a <title> element: is </title> missing?"},
		{`<p>{{.data.x}}<!-- note`, "1:24: the HTML ends inside a comment: is a closing --> missing?"},
		{"<p>x</p>\n<script>{{if .data.x}}var x = 1{{end}}/-{{.data.y}}/</script>",
			"2:39: in a <script>, a / after an {{if}}, {{with}} or {{range}} could start a division or a regular expression"},
	} {
		_, err := Compile(Source{Name: "r", Channel: "email", Locale: "en", Parts: map[string]string{"subject": "s", "html": c.html}})
		if err == nil || !strings.Contains(err.Error(), "r/en/email.html:"+c.want) {
			t.Errorf("%q: %v\nwant it to say r/en/email.html:%s", c.html, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "{state") || strings.Contains(err.Error(), ":0:")) {
			t.Errorf("%q: %v: the escaper's internals, or line 0", c.html, err)
		}
	}
}

// BenchmarkRenderEmail is one recipient's email (subject and HTML, two
// helpers), as an accept renders it.
func BenchmarkRenderEmail(b *testing.B) {
	tpl, err := Compile(Source{Name: "receipt", Channel: "email", Locale: "de", Parts: map[string]string{
		"subject": "Ihre Quittung, {{.data.name}}",
		"html":    "<p>{{currency .data.amount .data.currency}} am {{date .data.paid_at \"long\"}}</p>",
	}})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Data: json.RawMessage(`{"name":"Ben","amount":"1234.5","currency":"EUR","paid_at":"2026-03-01T23:30:00Z"}`),
		Locale: "de-AT", TimeZone: "Europe/Vienna"}
	for b.Loop() {
		if _, err := tpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

// A tenant's own template (DIR/@TENANT/…) wins over every tenant's in the
// same locale; the language comes first: a tenant with only English still
// sends German to a German recipient when every tenant's has German.
func TestTenantTemplates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"receipt/en/email.subject.tmpl":       "shared en",
		"receipt/en/email.text.tmpl":          "x",
		"receipt/de/email.subject.tmpl":       "shared de",
		"receipt/de/email.text.tmpl":          "x",
		"@acme/receipt/en/email.subject.tmpl": "acme en",
		"@acme/receipt/en/email.text.tmpl":    "x",
		"@acme/welcome/en/sms.text.tmpl":      "acme welcome",
	})
	s, err := LoadDir(dir, "en")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tenant, name, locale, want string }{
		{"acme", "receipt", "en-GB", "acme en"},
		{"acme", "receipt", "", "acme en"},
		{"acme", "receipt", "de-AT", "shared de"},
		{"other", "receipt", "en", "shared en"},
		{"acme", "welcome", "fr", "acme welcome"},
	} {
		ch := "email"
		if c.name == "welcome" {
			ch = "sms"
		}
		tpl, ok := s.Lookup(c.tenant, c.name, ch, c.locale)
		if !ok {
			t.Errorf("%+v: none", c)
			continue
		}
		if src := tpl.Source(); src.Parts[Parts(ch)[0]] != c.want {
			t.Errorf("%+v: chose %s/%s/%s", c, src.Tenant, src.Name, src.Locale)
		}
	}
	if s.Has("other", "welcome") || !s.Has("acme", "welcome") {
		t.Error("a tenant's own template is seen by another tenant")
	}
}

// track makes a link whose clicks are counted when the rendering has a
// Track (the relay's, with a public URL); without one the link stays as
// written. Only http and https links are tracked: anything else is a
// render error naming it, in the text and in the HTML part.
func TestTrackHelper(t *testing.T) {
	tpl, err := Compile(Source{Name: "invoice", Channel: "email", Locale: "en", Parts: map[string]string{
		"subject": "Invoice",
		"text":    `Pay at {{track .data.url}}`,
		"html":    `<a href="{{track .data.url}}">Pay</a>`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	track := func(u string) (string, error) {
		asked = append(asked, u)
		return "https://relay.example/c/T" + strconv.Itoa(len(asked)), nil
	}
	data := json.RawMessage(`{"url":"https://pay.example/inv/42?a=1&b=2"}`)
	out, err := tpl.Render(Input{Data: data, Track: track})
	if err != nil {
		t.Fatal(err)
	}
	if out.Body != "Pay at https://relay.example/c/T1" || out.HTML != `<a href="https://relay.example/c/T2">Pay</a>` ||
		len(asked) != 2 || asked[0] != "https://pay.example/inv/42?a=1&b=2" {
		t.Fatalf("tracked: body %q, html %q, asked %q", out.Body, out.HTML, asked)
	}
	if out, err := tpl.Render(Input{Data: data}); err != nil || out.Body != "Pay at https://pay.example/inv/42?a=1&b=2" {
		t.Fatalf("without a Track: %q, %v; want the link as written", out.Body, err)
	}
	for _, bad := range []string{"javascript:alert(1)", "/relative", "mailto:a@example.com", "https://"} {
		_, err := tpl.Render(Input{Data: json.RawMessage(`{"url":` + strconv.Quote(bad) + `}`), Track: track})
		if err == nil || !strings.Contains(err.Error(), "is not an http or https URL") {
			t.Errorf("track %q = %v; want refused", bad, err)
		}
	}
}

// .batch is the batch's events when a workflow's batch step gathered
// some, and the one event rendered otherwise, so a template reads both
// alike.
func TestBatchField(t *testing.T) {
	tpl, err := Compile(Source{Name: "digest", Channel: "email", Locale: "en", Parts: map[string]string{
		"subject": "{{.batch.count}} new", "text": "{{range .batch.items}}{{.id}}:{{.data.text}};{{end}}"}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := tpl.Render(Input{Data: json.RawMessage(`{"text":"hi"}`), Event: map[string]string{"id": "e1", "type": "comment"}})
	if err != nil || one.Subject != "1 new" || one.Body != "e1:hi;" {
		t.Fatalf("outside a batch: %+v, %v; want the event alone", one, err)
	}
	two, err := tpl.Render(Input{Data: json.RawMessage(`{"text":"hi"}`), Event: map[string]string{"id": "e1", "type": "comment"},
		Batch: []BatchEvent{{ID: "a", Type: "comment", Data: json.RawMessage(`{"text":"x"}`)}, {ID: "b", Type: "comment", Data: json.RawMessage(`{"text":null}`)}}})
	if err != nil || two.Subject != "2 new" || two.Body != "a:x;b:;" {
		t.Fatalf("a batch of two: %+v, %v", two, err)
	}
}

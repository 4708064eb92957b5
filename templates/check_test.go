package templates

import (
	"errors"
	"strings"
	"testing"
)

// A part that does not parse, or uses what a part may not, is refused with
// its part, line and column.
func TestCompileRefusesWithLineAndColumn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		part, body string
		line, col  int
		msg        string
	}{
		{"subject", "Hi {{.data.name}", 1, 4, "bad character"},
		{"text", "line one\nline two {{ nosuch .data.x }}", 2, 13, `function "nosuch" not defined`},
		{"text", "ok {{.a}}\n\n  {{if .b}}x{{end}}{{end}}", 3, 20, "unexpected {{end}}"},
		{"html", "<p>{{.data.a}}</p>\n{{if .data.b}}<a href=\"{{end}}x", 2, 1, "end in different places of the HTML"},
		{"text", "a\n{{define \"x\"}}y{{end}}", 2, 1, "{{define}} is not allowed"},
		{"text", "we define it\n{{- define \"x\"}}y{{end}}", 2, 1, "{{define}} is not allowed"},
		{"text", "a {{block \"x\" .}}y{{end}}", 1, 3, "{{block}} is not allowed"},
		{"text", "a {{template \"x\"}}", 1, 3, `{{template "x"}} is not allowed`},
		{"text", "a {{.x}} {{.y", 1, 10, "unclosed action"},
		{"text", "ünï {{ bad! }}", 1, 5, ""},
	} {
		_, err := Compile(Source{Name: "receipt", Channel: "email", Locale: "en", Parts: map[string]string{tc.part: tc.body, "subject": "s"}})
		if tc.part == "subject" {
			_, err = Compile(Source{Name: "receipt", Channel: "email", Locale: "en", Parts: map[string]string{"subject": tc.body, "text": "t"}})
		}
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: %v, want a ParseError", tc.body, err)
			continue
		}
		if pe.Part != tc.part || pe.Line != tc.line || pe.Column != tc.col || !strings.Contains(pe.Msg, tc.msg) {
			t.Errorf("%q: part %s line %d column %d %q; want %s %d:%d containing %q", tc.body, pe.Part, pe.Line, pe.Column, pe.Msg, tc.part, tc.line, tc.col, tc.msg)
		}
		if want := "receipt/en/email." + tc.part + ":"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want it to start with %s", tc.body, err, want)
		}
	}
	big := strings.Repeat("x", MaxPartBytes+1)
	_, err := Compile(Source{Name: "receipt", Channel: "sms", Locale: "en", Parts: map[string]string{"text": big}})
	if pe := (*ParseError)(nil); !errors.As(err, &pe) || !strings.Contains(pe.Msg, "more than the limit") {
		t.Errorf("a part over the limit: %v, want it refused", err)
	}
}

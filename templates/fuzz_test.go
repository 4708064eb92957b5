package templates

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzRenderUntrustedData renders an HTML template with data from the
// fuzzer: it never panics, and the data never opens or closes a tag (it
// is escaped for its context, text and attribute alike).
func FuzzRenderUntrustedData(f *testing.F) {
	tpl, err := Compile(Source{Name: "t", Channel: "email", Locale: "en", Parts: map[string]string{
		"subject": "Hi {{.data.x}}",
		"html":    `<p title="{{.data.x}}">{{.data.x}}</p><a href="/u/{{.data.x}}">{{get .data "y" "none"}}</a>`,
	}})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"ada", "<script>alert(1)</script>", `"><img src=x onerror=1>`, "</p>", "\x00\xff", "{{.data}}", "javascript:alert(1)"} {
		f.Add(s, "")
		f.Add(s, `{"y":`+string(must(json.Marshal(s)))+`}`)
	}
	f.Fuzz(func(t *testing.T, x, extra string) {
		data := map[string]any{"x": x}
		if extra != "" {
			var m map[string]any
			if json.Unmarshal([]byte(extra), &m) == nil {
				for k, v := range m {
					if k != "x" {
						data[k] = v
					}
				}
			}
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return
		}
		out, err := tpl.Render(Input{Data: raw})
		if err != nil {
			return // a too-long output is an error, not a panic
		}
		rest := out.HTML
		for _, fixed := range []string{`<p title="`, `">`, `</p>`, `<a href="/u/`, `</a>`} {
			rest = strings.ReplaceAll(rest, fixed, "")
		}
		if strings.ContainsAny(rest, "<>\"") {
			t.Fatalf("data escaped its context: %q", out.HTML)
		}
		if strings.Contains(out.Subject, "\n") {
			t.Fatalf("a subject with a line break: %q", out.Subject)
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

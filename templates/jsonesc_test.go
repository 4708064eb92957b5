package templates

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestJSONPartsEscapeByContext(t *testing.T) {
	hostile := `bob","role":"admin","x":"`
	cases := []struct {
		name, body, data string
		want             map[string]any
	}{
		{"injection in a string stays a string", `{"user": "{{.data.name}}", "role": "viewer"}`,
			`{"name":` + mustJSON(hostile) + `}`, map[string]any{"user": hostile, "role": "viewer"}},
		{"html and line separators escaped", `{"s": "{{.data.s}}"}`, `{"s":"<a>&\u2028\\\n"}`,
			map[string]any{"s": "<a>&\u2028\\\n"}},
		{"values outside quotes are JSON values", `{"n": {{.data.n}}, "b": {{.data.b}}, "o": {{.data.o}}, "s": {{.data.s}}}`,
			`{"n":12.5,"b":true,"o":{"k":[1,"x"]},"s":"a\"b"}`,
			map[string]any{"n": 12.5, "b": true, "o": map[string]any{"k": []any{1.0, "x"}}, "s": `a"b`}},
		{"the json helper is not quoted again outside a string, escaped inside one", `{"o": {{json .data.o}}, "p": {{.data.o | json}}, "s": "{{json .data.o}}"}`,
			`{"o":{"k":"\""}}`, map[string]any{"o": map[string]any{"k": `"`}, "p": map[string]any{"k": `"`}, "s": `{"k":"\""}`}},
		{"quote-breaking value in a nested string", `{"a": {"b": ["x", "pre-{{.data.v}}-post"]}}`, `{"v":"\"}],\"c\":\"1"}`,
			map[string]any{"a": map[string]any{"b": []any{"x", `pre-"}],"c":"1-post`}}}},
		{"escaped quote in literal text keeps the context", `{"a": "say \"{{.data.v}}\""}`, `{"v":"\",\"z\":\""}`,
			map[string]any{"a": `say "","z":""`}},
		{"actions in range and if", `{"tags": [{{range $i, $t := .data.tags}}{{if $i}},{{end}}"#{{$t}}"{{end}}], "v": {{if .data.on}}{{.data.n}}{{else}}"{{.data.name}}"{{end}}}`,
			`{"tags":["a\"","b"],"on":false,"n":1,"name":"q\"r"}`,
			map[string]any{"tags": []any{`#a"`, "#b"}, "v": `q"r`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, src := range []Source{
				{Name: "hook", Channel: "webhook", Locale: "en", Parts: map[string]string{"body": c.body}},
				{Name: "note", Channel: "push", Locale: "en", Parts: map[string]string{"title": "t", "data": c.body}},
			} {
				tpl, err := Compile(src)
				if err != nil {
					t.Fatal(err)
				}
				out, err := tpl.Render(Input{Data: json.RawMessage(c.data)})
				if err != nil {
					t.Fatal(err)
				}
				var got map[string]any
				if err := json.Unmarshal(out.Data, &got); err != nil {
					t.Fatalf("%s: %v", out.Data, err)
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("%s: got %s\nwant %v", src.Channel, out.Data, c.want)
				}
			}
		})
	}
}

func TestJSONPartsRefused(t *testing.T) {
	cases := []struct {
		name, body, data, compileErr, renderErr string
	}{
		{"branches disagree", `{"a": {{if .data.x}}"{{end}}1}`, ``, "ends inside a JSON string", ""},
		{"range leaves a string open", `[{{range .data.l}}"{{.}}{{end}}]`, ``, "ends inside a JSON string", ""},
		{"string open at the end", `{"a": "{{.data.x}}`, ``, "not closed", ""},
		{"output is not JSON", `{"a": {{.data.x}} {{.data.x}}}`, `{"x":1}`, "", "hook/en/webhook.body: the body part is not JSON"},
		{"duplicate key in output", `{"a": 1, {{if .data.x}}"a": 2{{else}}"b": 2{{end}}}`, `{"x":true}`, "", "duplicate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tpl, err := Compile(Source{Name: "hook", Channel: "webhook", Locale: "en", Parts: map[string]string{"body": c.body}})
			if c.compileErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.compileErr) || !strings.Contains(err.Error(), "webhook.body") {
					t.Fatalf("compile: got %v, want %q", err, c.compileErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = tpl.Render(Input{Data: json.RawMessage(c.data)})
			if err == nil || !strings.Contains(err.Error(), c.renderErr) || !strings.Contains(err.Error(), `"hook"`) {
				t.Fatalf("render: got %v, want %q", err, c.renderErr)
			}
		})
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

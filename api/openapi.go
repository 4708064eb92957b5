package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// The API described the way the ecosystem reads APIs: an OpenAPI 3.1
// document (openapi.yaml, kept beside the handlers and held to them by the
// tests, which validate every request and response they make against it),
// served as JSON at /openapi.json and rendered as a plain HTML reference at
// /docs/api. Both are public, as /healthz is: they describe the API and
// hold no tenant's data.

//go:embed openapi.yaml
var openapiYAML []byte

var (
	openapiOnce sync.Once
	openapiJSON []byte
	openapiDoc  map[string]any
	openapiErr  error
)

func loadOpenAPI() {
	var doc any
	if openapiErr = yaml.Unmarshal(openapiYAML, &doc); openapiErr != nil {
		return
	}
	m, ok := jsonValue(doc).(map[string]any)
	if !ok {
		openapiErr = fmt.Errorf("openapi.yaml: not a mapping")
		return
	}
	openapiDoc = m
	openapiJSON, openapiErr = json.MarshalIndent(m, "", "  ")
	openapiJSON = append(openapiJSON, '\n')
}

// jsonValue turns what yaml.v3 decodes into values encoding/json takes
// (mappings with keys of other types than string become string-keyed).
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = jsonValue(x)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[fmt.Sprint(k)] = jsonValue(x)
		}
		return m
	case []any:
		for i, x := range v {
			v[i] = jsonValue(x)
		}
		return v
	}
	return v
}

// OpenAPIJSON is the API's OpenAPI document, as GET /openapi.json serves it.
// It panics if the embedded document does not parse (a test catches that).
func OpenAPIJSON() []byte {
	openapiOnce.Do(loadOpenAPI)
	if openapiErr != nil {
		panic("api/openapi.yaml: " + openapiErr.Error())
	}
	return openapiJSON
}

func (s *Server) docRoutes() {
	s.handle("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) response {
		return response{status: http.StatusOK, ctype: "application/json", body: OpenAPIJSON()}
	})
	s.handle("GET /docs/api", func(w http.ResponseWriter, r *http.Request) response {
		b, err := referenceOnce()
		if err != nil {
			return s.internal(err)
		}
		return response{status: http.StatusOK, ctype: "text/html; charset=utf-8", body: b}
	})
}

// The reference page: operations grouped by tag, each with its parameters,
// body and responses, then the problem types and the schemas. Rendered on
// the server from the embedded document, with no script and nothing fetched
// from elsewhere.

type refParam struct {
	Name, In, Type, Description string
	Required                    bool
}

type refResponse struct {
	Status, Description string
	Types               []refMedia
}

type refMedia struct{ Type, Schema string }

type refOperation struct {
	ID, Method, Path, Summary, Description, Security string
	Params                                           []refParam
	Body                                             []refMedia
	Responses                                        []refResponse
}

type refTag struct {
	Name, Description string
	Operations        []refOperation
}

type refProblem struct{ Type, Statuses string }

type refSchema struct{ Name, JSON string }

type refPage struct {
	Title, Version, Description string
	Tags                        []refTag
	Problems                    []refProblem
	Schemas                     []refSchema
	Security                    []refParam
}

// referenceOnce renders the page once: the document is fixed at build time.
var referenceOnce = sync.OnceValues(referencePage)

var methodOrder = []string{"get", "put", "post", "delete", "patch", "options"}

func referencePage() ([]byte, error) {
	OpenAPIJSON()
	doc := openapiDoc
	info, _ := doc["info"].(map[string]any)
	page := refPage{Title: str(info["title"]), Version: str(info["version"]), Description: str(info["description"])}
	byTag := map[string]*refTag{}
	for _, t := range list(doc["tags"]) {
		tm, _ := t.(map[string]any)
		page.Tags = append(page.Tags, refTag{Name: str(tm["name"]), Description: str(tm["description"])})
	}
	for i := range page.Tags {
		byTag[page.Tags[i].Name] = &page.Tags[i]
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, path := range sortedKeys(paths) {
		item, _ := paths[path].(map[string]any)
		for _, m := range methodOrder {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			ro := refOperation{ID: str(op["operationId"]), Method: strings.ToUpper(m), Path: path,
				Summary: str(op["summary"]), Description: str(op["description"]), Security: security(doc, op)}
			for _, p := range append(list(item["parameters"]), list(op["parameters"])...) {
				pm := resolve(doc, p)
				ro.Params = append(ro.Params, refParam{Name: str(pm["name"]), In: str(pm["in"]),
					Type: schemaName(doc, pm["schema"]), Description: str(pm["description"]), Required: pm["required"] == true})
			}
			if rb := resolve(doc, op["requestBody"]); rb != nil {
				ro.Body = media(doc, rb)
			}
			rs, _ := op["responses"].(map[string]any)
			for _, status := range sortedKeys(rs) {
				r := resolve(doc, rs[status])
				ro.Responses = append(ro.Responses, refResponse{Status: status, Description: str(r["description"]), Types: media(doc, r)})
			}
			tags := list(op["tags"])
			tag := "other"
			if len(tags) > 0 {
				tag = str(tags[0])
			}
			t := byTag[tag]
			if t == nil {
				page.Tags = append(page.Tags, refTag{Name: tag})
				for i := range page.Tags {
					byTag[page.Tags[i].Name] = &page.Tags[i]
				}
				t = byTag[tag]
			}
			t.Operations = append(t.Operations, ro)
		}
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	statuses := map[string][]string{}
	for _, name := range sortedKeys(schemas) {
		code, ok := strings.CutPrefix(name, "Problem")
		if !ok || code == "" {
			continue
		}
		sm, _ := schemas[name].(map[string]any)
		props, _ := sm["properties"].(map[string]any)
		tp, _ := props["type"].(map[string]any)
		types := list(tp["enum"])
		if c, ok := tp["const"]; ok {
			types = append(types, c)
		}
		for _, t := range types {
			statuses[str(t)] = append(statuses[str(t)], code)
		}
	}
	problem, _ := schemas["Problem"].(map[string]any)
	pprops, _ := problem["properties"].(map[string]any)
	ptype, _ := pprops["type"].(map[string]any)
	for _, t := range list(ptype["enum"]) {
		st := strings.Join(statuses[str(t)], ", ")
		if st == "" && strings.HasSuffix(str(t), "/method-not-allowed") {
			st = "405 (any path, for a method it has no route for)"
		}
		page.Problems = append(page.Problems, refProblem{Type: str(t), Statuses: st})
	}
	for _, name := range sortedKeys(schemas) {
		b, _ := json.MarshalIndent(schemas[name], "", "  ")
		page.Schemas = append(page.Schemas, refSchema{Name: name, JSON: string(b)})
	}
	sec, _ := comps["securitySchemes"].(map[string]any)
	for _, name := range sortedKeys(sec) {
		sm, _ := sec[name].(map[string]any)
		page.Security = append(page.Security, refParam{Name: name, Type: str(sm["type"]) + " " + str(sm["scheme"]), Description: str(sm["description"])})
	}
	var b bytes.Buffer
	if err := referenceTemplate.Execute(&b, page); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func list(v any) []any { l, _ := v.([]any); return l }

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// resolve follows a local $ref ("#/components/…") to what it names.
func resolve(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	for range 8 {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cm, _ := cur.(map[string]any)
			cur = cm[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

// schemaName is a short name for a schema: its component's name, else its type.
func schemaName(doc map[string]any, v any) string {
	m, _ := v.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		return ref[strings.LastIndex(ref, "/")+1:]
	}
	switch t := m["type"].(type) {
	case string:
		if t == "array" {
			return "array of " + schemaName(doc, m["items"])
		}
		return t
	case []any:
		parts := make([]string, len(t))
		for i, x := range t {
			parts[i] = str(x)
		}
		return strings.Join(parts, " or ")
	}
	if c, ok := m["const"]; ok {
		b, _ := json.Marshal(c)
		return string(b)
	}
	if alts := list(m["oneOf"]); len(alts) > 0 {
		parts := make([]string, len(alts))
		for i, a := range alts {
			parts[i] = schemaName(doc, a)
		}
		return "one of " + strings.Join(parts, ", ")
	}
	if len(m) == 0 {
		return "any"
	}
	return "object"
}

func media(doc map[string]any, v map[string]any) []refMedia {
	c, _ := v["content"].(map[string]any)
	var out []refMedia
	for _, ct := range sortedKeys(c) {
		cm, _ := c[ct].(map[string]any)
		out = append(out, refMedia{Type: ct, Schema: schemaName(doc, cm["schema"])})
	}
	return out
}

func security(doc, op map[string]any) string {
	reqs, ok := op["security"]
	if !ok {
		reqs = doc["security"]
	}
	var names []string
	for _, r := range list(reqs) {
		rm, _ := r.(map[string]any)
		if len(rm) == 0 {
			names = append(names, "none")
		}
		names = append(names, sortedKeys(rm)...)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " or ")
}

// markdown renders the little of CommonMark the document's descriptions
// use: paragraphs, `code` and **bold**; everything else is escaped text.
func markdown(text string) template.HTML {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		para = strings.Join(strings.Fields(para), " ")
		if para == "" {
			continue
		}
		b.WriteString("<p>")
		for i, part := range strings.Split(para, "`") {
			if i%2 == 1 {
				b.WriteString("<code>" + template.HTMLEscapeString(part) + "</code>")
				continue
			}
			for j, bold := range strings.Split(part, "**") {
				if j%2 == 1 {
					b.WriteString("<b>" + template.HTMLEscapeString(bold) + "</b>")
				} else {
					b.WriteString(template.HTMLEscapeString(bold))
				}
			}
		}
		b.WriteString("</p>\n")
	}
	return template.HTML(b.String())
}

func slug(s string) string { return strings.ReplaceAll(s, " ", "-") }

var referenceTemplate = template.Must(template.New("ref").Funcs(template.FuncMap{"md": markdown, "slug": slug}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Title}}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:62rem;margin:2rem auto;padding:0 1rem;color:#222}
code,pre{font:13px ui-monospace,monospace}pre{background:#f6f6f6;padding:.6rem;overflow:auto}
h2{border-bottom:1px solid #ccc;margin-top:2.5rem}h3{margin:1.6rem 0 .3rem}
.m{display:inline-block;min-width:4.2rem;font-weight:bold}
table{border-collapse:collapse;margin:.3rem 0}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}
nav a{margin-right:.8rem}td p{margin:0}
</style></head><body>
<h1>{{.Title}} <small>version {{.Version}}</small></h1>
<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p>
<nav>{{range .Tags}}{{if .Operations}}<a href="#tag-{{slug .Name}}">{{.Name}}</a>{{end}}{{end}}<a href="#problems">problem types</a><a href="#schemas">schemas</a></nav>
{{md .Description}}
<h2 id="security">Security schemes</h2>
<table><tr><th>name</th><th>scheme</th><th>what</th></tr>
{{range .Security}}<tr><td><code>{{.Name}}</code></td><td>{{.Type}}</td><td>{{md .Description}}</td></tr>{{end}}</table>
{{range .Tags}}{{if .Operations}}
<h2 id="tag-{{slug .Name}}">{{.Name}}</h2>{{if .Description}}{{md .Description}}{{end}}
{{range .Operations}}
<h3 id="op-{{.ID}}"><span class="m">{{.Method}}</span> <code>{{.Path}}</code></h3>
<p><b>{{.Summary}}</b> <small>(<code>{{.ID}}</code>; security: {{.Security}})</small></p>
{{if .Description}}{{md .Description}}{{end}}
{{if .Params}}<table><tr><th>parameter</th><th>in</th><th>schema</th><th>what</th></tr>
{{range .Params}}<tr><td><code>{{.Name}}</code>{{if .Required}} (required){{end}}</td><td>{{.In}}</td><td>{{.Type}}</td><td>{{md .Description}}</td></tr>{{end}}</table>{{end}}
{{if .Body}}<p>Request body: {{range .Body}}<code>{{.Type}}</code> {{.Schema}}; {{end}}</p>{{end}}
<table><tr><th>status</th><th>answer</th><th>body</th></tr>
{{range .Responses}}<tr><td>{{.Status}}</td><td>{{md .Description}}</td><td>{{range .Types}}<code>{{.Type}}</code> {{.Schema}}<br>{{end}}</td></tr>{{end}}</table>
{{end}}{{end}}{{end}}
<h2 id="problems">Problem types</h2>
<p>Errors are RFC 9457 <code>application/problem+json</code>: <code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code> and, where one part of the request is at fault, <code>field</code>.</p>
<table><tr><th>type</th><th>status</th></tr>
{{range .Problems}}<tr><td><code>{{.Type}}</code></td><td>{{.Statuses}}</td></tr>{{end}}</table>
<h2 id="schemas">Schemas</h2>
{{range .Schemas}}<h3 id="schema-{{.Name}}">{{.Name}}</h3><pre>{{.JSON}}</pre>{{end}}
</body></html>
`))

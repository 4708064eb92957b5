package api_test

import (
	"encoding/json"
	"html"
	"net/http"
	"strings"
	"testing"
)

// GET /openapi.json and GET /docs/api are public, as /healthz is: on an API
// with tokens they answer without one. The document served is the one the
// tests validate against, and the page names every operation it has.
func TestOpenAPIServedAndRendered(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{}})

	rep := b.do(t, "GET", "/openapi.json", "")
	if rep.status != http.StatusOK || !strings.HasPrefix(rep.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %d %s", rep.status, rep.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rep.body, &doc); err != nil {
		t.Fatalf("GET /openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") || len(doc.Paths) == 0 {
		t.Fatalf("GET /openapi.json: openapi %q, %d paths", doc.OpenAPI, len(doc.Paths))
	}

	page := b.do(t, "GET", "/docs/api", "")
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs/api: %d %s", page.status, page.header.Get("Content-Type"))
	}
	text := html.UnescapeString(string(page.body))
	ops := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
				Summary     string `json:"summary"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ops++
			for _, want := range []string{`id="op-` + op.OperationID + `"`, strings.ToUpper(method) + `</span> <code>` + path + `</code>`, op.Summary} {
				if !strings.Contains(text, want) {
					t.Errorf("GET /docs/api: no %q for %s %s", want, method, path)
				}
			}
		}
	}
	for _, want := range []string{"https://edgerelay.dev/problems/idempotency-key-reused", "Idempotency-Key", "tenantToken", "application/problem+json"} {
		if !strings.Contains(text, want) {
			t.Errorf("GET /docs/api does not name %s", want)
		}
	}
	if strings.Contains(text, "<script") || strings.Contains(text, "https://cdn") {
		t.Errorf("GET /docs/api loads something: it must work offline")
	}
	t.Logf("%d operations rendered", ops)
}

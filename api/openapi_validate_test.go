package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/edgerelay/edgerelay/api"
)

// The API tests' requests go through contract (setup installs it on the
// bundle's client): each request and its response are validated against
// the OpenAPI document the binary serves (api.OpenAPIJSON), so a handler
// that drifts from the document fails the test that reached it.
//
//   - A request the document has no operation for fails the test, unless
//     the API agrees there is none (its 404 "no route" or 405 problem) or
//     the test marks it with the header undocumented (below).
//   - A request the document calls invalid (a test sending bad input on
//     purpose) must not be answered 2xx: the API would accept what the
//     document refuses.
//   - A query parameter the operation does not declare fails the test
//     (openapi3filter itself ignores them; the API does too, so a test
//     that sends one relies on what the document does not say).
//   - Every response, whatever its status, must be one the operation
//     documents, with its body valid against that status's schema.

// undocumented marks a request as deliberately outside the document (send
// it as a header pair: b.do(t, "GET", "/nowhere", "", undocumented...)); the
// round tripper strips it before the request is sent.
var undocumented = []string{"X-Edgerelay-Test-Undocumented", "deliberate"}

var (
	contractOnce   sync.Once
	contractRouter routers.Router
	contractErr    error
)

func loadContract() (routers.Router, error) {
	contractOnce.Do(func() {
		// Bodies the document names that openapi3filter has no decoder for:
		// they are validated as strings.
		for _, ct := range []string{"text/html", "message/rfc822", "text/event-stream", "text/javascript"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPIJSON())
		if err != nil {
			contractErr = err
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			contractErr = err
			return
		}
		// The tests' servers listen on ephemeral ports: route on paths alone.
		doc.Servers = nil
		contractRouter, contractErr = legacyrouter.NewRouter(doc)
	})
	return contractRouter, contractErr
}

// contract wraps next so that every request it carries, and its response,
// is validated against the document; failures are reported on tb.
func contract(tb testing.TB, next http.RoundTripper) http.RoundTripper {
	tb.Helper()
	router, err := loadContract()
	if err != nil {
		tb.Fatalf("the OpenAPI document: %v", err)
	}
	if next == nil {
		next = http.DefaultTransport
	}
	return &contractTripper{tb: tb, next: next, router: router}
}

type contractTripper struct {
	tb     testing.TB
	next   http.RoundTripper
	router routers.Router
}

func (c *contractTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	deliberate := req.Header.Get(undocumented[0]) != ""
	if deliberate {
		req = req.Clone(req.Context())
		req.Header.Del(undocumented[0])
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	what := req.Method + " " + req.URL.RequestURI()

	// The server matches paths segment by segment as sent (a source
	// named sqlite:%2F%2F… is one segment): so does the router.
	rreq := req.Clone(context.Background())
	rreq.URL.Path, rreq.URL.RawPath = req.URL.EscapedPath(), ""
	route, params, routeErr := c.router.FindRoute(rreq)
	var in *openapi3filter.RequestValidationInput
	var reqErr error
	if routeErr == nil {
		vreq := req.Clone(context.Background())
		vreq.Body = io.NopCloser(bytes.NewReader(body))
		in = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{
				AuthenticationFunc:                openapi3filter.NoopAuthenticationFunc,
				RejectWhenRequestBodyNotSpecified: true,
				SkipSettingDefaults:               true,
				MultiError:                        true,
			}}
		reqErr = openapi3filter.ValidateRequest(context.Background(), in)
		if unknown := undeclaredQuery(route, req); len(unknown) > 0 && !deliberate {
			// openapi3filter ignores query parameters the operation does not
			// declare; a test that sends one relies on what the document
			// does not say.
			c.tb.Errorf("OpenAPI: %s sends query parameters the document does not declare for %s: %s", what, route.Operation.OperationID, strings.Join(unknown, ", "))
		}
	}

	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		// A stream does not end: its status and headers are held to the
		// document, its body is the test's to read.
		if routeErr != nil {
			c.tb.Errorf("OpenAPI: %s streams, and is not in the document (%v)", what, routeErr)
			return resp, nil
		}
		if reqErr != nil && resp.StatusCode/100 == 2 {
			c.tb.Errorf("OpenAPI: the document calls %s invalid (%v), but the API streamed it", what, reqErr)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
		out.SetBodyBytes(nil)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			c.tb.Errorf("OpenAPI: the stream answering %s does not match the document: %v", what, err)
		}
		return resp, nil
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if err != nil {
		return resp, nil // the test sees the cut body as it would have
	}

	if routeErr != nil {
		if !deliberate && !noRoute(resp, rbody) {
			c.tb.Errorf("OpenAPI: %s is not in the document (%v), and the API answered it %d %s", what, routeErr, resp.StatusCode, bytes.TrimSpace(rbody))
		}
		return resp, nil
	}
	if reqErr != nil && resp.StatusCode/100 == 2 {
		c.tb.Errorf("OpenAPI: the document calls %s invalid (%v), but the API answered it %d", what, reqErr, resp.StatusCode)
	}
	if f := os.Getenv("EDGERELAY_OPENAPI_SEEN"); f != "" {
		// A record of the operations and statuses the tests reach, for
		// whoever wants to see what the document's checks cover.
		if w, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(w, "%s %d\n", route.Operation.OperationID, resp.StatusCode)
			w.Close()
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(rbody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.tb.Errorf("OpenAPI: the answer to %s does not match the document: %v\nanswer: %d %s %s", what, err,
			resp.StatusCode, resp.Header.Get("Content-Type"), truncate(rbody, 600))
	}
	return resp, nil
}

// undeclaredQuery lists the query parameters of req that route's path and
// operation do not declare.
func undeclaredQuery(route *routers.Route, req *http.Request) []string {
	declared := map[string]bool{}
	for _, ps := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				declared[p.Value.Name] = true
			}
		}
	}
	var out []string
	for name := range req.URL.Query() {
		if !declared[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// noRoute reports whether the API itself answered that it has no route
// for the request: its catch-all 404, or a 405 for a path it serves with
// other methods.
func noRoute(resp *http.Response, body []byte) bool {
	var p api.Problem
	if json.Unmarshal(body, &p) != nil {
		return false
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return strings.HasPrefix(p.Detail, "no route for ")
	case http.StatusMethodNotAllowed:
		return strings.HasSuffix(p.Type, "/method-not-allowed")
	}
	return false
}

func truncate(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// The document itself loads and validates as OpenAPI 3.1, and names an
// operation for every route the server registers (and none it does not).
func TestOpenAPIDocumentCoversRoutes(t *testing.T) {
	t.Parallel()
	if _, err := loadContract(); err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPIJSON())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	b := setup(t, options{Metrics: true})
	served := map[string]bool{}
	for _, p := range b.api.Routes() {
		served[p] = true
		method, path, _ := strings.Cut(p, " ")
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("the server serves %s; the document has no operation for it", p)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("the document describes %s %s; the server has no such route", method, path)
			}
		}
	}
}

// message adds to hdr the Content-Type of a bounce report's body (a whole
// message), for POST /v1/bounces: send labels every body JSON.
func message(hdr ...string) []string {
	return append(slices.Clone(hdr), "Content-Type", "message/rfc822")
}

// recorder is a testing.TB that keeps what contract reports.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// contract catches a handler that drifts: a body, a status or a path the
// document does not describe, and an accept of what it calls invalid. The
// server here is a stand-in that answers as a drifted handler would.
func TestOpenAPIContractCatchesDrift(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"status":"fine"}`) // not the documented "ok"
		case "/readyz":
			w.WriteHeader(http.StatusTeapot) // a status it does not document
		case "/v1/notifications/n_x":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"type":"https://edgerelay.dev/problems/gone","title":"Gone","status":404}`) // an undocumented type
		case "/v1/templates":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable) // without its Retry-After
			io.WriteString(w, `{"type":"https://edgerelay.dev/problems/storage-unavailable","title":"Storage unavailable","status":503}`)
		case "/v1/events":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		method, path, body, want string
		hdr                      []string
	}{
		{"GET", "/healthz", "", "does not match the document", nil},
		{"GET", "/readyz", "", "does not match the document", nil},
		{"GET", "/v1/notifications/n_x", "", "does not match the document", nil},
		{"GET", "/v1/templates", "", "does not match the document", nil},
		{"GET", "/v1/nowhere", "", "is not in the document", nil},
		{"GET", "/healthz?verbose=1", "", "does not declare for healthz: verbose", nil},
		{"POST", "/v1/events", `{"id": 1}`, "calls POST /v1/events invalid", nil},
		{"GET", "/v1/nowhere", "", "", undocumented},
	} {
		rec := &recorder{TB: t}
		client := &http.Client{Transport: contract(rec, srv.Client().Transport)}
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(c.hdr); i += 2 {
			req.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := strings.Join(rec.errors, "\n")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s %s (marked undocumented): reported %s", c.method, c.path, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s %s: reported %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// Every problem type the package's code can answer is in the document's
// Problem schema, and the document names none the code does not have.
func TestOpenAPIDocumentListsEveryProblemType(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties struct {
					Type struct {
						Enum []string `json:"enum"`
					} `json:"type"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPIJSON(), &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas["Problem"].Properties.Type.Enum
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	uri := regexp.MustCompile(`https://edgerelay\.dev/problems/[a-z0-9-]+`)
	inCode := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range uri.FindAllString(string(src), -1) {
			inCode[m] = true
		}
	}
	for typ := range inCode {
		if !slices.Contains(documented, typ) {
			t.Errorf("the code answers %s; the document's Problem schema does not list it", typ)
		}
	}
	for _, typ := range documented {
		if !inCode[typ] {
			t.Errorf("the document lists %s; no code in package api answers it", typ)
		}
	}
}

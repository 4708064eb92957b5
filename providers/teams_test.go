package providers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// teamsWorkflowPath stands for a workflow trigger's path; its query holds
// the signature.
const (
	teamsWorkflowPath  = "/workflows/0123abcd/triggers/manual/paths/invoke"
	teamsWorkflowQuery = "api-version=2016-06-01&sig=XXXXsecretXXXX&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0"
	teamsConnectorPath = "/webhookb2/0000-1111@2222-3333/IncomingWebhook/XXXXsecretXXXX/4444-5555"
)

// The card as both kinds of URL get it: a message with one Adaptive Card,
// its text in plain runs.
const teamsCardJSON = `{"type":"message","attachments":[{"contentType":"application/vnd.microsoft.card.adaptive","contentUrl":null,
"content":{"$schema":"http://adaptivecards.io/schemas/adaptive-card.json","type":"AdaptiveCard","version":"1.4","body":[
{"type":"RichTextBlock","inlines":[{"type":"TextRun","text":"Paid","weight":"Bolder","size":"Medium"}]},
{"type":"RichTextBlock","inlines":[{"type":"TextRun","text":"Thanks [click](https://evil.example) **now**"}]}]}}]}`

func TestTeamsRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		path, query, auth, ctype string
		body                     []byte
	}
	reqs := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		reqs <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body}
		if strings.HasPrefix(r.URL.Path, "/workflows/") {
			w.WriteHeader(http.StatusAccepted) // a workflow's answer: no body
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("1")) // a connector's
	}))
	t.Cleanup(srv.Close)
	m := testMessage("k1")
	m.Body = "Thanks [click](https://evil.example) **now**"
	for _, c := range []struct{ url, path, query string }{
		{"teams+" + srv.URL + teamsWorkflowPath + "?" + teamsWorkflowQuery, teamsWorkflowPath, teamsWorkflowQuery},
		{"teams+" + srv.URL + teamsConnectorPath, teamsConnectorPath, ""},
	} {
		p := newProvider(t, c.url)
		if p.HonoursKeys() {
			t.Error("HonoursKeys() = true: Teams takes no idempotency key")
		}
		r := send(p, m)
		if r.Outcome != Sent || r.MessageID != "" || (r.Detail != "202 Accepted" && r.Detail != "200 OK") {
			t.Errorf("%s: got %s status=%d detail %q id=%q", c.path, r.Outcome, r.HTTPStatus, r.Detail, r.MessageID)
		}
		q := <-reqs
		if q.path != c.path || q.query != c.query {
			t.Errorf("called %s?%s, want %s?%s", q.path, q.query, c.path, c.query)
		}
		if q.ctype != "application/json" || q.auth != "" {
			t.Errorf("Content-Type %q, Authorization %q", q.ctype, q.auth)
		}
		if !sameJSON(t, q.body, teamsCardJSON) {
			t.Errorf("body %s, want %s", q.body, teamsCardJSON)
		}
	}
}

func TestTeamsOutcomes(t *testing.T) {
	t.Parallel()
	flowErr := func(code, msg string) string { return `{"error":{"code":"` + code + `","message":"` + msg + `"}}` }
	connectorFailed := func(status string) string {
		return "Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error " + status + " with ContextId tcid=0,server=msgapi-production-weu-azsc2-4-125,cv=deadbeef.0.."
	}
	for _, c := range []struct {
		answer     scriptedAnswer
		outcome    Outcome
		permanent  bool
		overloaded bool
		after      time.Duration
		detail     string
	}{
		{scriptedAnswer{202, "", nil}, Sent, false, false, 0, "202 Accepted"},
		{scriptedAnswer{200, "1", map[string]string{"Content-Type": "text/plain"}}, Sent, false, false, 0, "200 OK"},
		// A connector that answers 200 and says it did not post.
		{scriptedAnswer{200, connectorFailed("429"), map[string]string{"Content-Type": "text/plain"}}, Refused, false, true, 0, "returned HTTP error 429"},
		{scriptedAnswer{200, connectorFailed("413"), map[string]string{"Content-Type": "text/plain"}}, Refused, true, false, 0, "returned HTTP error 413"},
		{scriptedAnswer{200, connectorFailed("502"), map[string]string{"Content-Type": "text/plain"}}, Refused, false, false, 0, "returned HTTP error 502"},
		{scriptedAnswer{400, flowErr("InvalidRequestContent", "The request content is not valid."), nil}, Refused, true, false, 0, "400 Bad Request: InvalidRequestContent"},
		{scriptedAnswer{400, "Bad payload received by generic incoming webhook.", map[string]string{"Content-Type": "text/plain"}}, Refused, true, false, 0, "Bad payload received"},
		{scriptedAnswer{401, flowErr("DirectApiAuthorizationRequired", "The request must be authenticated only by Shared Access scheme."), nil}, Refused, true, false, 0, "DirectApiAuthorizationRequired"},
		{scriptedAnswer{404, flowErr("WorkflowNotFound", "The workflow could not be found."), nil}, Refused, true, false, 0, "404 Not Found: WorkflowNotFound"},
		{scriptedAnswer{429, flowErr("WorkflowRequestsThrottled", "Rate limit is exceeded."), map[string]string{"Retry-After": "20"}}, Refused, false, true, 20 * time.Second, "WorkflowRequestsThrottled"},
		{scriptedAnswer{500, flowErr("InternalServerError", "Encountered internal server error."), nil}, Unknown, false, false, 0, "500 Internal Server Error"},
		{scriptedAnswer{502, "<html>bad gateway</html>", nil}, Unknown, false, false, 0, "502 Bad Gateway"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, true, 0, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			r := send(newProvider(t, "teams+"+srv.URL+teamsWorkflowPath+"?"+teamsWorkflowQuery+"&timeout=5s"), testMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.Overloaded != c.overloaded || r.RetryAfter != c.after || !strings.Contains(r.Detail, c.detail) || r.InvalidAddress {
				t.Errorf("got %s permanent=%v overloaded=%v retry-after=%v invalid-address=%v detail %q", r.Outcome, r.Permanent, r.Overloaded, r.RetryAfter, r.InvalidAddress, r.Detail)
			}
			if strings.Contains(r.Detail, "<html>") {
				t.Errorf("detail quotes an HTML body: %q", r.Detail)
			}
		})
	}
}

// The path and sig are the URL's credentials: Name, problems and errors
// never show them.
func TestTeamsURL(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "teams+https://prod-00.westus.logic.azure.com"+teamsWorkflowPath+"?"+teamsWorkflowQuery)
	if p.Name() != "teams://prod-00.westus.logic.azure.com" {
		t.Errorf("Name() = %q", p.Name())
	}
	if e := p.(*Teams).httpEndpoint; e.url != "https://prod-00.westus.logic.azure.com"+teamsWorkflowPath+"?"+teamsWorkflowQuery {
		t.Errorf("calls %q", e.url)
	}
	for _, c := range []struct{ url, want string }{
		{"teams+https://x.webhook.office.com", "missing path"},
		{"teams+https://x.webhook.office.com/", "missing path"},
		{"teams+https://u:p@x.webhook.office.com" + teamsConnectorPath, "teams URLs take no credentials"},
		{"teams+https://h.logic.azure.com" + teamsWorkflowPath + "?api-version=2016-06-01", `a workflow URL needs its "sig" parameter`},
		{"teams+https://h.logic.azure.com" + teamsWorkflowPath + "?" + teamsWorkflowQuery + "&sp=", `parameter "sp" given 2 times`},
		{"teams+https://h.logic.azure.com" + teamsWorkflowPath + "?api-version=2016-06-01&sig=", `parameter "sig" is empty`},
		{"teams+https://x.webhook.office.com" + teamsConnectorPath + "?token=XXXXsecretXXXX", `unknown parameter "token" (supported: api-version, concurrency, name, sig, sp, sv, timeout)`},
		{"teams+https://" + teamsConnectorPath, "missing host"},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s) = %v, want %q", Redact(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("New(%s): the error quotes a secret: %v", Redact(c.url), err)
		}
	}
	if u, err := url.Parse(teamsKind.Example); err != nil || !strings.Contains(Redact(teamsKind.Example), "sig=REDACTED") || strings.Contains(Redact(teamsKind.Example), u.Path) {
		t.Errorf("Redact(example) = %q", Redact(teamsKind.Example))
	}
}

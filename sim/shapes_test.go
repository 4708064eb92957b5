package sim

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// vendorCall is one request to a vendor shape.
type vendorCall struct {
	name   string
	path   string
	header map[string]string
	body   string
}

var vendorCalls = []vendorCall{
	{"mailgun", "/v3/mg.example.com/messages", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": "Basic YXBpOmtleQ=="},
		"from=a%40mg.example.com&to=ada%40example.com&subject=Hi&text=Hello"},
	{"ses", "/v2/email/outbound-emails", map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=AK/20261207/us-east-1/ses/aws4_request, SignedHeaders=host, Signature=00"},
		`{"FromEmailAddress":"a@example.com","Destination":{"ToAddresses":["bo@example.com"]},"Content":{"Simple":{"Subject":{"Data":"Hi"},"Body":{"Text":{"Data":"Hello"}}}}}`},
	{"discord", "/api/webhooks/42/tok?wait=true", nil, `{"content":"**Hi**\nHello","allowed_mentions":{"parse":[]}}`},
	{"telegram", "/bot1:tok/sendMessage", nil, `{"chat_id":987654321,"text":"Hi\nHello"}`},
	{"teams", "/workflows/ops/triggers/manual/paths/invoke?sig=s", nil,
		`{"type":"message","attachments":[{"contentType":"application/vnd.microsoft.card.adaptive","content":{"body":[{"type":"RichTextBlock","inlines":[{"type":"TextRun","text":"Hi"}]},{"type":"RichTextBlock","inlines":[{"type":"TextRun","text":"Hello"}]}]}}]}`},
}

func post(t *testing.T, c *http.Client, url string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "er1_same")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// Each vendor shape takes its vendor's request, delivers it, and answers
// as the vendor does; the same key twice sends twice (the vendors honour
// none); a refusal carries the vendor's own retry hint.
func TestVendorShapes(t *testing.T) {
	t.Parallel()
	sc, err := ParseScript([]byte(`{"rules": [{"to": "*", "attempts": [3], "action": "refuse", "status": 429, "retry_after": "7s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	srv, b := setup(t, Options{HonourKeys: true})
	srv.SetScript(sc)
	wantOK := map[string]string{"mailgun": `"message":"Queued. Thank you."`, "ses": `"MessageId":"0100019300000000-sim-`,
		"discord": `"webhook_id":"42"`, "telegram": `"ok":true`, "teams": ""}
	wantRefused := map[string]string{"mailgun": `"message":"too many requests`, "ses": `"message":"too many requests`,
		"discord": `"retry_after":7`, "telegram": `"parameters":{"retry_after":7}`, "teams": `"code":"WorkflowRequestsThrottled"`}
	for _, c := range vendorCalls {
		for attempt := 1; attempt <= 3; attempt++ {
			resp, body := post(t, b.client, b.ts.URL+c.path, c.header, c.body)
			want, status := wantOK[c.name], http.StatusOK
			if c.name == "teams" {
				status = http.StatusAccepted
			}
			if attempt == 3 {
				want, status = wantRefused[c.name], http.StatusTooManyRequests
				if resp.Header.Get("Retry-After") != "7" {
					t.Errorf("%s: Retry-After %q", c.name, resp.Header.Get("Retry-After"))
				}
			}
			if resp.StatusCode != status || !strings.Contains(string(body), want) {
				t.Errorf("%s attempt %d: %d %s, want %d with %s", c.name, attempt, resp.StatusCode, body, status, want)
			}
		}
	}
	byVia := map[string][]Delivery{}
	for _, d := range srv.Deliveries() {
		byVia[d.Via] = append(byVia[d.Via], d)
	}
	for name, to := range map[string]string{"mailgun": "ada@example.com", "ses": "bo@example.com", "discord": "discord:42",
		"telegram": "telegram:987654321", "teams": "teams:ops"} {
		ds := byVia[name]
		if len(ds) != 2 || ds[0].To != to || ds[0].Key != "er1_same" || !strings.Contains(ds[0].Text, "Hello") {
			t.Errorf("%s: deliveries %+v, want 2 to %s (the same key sends again)", name, ds, to)
		}
	}
	if ds := byVia["teams"]; len(ds) > 0 && ds[0].Subject != "Hi" {
		t.Errorf("teams: subject %q, want the card's first block", ds[0].Subject)
	}

	for _, c := range []struct {
		name, path string
		header     map[string]string
		body       string
		status     int
		want       string
	}{
		{"mailgun without the key", "/v3/mg.example.com/messages", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "to=a%40b.c", 401, "Forbidden"},
		{"mailgun bad to", "/v3/mg.example.com/messages", vendorCalls[0].header, "from=a%40b.c&to=nobody&text=x", 400, "'to' parameter is not a valid address"},
		{"ses unsigned", "/v2/email/outbound-emails", nil, vendorCalls[1].body, 403, "Missing Authentication Token"},
		{"discord empty", "/api/webhooks/42/tok", nil, `{"content":""}`, 400, "Cannot send an empty message"},
		{"telegram bad token", "/botnotoken/sendMessage", nil, `{"chat_id":1,"text":"x"}`, 401, `"ok":false`},
		{"teams without sig", "/workflows/ops/triggers/manual/paths/invoke", nil, vendorCalls[4].body, 401, "DirectApiAuthorizationRequired"},
		{"webpush unknown subscription", "/push/v1/sub-9", map[string]string{"TTL": "60", "Content-Encoding": "aes128gcm", "Authorization": "vapid t=x, k=y"}, "xx", 410, `"errno":106`},
		{"apns over HTTP/1.1", "/3/device/abcd", map[string]string{"Authorization": "bearer x", "apns-topic": "t"}, `{"aps":{}}`, 505, "reason"},
	} {
		resp, body := post(t, b.client, b.ts.URL+c.path, c.header, c.body)
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.name, resp.StatusCode, body, c.status, c.want)
		}
	}
}

// APNs is served over HTTP/2 with TLS: a push with a provider token and a
// topic is delivered and answered with its apns-id; one without a token
// is 403 MissingProviderToken.
func TestAPNsShape(t *testing.T) {
	t.Parallel()
	srv := New(Options{})
	cert, certPEM, err := SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	token := strings.Repeat("ab", 32)
	id := "6f1b4a4e-8d6f-4f0e-9c3e-2a1b3c4d5e6f"
	resp, body := post(t, c, ts.URL+"/3/device/"+token, map[string]string{"Authorization": "bearer jwt", "apns-topic": "com.example.app", "apns-id": id},
		`{"aps":{"alert":{"title":"Hi","body":"Hello"}}}`)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || resp.Header.Get("apns-id") != id || len(body) != 0 {
		t.Fatalf("push: %s %d apns-id %q body %q", resp.Proto, resp.StatusCode, resp.Header.Get("apns-id"), body)
	}
	if ds := srv.Deliveries(); len(ds) != 1 || ds[0].To != "apns:"+token || ds[0].Subject != "Hi" || ds[0].Text != "Hello" {
		t.Errorf("deliveries %+v", ds)
	}
	resp, body = post(t, c, ts.URL+"/3/device/"+token, map[string]string{"apns-topic": "com.example.app"}, `{"aps":{}}`)
	var e struct{ Reason string }
	if json.NewDecoder(bytes.NewReader(body)).Decode(&e); resp.StatusCode != http.StatusForbidden || e.Reason != "MissingProviderToken" {
		t.Errorf("without a token: %d %s", resp.StatusCode, body)
	}
}

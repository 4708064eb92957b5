package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	sesKeyID  = "AKIAIOSFODNN7EXAMPLE"
	sesSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// sesSigV4 checks r's Authorization as Signature Version 4 defines it,
// written out here from AWS's description rather than taken from the
// signer the provider uses: the canonical request (method, path, query,
// the signed headers' lowercase names and trimmed values, the payload's
// SHA-256), the string to sign under the scope date/region/service, and
// the HMAC chain from "AWS4"+secret. It returns the signed header names.
func sesSigV4(t *testing.T, r *http.Request, body []byte, secret, region, service string, at time.Time) []string {
	t.Helper()
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		t.Fatalf("Authorization %q is not SigV4", auth)
		return nil
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	date := at.UTC().Format("20060102")
	amzDate := at.UTC().Format("20060102T150405Z")
	scope := date + "/" + region + "/" + service + "/aws4_request"
	if fields["Credential"] != sesKeyID+"/"+scope {
		t.Errorf("Credential %q, want %s/%s", fields["Credential"], sesKeyID, scope)
	}
	if got := r.Header.Get("X-Amz-Date"); got != amzDate {
		t.Errorf("X-Amz-Date %q, want %q", got, amzDate)
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var canon strings.Builder
	for _, h := range signed {
		v := r.Header.Get(h)
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		}
		canon.WriteString(h + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	payload := sha256.Sum256(body)
	creq := strings.Join([]string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, canon.String(), fields["SignedHeaders"], hex.EncodeToString(payload[:])}, "\n")
	chash := sha256.Sum256([]byte(creq))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(chash[:])
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	k := mac(mac(mac(mac([]byte("AWS4"+secret), date), region), service), "aws4_request")
	if want := hex.EncodeToString(mac(k, toSign)); fields["Signature"] != want {
		t.Errorf("Signature %s, want %s for\n%s", fields["Signature"], want, creq)
	}
	return signed
}

func TestSESRequest(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 23, 30, 0, 0, time.UTC)
	type seen struct {
		signed []string
		r      *http.Request
		body   []byte
	}
	reqs := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- seen{sesSigV4(t, r, body, sesSecret, "eu-west-1", "ses", at), r, body}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"MessageId":"0102018c1234abcd-11111111-2222-3333-4444-555555555555-000000"}`)
	}))
	t.Cleanup(srv.Close)
	base := "ses+http://" + sesKeyID + ":" + strings.ReplaceAll(sesSecret, "/", "%2F") + "@" + strings.TrimPrefix(srv.URL, "http://")
	plain := newProvider(t, base+"?region=eu-west-1&from=Acme+%3Cno-reply%40example.com%3E").(*SES)
	full := newProvider(t, base+"?region=eu-west-1&from=no-reply%40example.com&configuration_set=transactional&session_token=FQoGZXIvYXdzEXAMPLE").(*SES)
	plain.now = func() time.Time { return at }
	full.now = plain.now
	if plain.HonoursKeys() {
		t.Error("HonoursKeys() = true: SES takes no idempotency key")
	}
	html := testMessage("er1_html")
	html.Body, html.HTML = "", "<p>Paid.</p>"
	for _, c := range []struct {
		p      *SES
		m      *Message
		body   string
		signed []string
	}{
		{plain, testMessage("er1_plain"), `{"FromEmailAddress":"Acme <no-reply@example.com>","Destination":{"ToAddresses":["ada@example.com"]},
			"Content":{"Simple":{"Subject":{"Data":"Paid","Charset":"UTF-8"},"Body":{"Text":{"Data":"Thanks.","Charset":"UTF-8"}},
			"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}]}},"EmailTags":[{"Name":"edgerelay-key","Value":"er1_plain"}]}`,
			[]string{"content-type", "host", "x-amz-date"}},
		{full, html, `{"FromEmailAddress":"no-reply@example.com","Destination":{"ToAddresses":["ada@example.com"]},
			"Content":{"Simple":{"Subject":{"Data":"Paid","Charset":"UTF-8"},"Body":{"Text":{"Data":"Paid.","Charset":"UTF-8"},"Html":{"Data":"<p>Paid.</p>","Charset":"UTF-8"}},
			"Headers":[{"Name":"Auto-Submitted","Value":"auto-generated"}]}},"ConfigurationSetName":"transactional","EmailTags":[{"Name":"edgerelay-key","Value":"er1_html"}]}`,
			[]string{"content-type", "host", "x-amz-date", "x-amz-security-token"}},
	} {
		r := send(c.p, c.m)
		if r.Outcome != Sent || r.MessageID != "0102018c1234abcd-11111111-2222-3333-4444-555555555555-000000" {
			t.Fatalf("%s: %+v", c.m.Key, r)
		}
		q := <-reqs
		if q.r.Method != http.MethodPost || q.r.URL.Path != "/v2/email/outbound-emails" {
			t.Errorf("called %s %s", q.r.Method, q.r.URL.Path)
		}
		if !sameJSON(t, q.body, c.body) {
			t.Errorf("%s: body %s, want %s", c.m.Key, q.body, c.body)
		}
		for _, h := range c.signed {
			if !slices.Contains(q.signed, h) {
				t.Errorf("%s: signed headers %v lack %s", c.m.Key, q.signed, h)
			}
		}
		if tok := q.r.Header.Get("X-Amz-Security-Token"); (c.p == full) != (tok == "FQoGZXIvYXdzEXAMPLE") {
			t.Errorf("%s: X-Amz-Security-Token %q", c.m.Key, tok)
		}
		if strings.Contains(q.r.Header.Get("Authorization"), sesSecret) {
			t.Error("the secret went out")
		}
	}
}

func TestSESOutcomes(t *testing.T) {
	t.Parallel()
	errType := func(name string) map[string]string {
		return map[string]string{"X-Amzn-ErrorType": name + ":http://internal.amazon.com/coral/com.amazonaws.sesv2/"}
	}
	msg := func(s string) string { return `{"message":"` + s + `"}` }
	for _, c := range []struct {
		answer     scriptedAnswer
		outcome    Outcome
		permanent  bool
		overloaded bool
		detail     string
	}{
		{scriptedAnswer{400, msg("Email address is not verified. The following identities failed the check in region EU-WEST-1: no-reply@example.com"), errType("MessageRejected")},
			Refused, true, false, "400 Bad Request: MessageRejected: Email address is not verified."},
		{scriptedAnswer{400, msg("Sending paused for this account."), errType("SendingPausedException")}, Refused, true, false, "SendingPaused: Sending paused"},
		{scriptedAnswer{400, msg("Daily message quota exceeded."), errType("LimitExceededException")}, Refused, false, true, "LimitExceeded: Daily message quota exceeded."},
		{scriptedAnswer{403, msg("The request signature we calculated does not match the signature you provided."), errType("SignatureDoesNotMatch")},
			Refused, true, false, "(check the access key, the secret and the region)"},
		{scriptedAnswer{403, `{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}`, nil},
			Refused, true, false, "UnrecognizedClient: The security token"},
		{scriptedAnswer{404, msg("Configuration set <transactional> does not exist."), errType("NotFoundException")}, Refused, true, false, "404 Not Found: NotFound: Configuration set"},
		{scriptedAnswer{429, msg("Maximum sending rate exceeded."), errType("TooManyRequestsException")}, Refused, false, true, "TooManyRequests: Maximum sending rate exceeded."},
		{scriptedAnswer{500, msg("Internal failure."), errType("InternalFailure")}, Unknown, false, false, "500 Internal Server Error: InternalFailure"},
		{scriptedAnswer{503, "<html>down</html>", nil}, Refused, false, true, "503 Service Unavailable"},
	} {
		t.Run(c.detail, func(t *testing.T) {
			t.Parallel()
			srv, _ := scriptedAPI(t, c.answer)
			r := send(newProvider(t, "ses+http://"+sesKeyID+":s@"+strings.TrimPrefix(srv.URL, "http://")+"?region=us-east-1&from=a%40example.com&timeout=5s"), testMessage("k"))
			if r.Outcome != c.outcome || r.Permanent != c.permanent || r.Overloaded != c.overloaded || !strings.Contains(r.Detail, c.detail) || r.InvalidAddress {
				t.Errorf("got %s permanent=%v overloaded=%v invalid=%v detail %q", r.Outcome, r.Permanent, r.Overloaded, r.InvalidAddress, r.Detail)
			}
		})
	}
}

func TestSESURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, name, target, region string }{
		{"ses+https://AK:XXXXsecretXXXX@email.eu-west-1.amazonaws.com?from=a%40example.com", "ses://email.eu-west-1.amazonaws.com", "https://email.eu-west-1.amazonaws.com/v2/email/outbound-emails", "eu-west-1"},
		{"ses+https://AK:XXXXsecretXXXX@email.cn-north-1.amazonaws.com.cn?from=a%40example.com", "ses://email.cn-north-1.amazonaws.com.cn", "https://email.cn-north-1.amazonaws.com.cn/v2/email/outbound-emails", "cn-north-1"},
		{"ses+https://AK:XXXXsecretXXXX@vpce.example.internal?from=a%40example.com&region=us-gov-west-1", "ses://vpce.example.internal", "https://vpce.example.internal/v2/email/outbound-emails", "us-gov-west-1"},
	} {
		p := newProvider(t, c.url).(*SES)
		if p.Name() != c.name || p.url != c.target || p.region != c.region || p.basic || p.pass != "" {
			t.Errorf("%s: name %q, calls %q, region %q, basic auth %v", Redact(c.url), p.Name(), p.url, p.region, p.basic)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"ses+https://email.us-east-1.amazonaws.com?from=a%40example.com", "missing credentials"},
		{"ses+https://AK@email.us-east-1.amazonaws.com?from=a%40example.com", "missing credentials"},
		{"ses+https://AK:XXXXsecretXXXX@ses.example.com?from=a%40example.com", `missing parameter "region"`},
		{"ses+https://AK:XXXXsecretXXXX@email.us-east-1.amazonaws.com?from=a%40example.com&region=Europe", `parameter "region": "Europe" is not an AWS region`},
		{"ses+https://AK:XXXXsecretXXXX@email.us-east-1.amazonaws.com", `missing parameter "from"`},
		{"ses+https://AK:XXXXsecretXXXX@email.us-east-1.amazonaws.com?from=a%40example.com&configuration_set=a+b", `parameter "configuration_set"`},
		{"ses+https://AK:XXXXsecretXXXX@email.us-east-1.amazonaws.com/v2/email/outbound-emails?from=a%40example.com", "ses URLs take no path"},
		{"ses+https://AK:XXXXsecretXXXX@email.us-east-1.amazonaws.com?from=a%40example.com&token=XXXXsecretXXXX", `unknown parameter "token"`},
	} {
		_, err := New(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s) = %v, want %q", Redact(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("New(%s): the error quotes the secret: %v", Redact(c.url), err)
		}
	}
}

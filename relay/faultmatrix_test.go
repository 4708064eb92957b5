//go:build linux

package relay

import (
	"cmp"
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

// TestFaultMatrix is the fault matrix: every HTTP provider against every way
// a provider call ends, each case through a real relay (its own SQLite file,
// the provider built by providers.New, a loopback server playing the
// fault). For each case it checks the attempt's outcome and HTTP status, the
// notification's status after it, whether and when a retry is scheduled
// (Retry-After honoured, otherwise within the backoff of DefaultPolicy; and
// not claimed a millisecond before it is due), and, for every retry, that
// the second attempt carried the same identity headers as the first.
//
// The table below is the documentation: the shared classifier
// (providers/classify.go) gives most rows; each provider's extras are
// where its own error codes change the answer. With -v the matrix is
// printed as markdown, one line per case, each starting with "matrix|":
//
//	go test -v -run TestFaultMatrix ./relay | sed -n 's/.*matrix|/|/p'
//
// Retries are driven by a clock the test moves (Options.Now), so the
// default policy's real delays cost nothing.
//
// SMTP is not in the matrix: the in-process SMTP server lives in package
// providers' test files (providers/smtp_test.go), which this package cannot
// import.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	start := time.Now()
	fcm := newFMFCM(t)
	provs := fmProviders(fcm, newFMWebPush(t), newFMAPNs(t))
	template := fmTemplateDB(t)

	type job struct {
		p, f  int
		fault fmFault
	}
	var jobs []job
	rows := make([][]fmRow, len(provs))
	for pi, p := range provs {
		faults := append(slices.Clone(fmFaults), p.extras...)
		rows[pi] = make([]fmRow, len(faults))
		for fi, f := range faults {
			jobs = append(jobs, job{pi, fi, f})
			// What a case that stops early leaves in the table.
			rows[pi][fi] = fmRow{fault: f.name, outcome: "?", httpStatus: "?", status: "?", retry: "?", sameKey: "?"}
		}
	}
	// The cases with a large body take longest: start them first.
	big := func(j job) int {
		if j.fault.play == playResetDuringWrite {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(big(a), big(b)) })

	// The cases are independent (a relay, a database and a server each) and
	// spend their time waiting on fsync and sockets, so they run on more
	// goroutines than -parallel (GOMAXPROCS) would allow t.Parallel.
	const workers = 16
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range next {
				p, f := provs[j.p], j.fault
				t.Run(p.name+"/"+f.name, func(t *testing.T) {
					runFaultCase(t, template, p, f, &rows[j.p][j.f])
				})
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()

	t.Logf("matrix| provider | fault | outcome | http status | notification status | retry (when) | same key |")
	t.Logf("matrix|---|---|---|---|---|---|---|")
	for pi, p := range provs {
		for _, r := range rows[pi] {
			if !r.ran {
				continue // filtered out by -run
			}
			t.Logf("matrix| %s | %s | %s | %s | %s | %s | %s |", p.label(), r.fault, r.outcome, r.httpStatus, r.status, r.retry, r.sameKey)
		}
	}
	t.Logf("%d cases in %s", len(jobs), time.Since(start).Round(time.Millisecond))
}

// fmRetryKind is what the relay schedules after the first attempt.
type fmRetryKind int

const (
	noRetry      fmRetryKind = iota
	retryBackoff             // DefaultPolicy's first backoff: BaseDelay with equal jitter
	retryAfter30             // the answer's Retry-After: 30
)

// fmExpect is what one case must produce.
type fmExpect struct {
	outcome   providers.Outcome
	permanent bool
	invalid   bool   // the address is marked invalid for the channel
	status    string // the notification's status after the first attempt
	retry     fmRetryKind
}

var (
	xSent       = fmExpect{outcome: providers.Sent, status: model.StatusSent}
	xFailed     = fmExpect{outcome: providers.Refused, permanent: true, status: model.StatusFailed}
	xInvalid    = fmExpect{outcome: providers.Refused, permanent: true, invalid: true, status: model.StatusFailed}
	xRefused    = fmExpect{outcome: providers.Refused, status: model.StatusPending, retry: retryBackoff}
	xRefusedRA  = fmExpect{outcome: providers.Refused, status: model.StatusPending, retry: retryAfter30}
	xUnknown    = fmExpect{outcome: providers.Unknown, status: model.StatusPending, retry: retryBackoff}
	fmPolicy    = DefaultPolicy
	fmRetryWait = 30 * time.Second // the Retry-After the 429 case sends
)

// fmPlay is what the fault server does with the first request that reaches
// it; every later request gets the provider's success answer.
type fmPlay int

const (
	playStatus           fmPlay = iota // answer status with the provider's own error body (its success answer for 2xx)
	playBody                           // answer status with fault.body
	playRefuse                         // nothing listens on attempt 1: connection refused
	playResetDuringWrite               // read the headers, then RST while the body (too large to sit in the socket buffers) is still being written
	playResetAfterRead                 // read the whole request, then RST without a byte of answer
	playCloseAfterRead                 // read the whole request, then FIN without a byte of answer
	playSlow                           // read the whole request, answer nothing before the timeout
	playTruncated                      // the success status, a body cut short of its Content-Length
	playNotJSON                        // the success status with an HTML body
	playSlowBody                       // the success status and headers, then half the body and silence
)

type fmFault struct {
	name       string
	play       fmPlay
	status     int    // for playStatus and playBody
	retryAfter string // Retry-After on the answer
	body       string // for playBody
	want       fmExpect
	// wantFor, if set, gives the expectation per provider instead.
	wantFor func(*fmProvider) fmExpect
	detail  string // a substring of the attempt's detail, if set
	// mode and maxAttempts, if set, configure the relay (the event's
	// type and the retry policy) instead of the defaults.
	mode        Mode
	maxAttempts int
}

// fmFaults apply to every provider, with the same expectation: the shared
// classifier decides them.
var fmFaults = []fmFault{
	{name: "2xx", play: playStatus, want: xSent},
	{name: "400", play: playStatus, status: 400, want: xFailed},
	{name: "401", play: playStatus, status: 401, want: xFailed},
	{name: "404", play: playStatus, status: 404, want: xFailed},
	{name: "409", play: playStatus, status: 409, want: xRefused},
	{name: "410", play: playStatus, status: 410, want: xFailed},
	{name: "422", play: playStatus, status: 422, want: xFailed},
	{name: "429 Retry-After: 30", play: playStatus, status: 429, retryAfter: "30", want: xRefusedRA},
	{name: "429", play: playStatus, status: 429, want: xRefused},
	{name: "500", play: playStatus, status: 500, want: xUnknown},
	{name: "502", play: playStatus, status: 502, want: xUnknown},
	{name: "503", play: playStatus, status: 503, want: xRefused},
	{name: "504", play: playStatus, status: 504, want: xUnknown},
	{name: "connection refused", play: playRefuse, want: xRefused, detail: "connection refused"},
	{name: "reset before the request was written (mid-body)", play: playResetDuringWrite, want: xRefused, detail: "before the request was written"},
	{name: "reset after the request was written", play: playResetAfterRead, want: xUnknown, detail: "connection closed before the answer"},
	{name: "closed (FIN) after the request, no answer", play: playCloseAfterRead, want: xUnknown, detail: "connection closed before the answer"},
	{name: "slower than timeout=" + fmSlowTimeout, play: playSlow, want: xUnknown, detail: "timeout after the request was written"},
	{name: "2xx, body truncated", play: playTruncated, want: xSent},
	{name: "2xx, body not JSON", play: playNotJSON, want: xSent},
	{name: "2xx, body stalls past timeout=" + fmSlowTimeout, play: playSlowBody, want: xSent, detail: "body unreadable"},
	// The same classes under other delivery settings: what an unknown
	// means depends on the type's mode and on whether the provider
	// honours keys; a retry past the budget ends dead.
	{name: "500, type at-most-once", play: playStatus, status: 500, mode: AtMostOnce, wantFor: func(p *fmProvider) fmExpect {
		if p.honours {
			return xUnknown // the key makes the retry safe
		}
		return fmExpect{outcome: providers.Unknown, status: model.StatusUnknown}
	}},
	{name: "503 on the last attempt (max_attempts=1)", play: playStatus, status: 503, maxAttempts: 1,
		want: fmExpect{outcome: providers.Refused, status: model.StatusDead}},
}

// fmSlowTimeout is the route's timeout in the slow cases. The retry of a
// slow case must answer within it too, under -race on a busy machine (at
// a load of 8 on two cores, 1 s was not always enough).
const fmSlowTimeout = "3s"

// fmAnswer is a provider's success answer.
type fmAnswer struct {
	status int
	header map[string]string
	body   string
	// id is the message id the relay must record; idInHeader says it
	// comes from a header, so a broken body does not lose it.
	id         string
	idInHeader bool
}

type fmProvider struct {
	name      string
	note      string // what the provider column adds: keys honoured or not
	channel   string
	rcpt      Recipient
	honours   bool
	url       func(addr string) string // the provider URL for a loopback host:port
	idHeaders []string                 // what carries the notification's identity on every attempt
	ok        fmAnswer
	errBodies map[int]string // the API's own error body per status; others get a proxy's HTML page
	extras    []fmFault      // the provider's own error codes
	// okDetailBare: a 2xx detail is the status alone, whatever the body
	// (Slack's "ok" is no JSON and carries no id: nothing to note).
	okDetailBare bool
	// rcptFor, if set, is the recipient for a server at addr (whose
	// address names the server: a push subscription's endpoint), instead
	// of rcpt.
	rcptFor func(addr string) Recipient
	// overrides are shared faults whose expectation differs for this
	// provider, by fault name.
	overrides map[string]fmOverride
	// h2: the API is HTTP/2 over TLS (APNs), so the faults below HTTP are
	// played on the connection, not by hijacking it.
	h2 bool
}

// fmOverride is a provider's own expectation for a shared fault.
type fmOverride struct {
	want   fmExpect
	detail string
}

func (p *fmProvider) label() string { return p.name + " (" + p.note + ")" }

func (p *fmProvider) errBody(status int) string {
	if b, ok := p.errBodies[status]; ok {
		return b
	}
	return fmt.Sprintf("<html><body><h1>%d %s</h1></body></html>", status, http.StatusText(status))
}

func fmProviders(fcm *fmFCM, wp *fmWebPush, apns *fmAPNs) []*fmProvider {
	email := Recipient{ID: "ada", Email: "ada@example.com"}
	jsonErr := func(status int) string { return fmt.Sprintf(`{"error":%q}`, http.StatusText(status)) }
	generic := map[int]string{}
	for _, s := range []int{400, 401, 404, 409, 410, 422, 429, 500, 502, 503, 504} {
		generic[s] = jsonErr(s)
	}
	resendErr := func(status int, name, msg string) string {
		return fmt.Sprintf(`{"statusCode":%d,"name":%q,"message":%q}`, status, name, msg)
	}
	sendgridErr := func(msg string) string {
		return fmt.Sprintf(`{"errors":[{"message":%q,"field":null,"help":null}]}`, msg)
	}
	discordErr := func(code int, msg string) string {
		return fmt.Sprintf(`{"message":%q,"code":%d}`, msg, code)
	}
	telegramErr := func(code int, desc, params string) string {
		b := fmt.Sprintf(`{"ok":false,"error_code":%d,"description":%q`, code, desc)
		if params != "" {
			b += `,"parameters":` + params
		}
		return b + "}"
	}
	teamsErr := func(code, msg string) string {
		return fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, msg)
	}
	sesErr := func(name, msg string) string {
		return fmt.Sprintf(`{"__type":"com.amazonaws.sesv2#%s","message":%q}`, name, msg)
	}
	twilioErr := func(status, code int, msg string) string {
		return fmt.Sprintf(`{"code":%d,"message":%q,"more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, msg, code, status)
	}
	apnsErr := func(reason string) string { return fmt.Sprintf(`{"reason":%q}`, reason) }
	pushErr := func(status, errno int, msg string) string {
		return fmt.Sprintf(`{"code":%d,"errno":%d,"error":%q,"message":%q}`, status, errno, http.StatusText(status), msg)
	}
	fcmErr := func(status int, grpc, code, msg string) string {
		details := ""
		if code != "" {
			details = fmt.Sprintf(`,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":%q}]`, code)
		}
		return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"status":%q%s}}`, status, msg, grpc, details)
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("fault-matrix-secret-32-bytes-ok!"))
	// A webhook with a fixed URL serves a channel whose address travels in
	// the body; a recipient URL it would not call is refused at accept.
	opsTeam := Recipient{ID: "u1", Addresses: map[string]string{"ops": "ops-team"}}
	return []*fmProvider{
		{
			name: "webhook", note: "keys: as declared, here none", channel: "ops",
			rcpt:      opsTeam,
			url:       func(a string) string { return "webhook+http://" + a + "/hook" },
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"id":"wh_1"}`, id: "wh_1"},
			errBodies: generic,
		},
		{
			name: "webhook signed", note: "secret=whsec_…, idempotency=honoured", channel: "ops", honours: true,
			rcpt: opsTeam,
			url: func(a string) string {
				return "webhook+http://" + a + "/hook?idempotency=honoured&secret=" + url.QueryEscape(secret)
			},
			idHeaders: []string{"Idempotency-Key", "webhook-id"},
			ok:        fmAnswer{status: 200, body: `{"id":"wh_1"}`, id: "wh_1"},
			errBodies: generic,
		},
		{
			name: "email-http", note: "generic shape, keys: none", channel: "email", rcpt: email,
			url:       func(a string) string { return "email-http+http://" + a + "/v1/emails?from=relay%40example.com" },
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"id":"em_1"}`, id: "em_1"},
			errBodies: generic,
		},
		{
			name: "email-http preset=postmark", note: "keys: none", channel: "email", rcpt: email,
			url: func(a string) string {
				return "email-http+http://" + a + "?from=relay%40example.com&preset=postmark&token=pm-server-token"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok: fmAnswer{status: 200, id: "0a129aee-e1cd-480d-b08d-4f48548ff48d",
				body: `{"To":"ada@example.com","SubmittedAt":"2025-02-01T10:00:00Z","MessageID":"0a129aee-e1cd-480d-b08d-4f48548ff48d","ErrorCode":0,"Message":"OK"}`},
			// Postmark answers API errors with 422 and an ErrorCode; other
			// statuses come without one.
			errBodies: map[int]string{
				401: `{"ErrorCode":10,"Message":"Bad or missing API token"}`,
				422: `{"ErrorCode":300,"Message":"Invalid email request"}`,
				429: `{"ErrorCode":0,"Message":"Rate limit exceeded"}`,
				500: `{"ErrorCode":0,"Message":"Internal server error"}`,
			},
			extras: []fmFault{{
				name: "422 ErrorCode 406 (inactive recipient)", play: playBody, status: 422, want: xInvalid, detail: "ErrorCode 406",
				body: `{"ErrorCode":406,"Message":"You tried to send to recipient(s) that have been marked as inactive."}`,
			}},
		},
		{
			name: "email-http preset=resend", note: "keys honoured", channel: "email", rcpt: email, honours: true,
			url: func(a string) string {
				return "email-http+http://" + a + "?from=relay%40example.com&preset=resend&token=re_test"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}`, id: "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"},
			errBodies: map[int]string{
				400: resendErr(400, "validation_error", "Invalid `to` field."),
				401: resendErr(401, "missing_api_key", "Missing API key in the authorization header."),
				404: resendErr(404, "not_found", "The requested endpoint does not exist."),
				409: resendErr(409, "concurrent_idempotent_requests", "Same idempotency key used while original request is still in progress."),
				422: resendErr(422, "validation_error", "Invalid `from` field."),
				429: resendErr(429, "rate_limit_exceeded", "Too many requests."),
				500: resendErr(500, "application_error", "An unexpected error occurred."),
			},
			extras: []fmFault{{
				// The key was used with another payload: an earlier attempt
				// may have been sent and retrying cannot settle it, so the
				// notification ends unknown instead of spending its retries.
				name: "409 invalid_idempotent_request", play: playBody, status: 409,
				want: fmExpect{outcome: providers.Unknown, permanent: true, status: model.StatusUnknown}, detail: "invalid_idempotent_request",
				body: resendErr(409, "invalid_idempotent_request", "Same idempotency key used with a different request payload."),
			}},
		},
		{
			name: "email-http preset=sendgrid", note: "keys: none", channel: "email", rcpt: email,
			url: func(a string) string {
				return "email-http+http://" + a + "?from=relay%40example.com&preset=sendgrid&token=SG.test"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 202, header: map[string]string{"X-Message-Id": "sg_1"}, id: "sg_1", idInHeader: true},
			errBodies: map[int]string{
				400: sendgridErr("Bad Request"), 401: sendgridErr("The provided authorization grant is invalid, expired, or revoked"),
				404: sendgridErr("Not Found"), 409: sendgridErr("Conflict"), 410: sendgridErr("Gone"),
				422: sendgridErr("Unprocessable Entity"), 429: sendgridErr("too many requests"),
				500: sendgridErr("internal server error"), 503: sendgridErr("service unavailable"),
			},
			extras: []fmFault{{
				name: "400 recipient field (personalizations.0.to.0.email)", play: playBody, status: 400, want: xInvalid,
				detail: "personalizations.0.to.0.email",
				body:   `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email","help":null}]}`,
			}},
		},
		{
			name: "twilio", note: "keys: none", channel: "sms", rcpt: Recipient{ID: "ada", Phone: "+15550111"},
			url:       func(a string) string { return "twilio+http://AC0123456789:authtoken@" + a + "?from=%2B15550100" },
			idHeaders: []string{"Idempotency-Key", "I-Twilio-Idempotency-Token"},
			ok: fmAnswer{status: 201, id: "SM0123456789abcdef0123456789abcdef",
				body: `{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued"}`},
			errBodies: map[int]string{
				400: twilioErr(400, 21602, "Message body is required."),
				401: twilioErr(401, 20003, "Authenticate"),
				404: twilioErr(404, 20404, "The requested resource was not found"),
				429: twilioErr(429, 20429, "Too Many Requests"),
				500: twilioErr(500, 20500, "Internal Server Error"),
				503: twilioErr(503, 20503, "Service Unavailable"),
			},
			extras: []fmFault{
				{name: "400 code 21211 (invalid To)", play: playBody, status: 400, want: xInvalid, detail: "twilio 21211",
					body: twilioErr(400, 21211, "Invalid 'To' Phone Number")},
				{name: "400 code 21610 (recipient replied STOP)", play: playBody, status: 400, want: xFailed, detail: "twilio 21610",
					body: twilioErr(400, 21610, "Attempt to send to unsubscribed recipient")},
				{name: "400 code 20429", play: playBody, status: 400, want: xRefused, detail: "twilio 20429",
					body: twilioErr(400, 20429, "Too Many Requests")},
			},
		},
		{
			name: "fcm", note: "keys: none, idempotency=honoured refused", channel: "push", rcpt: Recipient{ID: "ada", DeviceToken: "fcm-device-token-1"},
			url: func(a string) string {
				return "fcm+http://" + a + "?project=demo-project&credentials=" + url.QueryEscape(fcm.credentials) + "&token_url=" + url.QueryEscape(fcm.tokenURL)
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"name":"projects/demo-project/messages/0:1500415314455276%31bd1c9631bd1c96"}`, id: "projects/demo-project/messages/0:1500415314455276%31bd1c9631bd1c96"},
			errBodies: map[int]string{
				400: fcmErr(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
				401: fcmErr(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."),
				404: fcmErr(404, "NOT_FOUND", "", "Requested entity was not found."), // a wrong project: no FcmError code
				409: fcmErr(409, "ABORTED", "", "The operation was aborted."),
				429: fcmErr(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
				500: fcmErr(500, "INTERNAL", "INTERNAL", "Internal error encountered."),
				503: fcmErr(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."),
			},
			extras: []fmFault{{
				name: "404 UNREGISTERED", play: playBody, status: 404, want: xInvalid, detail: "UNREGISTERED",
				body: fcmErr(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."),
			}},
		},
		{
			name: "slack", note: "keys: none", channel: "chat", rcpt: Recipient{ID: "ops", Addresses: map[string]string{"chat": "#ops"}},
			url:          func(a string) string { return "slack+http://" + a + "/services/T0001/B0002/XXXXsecretXXXX" },
			idHeaders:    []string{"Idempotency-Key"},
			ok:           fmAnswer{status: 200, header: map[string]string{"Content-Type": "text/html"}, body: "ok"},
			okDetailBare: true,
			errBodies: map[int]string{
				400: "invalid_payload", 401: "invalid_auth", 404: "no_service", 410: "channel_is_archived",
				429: "rate_limited", 500: "rollup_error",
			},
		},
		{
			name: "webpush", note: "keys: none, idempotency=honoured refused", channel: "webpush",
			rcptFor: func(a string) Recipient {
				return Recipient{ID: "ada", Addresses: map[string]string{"webpush": wp.subscription("http://" + a + "/wpush/v2/sub-1")}}
			},
			url: func(string) string {
				return "webpush+http://push?allow_private=true&subject=mailto:ops%40example.com&vapid_key=" + url.QueryEscape(wp.key)
			},
			idHeaders: []string{"Idempotency-Key"},
			// RFC 8030 §5: 201 Created, the message's URL in Location.
			ok: fmAnswer{status: 201, header: map[string]string{"Location": "https://push.example/m/gAAAAABe"},
				id: "https://push.example/m/gAAAAABe", idInHeader: true},
			// Mozilla's autopush answers errors this way.
			errBodies: map[int]string{
				400: pushErr(400, 110, "Invalid TTL header"), 401: pushErr(401, 109, "Invalid Authorization"),
				404: pushErr(404, 102, "Request did not validate No such subscription"),
				410: pushErr(410, 106, "Request did not validate No such subscription"),
				413: pushErr(413, 104, "Body is too large"), 429: pushErr(429, 999, "Too Many Requests"),
				500: pushErr(500, 999, "Internal Server Error"), 503: pushErr(503, 201, "Service Unavailable"),
			},
			overrides: map[string]fmOverride{
				// The endpoint is the subscription: its absence is the
				// subscription's end, so it is suppressed.
				"404": {want: xInvalid, detail: "expired or was unsubscribed"},
				"410": {want: xInvalid, detail: "expired or was unsubscribed"},
				// The case's body is far beyond what a push message holds: it is
				// refused for good before any request (the reset cannot happen).
				"reset before the request was written (mid-body)": {want: xFailed, detail: "more than the 3993 a push message holds"},
			},
			extras: []fmFault{
				// Windows' push service (WNS, Edge's) says 406 for its throttle limit.
				{name: "406 (WNS throttle limit)", play: playBody, status: 406, want: xRefused, detail: "throttle limit",
					body: `{"error":"Not Acceptable"}`},
			},
		},
		{
			name: "apns", note: "HTTP/2 over TLS, keys: none, idempotency=honoured refused", channel: "push", h2: true,
			rcpt: Recipient{ID: "ada", DeviceToken: "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"},
			url: func(a string) string {
				return "apns://" + a + "?key_id=ABC123DEFG&team_id=DEF123GHIJ&topic=com.example.app&key=" + url.QueryEscape(apns.key) +
					"&ca=" + url.QueryEscape(apns.ca)
			},
			idHeaders: []string{"Idempotency-Key"},
			// APNs answers 200 with an empty body and the apns-id.
			ok: fmAnswer{status: 200, header: map[string]string{"apns-id": "eabeae54-14a8-11e5-b60b-1697f925ec7b"},
				id: "eabeae54-14a8-11e5-b60b-1697f925ec7b", idInHeader: true},
			errBodies: map[int]string{
				400: apnsErr("BadExpirationDate"), 403: apnsErr("InvalidProviderToken"), 404: apnsErr("BadPath"),
				410: apnsErr("Unregistered"), 413: apnsErr("PayloadTooLarge"), 429: apnsErr("TooManyProviderTokenUpdates"),
				500: apnsErr("InternalServerError"), 503: apnsErr("ServiceUnavailable"),
			},
			overrides: map[string]fmOverride{
				"410": {want: xInvalid, detail: "Unregistered"},
				// The case's body is far beyond the 4 KB APNs takes: it is
				// refused for good before any request.
				"reset before the request was written (mid-body)": {want: xFailed, detail: "more than the 4096 APNs takes"},
			},
			extras: []fmFault{
				{name: "400 BadDeviceToken", play: playBody, status: 400, want: xInvalid, detail: "BadDeviceToken", body: apnsErr("BadDeviceToken")},
				{name: "410 ExpiredToken", play: playBody, status: 410, want: xInvalid, detail: "ExpiredToken", body: apnsErr("ExpiredToken")},
				{name: "400 IdleTimeout", play: playBody, status: 400, want: xRefused, detail: "IdleTimeout", body: apnsErr("IdleTimeout")},
				{name: "403 ExpiredProviderToken", play: playBody, status: 403, want: xRefused, detail: "ExpiredProviderToken", body: apnsErr("ExpiredProviderToken")},
				{name: "429 TooManyRequests (one device)", play: playBody, status: 429, want: xRefused, detail: "TooManyRequests", body: apnsErr("TooManyRequests")},
			},
		},
		{
			name: "discord", note: "keys: none", channel: "chat", rcpt: Recipient{ID: "ops", Addresses: map[string]string{"chat": "#ops"}},
			url: func(a string) string {
				return "discord+http://" + a + "/api/webhooks/123456789012345678/XXXXsecretXXXX"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"id":"1234567890123456789","type":0,"channel_id":"99"}`, id: "1234567890123456789"},
			errBodies: map[int]string{
				400: discordErr(50035, "Invalid Form Body"), 401: discordErr(50027, "Invalid Webhook Token"),
				404: discordErr(10015, "Unknown Webhook"), 500: discordErr(0, "500: Internal Server Error"),
				// A 429 without retry_after: the Retry-After rows decide.
				429: discordErr(0, "You are being rate limited."),
			},
			extras: []fmFault{{
				name: "429 retry_after: 30 in the body only", play: playBody, status: 429, want: xRefusedRA, detail: "rate limited",
				body: `{"message":"You are being rate limited.","retry_after":30,"global":false}`,
			}},
		},
		{
			name: "telegram", note: "keys: none", channel: "telegram", rcpt: Recipient{ID: "ada", Addresses: map[string]string{"telegram": "987654321"}},
			url:       func(a string) string { return "telegram+http://" + a + "?token=123456%3AAAXXXXsecretXXXX" },
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"ok":true,"result":{"message_id":42,"chat":{"id":987654321,"type":"private"},"date":1767225600}}`, id: "987654321/42"},
			errBodies: map[int]string{
				400: telegramErr(400, "Bad Request: message text is empty", ""), 401: telegramErr(401, "Unauthorized", ""),
				404: telegramErr(404, "Not Found", ""), 409: telegramErr(409, "Conflict: terminated by other getUpdates request", ""),
				500: telegramErr(500, "Internal Server Error", ""),
				// A 429 without parameters: the Retry-After rows decide.
				429: telegramErr(429, "Too Many Requests", ""),
			},
			extras: []fmFault{
				{name: "403 bot was blocked by the user", play: playBody, status: 403, want: xInvalid, detail: "bot was blocked by the user",
					body: telegramErr(403, "Forbidden: bot was blocked by the user", "")},
				{name: "400 chat not found", play: playBody, status: 400, want: xInvalid, detail: "chat not found",
					body: telegramErr(400, "Bad Request: chat not found", "")},
				{name: "400 migrate_to_chat_id (a group now a supergroup)", play: playBody, status: 400, want: xInvalid, detail: "the chat is now -1009876543210",
					body: telegramErr(400, "Bad Request: group chat was upgraded to a supergroup chat", `{"migrate_to_chat_id":-1009876543210}`)},
				{name: "403 bot can't send messages to bots", play: playBody, status: 403, want: xFailed, detail: "messages to bots",
					body: telegramErr(403, "Forbidden: bot can't send messages to bots", "")},
				{name: "429 parameters.retry_after: 30 in the body only", play: playBody, status: 429, want: xRefusedRA, detail: "retry after 30",
					body: telegramErr(429, "Too Many Requests: retry after 30", `{"retry_after":30}`)},
			},
		},
		{
			name: "teams", note: "workflow URL, keys: none", channel: "chat", rcpt: Recipient{ID: "ops", Addresses: map[string]string{"chat": "#ops"}},
			url: func(a string) string {
				return "teams+http://" + a + "/workflows/0123abcd/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=XXXXsecretXXXX"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 202},
			errBodies: map[int]string{
				400: teamsErr("InvalidRequestContent", "The request content is not valid."),
				401: teamsErr("DirectApiAuthorizationRequired", "The request must be authenticated only by Shared Access scheme."),
				404: teamsErr("WorkflowNotFound", "The workflow could not be found."),
				429: teamsErr("WorkflowRequestsThrottled", "Rate limit is exceeded."),
				500: teamsErr("InternalServerError", "Encountered internal server error."),
			},
			// An Office 365 connector says in a 200 that it did not post.
			extras: []fmFault{
				{name: "200 connector: delivery failed, HTTP error 429", play: playBody, status: 200, want: xRefused, detail: "HTTP error 429",
					body: "Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0,server=msgapi,cv=x"},
				{name: "200 connector: delivery failed, HTTP error 413", play: playBody, status: 200, want: xFailed, detail: "HTTP error 413",
					body: "Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 413 with ContextId tcid=0,server=msgapi,cv=x"},
			},
		},
		{
			name: "mailgun", note: "keys: none", channel: "email", rcpt: email,
			url: func(a string) string {
				return "mailgun+http://" + a + "?domain=mg.example.com&from=relay%40mg.example.com&token=key-test"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"id":"<20250201100000.1.5F3C2A@mg.example.com>","message":"Queued. Thank you."}`, id: "20250201100000.1.5F3C2A@mg.example.com"},
			errBodies: map[int]string{
				400: `{"message":"Need at least one of 'text' or 'html' parameters specified"}`,
				401: "Forbidden", 404: `{"message":"Domain not found: mg.example.com"}`,
				429: `{"message":"Too many requests"}`, 500: `{"message":"Internal Server Error"}`,
			},
			extras: []fmFault{{
				name: "400 'to' parameter is not a valid address", play: playBody, status: 400, want: xInvalid, detail: "not a valid address",
				body: `{"message":"'to' parameter is not a valid address. please check documentation"}`,
			}},
		},
		{
			name: "ses", note: "SigV4, keys: none", channel: "email", rcpt: email,
			url: func(a string) string {
				return "ses+http://AKIAEXAMPLE:secret@" + a + "?region=eu-west-1&from=relay%40example.com"
			},
			idHeaders: []string{"Idempotency-Key"},
			ok:        fmAnswer{status: 200, body: `{"MessageId":"0102018c1234abcd-0000-000000"}`, id: "0102018c1234abcd-0000-000000"},
			errBodies: map[int]string{
				400: sesErr("BadRequestException", "Missing required field Destination."),
				403: sesErr("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."),
				404: sesErr("NotFoundException", "Configuration set <transactional> does not exist."),
				429: sesErr("TooManyRequestsException", "Maximum sending rate exceeded."),
				500: sesErr("InternalFailure", "Internal failure."),
			},
			extras: []fmFault{
				{name: "400 MessageRejected", play: playBody, status: 400, want: xFailed, detail: "MessageRejected",
					body: sesErr("MessageRejected", "Email address is not verified.")},
				{name: "400 LimitExceeded (a sending quota)", play: playBody, status: 400, want: xRefused, detail: "LimitExceeded",
					body: sesErr("LimitExceededException", "Daily message quota exceeded.")},
			},
		},
	}
}

// fmRow is one line of the printed matrix.
type fmRow struct {
	ran                                                bool
	fault, outcome, httpStatus, status, retry, sameKey string
}

// fmRequest is one request as the fault server saw it.
type fmRequest struct {
	header http.Header
	body   [32]byte // SHA-256 of the body, when read whole
	whole  bool
}

// fmServer is the provider's API on loopback: the first request that
// reaches it gets the fault, every later one the success answer.
type fmServer struct {
	t *testing.T
	// conns are the server's connections by remote address, for the h2
	// plays that close one.
	conns   sync.Map
	p       *fmProvider
	f       fmFault
	release chan struct{} // closed at the end of the case: a slow answer gives up

	mu   sync.Mutex
	reqs []fmRequest
}

func (s *fmServer) requests() []fmRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *fmServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, fmRequest{header: r.Header.Clone()})
	s.mu.Unlock()
	if n > 0 || s.f.play == playRefuse {
		s.readBody(n, r)
		s.answer(w, s.p.ok.status, "", s.p.ok.header, s.p.ok.body)
		return
	}
	if s.p.h2 && s.playH2(w, r, n) {
		return
	}
	switch s.f.play {
	case playStatus:
		s.readBody(n, r)
		if s.f.status == 0 {
			s.answer(w, s.p.ok.status, "", s.p.ok.header, s.p.ok.body)
		} else {
			s.answer(w, s.f.status, s.f.retryAfter, nil, s.p.errBody(s.f.status))
		}
	case playBody:
		s.readBody(n, r)
		s.answer(w, s.f.status, s.f.retryAfter, nil, s.f.body)
	case playResetDuringWrite:
		// Only the headers are in: the body is far larger than the socket
		// buffers can hold, so the client is still writing it.
		c := s.hijack(w)
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	case playResetAfterRead:
		s.readBody(n, r)
		c := s.hijack(w)
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	case playCloseAfterRead:
		s.readBody(n, r)
		s.hijack(w).Close()
	case playSlow:
		s.readBody(n, r)
		select { // the client hangs up at its timeout
		case <-r.Context().Done():
		case <-s.release:
		}
	case playTruncated, playNotJSON:
		s.readBody(n, r)
		c := s.hijack(w)
		defer c.Close()
		body, ctype := s.p.ok.body, "application/json"
		var length int
		if s.f.play == playTruncated {
			body = body[:len(body)/2]
			if body == "" {
				body = "{"
			}
			length = len(body) + 64
		} else {
			body, ctype = "<html><body>Accepted</body></html>", "text/html"
			length = len(body)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n", s.p.ok.status, http.StatusText(s.p.ok.status), ctype, length)
		for k, v := range s.p.ok.header {
			if k != "Content-Type" {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		b.WriteString("\r\n" + body)
		io.WriteString(c, b.String())
	case playSlowBody:
		s.readBody(n, r)
		c := s.hijack(w)
		defer c.Close()
		body := s.p.ok.body
		if body == "" {
			body = "{}"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", s.p.ok.status, http.StatusText(s.p.ok.status), len(body))
		for k, v := range s.p.ok.header {
			if k != "Content-Type" {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		b.WriteString("\r\n" + body[:len(body)/2])
		io.WriteString(c, b.String())
		// Silence until the client gives up and closes (or the case ends).
		go func() { <-s.release; c.Close() }()
		io.Copy(io.Discard, c)
	default:
		s.t.Errorf("server: no script for %v", s.f.play)
	}
}

// playH2 plays the faults below HTTP on an HTTP/2 connection, which
// cannot be hijacked: it closes or resets the connection itself (as the
// server's ConnState recorded it), or writes the broken answer through the
// stream. It reports false for the faults ServeHTTP plays the same way on
// either protocol.
func (s *fmServer) playH2(w http.ResponseWriter, r *http.Request, n int) bool {
	conn := func() net.Conn {
		c, ok := s.conns.Load(r.RemoteAddr)
		if !ok {
			s.t.Fatalf("server: no connection recorded for %s", r.RemoteAddr)
		}
		return c.(net.Conn)
	}
	body := s.p.ok.body
	if body == "" {
		body = "{}"
	}
	switch s.f.play {
	case playResetAfterRead:
		s.readBody(n, r)
		c := conn()
		c.(*tls.Conn).NetConn().(*net.TCPConn).SetLinger(0)
		c.Close()
	case playCloseAfterRead:
		s.readBody(n, r)
		conn().Close()
	case playTruncated, playNotJSON:
		s.readBody(n, r)
		for k, v := range s.p.ok.header {
			w.Header().Set(k, v)
		}
		if s.f.play == playNotJSON {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(s.p.ok.status)
			io.WriteString(w, "<html><body>Accepted</body></html>")
			return true
		}
		// The stream ends short of its Content-Length: the client reads
		// an unexpected end.
		w.Header().Set("Content-Length", strconv.Itoa(len(body)+64))
		w.WriteHeader(s.p.ok.status)
		io.WriteString(w, body[:len(body)/2])
	case playSlowBody:
		s.readBody(n, r)
		for k, v := range s.p.ok.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(s.p.ok.status)
		io.WriteString(w, body[:len(body)/2])
		w.(http.Flusher).Flush()
		select { // silence until the client gives up (or the case ends)
		case <-r.Context().Done():
		case <-s.release:
		}
	default:
		return false
	}
	return true
}

func (s *fmServer) readBody(n int, r *http.Request) {
	h := sha256.New()
	if _, err := io.Copy(h, r.Body); err != nil {
		return
	}
	s.mu.Lock()
	h.Sum(s.reqs[n].body[:0])
	s.reqs[n].whole = true
	s.mu.Unlock()
}

func (s *fmServer) answer(w http.ResponseWriter, status int, retryAfter string, header map[string]string, body string) {
	ctype := "text/html"
	if strings.HasPrefix(body, "{") {
		ctype = "application/json"
	}
	w.Header().Set("Content-Type", ctype)
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (s *fmServer) hijack(w http.ResponseWriter) net.Conn {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		s.t.Fatalf("hijack: %v", err)
	}
	return c
}

// fmClock is the relay's clock: it moves only when the test moves it, so
// retry times are exact and no test waits for a backoff.
type fmClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fmClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fmClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// fmBig bounds the cases that send a large body, for memory.
var fmBig = make(chan struct{}, 3)

// runFaultCase plays one fault against one provider and fills in its row.
func runFaultCase(t *testing.T, template string, p *fmProvider, f fmFault, row *fmRow) {
	ctx := context.Background()
	row.ran = true
	want := f.want
	if f.wantFor != nil {
		want = f.wantFor(p)
	}
	if o, ok := p.overrides[f.name]; ok {
		want, f.detail = o.want, o.detail
	}
	srv := &fmServer{t: t, p: p, f: f, release: make(chan struct{})}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Listener.Close()
	var addr string
	var listenLater func() net.Listener
	switch f.play {
	case playRefuse:
		addr, listenLater = fmReservedPort(t)
	case playResetDuringWrite:
		hs.Listener = fmListen(t, true)
	default:
		hs.Listener = fmListen(t, false)
	}
	start := hs.Start
	if p.h2 {
		hs.EnableHTTP2 = true
		hs.Config.ConnState = func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				srv.conns.Store(c.RemoteAddr().String(), c)
			}
		}
		start = hs.StartTLS
	}
	if listenLater == nil {
		addr = hs.Listener.Addr().String()
		start()
	}
	// Cleanups run last-in first-out: release the slow handler, then close
	// the server (which waits for its handlers).
	t.Cleanup(func() {
		if hs.URL != "" {
			hs.Close()
		}
	})
	t.Cleanup(func() { close(srv.release) })

	timeout := "5s"
	if f.play == playSlow || f.play == playSlowBody {
		timeout = fmSlowTimeout
	}
	rawURL := p.url(addr)
	if strings.Contains(rawURL, "?") {
		rawURL += "&timeout=" + timeout
	} else {
		rawURL += "?timeout=" + timeout
	}
	prov, err := providers.New(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := prov.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	if prov.HonoursKeys() != p.honours {
		t.Errorf("HonoursKeys() = %v, want %v", prov.HonoursKeys(), p.honours)
	}

	clock := &fmClock{t: time.Now().UTC().Truncate(time.Second)}
	opts := Options{
		Routes: Routes{p.channel: {prov}},
		Retry:  fmPolicy,
		Now:    clock.Now,
		Poll:   20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if f.mode != "" {
		opts.Delivery = map[string]Mode{"notice": f.mode}
	}
	if f.maxAttempts > 0 {
		opts.Retry.MaxAttempts = f.maxAttempts
	}
	r, err := openAt(ctx, fmCopyDB(t, template), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})

	body := "Thanks for your payment."
	if f.play == playResetDuringWrite {
		fmBig <- struct{}{}
		defer func() { <-fmBig }()
		body = strings.Repeat("x", fmBigBody(t))
		t.Logf("a body of %d bytes", len(body))
	}
	rcpt := p.rcpt
	if p.rcptFor != nil {
		rcpt = p.rcptFor(addr)
	}
	acc := accept(t, r, Event{ID: "evt_fault", Type: "notice", Channels: []string{p.channel},
		Recipients: []Recipient{rcpt}, Subject: "Fault matrix", Body: body})
	id := acc.Notifications[0].ID
	// run delivers what is due at the clock's time and returns how many
	// calls it made.
	run := func() int {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		sum, err := r.RunUntilIdle(rctx, 0)
		if err != nil {
			t.Fatalf("RunUntilIdle: %v (summary %+v)", err, sum)
		}
		return sum.Attempts
	}

	// The first attempt.
	run()
	n := notification(t, r, id)
	if len(n.AttemptLog) != 1 {
		t.Fatalf("%d attempts after the first run, want 1: %+v", len(n.AttemptLog), n.AttemptLog)
	}
	a := n.AttemptLog[0]
	t.Logf("attempt 1: %s, http %d, id %q, detail %q; decision %q", a.Outcome, a.HTTPStatus, a.MessageID, a.Detail, a.Decision)
	*row = fmRow{ran: true, fault: f.name, outcome: a.Outcome, httpStatus: "—", status: n.Status, retry: "no", sameKey: "—"}
	if a.Permanent {
		row.outcome += " (permanent)"
	}
	if a.HTTPStatus != 0 {
		row.httpStatus = strconv.Itoa(a.HTTPStatus)
	}
	wantHTTP := f.status
	switch f.play {
	case playRefuse, playResetDuringWrite, playResetAfterRead, playCloseAfterRead, playSlow:
		wantHTTP = 0
	case playStatus:
		if f.status == 0 {
			wantHTTP = p.ok.status
		}
	case playTruncated, playNotJSON, playSlowBody:
		wantHTTP = p.ok.status
	}
	if a.Outcome != string(want.outcome) || a.Permanent != want.permanent || a.HTTPStatus != wantHTTP {
		t.Errorf("attempt 1: %s permanent=%v http %d (%s); want %s permanent=%v http %d",
			a.Outcome, a.Permanent, a.HTTPStatus, a.Detail, want.outcome, want.permanent, wantHTTP)
	}
	if p.okDetailBare && a.Outcome == string(providers.Sent) {
		if a.Detail != strconv.Itoa(p.ok.status)+" "+http.StatusText(p.ok.status) {
			t.Errorf("attempt 1 detail %q, want the status alone", a.Detail)
		}
	} else if f.detail != "" && !strings.Contains(a.Detail, f.detail) {
		t.Errorf("attempt 1 detail %q, want it to contain %q", a.Detail, f.detail)
	}
	if a.Outcome == string(providers.Sent) {
		wantID := p.ok.id
		if (f.play == playTruncated || f.play == playNotJSON || f.play == playSlowBody) && !p.ok.idInHeader {
			wantID = "" // the id was in the body that did not arrive whole
		}
		if a.MessageID != wantID {
			t.Errorf("attempt 1 message id %q, want %q", a.MessageID, wantID)
		}
		if a.MessageID != "" && strings.Contains(a.Detail, "no message id") {
			t.Errorf("attempt 1 recorded message id %q with the detail %q", a.MessageID, a.Detail)
		}
	}
	if n.Status != want.status {
		t.Errorf("notification %s (%s), want %s", n.Status, n.Reason, want.status)
	}
	marks, err := r.Suppressions(ctx, model.SuppressionFilter{Tenant: n.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	invalid, why := false, ""
	for _, m := range marks {
		if m.Channel == p.channel && m.Address == n.Address {
			invalid, why = true, m.Reason
		}
	}
	if invalid != want.invalid {
		t.Errorf("address marked invalid: %v (%q), want %v", invalid, why, want.invalid)
	}
	if invalid {
		row.status += " (address marked invalid)"
	}

	arrived := len(srv.requests()) // requests that reached the server on attempt 1
	if want.retry == noRetry {
		if n.NextAttemptAt != nil {
			t.Errorf("a retry is scheduled at %s, want none", n.NextAttemptAt)
		}
		// Nothing more happens, however long one waits.
		clock.Set(clock.Now().Add(24 * time.Hour))
		if calls := run(); calls != 0 || len(srv.requests()) != arrived {
			t.Errorf("a day later: %d more calls, the server saw %d requests; want nothing new", calls, len(srv.requests())-arrived)
		}
		return
	}

	// A retry is scheduled, and when.
	if n.NextAttemptAt == nil {
		t.Fatalf("no retry scheduled (status %s, reason %q)", n.Status, n.Reason)
	}
	next := *n.NextAttemptAt
	delay := next.Sub(a.EndedAt)
	switch want.retry {
	case retryAfter30:
		row.retry = "at Retry-After (30 s)"
		if delay != fmRetryWait {
			t.Errorf("next attempt %s after the first, want the Retry-After of %s", delay, fmRetryWait)
		}
	case retryBackoff:
		lo, hi := fmPolicy.BaseDelay/2, fmPolicy.BaseDelay
		row.retry = fmt.Sprintf("backoff (%s–%s)", lo, hi)
		if delay < lo || delay > hi {
			t.Errorf("next attempt %s after the first, want within the first backoff [%s, %s]", delay, lo, hi)
		}
	}
	// Not a millisecond before it is due.
	clock.Set(next.Add(-time.Millisecond))
	if calls := run(); calls != 0 || len(srv.requests()) != arrived {
		t.Errorf("1ms before the retry is due: %d calls, the server saw %d more requests; want none", calls, len(srv.requests())-arrived)
	}
	if listenLater != nil {
		// The provider is back where it refused connections.
		hs.Listener = listenLater()
		start()
	}
	clock.Set(next)
	run()
	n = notification(t, r, id)
	if len(n.AttemptLog) != 2 {
		t.Fatalf("%d attempts after the retry was due, want 2: %+v", len(n.AttemptLog), n.AttemptLog)
	}
	if a2 := n.AttemptLog[1]; a2.Outcome != string(providers.Sent) || a2.HTTPStatus != p.ok.status || a2.MessageID != p.ok.id || n.Status != model.StatusSent {
		t.Errorf("attempt 2: %s http %d id %q (%s), notification %s; want sent, %d, %q", a2.Outcome, a2.HTTPStatus, a2.MessageID, a2.Detail, n.Status, p.ok.status, p.ok.id)
	} else if !a2.StartedAt.Equal(next) {
		t.Errorf("attempt 2 started at %s, want when it was due, %s", a2.StartedAt, next)
	}

	// The retry carried the same identity as the first attempt.
	reqs := srv.requests()
	if len(reqs) != arrived+1 {
		t.Fatalf("the server saw %d requests, want %d", len(reqs), arrived+1)
	}
	retryReq := reqs[len(reqs)-1]
	for _, h := range p.idHeaders {
		if got := retryReq.header.Get(h); got != n.Key {
			t.Errorf("retry %s = %q, want the notification's key %q", h, got, n.Key)
		}
	}
	if arrived == 0 {
		row.sameKey = "n/a: attempt 1 never arrived; the retry has " + strings.Join(p.idHeaders, ", ") + " = the key"
		return
	}
	first := reqs[0]
	same := true
	for _, h := range p.idHeaders {
		if a, b := first.header.Get(h), retryReq.header.Get(h); a != b || a == "" {
			same = false
			t.Errorf("%s: attempt 1 %q, retry %q; want the same key", h, a, b)
		}
	}
	if first.whole && retryReq.whole && first.body != retryReq.body {
		t.Errorf("the retry's body differs from the first attempt's")
	}
	if same {
		row.sameKey = "yes (" + strings.Join(p.idHeaders, ", ") + ")"
	} else {
		row.sameKey = "NO"
	}
}

// fmTemplateDB creates and migrates one database for the cases to copy:
// migrating a fresh file is most of what opening a relay costs (under
// -race, seconds across the matrix), and every case starts from the
// same empty, current schema anyway.
func fmTemplateDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// fmCopyDB copies the template database into the case's own directory.
func fmCopyDB(t *testing.T, template string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(template + suffix)
		if suffix != "" && os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// fmListen listens on a loopback port. narrow gives every accepted
// connection a tiny receive buffer and segment size: a client writing to
// it while nothing reads can hand its kernel only so much (its send
// buffer grows with the segments and window the peer allows) before its
// write blocks. On loopback that is about 90 KB, against some 3.6 MB
// with the defaults.
func fmListen(t *testing.T, narrow bool) net.Listener {
	t.Helper()
	ln, err := fmListenConfig(narrow).Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func fmListenConfig(narrow bool) *net.ListenConfig {
	lc := &net.ListenConfig{}
	if narrow {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = errors.Join(
					syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10),
					syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 536))
			})
			return errors.Join(err, serr)
		}
	}
	return lc
}

// fmReservedPort binds a loopback port without listening on it: a connect
// is refused, and no other test can take the port. listen starts
// listening on it.
func fmReservedPort(t *testing.T) (addr string, listen func() net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	listened := false
	t.Cleanup(func() {
		if !listened {
			syscall.Close(fd)
		}
	})
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	return addr, func() net.Listener {
		t.Helper()
		listened = true
		if err := syscall.Listen(fd, 128); err != nil {
			syscall.Close(fd)
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "reserved port")
		defer f.Close() // FileListener holds its own copy
		ln, err := net.FileListener(f)
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
}

// fmBigBody is a message body the client cannot finish writing to a
// narrow listener (fmListen) that does not read: four times what a probe
// connection to one took in before its write blocked, and at least 256 KB.
// It is at most the largest TCP send buffer (tcp_wmem) plus 1 MB, which
// no connection can exceed, whatever the probe says. A body too small
// would show: the reset case would come out unknown, not refused.
func fmBigBody(t *testing.T) int {
	n, err := fmBigBodyOnce()
	if err != nil {
		t.Logf("probing the send buffer: %v; the body is the most a send buffer holds (%d bytes)", err, n)
	}
	return n
}

var fmBigBodyOnce = sync.OnceValues(func() (int, error) {
	most := 8 << 20
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.Atoi(f[2]); err == nil {
				most = v + 1<<20
			}
		}
	}
	ln, err := fmListenConfig(true).Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		return most, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	// Dialled as the providers dial.
	c, err := (&net.Dialer{KeepAlive: 30 * time.Second}).Dial("tcp4", ln.Addr().String())
	if err != nil {
		return most, err
	}
	defer c.Close()
	total, buf := 0, make([]byte, 4096)
	for total < most {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(buf)
		total += n
		if err != nil {
			break
		}
	}
	if s, ok := <-accepted; ok {
		s.Close()
	}
	return min(most, max(256<<10, 4*total)), nil
})

// fmFCM is what an FCM provider needs besides its API: a service account
// file and an OAuth token endpoint (which, unlike the API, never fails).
type fmFCM struct {
	credentials string
	tokenURL    string
}

var fmFCMKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

func newFMFCM(t *testing.T) *fmFCM {
	t.Helper()
	key, err := fmFCMKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.Form.Get("assertion") == "" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"invalid_request"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"ya29.fault-matrix","expires_in":3600,"token_type":"Bearer"}`)
	}))
	t.Cleanup(tokens.Close)
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "demo-project", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "relay@demo-project.iam.gserviceaccount.com", "token_uri": tokens.URL + "/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "service-account.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &fmFCM{credentials: path, tokenURL: tokens.URL + "/token"}
}

// fmWebPush is what a webpush provider needs besides its push service: a
// VAPID key file and a browser's subscription keys.
type fmWebPush struct {
	key          string // the VAPID key file
	p256dh, auth string
}

func newFMWebPush(t *testing.T) *fmWebPush {
	t.Helper()
	priv, _, err := providers.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vapid.pem")
	if err := os.WriteFile(path, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	return &fmWebPush{key: path, p256dh: enc.EncodeToString(ua.PublicKey().Bytes()), auth: enc.EncodeToString([]byte("fault-matrix-16b"))}
}

// subscription is the subscription JSON of a browser whose push service
// is at endpoint.
func (w *fmWebPush) subscription(endpoint string) string {
	b, _ := json.Marshal(map[string]any{"endpoint": endpoint, "keys": map[string]string{"p256dh": w.p256dh, "auth": w.auth}})
	return string(b)
}

// fmAPNs is what an apns provider needs besides its API: a .p8 key and the
// CA of the TLS stand-in (every httptest TLS server has the same
// certificate).
type fmAPNs struct {
	key, ca string
}

func newFMAPNs(t *testing.T) *fmAPNs {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := &fmAPNs{key: filepath.Join(dir, "AuthKey_ABC123DEFG.p8"), ca: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(a.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := httptest.NewTLSServer(http.NotFoundHandler())
	cert := probe.Certificate()
	probe.Close()
	if err := os.WriteFile(a.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

package providers

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzReceiptParser builds the provider rawURL describes as a ReceiptParser.
func fuzzReceiptParser(f *testing.F, rawURL string) ReceiptParser {
	f.Helper()
	p, err := New(rawURL)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.(io.Closer).Close() })
	rp, ok := p.(ReceiptParser)
	if !ok {
		f.Fatalf("%T takes no receipts", p)
	}
	return rp
}

// checkReceipts fails unless each receipt names a message and has one of
// the known statuses.
func checkReceipts(t *testing.T, rs []Receipt) {
	t.Helper()
	for i, rc := range rs {
		switch rc.Status {
		case ReceiptDelivered, ReceiptBounced, ReceiptComplained, ReceiptFailed, ReceiptSent:
		default:
			t.Fatalf("receipt %d: unknown status %q", i, rc.Status)
		}
		if rc.MessageID == "" {
			t.Fatalf("receipt %d: no message id: %+v", i, rc)
		}
	}
}

// fuzzTwilioSign is Twilio's signature, written out again from Twilio's
// documentation rather than taken from twilio.go: base64(HMAC-SHA1(token,
// URL then each parameter's name and value, by name)).
func fuzzTwilioSign(token, rawURL string, form url.Values) string {
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(rawURL))
	for _, k := range slices.Sorted(maps.Keys(form)) {
		for _, v := range slices.Sorted(slices.Values(form[k])) {
			mac.Write([]byte(k + v))
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// FuzzTwilioReceipts posts an arbitrary form body as a Twilio status
// callback, signed with the auth token or not. Unsigned (no signature, or
// one made with another token): never a receipt; with no signature, always
// ErrBadSignature. Signed: never ErrBadSignature, and either one receipt
// with a message id and a known status, or another error.
// Seeds are in testdata/fuzz/FuzzTwilioReceipts.
func FuzzTwilioReceipts(f *testing.F) {
	f.Add("MessageSid=SM001&MessageStatus=delivered&AccountSid=AC1", uint8(1))
	p := fuzzReceiptParser(f, "twilio+http://AC1:tok@127.0.0.1:1?from=%2B15550100&name=t")
	const cb = "https://relay.example.com/v1/receipts/t?route=sms"

	f.Fuzz(func(t *testing.T, body string, mode uint8) {
		r, err := http.NewRequest(http.MethodPost, cb, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// What Twilio signs is what it sent; a body that is not a valid
		// form is signed as far as it parses (and must then be refused).
		form, formErr := url.ParseQuery(body)
		signed := mode%2 == 1
		switch {
		case signed:
			r.Header.Set("X-Twilio-Signature", fuzzTwilioSign("tok", cb, form))
		case mode%4 == 2:
			r.Header.Set("X-Twilio-Signature", fuzzTwilioSign("another-token", cb, form))
		}
		rs, err := p.ParseReceipts(r, []byte(body), cb)
		t.Logf("signed %v: %+v, %v", mode%2 == 1, rs, err)

		if !signed {
			if err == nil {
				t.Fatalf("unsigned callback accepted: %+v", rs)
			}
			if (r.Header.Get("X-Twilio-Signature") == "" || formErr == nil) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("unsigned callback: %v, want ErrBadSignature", err)
			}
			return
		}
		if err != nil {
			if errors.Is(err, ErrBadSignature) {
				t.Fatalf("correctly signed callback refused: %v", err)
			}
			if formErr == nil && (form.Get("MessageSid") != "" || form.Get("SmsSid") != "") &&
				(form.Get("MessageStatus") != "" || form.Get("SmsStatus") != "") {
				t.Fatalf("signed callback with a sid and a status refused: %v", err)
			}
			return
		}
		if formErr != nil {
			t.Fatalf("body that is not a form (%v) gave receipts %+v", formErr, rs)
		}
		if len(rs) != 1 {
			t.Fatalf("%d receipts from one callback, want 1", len(rs))
		}
		checkReceipts(t, rs)
		if sid := rs[0].MessageID; sid != form.Get("MessageSid") && sid != form.Get("SmsSid") {
			t.Fatalf("message id %q is neither MessageSid nor SmsSid of %v", sid, form)
		}
	})
}

// FuzzWebhookReceipts posts an arbitrary body as webhook receipts under a
// webhook-id, signed per Standard Webhooks with the provider's secret or
// not. Unsigned: ErrBadSignature. Signed (when the id can be signed): never
// ErrBadSignature, and either receipts each with a message id and a known
// status, or another error. Seeds are in testdata/fuzz/FuzzWebhookReceipts.
func FuzzWebhookReceipts(f *testing.F) {
	f.Add([]byte(`{"id": "rcpt_1", "message_id": "wh_1", "status": "delivered"}`), "msg_1", true)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the specification's test vector
	p := fuzzReceiptParser(f, "webhook+http://127.0.0.1:1/hook?secret="+url.QueryEscape(secret))

	f.Fuzz(func(t *testing.T, body []byte, id string, sign bool) {
		r, err := http.NewRequest(http.MethodPost, "https://relay.example.com/v1/receipts/hook", nil)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("webhook-id", id)
		r.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		signed := false
		if sign {
			sig, err := SignStandardWebhook(secret, id, now, body)
			if err == nil {
				r.Header.Set("webhook-signature", sig)
				signed = true
			} else if id != "" && !strings.Contains(id, ".") {
				t.Fatalf("SignStandardWebhook(%q): %v", id, err)
			}
		}
		rs, err := p.ParseReceipts(r, body, "")
		t.Logf("signed %v: %+v, %v", signed, rs, err)

		if !signed {
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("unsigned receipts: %+v, %v; want ErrBadSignature", rs, err)
			}
			return
		}
		if err != nil {
			if errors.Is(err, ErrBadSignature) {
				t.Fatalf("correctly signed receipts refused: %v", err)
			}
			return
		}
		if len(rs) == 0 && !strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "[") {
			t.Fatalf("no receipt from a single object %q", body)
		}
		checkReceipts(t, rs)
	})
}

// FuzzMailgunReceipts posts an arbitrary event-data as a Mailgun webhook,
// signed with the webhook signing key or with another. Signed with
// another: ErrBadSignature. Signed: never ErrBadSignature, and either one
// receipt that names a message (its message-id or its key) with a known
// status, or another error.
func FuzzMailgunReceipts(f *testing.F) {
	f.Add([]byte(`{"id":"ev1","event":"delivered","message":{"headers":{"message-id":"m1@mg.example.com"}}}`), true)
	f.Add([]byte(`{"id":"ev2","event":"failed","severity":"permanent","reason":"bounce","user-variables":{"edgerelay-key":"er1_k"}}`), true)
	f.Add([]byte(`{"event":"failed","user-variables":{"edgerelay-key":7}}`), false)
	p := fuzzReceiptParser(f, "mailgun+http://127.0.0.1:1?domain=mg.example.com&from=a%40mg.example.com&token=k&webhook_signing_key=signing-key")

	f.Fuzz(func(t *testing.T, eventData []byte, sign bool) {
		key := "another-key"
		if sign {
			key = "signing-key"
		}
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write([]byte(ts + "fuzz-token"))
		body := fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":"fuzz-token","signature":%q},"event-data":%s}`,
			ts, hex.EncodeToString(mac.Sum(nil)), eventData)
		rs, err := p.ParseReceipts(httptest.NewRequest(http.MethodPost, "/v1/receipts/mailgun", nil), body, "")
		t.Logf("signed %v: %+v, %v", sign, rs, err)
		switch {
		case !sign:
			// A body that is not JSON at all is refused before its
			// signature is read.
			if err == nil || json.Valid(body) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("signed with another key: %+v, %v; want ErrBadSignature", rs, err)
			}
		case errors.Is(err, ErrBadSignature):
			t.Fatalf("correctly signed event refused: %v", err)
		case err == nil:
			if len(rs) != 1 || rs[0].MessageID == "" && rs[0].Key == "" {
				t.Fatalf("receipts %+v: want one that names a message", rs)
			}
			switch rs[0].Status {
			case ReceiptDelivered, ReceiptBounced, ReceiptComplained, ReceiptFailed, ReceiptSent:
			default:
				t.Fatalf("unknown status %q", rs[0].Status)
			}
		}
	})
}

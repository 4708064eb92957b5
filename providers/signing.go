package providers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (standardwebhooks.com, spec 1.0.0), symmetric scheme:
// webhook-signature is "v1," + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")),
// where key is the base64 text after a secret's "whsec_" prefix.

// StandardWebhookTolerance is how far a webhook-timestamp may be from the
// verifier's clock, either way: the window the specification's reference
// libraries enforce, and the one ParseReceipts uses.
const StandardWebhookTolerance = 5 * time.Minute

const (
	whsecPrefix = "whsec_"
	// The specification asks for at least 24 random bytes and at most 512
	// bits. A shorter key is refused rather than used: the relay would be
	// signing with a secret that a guesser can reach.
	minSecretBytes = 24
	maxSecretBytes = 64
)

// decodeSecret turns "whsec_<base64>" into the HMAC key. Its errors never
// quote the secret.
func decodeSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, whsecPrefix)
	if !ok {
		return nil, errors.New("not a Standard Webhooks secret (expected whsec_ followed by base64)")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		hint := ""
		if strings.ContainsRune(b64, ' ') {
			// A + left unescaped in a URL query reads as a space.
			hint = " (write + as %2B in a URL)"
		}
		return nil, errors.New("the part after whsec_ is not valid base64" + hint)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("decodes to %d bytes; Standard Webhooks secrets are %d to %d bytes", len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

// checkWebhookID refuses ids the signed content cannot carry unambiguously:
// the specification forbids "." in them, since "{id}.{timestamp}.{body}"
// could otherwise be split in more than one way.
func checkWebhookID(id string) error {
	switch {
	case id == "":
		return errors.New("empty webhook-id")
	case strings.Contains(id, "."):
		return errors.New("webhook-id contains '.', which Standard Webhooks forbids")
	}
	return nil
}

func signature(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// SignStandardWebhook returns the webhook-signature value ("v1,<base64>")
// for body sent with webhook-id id at ts (whole Unix seconds), under
// secret ("whsec_<base64>").
func SignStandardWebhook(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	if err := checkWebhookID(id); err != nil {
		return "", err
	}
	return signature(key, id, strconv.FormatInt(ts.Unix(), 10), body), nil
}

// VerifyStandardWebhook checks that h (webhook-id, webhook-timestamp,
// webhook-signature) signs body under secret, and that the timestamp lies
// within tolerance of now, either way (StandardWebhookTolerance when
// tolerance is not positive). Any one of several space-separated v1
// signatures may match; other versions (v1a …) are skipped. Failures wrap
// ErrBadSignature; an invalid secret is a configuration error and does
// not.
func VerifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	return verifyStandardWebhook(key, h, body, now, tolerance)
}

func verifyStandardWebhook(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = StandardWebhookTolerance
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	for _, m := range []struct{ name, v string }{{"webhook-id", id}, {"webhook-timestamp", ts}, {"webhook-signature", sigs}} {
		if m.v == "" {
			return fmt.Errorf("%w: no %s header", ErrBadSignature, m.name)
		}
	}
	if err := checkWebhookID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	// Digits only: the signed text is the header as sent, so "+1614265330"
	// must not pass for the number it parses to.
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strings.Trim(ts, "0123456789") != "" {
		return fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrBadSignature, ts)
	}
	at := time.Unix(secs, 0)
	switch d := now.Sub(at); {
	case d > tolerance:
		return fmt.Errorf("%w: webhook-timestamp is %s old (tolerance %s)", ErrBadSignature, d.Truncate(time.Second), tolerance)
	case -d > tolerance:
		return fmt.Errorf("%w: webhook-timestamp is %s in the future (tolerance %s)", ErrBadSignature, (-d).Truncate(time.Second), tolerance)
	}
	want := []byte(signature(key, id, ts, body))
	for _, sig := range strings.Fields(sigs) {
		if strings.HasPrefix(sig, "v1,") && hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature in webhook-signature matches", ErrBadSignature)
}

// sign sets the Standard Webhooks secret (the URL's secret parameter):
// every request is then signed, and receipts must be.
func (w *Webhook) sign(secret string) string {
	key, err := decodeSecret(secret)
	if err != nil {
		return `parameter "secret": ` + err.Error()
	}
	w.key = key
	return ""
}

// postSigned sends body to target (the URL when "") with the Standard
// Webhooks headers: webhook-id is the idempotency key (the same on every
// attempt, as the specification wants), webhook-timestamp this attempt's
// time.
func (w *Webhook) postSigned(ctx context.Context, target, key string, body []byte) Result {
	if err := checkWebhookID(key); err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "idempotency key cannot be a webhook-id"}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h := http.Header{}
	h.Set("webhook-id", key)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", signature(w.key, key, ts, body))
	r, _ := w.postWith(ctx, postSpec{target: target, key: key, body: body, header: h, idKeys: []string{"id"}})
	return r
}

var _ ReceiptParser = (*Webhook)(nil)

// webhookReceipt is one status report POSTed back to edgerelay by the
// webhook's receiver.
type webhookReceipt struct {
	ID        string `json:"id"`
	MessageID string `json:"message_id"`
	WebhookID string `json:"webhook_id"`
	Status    string `json:"status"`
	At        string `json:"at"`
	Detail    string `json:"detail"`
	Bounce    string `json:"bounce"`
}

// ParseReceipts reads status reports for messages this webhook sent: one
// JSON object or an array of them,
//
//	{"id": "rcpt_…", "message_id": "…", "status": "delivered", "at": "2025-01-02T15:04:05Z", "detail": "…"}
//
// where message_id is the id the receiver answered the send with, status
// one of delivered, bounced, complained, failed or sent, and id, at and
// detail are optional. webhook_id, the webhook-id header the message came
// with (its key), names the message exactly and may stand for message_id:
// ids that many receivers mint (to=recipient) can collide, and a receipt
// naming a message id that more than one notification has applies to
// none. bounce, also optional, says what a bounce means for
// the address: "hard" (the default for bounced), "soft" (suppressed for a
// while) or "none". The request must carry a Standard Webhooks
// signature under the URL's secret, at most StandardWebhookTolerance
// old. Without a secret every receipt is refused: anyone who can reach
// edgerelay could forge one.
func (w *Webhook) ParseReceipts(r *http.Request, body []byte, _ string) ([]Receipt, error) {
	if w.key == nil {
		return nil, fmt.Errorf("%w: %s takes no receipts without a secret (add secret=whsec_… to its URL and sign receipts with it), since unsigned ones could come from anyone", ErrBadSignature, w.Name())
	}
	if err := verifyStandardWebhook(w.key, r.Header, body, time.Now(), StandardWebhookTolerance); err != nil {
		return nil, err
	}
	var raw []webhookReceipt
	switch trimmed := strings.TrimLeft(string(body), " \t\r\n"); {
	case strings.HasPrefix(trimmed, "["):
		if err := json.Unmarshal(body, &raw); err != nil {
			return nil, fmt.Errorf("receipts: %w", err)
		}
	case strings.HasPrefix(trimmed, "{"):
		var one webhookReceipt
		if err := json.Unmarshal(body, &one); err != nil {
			return nil, fmt.Errorf("receipt: %w", err)
		}
		raw = []webhookReceipt{one}
	default:
		return nil, errors.New("receipts: expected a JSON object or array")
	}
	out := make([]Receipt, 0, len(raw))
	for i, wr := range raw {
		rc, err := wr.receipt()
		if err != nil {
			if len(raw) > 1 {
				return nil, fmt.Errorf("receipt %d: %w", i, err)
			}
			return nil, fmt.Errorf("receipt: %w", err)
		}
		out = append(out, rc)
	}
	return out, nil
}

func (wr webhookReceipt) receipt() (Receipt, error) {
	rc := Receipt{ID: wr.ID, MessageID: wr.MessageID, Key: wr.WebhookID, Status: ReceiptStatus(wr.Status), Detail: wr.Detail}
	if rc.MessageID == "" && rc.Key == "" {
		return Receipt{}, errors.New(`missing "message_id" (or "webhook_id")`)
	}
	switch rc.Status {
	case ReceiptDelivered, ReceiptBounced, ReceiptComplained, ReceiptFailed, ReceiptSent:
	default:
		return Receipt{}, fmt.Errorf(`"status": %q is not one of delivered, bounced, complained, failed, sent`, wr.Status)
	}
	switch wr.Bounce {
	case "":
	case "hard":
		rc.Bounce = BounceHard
	case "soft":
		rc.Bounce = BounceSoft
	case "none":
		rc.Bounce = BounceNone
	default:
		return Receipt{}, fmt.Errorf(`"bounce": %q is not one of hard, soft, none`, wr.Bounce)
	}
	if wr.At != "" {
		t, err := time.Parse(time.RFC3339, wr.At)
		if err != nil {
			return Receipt{}, fmt.Errorf(`"at": %q is not an RFC 3339 time`, wr.At)
		}
		rc.At = t
	}
	return rc, nil
}

package providers

import (
	"context"
	"encoding/json"
	"net/url"
)

var _ Provider = (*Webhook)(nil)

var webhookKind = &Kind{
	Name: "webhook", Schemes: httpSchemes("webhook"),
	URLs:    []string{"webhook+https://host/path[?secret=whsec_…]"},
	Summary: "POST the notification as JSON with `Idempotency-Key`",
	Params: httpParams(Param{"secret", "a `whsec_…` secret that signs each request per " +
		"[Standard Webhooks](https://www.standardwebhooks.com) (`webhook-id` = the key, so a receiver using any " +
		"Standard Webhooks library verifies it and dedupes on `webhook-id`); receipts must be signed with it too"}),
	Keys:    "as declared (`idempotency=`)",
	Example: "webhook+https://hooks.example.com/notify?secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	build:   newWebhookURL,
}

// Webhook POSTs each message as JSON to one URL (webhook+http://,
// webhook+https://). Build it with New. With secret=whsec_… every request
// is signed the Standard Webhooks way, and the receiver may post receipts
// back signed with the same secret (signing.go).
type Webhook struct {
	*httpEndpoint
	key []byte // the decoded secret; nil when the URL sets none
}

type webhookRecipient struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

type webhookBody struct {
	Key            string           `json:"key"`
	NotificationID int64            `json:"notification_id"`
	Tenant         string           `json:"tenant"`
	EventID        string           `json:"event_id"`
	Type           string           `json:"type"`
	Purpose        string           `json:"purpose"`
	Channel        string           `json:"channel"`
	Recipient      webhookRecipient `json:"recipient"`
	Subject        string           `json:"subject"`
	Body           string           `json:"body"`
	// Data is null when the message has none, so receivers see one shape.
	Data json.RawMessage `json:"data"`
}

func (w *Webhook) Send(ctx context.Context, m *Message) Result {
	body, err := json.Marshal(webhookBody{
		Key: m.Key, NotificationID: m.NotificationID, Tenant: m.Tenant, EventID: m.EventID,
		Type: m.Type, Purpose: m.Purpose, Channel: m.Channel,
		Recipient: webhookRecipient{ID: m.RecipientID, Address: m.Address},
		Subject:   m.Subject, Body: m.Body, Data: m.Data,
	})
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	if w.key != nil {
		return w.postSigned(ctx, m.Key, body)
	}
	return w.post(ctx, m.Key, body, "id")
}

func newWebhookURL(u *url.URL, q url.Values) (Provider, string) {
	e, problem := parseEndpoint(u, q, "webhook")
	if problem != "" {
		return nil, problem
	}
	w := &Webhook{httpEndpoint: e}
	if q.Has("secret") {
		if problem := w.sign(q.Get("secret")); problem != "" {
			return nil, problem
		}
	}
	return w, ""
}

package providers

import (
	"context"
	"encoding/json"
	"time"
)

// Outcome is how a provider call ended. There are three, never two: a call
// that timed out or lost its answer may have been sent, and treating it as
// failed is how duplicates are born.
type Outcome string

const (
	// Sent: the provider accepted the message (2xx).
	Sent Outcome = "sent"
	// Refused: the provider definitely did not send it (it said no, or never
	// got the request). With Result.Permanent, retrying cannot help.
	Refused Outcome = "refused"
	// Unknown: the request may have been acted on, but no answer says so
	// (timeout or connection lost after the request was written, 500/502/504).
	Unknown Outcome = "unknown"
)

// Message is one notification as a provider sees it: one recipient, one
// channel, one idempotency key.
type Message struct {
	// Key is the notification's idempotency key. HTTP providers send it as
	// the Idempotency-Key header; it is the same on every attempt.
	Key string
	// NotificationID is the notification's id as the API shows it (n_…).
	NotificationID string
	Tenant         string
	EventID        string
	Type           string
	Purpose        string
	Channel        string
	RecipientID    string
	// Address is where the channel delivers: an email address, a phone
	// number, a device token, a URL.
	Address string
	Subject string
	Body    string
	HTML    string
	Data    json.RawMessage // may be nil
	// Attempt is 1 on the first call for this notification.
	Attempt int
	// Created is when the notification was accepted, the same on every
	// attempt; zero when the caller does not know it. The smtp provider
	// dates the message with it, so that a retry sends the same bytes.
	Created time.Time
	// Unsubscribe, if set, is the relay's one-click unsubscribe link for
	// this recipient, category and channel (RFC 8058): the smtp
	// provider gives it as List-Unsubscribe. The same on every attempt.
	Unsubscribe string
}

// Result is what one call produced. Providers never return a Go error:
// every failure is classified into an Outcome, with the detail kept for the
// audit trail.
type Result struct {
	Outcome Outcome
	// Permanent, with Refused, means retrying cannot help (400, 401, 403,
	// 404, 422 ...): the notification fails with Detail as the reason.
	// With Unknown, it means retrying cannot settle the question (the
	// provider refuses the key for another payload): the notification
	// ends unknown instead of spending its retries.
	Permanent  bool
	HTTPStatus int    // 0 when there was no HTTP answer
	MessageID  string // the provider's id for the message, when it gave one
	// Response is the provider's raw answer (body, truncated), or the
	// transport error text when there was none.
	Response string
	// RetryAfter is the provider's Retry-After, 0 when it gave none.
	RetryAfter time.Duration
	// Overloaded says the provider asked to be called less: HTTP 429 or
	// 503, SMTP 421 or 451. The relay halves the calls it has in flight to
	// it (and, with RetryAfter, pauses it).
	Overloaded bool
	// Detail is a short human-readable reason ("503 Service Unavailable",
	// "timeout after the request was written").
	Detail string
	// InvalidAddress, with a permanent Refused, says the address itself is
	// dead (an unregistered push token, a number that cannot receive): the
	// relay stops sending to it.
	InvalidAddress bool
}

// Provider delivers one message per call. Implementations must be safe for
// concurrent use and must honour ctx (a cancelled call whose request was
// already written is Unknown, not Refused).
type Provider interface {
	// Name identifies the provider in the audit trail and in status counts.
	// It never contains credentials.
	Name() string
	// HonoursKeys reports whether the remote side recognises a repeated
	// Idempotency-Key and answers from memory instead of sending again. It
	// decides what happens after an Unknown for at-most-once types.
	HonoursKeys() bool
	Send(ctx context.Context, m *Message) Result
}

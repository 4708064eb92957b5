package providers

import (
	"errors"
	"net/http"
	"time"
)

// ReceiptStatus is what a provider's status callback says happened to a
// message after the provider accepted it.
type ReceiptStatus string

const (
	ReceiptDelivered  ReceiptStatus = "delivered"  // reached the recipient (inbox, handset, device)
	ReceiptBounced    ReceiptStatus = "bounced"    // the recipient's side refused it for good
	ReceiptComplained ReceiptStatus = "complained" // the recipient marked it as spam
	ReceiptFailed     ReceiptStatus = "failed"     // the provider gave up after accepting it
	ReceiptSent       ReceiptStatus = "sent"       // handed on by the provider (queued, sent to carrier): progress only
)

// Receipt is one status callback about one message.
type Receipt struct {
	// ID identifies the receipt itself when the provider gives one (an
	// event id); empty otherwise. Dedupe uses it, else MessageID+Status.
	ID string
	// MessageID is the provider's id for the message, as Result.MessageID
	// returned it when the message was sent.
	MessageID string
	// Key, when the receipt names it, is the message's idempotency key
	// (the webhook-id it was sent with): the receipt is then about that
	// one notification, whatever other notification has its MessageID.
	Key    string
	Status ReceiptStatus
	At     time.Time // when the provider says it happened; zero if it does not say
	Detail string    // the provider's own status words ("undelivered 30003")
	// Bounce says what the receipt means for the address (the relay's
	// suppression list); BounceDefault leaves it to Status.
	Bounce Bounce
}

// Bounce is what a receipt says about the address itself.
type Bounce uint8

const (
	// BounceDefault: bounced is a hard bounce, complained a complaint,
	// anything else says nothing about the address.
	BounceDefault Bounce = iota
	BounceNone           // nothing about the address (a handset switched off)
	BounceHard           // the address is bad for good
	BounceSoft           // refused for now: the address is suppressed for a while
)

// ErrBadSignature: a receipt request's signature is missing or wrong.
var ErrBadSignature = errors.New("receipt signature missing or invalid")

// ReceiptParser is implemented by providers that take status callbacks.
// ParseReceipts verifies the request's signature where the provider signs
// (returning ErrBadSignature), then reads the receipts in its body. url is
// the full public URL the provider called (some signatures cover it).
type ReceiptParser interface {
	ParseReceipts(r *http.Request, body []byte, url string) ([]Receipt, error)
}

// Package sim is a provider simulator: an email-style HTTP API
// (POST /v1/emails) that honours Idempotency-Key the way real providers do,
// and the APIs of Mailgun, SES, Discord, Telegram, Teams (Workflows), Web
// Push (payloads decrypted with the subscriptions it makes) and APNs
// (HTTP/2 over TLS), each answering as its vendor documents and honouring
// no key, as the vendors honour none. Every API injects faults from the
// same script (lost answers, hangs, refusals, 5xx, permanent rejections,
// slow answers).
//
// It owns what recipients "really received", so tests and the
// `edgerelay sim` command can check exactly-once effect from the
// receiving side: Counts tells how many emails each address got, whatever
// the relay believes it sent.
//
// It must never import the relay, the store or the providers: it plays the
// far side of the network and knows only what arrives over HTTP.
package sim

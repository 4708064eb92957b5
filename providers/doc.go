// Package providers holds the one interface through which edgerelay
// delivers, and one implementation per file: log, webhook (signed per
// Standard Webhooks), email-http (with Postmark, Resend and SendGrid
// presets), mailgun, ses, smtp, twilio, fcm, slack, discord, telegram
// and teams. Each file declares its Kind, and kinds (kind.go) lists them:
// New builds from that list, and the CLI's help and the README's provider
// table are rendered from it. Providers that take status callbacks also
// implement ReceiptParser.
//
// A provider classifies every call into one of three outcomes (sent,
// refused, unknown) and must never decide policy: whether to retry, fail or
// stop is the relay's job. Providers never touch the store.
package providers

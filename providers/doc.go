// Package providers holds the one interface through which edgerelay
// delivers, and one implementation per file: log, webhook, email-http.
//
// A provider classifies every call into one of three outcomes (sent,
// refused, unknown) and must never decide policy: whether to retry, fail or
// stop is the relay's job. Providers never touch the store.
package providers

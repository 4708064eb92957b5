package providers

import "net/url"

// Placeholder until the SMTP provider lands (owned by its own file).
func newSMTPURL(u *url.URL) (Provider, string) { return nil, "smtp: not implemented yet" }

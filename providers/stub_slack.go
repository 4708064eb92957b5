package providers

import "net/url"

// Placeholder until the Slack provider lands.
func newSlackURL(u *url.URL) (Provider, string) { return nil, "slack: not implemented yet" }

package providers

import "net/url"

// Placeholder until the Twilio provider lands.
func newTwilioURL(u *url.URL) (Provider, string) { return nil, "twilio: not implemented yet" }

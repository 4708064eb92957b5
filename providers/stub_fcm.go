package providers

import "net/url"

// Placeholder until the FCM provider lands.
func newFCMURL(u *url.URL) (Provider, string) { return nil, "fcm: not implemented yet" }

package providers

// AddressChecker is implemented by a provider that can tell, before a
// notification is written, whether it would use a recipient's address. The
// relay asks the first provider of a notification's route when it accepts
// the event, and rejects the event (naming the address's field) instead of
// failing the notification hours later.
type AddressChecker interface {
	// CheckAddress returns why the provider would not deliver to address
	// on channel, or nil. It does no I/O: it judges the address as
	// written.
	CheckAddress(channel, address string) error
}

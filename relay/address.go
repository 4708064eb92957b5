package relay

import (
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"strings"

	"github.com/edgerelay/edgerelay/providers"
)

// Addresses are checked when an event is accepted, not when its
// notifications are first attempted: an address that cannot work would
// otherwise be retried for hours and end dead. Events already stored are
// never checked again (the dispatcher finishes a fan-out from its stored
// payload as it was accepted).

// e164RE is an E.164 number: "+", then 8 to 15 digits, the first not 0.
var e164RE = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// addressField names a recipient's address for a channel the way the
// event wrote it: recipients[2].email, recipients[0].addresses.chat.
func addressField(recipient string, r Recipient, channel string) string {
	if _, ok := r.Addresses[channel]; ok {
		return recipient + ".addresses." + channel
	}
	switch channel {
	case "email":
		return recipient + ".email"
	case "sms":
		return recipient + ".phone"
	case "push":
		return recipient + ".device_token"
	case "webhook":
		return recipient + ".url"
	}
	return recipient + ".addresses." + channel
}

// checkAddress checks the address a of recipient r (at path recipient) on
// a channel whose addresses have a known shape: email an addr-spec, sms an
// E.164 number, the url field an absolute http(s) URL. Other addresses are
// the provider's to judge (checkRoutes): push tokens, chat channels, and a
// webhook address given in addresses, which is a URL for a route that
// posts to the recipient's URL (to=recipient checks it against its
// allow-list) and any text, passed along, for a route that posts to its
// own URL: "addresses": {"webhook": "ops"} reaches a fixed-URL webhook.
func checkAddress(recipient string, r Recipient, channel, a string) error {
	var why string
	switch channel {
	case "email":
		why = emailProblem(a)
	case "sms":
		if !e164RE.MatchString(a) {
			why = "not an E.164 phone number (want + and 8 to 15 digits, the first not 0, e.g. +15550100)"
		}
	case "webhook":
		if _, own := r.Addresses[channel]; !own {
			why = urlProblem(a) // the url field is a URL
		}
	}
	if why == "" {
		return nil
	}
	return invalid(addressField(recipient, r, channel), "%s", why)
}

// emailProblem says why a is not one bare addr-spec ("ada@example.com"):
// no display name, no angle brackets, no comment, no list.
func emailProblem(a string) string {
	m, err := mail.ParseAddress(a)
	switch {
	case err != nil:
		return "not an email address"
	case m.Name != "" || m.Address != a:
		return "not an email address: want the bare address (ada@example.com), without a display name or angle brackets"
	}
	return ""
}

// urlProblem says why a is not an absolute http(s) URL with a host.
func urlProblem(a string) string {
	u, err := url.Parse(a)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "not a URL: " + err.Error()
	case u.Scheme != "http" && u.Scheme != "https":
		return "not an http(s) URL (want https://host/path)"
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return "not an absolute URL with a host (want https://host/path)"
	}
	return ""
}

// checkRoutes checks each notification of a normalised event against its
// route: its channel must have one (the tenant's or the default), and the
// first provider of the route, if it judges addresses
// (providers.AddressChecker), must take the address. A route removed after
// an event was accepted is not this check's concern: the dispatcher makes
// that notification wait.
func (r *Relay) checkRoutes(ev *Event) error {
	// Not the dispatcher's goroutine: the latest published routes.
	t := r.router.published()
	for i, rc := range ev.Recipients {
		f := fmt.Sprintf("recipients[%d]", i)
		for _, c := range rc.channels(ev.Channels) {
			route := t.route(ev.Tenant, c)
			if len(route) == 0 {
				return invalid(f, "channel %q has no route (routes: %s)", c, strings.Join(t.channels(ev.Tenant), ", "))
			}
			ac, ok := route[0].(providers.AddressChecker)
			if !ok {
				continue
			}
			if err := ac.CheckAddress(c, rc.Address(c)); err != nil {
				return invalid(addressField(f, rc, c), "%v (provider %s)", err, route[0].Name())
			}
		}
	}
	return nil
}

// Package addrkey is the one normal form of an address that the
// suppression list keys on: the relay keys entries and notifications with
// it, and the stores' migration 0024 re-keys rows written before it. It
// does no I/O and must stay a pure function of its inputs: a change to it
// changes which stored rows match, and needs a migration that re-keys them.
package addrkey

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// Key is address as the suppression list keys it on channel.
//
//   - email: Unicode NFC; the local part lower-cased (strings.ToLower: the
//     Unicode lower-case mapping, not locale-tailored and not case folding,
//     so "ß" stays "ß" and is not "ss", "İ" becomes "i", the dotless "ı"
//     stays itself); the domain after the last "@" mapped as IDNA lookups
//     map it (UTS 46, non-transitional) and written with U-labels, so
//     "xn--jrg-sna.example" and "jörg.example" are one key. A domain IDNA
//     refuses (an underscore, say) is only lower-cased.
//   - push and webhook: as given. A device token or a URL is matched byte
//     for byte by whoever receives it; two spellings are two addresses.
//   - any other channel (sms numbers are E.164, so ASCII; chat handles):
//     NFC only.
//
// A string that is not valid UTF-8 is keyed as before this normal form
// existed (ASCII letters lower-cased for email, else as given): stable,
// and it cannot meet a valid spelling by accident.
//
// Key is idempotent: Key(c, Key(c, a)) == Key(c, a).
func Key(channel, address string) string {
	if !utf8.ValidString(address) {
		if channel == "email" {
			return asciiLower(address)
		}
		return address
	}
	switch channel {
	case "email":
		return email(address)
	case "push", "webhook":
		return address
	}
	return norm.NFC.String(address)
}

// Stored is what a notification keeps as its address_key: Key, or "" when
// that is the address itself (the stores keep NULL then).
func Stored(channel, address string) string {
	if k := Key(channel, address); k != address {
		return k
	}
	return ""
}

func email(address string) string {
	a := norm.NFC.String(address)
	at := strings.LastIndexByte(a, '@')
	if at < 0 {
		return lower(a)
	}
	return lower(a[:at]) + "@" + domain(a[at+1:])
}

// lower lower-cases s and puts it back in NFC (a lower-case mapping may
// leave a sequence that composes).
func lower(s string) string { return norm.NFC.String(strings.ToLower(s)) }

func domain(d string) string {
	d = lower(d)
	if u, err := idna.Lookup.ToUnicode(d); err == nil {
		// Mapping again must not change it (idempotence); it can only if
		// IDNA's mapping and ours disagree, and then lower-case is kept.
		if lower(u) == u {
			return u
		}
	}
	return d
}

// asciiLower lower-cases ASCII letters byte by byte, leaving every other
// byte as it is (strings.Map would turn each invalid byte into U+FFFD, and
// so make distinct strings one key).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

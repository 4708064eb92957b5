package providers

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
)

// A CommercialSender puts List-Unsubscribe on the mail of types its
// operator marks commercial (types: T: commercial: true in the config).
// The smtp and email-http providers are.
type CommercialSender interface {
	Provider
	// SetCommercial names the notification types and purposes whose mail
	// is commercial, replacing any earlier list.
	SetCommercial(types []string)
	// Unsubscribes reports whether the provider has a List-Unsubscribe to
	// give that mail (list_unsubscribe=).
	Unsubscribes() bool
}

var paramListUnsubscribe = Param{"list_unsubscribe", "`https://…{key}…` or `mailto:…{key}…`: the `List-Unsubscribe` of mail of " +
	"the types the config marks `commercial: true`, `{key}` replaced by the notification's key; " +
	"an https URL adds `List-Unsubscribe-Post: List-Unsubscribe=One-Click` (RFC 8058); " +
	"the relay's own one-click link (`api.public_url`, an optional category) wins over it"}

// listUnsubscribe is what the mail providers share to decide a message's
// List-Unsubscribe: the relay's own one-click link when the message
// carries one, else the list_unsubscribe template for commercial types.
type listUnsubscribe struct {
	tmpl string // the list_unsubscribe template, "" for none
	// commercial holds the types and purposes whose mail carries
	// List-Unsubscribe (SetCommercial).
	commercial atomic.Pointer[map[string]bool]
}

// parse reads the list_unsubscribe parameter; it returns the problem, or "".
func (u *listUnsubscribe) parse(q url.Values) string {
	if !q.Has("list_unsubscribe") {
		return ""
	}
	u.tmpl = q.Get("list_unsubscribe")
	if problem := checkUnsubscribe(u.tmpl); problem != "" {
		return `parameter "list_unsubscribe": ` + problem
	}
	return ""
}

func (u *listUnsubscribe) SetCommercial(types []string) {
	set := make(map[string]bool, len(types))
	for _, t := range types {
		set[t] = true
	}
	u.commercial.Store(&set)
}

func (u *listUnsubscribe) Unsubscribes() bool { return u.tmpl != "" }

// link is m's List-Unsubscribe URI, "" for none. Until categories existed
// the config's commercial types were the only source; the relay's own link
// (m.Unsubscribe: the category is optional) now wins over the template.
func (u *listUnsubscribe) link(m *Message) string {
	if m.Unsubscribe != "" {
		return m.Unsubscribe
	}
	set := u.commercial.Load()
	if u.tmpl == "" || set == nil || !((*set)[m.Type] || (*set)[m.Purpose]) {
		return ""
	}
	return strings.ReplaceAll(u.tmpl, "{key}", escapeKey(m.Key))
}

// mailHeader is one header a provider adds to a message.
type mailHeader struct{ name, value string }

// headers are the headers every provider of mail adds, in a fixed order:
// Auto-Submitted, then List-Unsubscribe and List-Unsubscribe-Post when m
// has a link. Nothing in them comes from the clock, so every attempt
// carries the same.
func (u *listUnsubscribe) headers(m *Message) []mailHeader {
	// Every message is made by the relay from an event, not written by a
	// person as a reply: RFC 3834's auto-generated, which also keeps
	// vacation auto-replies from answering it.
	h := []mailHeader{{"Auto-Submitted", "auto-generated"}}
	if link := u.link(m); link != "" {
		// A POST of List-Unsubscribe=One-Click to the link turns the mail
		// off; RFC 8058 allows one-click over https only.
		h = append(h, mailHeader{"List-Unsubscribe", "<" + link + ">"})
		if strings.HasPrefix(link, "https://") {
			h = append(h, mailHeader{"List-Unsubscribe-Post", "List-Unsubscribe=One-Click"})
		}
	}
	return h
}

// checkUnsubscribe says what is wrong with a list_unsubscribe template, or
// returns "".
func checkUnsubscribe(tmpl string) string {
	if !strings.Contains(tmpl, "{key}") {
		return fmt.Sprintf("%q has no {key}: the unsubscribe endpoint could not tell whose mail it is", tmpl)
	}
	if len(tmpl) > 500 {
		return "longer than 500 bytes"
	}
	sample := strings.ReplaceAll(tmpl, "{key}", "er1_0")
	for i := 0; i < len(sample); i++ {
		// Printable ASCII without what would end the <URI> of the header
		// (RFC 2369) or need encoding in it.
		if c := sample[i]; c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == ',' || c == '"' {
			return fmt.Sprintf("%q: byte %q is not allowed (percent-encode it)", tmpl, c)
		}
	}
	u, err := url.Parse(sample)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URL: %v", tmpl, err)
	case u.Scheme == "https" && u.Host != "":
	case u.Scheme == "mailto" && strings.Contains(u.Opaque, "@"):
	default:
		return fmt.Sprintf("%q is neither an https URL nor a mailto: address (RFC 8058 one-click needs https; http is not accepted)", tmpl)
	}
	return ""
}

// escapeKey percent-encodes every byte of a key outside RFC 3986's
// unreserved characters, so that it stands anywhere in a URL: path, query
// or a mailto address.
func escapeKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

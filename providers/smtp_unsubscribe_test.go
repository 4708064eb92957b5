package providers

import (
	"net/url"
	"testing"
)

// The relay's own one-click link (Message.Unsubscribe: the category is
// optional) is the mail's List-Unsubscribe, with List-Unsubscribe-Post
// when it is https; it wins over a list_unsubscribe template.
func TestSMTPRelayUnsubscribeLink(t *testing.T) {
	t.Parallel()
	s := startSMTP(t, smtpServerOpts{})
	tmpl := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&list_unsubscribe="+
		url.QueryEscape("https://other.example.com/u/{key}")), nil)
	tmpl.SetCommercial([]string{"newsletter"})
	none := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none"), nil)
	for _, c := range []struct {
		name, link, want, post string
		p                      *SMTP
	}{
		{"https link, no template", "https://relay.example.com/u/abc.def", "<https://relay.example.com/u/abc.def>", "List-Unsubscribe=One-Click", none},
		{"the relay's link wins over the template", "https://relay.example.com/u/x.y", "<https://relay.example.com/u/x.y>", "List-Unsubscribe=One-Click", tmpl},
		{"http link: no one-click (RFC 8058 wants https)", "http://127.0.0.1:8080/u/x.y", "<http://127.0.0.1:8080/u/x.y>", "", none},
	} {
		m := testMessage("er1_u")
		m.Type, m.Unsubscribe = "newsletter", c.link
		if res := send(c.p, m); res.Outcome != Sent {
			t.Fatalf("%s: %+v", c.name, res)
		}
		h := parseMail(t, s.one(t).data).header
		if got := h.Get("List-Unsubscribe"); got != c.want {
			t.Errorf("%s: List-Unsubscribe %q, want %q", c.name, got, c.want)
		}
		if got := h.Get("List-Unsubscribe-Post"); got != c.post {
			t.Errorf("%s: List-Unsubscribe-Post %q, want %q", c.name, got, c.post)
		}
	}
}

package providers

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHTMLToText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, html, want string }{
		{"plain", "Thanks, Ada.", "Thanks, Ada."},
		{"entities", "<p>Fish &amp; chips &lt;3 &eacute;t&eacute; 12&nbsp;€</p>", "Fish & chips <3 été 12 €"},
		{"whitespace collapses", "<p>  Thanks,\n\t <b>Ada</b> .  </p>", "Thanks, Ada ."},
		{"paragraphs", "<p>One</p><p>Two</p>\n\n<h1>Three</h1>Four", "One\n\nTwo\n\nThree\n\nFour"},
		{"line breaks", "a<br>b<br><br>c<br/><br/><br/><br/>d", "a\nb\n\nc\n\nd"},
		{"divs are lines", "<div>a</div><div><div>b</div></div>c", "a\nb\nc"},
		{"head, script, style dropped",
			"<html><head><title>T</title><style>p{color:red}</style><meta charset=utf-8></head>" +
				"<body><script>alert(1)</script><p>Body</p><template><p>no</p></template></body></html>",
			"Body"},
		{"hidden preheader",
			`<div style="display: none; max-height:0">Your receipt&zwnj;&nbsp;&zwnj;&nbsp;</div><p hidden>x</p><p>Paid.</p>`,
			"Paid."},
		{"unclosed hidden paragraph hides only itself", `<p style="DISPLAY:NONE">pre<p>Shown</p>`, "Shown"},
		{"links", `<p>See <a href="https://example.com/r/1">your receipt</a>.</p>`, "See your receipt (https://example.com/r/1)."},
		{"link text is the URL", `<a href="https://example.com/">example.com</a> <a href="mailto:a@example.com">a@example.com</a>`,
			"example.com a@example.com"},
		{"image link", `<a href="https://example.com/x"><img src="x.png" alt=""></a>`, "https://example.com/x"},
		{"relative and script links", `<a href="/x">here</a> <a href="javascript:go()">there</a> <a href="#top">top</a>`, "here there top"},
		{"image alt", `<p><img src="logo.png" alt="Acme"> Receipt</p>`, "Acme Receipt"},
		{"lists", "<ul><li>one</li><li>two<ul><li>deep</li></ul></li></ul><ol start=3><li>three<li>four</ol>after",
			"- one\n- two\n  - deep\n\n3. three\n4. four\n\nafter"},
		{"table rows are lines", "<table><tr><td>Item</td><td>€12</td></tr><tr><th>Total</th><td>€12</td></tr></table>End",
			"Item €12\nTotal €12\n\nEnd"},
		{"pre keeps whitespace", "<p>Code:</p><pre>  a  b\n\n    c  </pre>x", "Code:\n\n  a  b\n\n    c\n\nx"},
		{"hr", "a<hr>b", "a\n\n---\n\nb"},
		{"comments and doctype", "<!DOCTYPE html><!-- hi --><p>a</p>", "a"},
		{"empty", "", ""},
		{"href not UTF-8, broken over lines", "<a href=\"https://x.test/\xff\n/b\">y</a>", "y (https://x.test/\ufffd/b)"},
		{"malformed", "<p><b>bold <i>both</b> italic</p></div></span>tail", "bold both italic\n\ntail"},
	} {
		if got := htmlToText(c.html); got != c.want {
			t.Errorf("%s: htmlToText(%q)\n = %q\nwant %q", c.name, c.html, got, c.want)
		}
	}
}

// Any input gives valid UTF-8 without blank lines at either end or
// spaces at the end of a line, and deep nesting costs no stack.
func FuzzHTMLToText(f *testing.F) {
	for _, s := range []string{"<p>a</p>", "<ul><li>x<ol><li>y", "<pre>\r\n a\r b</pre>", "<a href=https://x>y</a>",
		strings.Repeat("<div>", 10000) + "deep", "\xff<p>\x00</p>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := htmlToText(s)
		if !utf8.ValidString(got) {
			t.Fatalf("htmlToText(%q) = %q: not UTF-8", s, got)
		}
		if strings.HasPrefix(got, "\n") || strings.HasSuffix(got, "\n") || strings.Contains(got, " \n") || strings.Contains(got, "\n\n\n") {
			t.Fatalf("htmlToText(%q) = %q: stray blank lines or spaces", s, got)
		}
	})
}

package providers

import (
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// textPart is m's text part: its body, or the text of its HTML when it has
// none.
func textPart(m *Message) string {
	if m.Body == "" && m.HTML != "" {
		return htmlToText(m.HTML)
	}
	return m.Body
}

// htmlToText is the text part for an HTML message that brings none, so
// that every HTML email is multipart/alternative with a readable text
// (spam filters score HTML-only mail, and text-only clients show it).
//
// It keeps what a reader of the HTML sees: the text, paragraphs and line
// breaks, list items ("- ", "1. "), table rows as lines, image alt text,
// and links as "text (URL)". It drops what a reader never sees: script,
// style, title, template, and elements hidden with the hidden attribute or
// display:none (the preheader trick of email templates). Whitespace
// collapses as a browser collapses it, except in <pre>.
//
// The HTML5 parser (golang.org/x/net/html) closes what the markup leaves
// open, as a browser would, so an unclosed <p style="display:none"> hides
// only its paragraph. The walk is iterative: nesting depth costs no stack.
func htmlToText(src string) string {
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		// html.Parse fails only when reading fails, which a string does not.
		return ""
	}
	w := &textWriter{}
	n := doc
	for n != nil {
		if w.enter(n) && n.FirstChild != nil {
			n = n.FirstChild
			continue
		}
		w.leave(n)
		for n != doc && n.NextSibling == nil {
			n = n.Parent
			w.leave(n)
		}
		if n == doc {
			break
		}
		n = n.NextSibling
	}
	return w.String()
}

// textWriter accumulates the text. Line breaks and spaces are owed rather
// than written, so that runs of them collapse and none trails.
type textWriter struct {
	b        strings.Builder
	trail    int  // newlines at the end of b
	breaks   int  // newlines b must end with before the next text (2: a blank line)
	space    bool // a space is owed before the next text on this line
	pre      int  // depth of <pre>
	lists    []int
	link     string // the href of the <a> being written
	linkFrom int    // where its text starts in b
	skipped  map[*html.Node]bool
}

// String is the text: at most one blank line in a row, no space at the
// end of a line, no blank line at either end.
func (w *textWriter) String() string {
	out := strings.Split(w.b.String(), "\n")
	kept := out[:0]
	blank := true // drops leading blank lines
	for _, line := range out {
		line = strings.TrimRight(line, " ")
		if line == "" && blank {
			continue
		}
		blank = line == ""
		kept = append(kept, line)
	}
	return strings.TrimRight(strings.Join(kept, "\n"), "\n")
}

// htmlHidden are the elements whose content no reader sees.
var htmlHidden = map[atom.Atom]bool{atom.Script: true, atom.Style: true, atom.Title: true, atom.Template: true}

// htmlParagraphs are separated from what is around them by a blank line;
// lines by a line break.
var (
	htmlParagraphs = map[atom.Atom]bool{
		atom.P: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
		atom.Blockquote: true, atom.Pre: true, atom.Ul: true, atom.Ol: true, atom.Dl: true, atom.Hr: true,
		atom.Table: true,
	}
	htmlLines = map[atom.Atom]bool{
		atom.Div: true, atom.Section: true, atom.Article: true, atom.Header: true, atom.Footer: true,
		atom.Nav: true, atom.Main: true, atom.Aside: true, atom.Figure: true, atom.Figcaption: true,
		atom.Tr: true, atom.Dt: true, atom.Dd: true, atom.Address: true, atom.Form: true,
		atom.Fieldset: true, atom.Legend: true, atom.Center: true, atom.Li: true, atom.Caption: true,
	}
)

// enter handles the start of n and reports whether to walk its children.
func (w *textWriter) enter(n *html.Node) bool {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return false
	case html.DocumentNode:
		return true
	case html.ElementNode:
	default:
		return false // comments, doctype
	}
	if htmlHidden[n.DataAtom] || isHidden(n) {
		w.skip(n)
		return false
	}
	a := n.DataAtom
	switch {
	case a == atom.Br:
		w.newline()
	case a == atom.Li:
		w.lineBreak(1)
		depth := len(w.lists)
		if depth > 1 {
			w.raw(strings.Repeat("  ", depth-1))
		}
		marker := "- "
		if depth > 0 && w.lists[depth-1] > 0 {
			marker = strconv.Itoa(w.lists[depth-1]) + ". "
			w.lists[depth-1]++
		}
		w.raw(marker)
	case htmlParagraphs[a]:
		w.lineBreak(w.paragraphBreak())
	case htmlLines[a]:
		w.lineBreak(1)
	case a == atom.Td || a == atom.Th:
		w.space = true
	case a == atom.Img:
		w.text(attr(n, "alt"))
	case a == atom.A:
		w.link, w.linkFrom = attr(n, "href"), w.b.Len()
	}
	switch a {
	case atom.Pre:
		w.pre++
	case atom.Ol:
		start := 1
		if s, err := strconv.Atoi(attr(n, "start")); err == nil {
			start = s
		}
		w.lists = append(w.lists, max(start, 1))
	case atom.Ul:
		w.lists = append(w.lists, 0)
	case atom.Hr:
		w.raw("---")
	}
	return true
}

// leave handles the end of n (after its children).
func (w *textWriter) leave(n *html.Node) {
	if n.Type != html.ElementNode || w.skipped[n] {
		return
	}
	a := n.DataAtom
	switch {
	case htmlParagraphs[a]:
		if a == atom.Ul || a == atom.Ol {
			w.lists = w.lists[:len(w.lists)-1]
		}
		if a == atom.Pre {
			w.pre--
		}
		w.lineBreak(w.paragraphBreak())
	case htmlLines[a]:
		w.lineBreak(1)
	case a == atom.Td || a == atom.Th:
		w.space = true
	case a == atom.A:
		w.endLink()
	}
}

// paragraphBreak is a blank line, or a line break inside a list (a nested
// list is not a paragraph of its own).
func (w *textWriter) paragraphBreak() int {
	if len(w.lists) > 0 {
		return 1
	}
	return 2
}

func (w *textWriter) skip(n *html.Node) {
	if w.skipped == nil {
		w.skipped = map[*html.Node]bool{}
	}
	w.skipped[n] = true
}

// endLink follows a link's text with its URL, unless the text is the URL
// or the link goes nowhere a text reader can follow.
func (w *textWriter) endLink() {
	// As a browser's URL parser does, tabs and line breaks inside the
	// href are dropped; bytes that are not UTF-8 are replaced.
	href := strings.ToValidUTF8(urlNoise.Replace(strings.TrimSpace(w.link)), "\ufffd")
	w.link = ""
	bare, ok := bareURL(href)
	if !ok {
		return
	}
	text := strings.TrimSpace(w.b.String()[min(w.linkFrom, w.b.Len()):])
	if t, _ := bareURL(text); text == href || t == bare || text == bare {
		return
	}
	if text == "" {
		w.text(href)
		return
	}
	w.space = false
	w.raw(" (" + href + ")")
}

var urlNoise = strings.NewReplacer("\t", "", "\n", "", "\r", "")

// bareURL is an http(s) or mailto URL without its scheme and final slash,
// as link texts write it; ok is false for any other URL.
func bareURL(s string) (bare string, ok bool) {
	lower := strings.ToLower(s)
	for _, scheme := range []string{"https://", "http://", "mailto:"} {
		if strings.HasPrefix(lower, scheme) {
			return strings.TrimSuffix(s[len(scheme):], "/"), true
		}
	}
	return s, false
}

// text writes s, collapsing HTML whitespace outside <pre>. A no-break space
// is a space to a text reader, and zero-width characters are dropped.
func (w *textWriter) text(s string) {
	if w.pre > 0 {
		s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
		for i, line := range strings.Split(s, "\n") {
			if i > 0 {
				w.newline()
			}
			if line = strings.TrimRight(line, " \t"); line != "" {
				w.raw(strings.ToValidUTF8(line, "\ufffd"))
			}
		}
		return
	}
	for _, r := range s {
		switch r {
		case ' ', '\t', '\n', '\r', '\f', '\u00a0':
			w.space = true
			continue
		case '\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u00ad', '\u034f':
			continue
		}
		w.owe()
		w.b.WriteRune(r)
		w.trail = 0
	}
}

// raw writes s as it is (no newline in it), after what is owed.
func (w *textWriter) raw(s string) {
	w.owe()
	w.b.WriteString(s)
	w.trail = 0
}

// owe writes the line breaks and the space that are owed: none at the
// start, and no space at the start of a line.
func (w *textWriter) owe() {
	if w.b.Len() == 0 {
		w.breaks, w.space = 0, false
		return
	}
	for ; w.trail < w.breaks; w.trail++ {
		w.b.WriteByte('\n')
	}
	if w.space && w.trail == 0 {
		w.b.WriteByte(' ')
	}
	w.breaks, w.space = 0, false
}

// lineBreak owes n line breaks (2: a blank line) unless b has them.
func (w *textWriter) lineBreak(n int) {
	w.breaks = max(w.breaks, n)
	w.space = false
}

// newline is a <br> (or a newline in <pre>): one more line break, even on
// an empty line.
func (w *textWriter) newline() {
	w.space = false
	if w.b.Len() == 0 {
		return
	}
	w.owe()
	w.b.WriteByte('\n')
	w.trail++
}

// isHidden reports whether n is hidden from a reader by its attributes.
func isHidden(n *html.Node) bool {
	for _, a := range n.Attr {
		switch a.Key {
		case "hidden":
			return true
		case "style":
			style := strings.ToLower(strings.Join(strings.Fields(a.Val), ""))
			if strings.Contains(style, "display:none") {
				return true
			}
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

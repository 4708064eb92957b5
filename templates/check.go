package templates

import (
	"context"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"regexp"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
	"unicode/utf8"
)

// ParseError is a part that is refused when it is compiled (a template
// saved over the API, a file loaded): it names the part, its file, and the
// line and column (1-based, in characters) where the parser stopped.
type ParseError struct {
	Part, File   string
	Line, Column int
	Msg          string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// position is the 1-based line and column (in characters) of byte offset
// off in body.
func position(body string, off int) (line, col int) {
	off = min(max(off, 0), len(body))
	before := body[:off]
	line = 1 + strings.Count(before, "\n")
	col = 1 + utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:])
	return line, col
}

// parseFailure turns text/template's parse error, which has a line but no
// column, into a ParseError. The column is found by bisection: the parser
// reads left to right and stops at the first error, so the shortest prefix
// of body that fails with the same message ends where the parser found it;
// the error is placed at that action's "{{" (or at the token it quotes,
// when that is inside the action). An error only the end of the text
// shows (an action or a block left open) is placed where it ends.
func parseFailure(name, part, body string, err error) *ParseError {
	msg := err.Error()
	line := 0
	// "template: NAME:LINE: MSG"
	if rest, ok := strings.CutPrefix(msg, "template: "+name+":"); ok {
		if l, m, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(l); err == nil {
				line, msg = n, m
			}
		}
	}
	pe := &ParseError{Part: part, File: name, Msg: msg}
	fails := func(k int) bool {
		_, err := texttemplate.New(name).Funcs(placeholderFuncs).Parse(body[:k])
		if err == nil {
			return false
		}
		s := err.Error()
		_, m, _ := strings.Cut(strings.TrimPrefix(s, "template: "+name+":"), ": ")
		return m == msg
	}
	atEnd := strings.Contains(msg, "EOF") || strings.HasPrefix(msg, "unclosed")
	off := len(body)
	if !atEnd {
		lo, hi := 0, len(body) // fails(hi) holds
		for lo < hi {
			mid := (lo + hi) / 2
			if fails(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		off = lo
		if start := strings.LastIndex(body[:off], "{{"); start >= 0 {
			at := start
			if q, ok := quoted(msg); ok && q != "" {
				if i := strings.LastIndex(body[start:off], q); i >= 0 {
					at = start + i
				}
			}
			off = at
		}
	} else if strings.HasPrefix(msg, "unclosed action") {
		if start := strings.LastIndex(body, "{{"); start >= 0 {
			off = start
		}
	}
	pe.Line, pe.Column = position(body, off)
	if line > 0 && atEnd && !strings.HasPrefix(msg, "unclosed action") {
		pe.Line = line // the parser's own line, at the end
	}
	return pe
}

// quoted is the first Go-quoted string in msg ("foo" in `function "foo"
// not defined`).
func quoted(msg string) (string, bool) {
	i := strings.IndexByte(msg, '"')
	if i < 0 {
		return "", false
	}
	q, err := strconv.QuotedPrefix(msg[i:])
	if err != nil {
		return "", false
	}
	s, err := strconv.Unquote(q)
	return s, err == nil
}

// defineAction finds the action that makes a second template.
var defineAction = regexp.MustCompile(`\{\{-?\s*(define|block)\b`)

// forbidden refuses what a part may not use: each part stands alone, so
// {{define}}, {{template}} and {{block}} (which name other templates) are
// refused where they are written.
func forbidden(name, part, body string, tree *parse.Tree, defined int) error {
	if defined > 1 {
		// A {{define}} or {{block}} made a second template; find the
		// action (not the word in the text around it).
		i, action := 0, "define"
		if m := defineAction.FindStringSubmatchIndex(body); m != nil {
			i, action = m[0], body[m[2]:m[3]]
		}
		line, col := position(body, i)
		return &ParseError{Part: part, File: name, Line: line, Column: col,
			Msg: "{{" + action + "}} is not allowed: each part is one template (use helpers, not sub-templates)"}
	}
	var err error
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		if err != nil || n == nil {
			return
		}
		switch x := n.(type) {
		case *parse.ListNode:
			if x == nil {
				return
			}
			for _, c := range x.Nodes {
				walk(c)
			}
		case *parse.TemplateNode:
			off := int(x.Position())
			if j := strings.LastIndex(body[:min(off, len(body))], "{{"); j >= 0 {
				off = j
			}
			line, col := position(body, off)
			err = &ParseError{Part: part, File: name, Line: line, Column: col,
				Msg: fmt.Sprintf("{{template %q}} is not allowed: each part is one template (use helpers, not sub-templates)", x.Name)}
		case *parse.IfNode:
			walk(x.List)
			walk(x.ElseList)
		case *parse.RangeNode:
			walk(x.List)
			walk(x.ElseList)
		case *parse.WithNode:
			walk(x.List)
			walk(x.ElseList)
		}
	}
	if tree != nil {
		walk(tree.Root)
	}
	return err
}

// escapeMessage says what html/template's escaper refused in an author's
// words: its descriptions of an unfinished context print the escaper's
// own state ({stateURL delimDoubleQuote …}).
func escapeMessage(he *htmltemplate.Error) string {
	switch he.ErrorCode {
	case htmltemplate.ErrEndContext:
		return endContextMessage(he.Description)
	case htmltemplate.ErrSlashAmbig:
		return "in a <script>, a / after an {{if}}, {{with}} or {{range}} could start a division or a regular expression, " +
			"depending on the branch taken: is a semicolon missing in a branch? Parentheses make it clear"
	case htmltemplate.ErrBranchEnd:
		return "the branches of an {{if}}, {{with}} or {{range}} end in different places of the HTML (one inside a tag, an attribute or a quote, the other not): close them alike"
	case htmltemplate.ErrRangeLoopReentry:
		return "a {{range}} ends in another place of the HTML than it starts (inside a tag, an attribute or a quote): close what it opens before {{end}}"
	}
	return stateDump.ReplaceAllString(he.Description, "")
}

// slashAt is where the ambiguous / of an ErrSlashAmbig is, or -1: the
// escaper gives no line for it, only the text from the / on ("/-"), which
// is found after the {{end}} that precedes it.
func slashAt(he *htmltemplate.Error, body string) int {
	if he.ErrorCode != htmltemplate.ErrSlashAmbig {
		return -1
	}
	i := strings.LastIndex(he.Description, ": ")
	if i < 0 {
		return -1
	}
	text, err := strconv.Unquote(he.Description[i+2:])
	if err != nil || text == "" {
		return -1
	}
	for off := 0; ; {
		j := strings.Index(body[off:], text)
		if j < 0 {
			return -1
		}
		if strings.HasSuffix(strings.TrimRight(body[:off+j], " \t\n"), "}}") {
			return off + j
		}
		off += j + 1
	}
}

// endContextMessage says where an HTML part ends unfinished. The escaper
// says so only in its state's dump ({stateURL delimDoubleQuote …
// elementNone}), which is read here for the one word an author needs; a
// dump of another shape gets the general message.
func endContextMessage(desc string) string {
	words := strings.FieldsFunc(desc, func(r rune) bool { return r == ' ' || r == '{' || r == '}' })
	has := func(w string) bool { return slices.Contains(words, w) }
	switch {
	case has("stateHTMLCmt"):
		return "the HTML ends inside a comment: is a closing --> missing?"
	case has("delimDoubleQuote"):
		return `the HTML ends inside an attribute's value in double quotes: is a closing " missing?`
	case has("delimSingleQuote"):
		return "the HTML ends inside an attribute's value in single quotes: is a closing ' missing?"
	case has("stateTag"), has("stateAttrName"), has("stateAfterName"), has("stateBeforeValue"), has("delimSpaceOrTagEnd"):
		return "the HTML ends inside a tag: is a closing > missing?"
	}
	for _, el := range []string{"Script", "Style", "Textarea", "Title"} {
		if has("element" + el) {
			tag := strings.ToLower(el)
			return fmt.Sprintf("the HTML ends inside a <%s> element: is </%s> missing?", tag, tag)
		}
	}
	return "the HTML ends inside a tag, an attribute or a quoted value: is a closing quote or > missing?"
}

// stateDump is the escaper's state in a description: ": {stateURL …}".
var stateDump = regexp.MustCompile(`:? ?\{state[A-Za-z]+ [^}]*\}`)

// escapeCheck runs html/template's escaper on a copy of t, as the first
// rendering would: a part it cannot escape (an action inside an attribute
// name, branches that end in different HTML contexts, an unclosed tag at
// the end) is refused when it is saved, not at an accept. The copy runs on
// no data, bounded as a rendering is; any error but the escaper's is the
// missing data's and ignored.
func escapeCheck(name, part, body string, t *htmltemplate.Template) error {
	c, err := t.Clone()
	if err != nil {
		return err
	}
	b := newBudget(context.Background())
	err = c.Funcs(htmltemplate.FuncMap(b.funcs())).Execute(&limitWriter{b: b}, nil)
	if be := (*BudgetError)(nil); errors.As(err, &be) {
		return &BudgetError{Limit: be.Limit, Budget: be.Budget, File: name}
	}
	var he *htmltemplate.Error
	if !errors.As(err, &he) || he.ErrorCode == htmltemplate.OK {
		return nil
	}
	pe := &ParseError{Part: part, File: name, Line: he.Line, Column: 1, Msg: escapeMessage(he)}
	if he.ErrorCode == htmltemplate.ErrEndContext {
		pe.Line, pe.Column = position(body, len(body)) // it is the end that is unfinished
	} else if at := slashAt(he, body); at >= 0 {
		pe.Line, pe.Column = position(body, at)
	} else if he.Node != nil {
		off := min(int(he.Node.Position()), len(body))
		if j := strings.LastIndex(body[:off], "{{"); j >= 0 {
			off = j
		}
		pe.Line, pe.Column = position(body, off)
	}
	return pe
}

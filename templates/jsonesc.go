package templates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template/parse"

	jsonv2 "github.com/go-json-experiment/json"
)

// A JSON part (push data, a webhook body) is escaped by context, as
// html/template escapes HTML: data pasted in as it is could close a string
// and write keys of its own. At compile time each action that prints is
// given a last command, jsonStr inside a JSON string literal (the value
// becomes string content) or jsonVal outside one (the value becomes one
// whole JSON value, never structure).

// jsonPart reports whether part p of a channel's template is JSON.
func jsonPart(channel, p string) bool {
	return p == "data" || (p == "body" && channel == "webhook")
}

// jsonEscFuncs are the escapers escapeJSON adds to pipelines.
var jsonEscFuncs = map[string]any{"_json_str": jsonStr, "_json_val": jsonVal}

// jsonStr is a value as JSON string content, without the quotes.
// encoding/json also escapes <, >, & and U+2028/2029, so the output is safe
// to embed in HTML or JavaScript too.
func jsonStr(args ...any) (string, error) {
	b, err := json.Marshal(fmt.Sprint(args...))
	if err != nil {
		return "", err
	}
	return string(b[1 : len(b)-1]), nil
}

// jsonVal is a value as one JSON value: a string quoted, a number (data's
// numbers are json.Number) or a bool as written, a map or slice marshalled.
func jsonVal(args ...any) (string, error) {
	var v any = args
	if len(args) == 1 {
		v = args[0]
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// escapeJSON adds an escaper to every printing action in tree, refusing a
// template whose context at an action cannot be known: an {{if}} whose
// branches end one inside a string and one outside, a {{range}} whose body
// does not end where it began, an action right after a backslash.
func escapeJSON(name string, tree *parse.Tree) error {
	e := &jsonEscaper{name: name, tree: tree}
	end, err := e.list(tree.Root, false)
	if err == nil && end {
		err = fmt.Errorf("a JSON string is not closed at the end")
	}
	return err
}

type jsonEscaper struct {
	name string
	tree *parse.Tree
}

// list walks nodes starting inside a string or not, and returns where the
// last one leaves it.
func (e *jsonEscaper) list(l *parse.ListNode, inStr bool) (bool, error) {
	if l == nil {
		return inStr, nil
	}
	for _, n := range l.Nodes {
		var err error
		switch n := n.(type) {
		case *parse.TextNode:
			inStr, err = e.text(n, inStr)
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 { // {{$x := ...}} prints nothing
				continue
			}
			fn := "_json_val"
			if inStr {
				fn = "_json_str"
			} else if endsInJSONHelper(n.Pipe) {
				continue // already one JSON value: quoting it again would make it a string
			}
			id := parse.NewIdentifier(fn).SetTree(e.tree).SetPos(n.Pos)
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{id}})
		case *parse.IfNode:
			inStr, err = e.branch(&n.BranchNode, "if", inStr, false)
		case *parse.WithNode:
			inStr, err = e.branch(&n.BranchNode, "with", inStr, false)
		case *parse.RangeNode:
			inStr, err = e.branch(&n.BranchNode, "range", inStr, true)
		case *parse.TemplateNode:
			err = fmt.Errorf("{{template}} in a JSON part cannot be escaped")
		}
		if err != nil {
			return inStr, err
		}
	}
	return inStr, nil
}

// endsInJSONHelper reports whether the pipeline's last command is the json
// helper, whose output is encoding/json's of one value.
func endsInJSONHelper(p *parse.PipeNode) bool {
	last := p.Cmds[len(p.Cmds)-1]
	id, ok := last.Args[0].(*parse.IdentifierNode)
	return ok && id.Ident == "json"
}

// branch walks an if/with/range: every way through must end in the same
// context, or what follows could not be escaped once for all of them. A
// range body also runs after itself, so it must end where it began.
func (e *jsonEscaper) branch(b *parse.BranchNode, kind string, inStr, loop bool) (bool, error) {
	body, err := e.list(b.List, inStr)
	if err != nil {
		return inStr, err
	}
	alt, err := e.list(b.ElseList, inStr)
	if err != nil {
		return inStr, err
	}
	if body != alt || (loop && body != inStr) {
		line, _ := e.tree.ErrorContext(b)
		return inStr, fmt.Errorf("{{%s}} at %s ends inside a JSON string on one path and outside it on another", kind, line)
	}
	return body, nil
}

// text moves through literal JSON text, tracking strings and escapes.
func (e *jsonEscaper) text(n *parse.TextNode, inStr bool) (bool, error) {
	esc := false
	for _, c := range n.Text {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		}
	}
	if esc {
		line, _ := e.tree.ErrorContext(n)
		return inStr, fmt.Errorf("at %s a backslash ends the text before an action in a JSON string", strings.TrimSpace(line))
	}
	return inStr, nil
}

// checkJSON is the rendered part read as input is read: one JSON value,
// valid UTF-8, and no key given twice (encoding/json/v2's defaults, the
// strict decoding relay.DecodeJSON does; relay imports this package, so it
// cannot be called here).
func checkJSON(b []byte) error {
	var v any
	return jsonv2.Unmarshal(bytes.TrimSpace(b), &v)
}

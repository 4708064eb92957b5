package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The config's YAML is checked against the Config type before any value is
// used. yaml.v3 alone reports in Go's terms ("field rotues not found in type
// config.Config", "cannot unmarshal !!str `ten` into int"), without the key
// path, and its KnownFields stops at the first unknown key. This walk
// reports every unknown key and every value of the wrong kind, each with
// its line and key path, and records where each key is for the checks that
// follow (check.go).

// problem is one thing wrong with the config, at a place in the file.
type problem struct {
	line int    // 0 when the place is not in the file
	path string // "providers.resend.url", "tail[0].source"; "" for the top level
	msg  string
}

func (p problem) String() string {
	switch {
	case p.line > 0 && p.path != "":
		return fmt.Sprintf("line %d (%s): %s", p.line, p.path, p.msg)
	case p.line > 0:
		return fmt.Sprintf("line %d: %s", p.line, p.msg)
	case p.path != "":
		return p.path + ": " + p.msg
	}
	return p.msg
}

// keyPath is a place in the file: mapping keys, and "[i]" for list items.
type keyPath []string

func (k keyPath) String() string {
	var b strings.Builder
	for i, s := range k {
		if i > 0 && !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// id is the path as a map key: keys may hold dots ("otp.requested").
func (k keyPath) id() string { return strings.Join(k, "\x00") }

func (k keyPath) with(s ...string) keyPath { return append(slices.Clip(k), s...) }

// shape is what the walk found.
type shape struct {
	lines    map[string]int  // by keyPath.id: the line of each key the file sets (aliases and merges followed)
	bad      map[string]bool // by keyPath.id: values that did not fit their key (left unset)
	meant    map[string]bool // by keyPath.id: keys an unknown key was taken for ("sorce": "source")
	problems []problem
}

func newShape() *shape {
	return &shape{lines: map[string]int{}, bad: map[string]bool{}, meant: map[string]bool{}}
}

func (s *shape) wrong(n *yaml.Node, at keyPath, format string, args ...any) {
	s.bad[at.id()] = true
	s.problems = append(s.problems, problem{line: n.Line, path: at.String(), msg: fmt.Sprintf(format, args...)})
}

// badUnder reports whether a value at or under at did not fit: the checks
// of what it would have set are then skipped, not reported a second time.
func (s *shape) badUnder(at keyPath) bool {
	p := at.id()
	for b := range s.bad {
		if b == p || strings.HasPrefix(b, p+"\x00") {
			return true
		}
	}
	return false
}

var (
	durationType   = reflect.TypeFor[Duration]()
	stringListType = reflect.TypeFor[StringList]()
	textType       = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walk checks n against the Go type t. The decoder has already run on the
// same tree, so aliases are known not to loop.
func (s *shape) walk(n *yaml.Node, t reflect.Type, at keyPath) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // written but empty: unset
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			s.wrong(n, at, "want a duration such as 90s, 15m or 12h, got %s", describe(n))
		} else if _, err := parseDuration(n.Value); err != nil {
			s.wrong(n, at, "%v", err)
		}
		return
	case t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(textType):
		// A value that reads itself from text (a workflow's durations):
		// its own error says what it wants.
		if n.Kind != yaml.ScalarNode {
			s.wrong(n, at, "want a single value, got %s", describe(n))
		} else if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			s.wrong(n, at, "%v", err)
		}
		return
	case t == stringListType:
		items := []*yaml.Node{n}
		if n.Kind == yaml.SequenceNode {
			items = n.Content
		}
		for _, it := range items {
			for it.Kind == yaml.AliasNode {
				it = it.Alias
			}
			if it.Kind != yaml.ScalarNode {
				s.wrong(it, at, "want a provider name or URL, or a list of them, got %s", describe(it))
				return
			}
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		s.walk(n, t.Elem(), at)
	case reflect.Struct:
		fields := yamlFields(t)
		if n.Kind != yaml.MappingNode {
			s.wrong(n, at, "want a mapping (keys: %s), got %s", strings.Join(sortedKeys(fields), ", "), describe(n))
			return
		}
		kvs := entries(n)
		set := map[string]bool{}
		for _, kv := range kvs {
			set[kv[0].Value] = true
		}
		for _, kv := range kvs {
			k, v := kv[0], kv[1]
			f, ok := fields[k.Value]
			if !ok {
				s.unknownKey(k, at, sortedKeys(fields), set)
				continue
			}
			s.lines[at.with(k.Value).id()] = k.Line
			s.walk(v, f.Type, at.with(k.Value))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			s.wrong(n, at, "want a mapping, got %s", describe(n))
			return
		}
		for _, kv := range entries(n) {
			k, v := kv[0], kv[1]
			if k.Kind != yaml.ScalarNode {
				s.wrong(k, at, "want a name as the key, got %s", describe(k))
				continue
			}
			s.lines[at.with(k.Value).id()] = k.Line
			s.walk(v, t.Elem(), at.with(k.Value))
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			s.wrong(n, at, "want a list, got %s", describe(n))
			return
		}
		for i, item := range n.Content {
			p := at.with("[" + strconv.Itoa(i) + "]")
			s.lines[p.id()] = item.Line
			s.walk(item, t.Elem(), p)
		}
	default:
		s.scalar(n, t, at)
	}
}

// scalar checks a value for a string, number or boolean key by decoding it
// as yaml.v3 will, and says what was wanted in the file's terms.
func (s *shape) scalar(n *yaml.Node, t reflect.Type, at keyPath) {
	whole := false
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		whole = true
	}
	// yaml.v3 truncates 1.5 into an int: a whole number must be written as one.
	if n.Kind == yaml.ScalarNode && (!whole || n.ShortTag() == "!!int") && n.Decode(reflect.New(t).Interface()) == nil {
		return
	}
	var want string
	switch {
	case whole:
		want = "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "a number"
	case t.Kind() == reflect.Bool:
		want = "true or false"
	case t.Kind() == reflect.String:
		want = "a string"
	default:
		want = "a " + t.Kind().String()
	}
	got := describe(n)
	// A quoted number is a string in YAML: say so, or "got "8"" puzzles.
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		var num yaml.Node
		if yaml.Unmarshal([]byte(n.Value), &num) == nil && len(num.Content) == 1 && num.Content[0].Kind == yaml.ScalarNode &&
			(!whole || num.Content[0].ShortTag() == "!!int") && num.Content[0].Decode(reflect.New(t).Interface()) == nil {
			got = "the string " + strconv.Quote(n.Value) + " (write it without quotes)"
		}
	}
	s.wrong(n, at, "want %s, got %s", want, got)
}

// unknownKey reports a key the level does not have, with the closest
// known key when one is close enough to be what was meant.
// The key it suggests, when the mapping does not set it, is marked meant:
// "source is required" after "unknown key `sorce`" would say it twice.
func (s *shape) unknownKey(k *yaml.Node, at keyPath, known []string, set map[string]bool) {
	msg := fmt.Sprintf("unknown key `%s`", k.Value)
	if m, ok := closest(k.Value, known); ok {
		msg += fmt.Sprintf(" (did you mean `%s`?)", m)
		if !set[m] {
			s.meant[at.with(m).id()] = true
		}
	} else {
		msg += " (known here: " + strings.Join(known, ", ") + ")"
	}
	s.problems = append(s.problems, problem{line: k.Line, path: at.String(), msg: msg})
}

// entries returns a mapping's key/value pairs, with "<<" merges expanded
// first (the mapping's own keys win, as yaml.v3 decodes them).
func entries(n *yaml.Node) [][2]*yaml.Node {
	var merged, own [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!merge" {
			own = append(own, [2]*yaml.Node{k, v})
			continue
		}
		for v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, m := range sources {
			for m.Kind == yaml.AliasNode {
				m = m.Alias
			}
			if m.Kind == yaml.MappingNode {
				merged = append(merged, entries(m)...)
			}
		}
	}
	return append(merged, own...)
}

// yamlFields maps a struct's YAML keys to its fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

// describe names what a node holds: `"ten"`, `1.5`, `a mapping`, `a list`.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	return "nothing"
}

// closest returns the candidate nearest to s when it is close enough to be
// a slip of the keyboard: within one edit for short words, two or three for
// longer ones, compared without case.
func closest(s string, candidates []string) (string, bool) {
	limit := min(3, 1+len(s)/5)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best, best != "" && best != s
}

// editDistance counts the insertions, deletions, substitutions and swaps
// of neighbours that turn a into b (optimal string alignment), so that
// "rotues" is one edit from "routes".
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

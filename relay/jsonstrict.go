package relay

import (
	"bytes"
	"encoding"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// JSONError says where a JSON document broke the rules DecodeJSON keeps.
type JSONError struct {
	// Field is the JSON path of the offending part ("members[0].emial",
	// "data.lines[1].sku"); "" for the document as a whole, or for a key
	// of the top-level object.
	Field  string
	Reason string

	trailing bool // more than one JSON value
}

func (e *JSONError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// DecodeOption changes what DecodeJSON checks.
type DecodeOption int

const (
	// RawAsSent leaves each json.RawMessage in the target as sent, for its
	// own decoder to judge (a batch's events are each accepted or refused
	// on their own); everything around them is decoded strictly.
	RawAsSent DecodeOption = iota + 1
)

// strictOptions: unknown fields are errors (a misspelt "recipents" must
// not send to nobody). jsontext's defaults do the rest: invalid UTF-8, a
// lone UTF-16 surrogate escape and a key given twice are errors, and names
// match fields exactly (encoding/json would let "ID" fill or overwrite "id").
var strictOptions = jsonv2.RejectUnknownMembers(true)

// DecodeJSON decodes exactly one JSON value from b into v, which must be a
// pointer, and refuses what encoding/json lets through silently: bytes
// that are not UTF-8 and lone surrogate escapes (which it turns into
// U+FFFD, so that "c\xff" and "c\xfe" decode alike), keys given twice (it
// keeps the last), keys that differ from a field name only in case, and
// unknown fields. Every error is a *JSONError naming the JSON path.
//
// Decoding is encoding/json/v2's (go-json-experiment/json): for every
// document it accepts, the result is what encoding/json with
// DisallowUnknownFields gives (FuzzDecodeEvent checks it for events).
func DecodeJSON(b []byte, v any, opts ...DecodeOption) error {
	err := jsonv2.Unmarshal(b, v, strictOptions)
	if err == nil {
		return nil
	}
	var sem *jsonv2.SemanticError
	if errors.As(err, &sem) {
		return semanticError(sem, reflect.TypeOf(v))
	}
	fault := locate(b, reflect.TypeOf(v))
	if fault == nil {
		// The walk found nothing the decoder did: say what the decoder said.
		return &JSONError{Reason: "malformed JSON: " + strings.TrimPrefix(err.Error(), "jsontext: ")}
	}
	if fault.strict && slices.Contains(opts, RawAsSent) {
		return decodeRawAsSent(b, v)
	}
	return &fault.JSONError
}

// fault is the first syntactic fault in a document.
type fault struct {
	JSONError
	strict bool  // a fault encoding/json would not have reported
	at     int64 // its byte offset
}

// locate reads b token by token to find and name its first syntactic
// fault, nil if it has none. It runs only after a decode failed, so it
// may take its time; the decoder's stack says which steps of the path are
// array indexes and which object keys.
func locate(b []byte, target reflect.Type) *fault {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.ReadToken()
		if err == nil {
			if dec.StackDepth() > 0 {
				continue
			}
			// The first value is complete: only white space may follow.
			_, err = dec.ReadToken()
			if err == io.EOF {
				return nil
			}
			if f := badText(b, err, dec); f != nil {
				return f
			}
			return &fault{JSONError: JSONError{Reason: "more than one JSON value", trailing: true}}
		}
		if err == io.EOF {
			return &fault{JSONError: JSONError{Reason: "empty input, want " + describe(target, true)}}
		}
		if f := badText(b, err, dec); f != nil {
			return f
		}
		var se *jsontext.SyntacticError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return &fault{JSONError: JSONError{Reason: "truncated JSON"}}
		case errors.As(err, &se):
			return &fault{JSONError: JSONError{Reason: fmt.Sprintf("malformed JSON at byte %d: %v", se.ByteOffset, se.Err)}}
		}
		return &fault{JSONError: JSONError{Reason: err.Error()}}
	}
}

// badText names the faults encoding/json lets through: bytes that are not
// UTF-8, a lone surrogate escape, a key given twice. nil for any other.
func badText(b []byte, err error, dec *jsontext.Decoder) *fault {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return nil
	}
	if errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return &fault{strict: true, at: se.ByteOffset, JSONError: JSONError{
			Field:  jsonPath(se.JSONPointer, dec),
			Reason: fmt.Sprintf("key %q given twice", se.JSONPointer.LastToken())}}
	}
	off := se.ByteOffset
	if off < 0 || off >= int64(len(b)) {
		return nil
	}
	// The decoder stops at the first byte it cannot take; what is there
	// says why. A key is named by the object that holds it: the key itself
	// cannot be shown as sent.
	at := b[off:]
	var reason string
	if r, n := utf8.DecodeRune(at); r == utf8.RuneError && n <= 1 {
		reason = fmt.Sprintf("not valid UTF-8 as sent (byte 0x%02x at offset %d)", at[0], off)
	} else if len(at) >= 6 && at[0] == '\\' && at[1] == 'u' {
		v, err := strconv.ParseUint(string(at[2:6]), 16, 16)
		if err != nil || !utf16.IsSurrogate(rune(v)) {
			return nil
		}
		reason = "lone UTF-16 surrogate " + string(at[:6])
	} else {
		return nil
	}
	field := jsonPath(se.JSONPointer, dec)
	if d := dec.StackDepth(); d > 0 {
		if k, n := dec.StackIndex(d); k == '{' && n%2 == 0 {
			// Inside an object, where a key comes next: the fault is in it.
			if strings.HasPrefix(reason, "lone") {
				reason = "a key has a " + reason
			} else {
				reason = "a key is " + reason
			}
		}
	}
	return &fault{strict: true, at: off, JSONError: JSONError{Field: field, Reason: reason}}
}

// jsonPath writes a JSON Pointer ("/recipients/1/id") in the project's
// style ("recipients[1].id"), with the decoder's stack telling indexes
// from keys (a key may be "1" too).
func jsonPath(p jsontext.Pointer, dec *jsontext.Decoder) string {
	var sb strings.Builder
	level := 1
	for tok := range p.Tokens() {
		index := false
		if level <= dec.StackDepth() {
			k, _ := dec.StackIndex(level)
			index = k == '['
		}
		writeStep(&sb, tok, index)
		level++
	}
	return sb.String()
}

func writeStep(sb *strings.Builder, tok string, index bool) {
	switch {
	case index:
		sb.WriteString("[" + tok + "]")
	case sb.Len() > 0:
		sb.WriteString("." + tok)
	default:
		sb.WriteString(tok)
	}
}

var (
	rawMessageType  = reflect.TypeFor[stdjson.RawMessage]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// semanticError says in JSON's words (not Go's) what did not fit where.
func semanticError(sem *jsonv2.SemanticError, target reflect.Type) error {
	field := typePath(sem.JSONPointer, target)
	if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
		return &JSONError{Field: field, Reason: "unknown field"}
	}
	if sem.JSONKind == '"' && sem.Err != nil && sem.GoType != nil && reflect.PointerTo(sem.GoType).Implements(textUnmarshaler) {
		// A string the type read and refused (a duration): its own words
		// say what it wants.
		return &JSONError{Field: field, Reason: sem.Err.Error()}
	}
	got := map[jsontext.Kind]string{'n': "null", 't': "true", 'f': "false", '"': "a string", '0': "a number",
		'{': "an object", '[': "an array"}[sem.JSONKind]
	if sem.JSONKind == '0' && len(sem.JSONValue) > 0 {
		got = string(sem.JSONValue)
	}
	if got == "" {
		got = "something else"
	}
	reason := fmt.Sprintf("want %s, got %s", describe(sem.GoType, field == ""), got)
	if sem.Err != nil && strings.Contains(sem.Err.Error(), "out of range") {
		reason += " (out of range)"
	}
	return &JSONError{Field: field, Reason: reason}
}

// typePath writes a JSON Pointer in the project's style, with the target's
// Go type telling indexes from keys.
func typePath(p jsontext.Pointer, t reflect.Type) string {
	var sb strings.Builder
	for tok := range p.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == nil || t == rawMessageType:
			t = nil
			writeStep(&sb, tok, false)
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
			t = t.Elem()
			writeStep(&sb, tok, true)
		case t.Kind() == reflect.Map:
			t = t.Elem()
			writeStep(&sb, tok, false)
		case t.Kind() == reflect.Struct:
			t = fieldType(t, tok)
			writeStep(&sb, tok, false)
		default:
			t = nil
			writeStep(&sb, tok, false)
		}
	}
	return sb.String()
}

// fieldType is the type of the struct field named name in JSON, nil if none.
func fieldType(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" {
			tag = f.Name
		}
		if tag == name && f.IsExported() {
			return f.Type
		}
	}
	return nil
}

// describe names the JSON a Go type takes: "an array", or at the top "a
// JSON array".
func describe(t reflect.Type, top bool) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	noun := "value"
	switch {
	case t == nil || t == rawMessageType || t.Kind() == reflect.Interface:
		return "a JSON value"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uintptr:
		noun = "integer"
	case t.Kind() == reflect.String:
		noun = "string"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		noun = "number"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		noun = "array"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		noun = "object"
	}
	switch {
	case top:
		return "a JSON " + noun
	case strings.ContainsRune("aeiou", rune(noun[0])):
		return "an " + noun
	}
	return "a " + noun
}

// decodeRawAsSent decodes b into v with every json.RawMessage taken as
// sent, after checking strictly everything outside them. Only a document
// with a fault inside one comes here, so it may take two passes.
func decodeRawAsSent(b []byte, v any) error {
	var spans [][2]int64
	keep := jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, m *stdjson.RawMessage) error {
		val, err := dec.ReadValue()
		if err != nil {
			return err
		}
		end := dec.InputOffset()
		spans = append(spans, [2]int64{end - int64(len(val)), end})
		*m = append((*m)[:0], val...)
		return nil
	})
	reflect.ValueOf(v).Elem().SetZero()
	err := jsonv2.Unmarshal(b, v, strictOptions, jsonv2.WithUnmarshalers(keep),
		jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	// Blank each raw value out (a 0 and spaces: the same length, so the
	// offsets hold) and check what is left strictly.
	rest := bytes.Clone(b)
	for _, s := range spans {
		rest[s[0]] = '0'
		for i := s[0] + 1; i < s[1]; i++ {
			rest[i] = ' '
		}
	}
	var f *fault
	if err != nil || !jsontext.Value(rest).IsValid() {
		f = locate(rest, reflect.TypeOf(v))
	}
	if err == nil {
		if f != nil {
			return &f.JSONError
		}
		return nil
	}
	// The decode stopped at err; the raw values before it are blanked, so
	// a strict fault before it is outside them, and came first.
	var sem *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &sem):
		if f != nil && f.strict && f.at < tokenEnd(rest, sem.ByteOffset) {
			return &f.JSONError
		}
		return semanticError(sem, reflect.TypeOf(v))
	case errors.As(err, &syn) && f != nil && f.at <= syn.ByteOffset:
		return &f.JSONError
	}
	return &JSONError{Reason: "malformed JSON: " + strings.TrimPrefix(err.Error(), "jsontext: ")}
}

// tokenEnd is the offset just past the key or value that starts at off.
func tokenEnd(b []byte, off int64) int64 {
	if off < 0 || off >= int64(len(b)) {
		return off
	}
	dec := jsontext.NewDecoder(bytes.NewReader(b[off:]), jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	if _, err := dec.ReadValue(); err != nil {
		return off
	}
	return off + dec.InputOffset()
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/edgerelay/edgerelay/model"
)

func TestKeyDeterministicAndDistinct(t *testing.T) {
	t.Parallel()
	base := []string{"default", "evt_1", "receipt", "ada", "email"}
	k := Key(base[0], base[1], base[2], base[3], base[4])
	if again := Key(base[0], base[1], base[2], base[3], base[4]); again != k {
		t.Fatalf("same inputs gave %s then %s", k, again)
	}
	if !strings.HasPrefix(k, "er1_") || len(k) != len("er1_")+40 {
		t.Errorf("key %q: want er1_ and 40 hex digits", k)
	}

	seen := map[string]string{k: fmt.Sprint(base)}
	add := func(f []string) {
		t.Helper()
		kk := Key(f[0], f[1], f[2], f[3], f[4])
		if prev, dup := seen[kk]; dup {
			t.Errorf("%q and %s share key %s", f, prev, kk)
		}
		seen[kk] = fmt.Sprintf("%q", f)
	}
	// Each field on its own changes the key.
	for i := range base {
		f := append([]string(nil), base...)
		f[i] += "x"
		add(f)
	}
	// No shift of characters across a field boundary collides: the fields
	// are length-prefixed, not joined with a separator.
	for i := range len(base) - 1 {
		for _, pair := range [][2]string{{"a:b", "c"}, {"a", "b:c"}, {"ab", ""}, {"", "ab"}, {"a", "b"}} {
			f := append([]string(nil), base...)
			f[i], f[i+1] = pair[0], pair[1]
			add(f)
		}
	}
	// A separator-joined derivation would collide here.
	if Key("a:b", "c", "p", "r", "email") == Key("a", "b:c", "p", "r", "email") {
		t.Error(`Key("a:b", "c", …) == Key("a", "b:c", …)`)
	}
}

// The derivation is versioned by its prefix: changing it silently would
// break dedupe against every key stored and every key providers remember.
func TestKeyIsStable(t *testing.T) {
	t.Parallel()
	const want = "er1_7c3d720c16561f8c8e3a8757745d8cf29a5275af"
	if got := Key("default", "evt_501", "receipt", "ada", "email"); got != want {
		t.Errorf("Key changed: got %s, want %s (bump the er1_ prefix if this is deliberate)", got, want)
	}
}

const okRecipients = `"recipients": [{"id": "ada", "email": "ada@example.com"}]`

func TestDecodeAndNormalizeReject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		max    int    // recipient cap for Normalize; 0 means none
		field  string // want InvalidEventError.Field
		reason string // want a substring of its Reason
	}{
		{"missing id", `{"type": "t", ` + okRecipients + `}`, 0, "id", "required"},
		{"missing type", `{"id": "e", ` + okRecipients + `}`, 0, "type", "required"},
		{"empty recipients", `{"id": "e", "type": "t", "recipients": []}`, 0, "recipients", "at least one"},
		{"no recipients field", `{"id": "e", "type": "t"}`, 0, "recipients", "at least one"},
		{"recipient without id", `{"id": "e", "type": "t", "recipients": [{"email": "a@x"}]}`, 0, "recipients[0].id", "required"},
		{"duplicate recipient id", `{"id": "e", "type": "t", "recipients": [{"id": "a", "email": "a@x"}, {"id": "a", "email": "b@x"}]}`, 0, "recipients[1].id", "twice"},
		{"no address for a listed channel", `{"id": "e", "type": "t", "channels": ["email", "sms"], ` + okRecipients + `}`, 0, "recipients[0]", `channel "sms"`},
		{"no address at all", `{"id": "e", "type": "t", "recipients": [{"id": "a"}]}`, 0, "recipients[0]", "no address"},
		{"unknown field", `{"id": "e", "type": "t", "recipents": [{"id": "a", "email": "a@x"}]}`, 0, "recipents", "unknown field"},
		{"bad tenant", `{"id": "e", "type": "t", "tenant": "acme corp", ` + okRecipients + `}`, 0, "tenant", "acme corp"},
		{"bad channel name", `{"id": "e", "type": "t", "channels": ["Email"], ` + okRecipients + `}`, 0, "channels[0]", "lower-case"},
		{"channel twice", `{"id": "e", "type": "t", "channels": ["email", "email"], ` + okRecipients + `}`, 0, "channels[1]", "twice"},
		{"bad address channel", `{"id": "e", "type": "t", "recipients": [{"id": "a", "addresses": {"Chat!": "#ops"}}]}`, 0, "recipients[0].addresses", "not a channel"},
		{"id is a number", `{"id": 42, "type": "t", ` + okRecipients + `}`, 0, "id", "number"},
		{"two JSON values", `{"id": "e", "type": "t", ` + okRecipients + `} {"id": "f"}`, 0, "", "more than one JSON value"},
		{"empty input", ``, 0, "", "empty input"},
		{"only white space", " \n\t", 0, "", "empty input"},
		{"truncated JSON", `{"id": "e", "type": "t", "recip`, 0, "", "truncated"},
		{"not an object", `["e"]`, 0, "", "want a JSON object"},
		{"malformed JSON", `{"id": "e",, }`, 0, "", "malformed JSON"},
		{"control character in id", `{"id": "evt\u00071", "type": "t", ` + okRecipients + `}`, 0, "id", "control character"},
		{"white space around id", `{"id": " evt", "type": "t", ` + okRecipients + `}`, 0, "id", "white space"},
		{"id too long", `{"id": "` + strings.Repeat("x", 257) + `", "type": "t", ` + okRecipients + `}`, 0, "id", "longer than 256"},
		{"control character in recipient id", `{"id": "e", "type": "t", "recipients": [{"id": "a\nb", "email": "a@x"}]}`, 0, "recipients[0].id", "control character"},
		{"control character in address", `{"id": "e", "type": "t", "recipients": [{"id": "a", "email": "a@x\r\nBcc: all@x"}]}`, 0, "recipients[0]", "control character"},
		{"too many recipients", `{"id": "e", "type": "t", "recipients": [{"id": "a", "email": "a@x"}, {"id": "b", "email": "b@x"}, {"id": "c", "email": "c@x"}]}`, 2, "recipients", "limit of 2"},
		{"valid, for contrast", `{"id": "e", "type": "t", "data": {"a": 1}, ` + okRecipients + `}`, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := DecodeEvent(strings.NewReader(tt.in))
			if err == nil {
				err = ev.Normalize(tt.max)
			}
			if tt.field == "" && tt.reason == "" {
				if err != nil {
					t.Fatalf("valid event rejected: %v", err)
				}
				return
			}
			var ie *InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v (%T), want *InvalidEventError", err, err)
			}
			if ie.Field != tt.field || !strings.Contains(ie.Reason, tt.reason) {
				t.Errorf("got field %q reason %q, want field %q reason containing %q", ie.Field, ie.Reason, tt.field, tt.reason)
			}
			if !strings.HasPrefix(ie.Error(), "invalid event: ") {
				t.Errorf("message %q", ie.Error())
			}
		})
	}
}

func TestNormalizeDefaults(t *testing.T) {
	t.Parallel()
	ev, err := DecodeEvent(strings.NewReader(`{"id": "e", "type": "payment.succeeded",
		"recipients": [{"id": "a", "email": "a@x", "addresses": {"chat": "#a", "email": "override@x"}}],
		"data": {"b": [1, 2.50, {"z": 1, "y": null}], "a": "<&>"}}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Normalize(0); err != nil {
		t.Fatal(err)
	}
	if ev.Tenant != "default" || ev.Purpose != "payment.succeeded" {
		t.Errorf("tenant %q purpose %q, want default and the type", ev.Tenant, ev.Purpose)
	}
	if got, want := string(ev.Data), `{"a":"\u003c\u0026\u003e","b":[1,2.50,{"y":null,"z":1}]}`; got != want {
		t.Errorf("data %s, want %s (sorted keys, numbers as written)", got, want)
	}
	ts := ev.targets()
	if len(ts) != 2 || ts[0].Channel != "email" || ts[0].Address != "override@x" || ts[1].Channel != "chat" || ts[1].Address != "#a" {
		t.Errorf("targets %+v, want email to override@x then chat to #a", ts)
	}
}

func TestAcceptFingerprint(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := context.Background()
	ev := receipt("evt_9", ada)
	ev.Data = []byte(`{"amount": {"value": 2000, "currency": "EUR"}, "lines": [{"sku": "a", "n": 1}]}`)
	first := accept(t, r, ev)
	if first.Duplicate || len(first.Notifications) != 1 {
		t.Fatalf("first accept %+v", first)
	}

	// The same event with its data's keys reordered and re-spaced.
	reordered := ev
	reordered.Data = []byte("{\n  \"lines\": [{\"n\": 1, \"sku\": \"a\"}],\n  \"amount\": {\"currency\": \"EUR\", \"value\": 2000}\n}")
	second, err := r.Accept(ctx, reordered)
	if err != nil {
		t.Fatalf("reordered data: %v, want a duplicate", err)
	}
	if !second.Duplicate || len(second.Notifications) != 1 || second.Notifications[0] != first.Notifications[0] {
		t.Errorf("reordered data: %+v, want a duplicate of %+v", second, first)
	}

	for name, change := range map[string]func(*Event){
		"body": func(e *Event) { e.Body = "Thanks, again." },
		"data value": func(e *Event) {
			e.Data = []byte(`{"amount": {"value": 2001, "currency": "EUR"}, "lines": [{"sku": "a", "n": 1}]}`)
		},
		"recipient": func(e *Event) { e.Recipients = []Recipient{ada, {ID: "ben", Email: "ben@example.com"}} },
		"address":   func(e *Event) { e.Recipients = []Recipient{{ID: "ada", Email: "ada@elsewhere.example"}} },
	} {
		changed := ev
		change(&changed)
		_, err := r.Accept(ctx, changed)
		if !errors.Is(err, model.ErrEventConflict) {
			t.Errorf("changed %s: %v, want ErrEventConflict", name, err)
		}
	}
	if c := counts(t, r); c[model.StatusPending] != 1 {
		t.Errorf("counts %v, want the one notification of the first accept", c)
	}
	// A different purpose is a different event, not a conflict.
	other := ev
	other.Purpose = "ledger"
	res := accept(t, r, other)
	if res.Duplicate || res.Notifications[0].Key == first.Notifications[0].Key {
		t.Errorf("other purpose: %+v, want a new notification with its own key", res)
	}
}

// encoding/json turns invalid UTF-8 and lone surrogate escapes into U+FFFD
// and keeps the last of two equal keys, before any validation: "c\xff",
// "c\xfe" and "c\ud800" were one event, and a body was silently changed.
// DecodeEvent refuses each, anywhere in the event, naming the JSON path.
func TestDecodeEventStrict(t *testing.T) {
	t.Parallel()
	// at is the reason for the first byte of doc that is not UTF-8.
	at := func(doc string) string {
		i := strings.IndexFunc(doc, func(r rune) bool { return r == utf8.RuneError })
		return fmt.Sprintf("not valid UTF-8 as sent (byte 0x%02x at offset %d)", doc[i], i)
	}
	ev := func(fields string) string { return `{"id": "e", "type": "t", ` + fields + `}` }
	rcpt := `"recipients": [{"id": "ada", "email": "ada@example.com"}, `
	tests := []struct {
		name   string
		in     string
		field  string
		reason string // "" means at(in)
	}{
		{"invalid byte in id", `{"id": "c` + "\xff" + `", "type": "t", ` + okRecipients + `}`, "id", ""},
		{"another invalid byte in id", `{"id": "c` + "\xfe" + `", "type": "t", ` + okRecipients + `}`, "id", ""},
		{"invalid byte in recipients[1].id", ev(rcpt + `{"id": "b` + "\xff" + `", "email": "b@x"}]`), "recipients[1].id", ""},
		{"invalid byte in tenant", ev(`"tenant": "acme` + "\xff" + `", ` + okRecipients), "tenant", ""},
		{"invalid byte in purpose", ev(`"purpose": "r` + "\xff" + `", ` + okRecipients), "purpose", ""},
		{"invalid byte in type", `{"id": "e", "type": "t` + "\xff" + `", ` + okRecipients + `}`, "type", ""},
		{"invalid byte in audience", `{"id": "e", "type": "t", "audience": "team` + "\xff" + `"}`, "audience", ""},
		{"invalid byte in feeds[0]", `{"id": "e", "type": "t", "feeds": ["news` + "\xff" + `", "*"]}`, "feeds[0]", ""},
		{"invalid byte in an address", ev(`"recipients": [{"id": "a", "addresses": {"chat": "#ops` + "\xff" + `"}}]`), "recipients[0].addresses.chat", ""},
		{"invalid byte in data.x", ev(okRecipients + `, "data": {"x": "1` + "\xff" + `"}`), "data.x", ""},
		{"invalid byte deep in data", ev(okRecipients + `, "data": {"lines": [{"sku": "a"}, {"sku": "` + "\xff" + `"}]}`), "data.lines[1].sku", ""},
		{"invalid byte in body", ev(okRecipients + `, "body": "Thanks ` + "\xff" + `"`), "body", ""},
		{"overlong encoding", ev(okRecipients + `, "subject": "` + "\xc0\xaf" + `"`), "subject", ""},
		{"UTF-8 encoded surrogate", `{"id": "c` + "\xed\xa0\x80" + `", "type": "t", ` + okRecipients + `}`, "id", ""},
		{"invalid byte in a key", `{"id": "e", "ty` + "\xff" + `pe": "t", ` + okRecipients + `}`, "", "a key is " + at(`{"id": "e", "ty`+"\xff")},
		{"invalid byte in a recipient's key", ev(`"recipients": [{"id": "a", "em` + "\xff" + `ail": "a@x"}]`), "recipients[0]", "a key is " + at(ev(`"recipients": [{"id": "a", "em`+"\xff"))},
		{"invalid byte outside a string", `{"id": "e"}` + "\xff", "", ""},
		{"lone high surrogate", `{"id": "c\ud800", "type": "t", ` + okRecipients + `}`, "id", `lone UTF-16 surrogate \ud800`},
		{"lone low surrogate", ev(`"recipients": [{"id": "\uDC00a", "email": "a@x"}]`), "recipients[0].id", `lone UTF-16 surrogate \uDC00`},
		{"high surrogate then a letter", ev(okRecipients + `, "data": {"note": "\ud83d\u0041"}`), "data.note", `lone UTF-16 surrogate \ud83d`},
		{"two high surrogates", ev(okRecipients + `, "data": {"note": "\ud83d\ud83d"}`), "data.note", `lone UTF-16 surrogate \ud83d`},
		{"lone surrogate in a key", ev(okRecipients + `, "data": {"\ud800": 1}`), "data", `a key has a lone UTF-16 surrogate \ud800`},
		{"duplicate key at the top", `{"id": "a", "type": "t", "id": "b", ` + okRecipients + `}`, "id", `key "id" given twice`},
		{"duplicate key in a recipient", ev(`"recipients": [{"id": "a", "email": "a@x", "email": "b@x"}]`), "recipients[0].email", `key "email" given twice`},
		{"duplicate key in data", ev(okRecipients + `, "data": {"amount": 1, "amount": 2}`), "data.amount", `key "amount" given twice`},
		{"duplicate key deep in data", ev(okRecipients + `, "data": {"1": [{"a": 1, "a": 1}]}`), "data.1[0].a", `key "a" given twice`},
		{"key differing only in case", ev(`"ID": "b", ` + okRecipients), "ID", "unknown field"},
		{"unknown field in a recipient", ev(`"recipients": [{"id": "a", "emial": "a@x"}]`), "recipients[0].emial", "unknown field"},
		{"recipient is a string", ev(`"recipients": ["ada"]`), "recipients[0]", "want an object, got a string"},
		{"channels is an object", ev(`"channels": {"email": true}, ` + okRecipients), "channels", "want an array, got an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.reason == "" {
				tt.reason = at(tt.in)
			}
			_, err := DecodeEvent(strings.NewReader(tt.in))
			var ie *InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v (%T), want *InvalidEventError", err, err)
			}
			if ie.Field != tt.field || ie.Reason != tt.reason {
				t.Errorf("got field %q reason %q,\nwant field %q reason %q", ie.Field, ie.Reason, tt.field, tt.reason)
			}
			if strings.Contains(ie.Error(), "Go ") || strings.Contains(ie.Error(), "relay.") || !utf8.ValidString(ie.Error()) {
				t.Errorf("message %q: want JSON's words, valid UTF-8", ie.Error())
			}
		})
	}

	// What is valid as sent stays valid: a surrogate pair, U+FFFD itself
	// (escaped or not), keys equal only once unescaped are still one key
	// given twice.
	for in, wantID := range map[string]string{
		`"c\ud83d\ude00"`: "c\U0001F600",
		`"c\uD83D\uDE00"`: "c\U0001F600",
		`"c\ufffd"`:       "c\ufffd",
		`"c` + "\uFFFD\"": "c\ufffd",
		`"caf\u00e9"`:     "café",
	} {
		got, err := DecodeEvent(strings.NewReader(`{"id": ` + in + `, "type": "t", ` + okRecipients + `}`))
		if err != nil || got.ID != wantID {
			t.Errorf("id %s: got %q, %v; want %q", in, got.ID, err, wantID)
		}
	}
	_, err := DecodeEvent(strings.NewReader(`{"id": "a", "\u0069d": "b", "type": "t", ` + okRecipients + `}`))
	var ie *InvalidEventError
	if !errors.As(err, &ie) || ie.Field != "id" || ie.Reason != `key "id" given twice` {
		t.Errorf(`"id" and "\u0069d": %v, want id given twice`, err)
	}
}

func TestIsControlRune(t *testing.T) {
	for _, c := range []struct {
		r    rune
		want bool
	}{
		{0x00, true}, {0x1b, true}, {0x1f, true}, {0x7f, true}, {0x80, true}, {0x9f, true},
		{0x200e, true}, {0x200f, true}, {0x202a, true}, {0x202e, true}, {0x2066, true}, {0x2069, true}, {0x061c, true},
		{'a', false}, {' ', false}, {0xa0, false}, {0xe9, false}, {0x200d, false}, {0x2070, false}, {0x2029, false},
	} {
		if got := IsControlRune(c.r); got != c.want {
			t.Errorf("IsControlRune(%U) = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestShowControls(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"line one\n\tline two", "line one\n\tline two"},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"abc\u202edef", `abc\u202edef`},
		{"\u0085x", `\x85x`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"café", "café"},
	} {
		if got := ShowControls(c.in); got != c.want {
			t.Errorf("ShowControls(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

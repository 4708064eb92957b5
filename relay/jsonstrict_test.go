package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The bodies the API decodes besides events, in the shapes it uses: errors
// name the JSON path and speak JSON, never Go.
func TestDecodeJSONBodies(t *testing.T) {
	t.Parallel()
	type members struct {
		Members []Recipient `json:"members"`
	}
	type feedMembers struct {
		Members []string `json:"members"`
		History bool     `json:"history"`
	}
	type readAll struct {
		UpTo *int64 `json:"up_to"`
	}
	type envelope struct {
		Events []json.RawMessage `json:"events"`
	}
	tests := []struct {
		name   string
		in     string
		into   func() any
		field  string
		reason string
	}{
		{"unknown nested field", `{"members": [{"id": "a", "email": "a@x"}, {"id": "b", "emial": "b@x"}]}`,
			func() any { return new(members) }, "members[1].emial", "unknown field"},
		{"member is a string", `{"members": ["ada"]}`, func() any { return new(members) }, "members[0]", "want an object, got a string"},
		{"member id is a number", `{"members": [{"id": 7}]}`, func() any { return new(members) }, "members[0].id", "want a string, got a number"},
		{"invalid byte in a member id", `{"members": [{"id": "a` + "\xff" + `"}]}`, func() any { return new(members) },
			"members[0].id", "not valid UTF-8 as sent (byte 0xff at offset 22)"},
		{"member id given twice", `{"members": [{"id": "a", "id": "b"}]}`, func() any { return new(members) }, "members[0].id", `key "id" given twice`},
		{"feed member lone surrogate", `{"members": ["ada", "\udfff"]}`, func() any { return new(feedMembers) }, "members[1]", `lone UTF-16 surrogate \udfff`},
		{"history is a string", `{"members": [], "history": "yes"}`, func() any { return new(feedMembers) }, "history", "want true or false, got a string"},
		{"up_to is a string", `{"up_to": "7"}`, func() any { return new(readAll) }, "up_to", "want an integer, got a string"},
		{"up_to is a fraction", `{"up_to": 1.5}`, func() any { return new(readAll) }, "up_to", "want an integer, got 1.5"},
		{"up_to is too large", `{"up_to": 99999999999999999999}`, func() any { return new(readAll) }, "up_to", "want an integer, got 99999999999999999999 (out of range)"},
		{"up_to given twice", `{"up_to": 1, "up_to": 9}`, func() any { return new(readAll) }, "up_to", `key "up_to" given twice`},
		{"not an object", `[1]`, func() any { return new(readAll) }, "", "want a JSON object, got an array"},
		{"empty", ` `, func() any { return new(readAll) }, "", "empty input, want a JSON object"},
		{"two values", `{} {}`, func() any { return new(readAll) }, "", "more than one JSON value"},
		{"events given twice", `{"events": [], "events": [{"id": "x"}]}`, func() any { return new(envelope) }, "events", `key "events" given twice`},
		{"envelope key not UTF-8", `{"events": [], "ev` + "\xff" + `": 1}`, func() any { return new(envelope) }, "", "a key is not valid UTF-8 as sent (byte 0xff at offset 18)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, opts := range [][]DecodeOption{nil, {RawAsSent}} {
				err := DecodeJSON([]byte(tt.in), tt.into(), opts...)
				var je *JSONError
				if !errors.As(err, &je) {
					t.Fatalf("options %v: got %v (%T), want *JSONError", opts, err, err)
				}
				if je.Field != tt.field || je.Reason != tt.reason {
					t.Errorf("options %v: got field %q reason %q, want field %q reason %q", opts, je.Field, je.Reason, tt.field, tt.reason)
				}
				if msg := je.Error(); strings.Contains(msg, "Go ") || strings.Contains(msg, "relay.") || strings.Contains(msg, "int64") {
					t.Errorf("message %q speaks Go", msg)
				}
			}
		})
	}
}

// RawAsSent leaves a batch's events as sent, each for DecodeEvent to
// judge; without it, a fault anywhere refuses the whole document.
func TestDecodeJSONRawAsSent(t *testing.T) {
	t.Parallel()
	type envelope struct {
		Events []json.RawMessage `json:"events"`
	}
	events := []string{
		`{"id": "c` + "\xff" + `"}`,
		`{"id": "c\ud800", "x": {"a": 1, "a": 2}}`,
		`{"id": "c\ufffd"}`,
	}
	doc := `{"events": [` + strings.Join(events, ", ") + `]}`
	var env envelope
	if err := DecodeJSON([]byte(doc), &env, RawAsSent); err != nil {
		t.Fatalf("RawAsSent: %v", err)
	}
	if len(env.Events) != len(events) {
		t.Fatalf("%d events, want %d", len(env.Events), len(events))
	}
	for i, raw := range env.Events {
		if string(raw) != events[i] {
			t.Errorf("event %d: %q, want it as sent: %q", i, raw, events[i])
		}
	}
	var je *JSONError
	if err := DecodeJSON([]byte(doc), new(envelope)); !errors.As(err, &je) || je.Field != "events[0].id" {
		t.Errorf("strict: %v, want the fault at events[0].id", err)
	}
	// A fault outside the raw values is still one, at its true offset.
	bad := `{"events": [` + events[0] + `], "events": []}`
	if err := DecodeJSON([]byte(bad), new(envelope), RawAsSent); !errors.As(err, &je) || je.Field != "events" || je.Reason != `key "events" given twice` {
		t.Errorf("events twice: %v", err)
	}
	bad = `{"events": [` + events[0] + `], "x` + "\xfe" + `": 1}`
	want := fmt.Sprintf("a key is not valid UTF-8 as sent (byte 0xfe at offset %d)", strings.Index(bad, "\xfe\""))
	if err := DecodeJSON([]byte(bad), new(envelope), RawAsSent); !errors.As(err, &je) || je.Field != "" || je.Reason != want {
		t.Errorf("bad envelope key: %v, want %s", err, want)
	}
}

// The decode on the ingest path: go test ./relay -run '^$' -bench DecodeEvent
func BenchmarkDecodeEvent(b *testing.B) {
	body := []byte(`{"id":"e12345","type":"receipt","channels":["email"],"recipients":[{"id":"u12345","email":"u12345@example.com"}],` +
		`"subject":"Your receipt","body":"Thanks for your order.","data":{"amount":"20.00","currency":"EUR"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEvent(strings.NewReader(string(body))); err != nil {
			b.Fatal(err)
		}
	}
}

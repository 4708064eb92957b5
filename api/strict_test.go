package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/api"
)

// The case: four sources send events whose ids differ as sent.
// encoding/json made the first three one event ("c\uFFFD"), so three were
// answered 202 duplicate and never sent. Now each id that is not UTF-8 as
// sent is a 400 naming id, and only the valid one is stored.
var asSent = []struct {
	id     string // as it appears between the quotes in the body
	reason string // want in the problem's detail; "" for the valid one
}{
	{"c\xff", "not valid UTF-8 as sent (byte 0xff at offset 9)"},
	{"c\xfe", "not valid UTF-8 as sent (byte 0xfe at offset 9)"},
	{`c\ud800`, `lone UTF-16 surrogate \ud800`},
	{`c\ufffd`, ""},
}

func asSentEvent(id string) string {
	return `{"id": "` + id + `", "type": "payment.succeeded", "purpose": "receipt", ` +
		`"recipients": [{"id": "ada", "email": "ada@example.com"}], "subject": "Your receipt"}`
}

func TestEventIDsAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, c := range asSent {
		rep := b.do(t, "POST", "/v1/events", asSentEvent(c.id))
		if c.reason == "" {
			if res := accepted(t, rep); res.Duplicate || res.EventID != "c\uFFFD" || res.Count != 1 {
				t.Errorf("valid id %s: %+v, want a new event c\uFFFD", c.id, res)
			}
			continue
		}
		p := wantProblem(t, rep, http.StatusBadRequest, "invalid-event")
		if p.Field != "id" || !strings.Contains(p.Detail, c.reason) {
			t.Errorf("id %q: problem %+v, want field id and %q", c.id, p, c.reason)
		}
	}
	wantOnlyValid(t, b)
}

func TestBatchEventIDsAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	events := make([]string, len(asSent))
	for i, c := range asSent {
		events[i] = asSentEvent(c.id)
	}
	rep := b.do(t, "POST", "/v1/events:batch", `{"events": [`+strings.Join(events, ", ")+`]}`)
	if rep.status != http.StatusOK {
		t.Fatalf("batch: %s", rep)
	}
	out := decode[struct {
		Results []struct {
			Index  int             `json:"index"`
			Status int             `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"results"`
	}](t, rep)
	if len(out.Results) != len(asSent) {
		t.Fatalf("%d results, want %d", len(out.Results), len(asSent))
	}
	for i, c := range asSent {
		r := out.Results[i]
		if c.reason == "" {
			var res acceptBody
			if r.Status != http.StatusAccepted || json.Unmarshal(r.Result, &res) != nil || res.Duplicate || res.EventID != "c\uFFFD" {
				t.Errorf("result %d: %d %s, want 202 for a new event c\uFFFD", i, r.Status, r.Result)
			}
			continue
		}
		var p api.Problem
		if err := json.Unmarshal(r.Result, &p); err != nil || r.Status != http.StatusBadRequest || p.Field != "id" ||
			!strings.HasSuffix(p.Type, "/invalid-event") || !strings.Contains(p.Detail, c.reason) {
			t.Errorf("result %d (id %q): %d %s, want 400 invalid-event naming id: %s", i, c.id, r.Status, r.Result, c.reason)
		}
	}
	wantOnlyValid(t, b)
}

// wantOnlyValid checks that the one valid event is all that was stored.
func wantOnlyValid(t *testing.T, b *bundle) {
	t.Helper()
	all := b.listAll(t)
	if len(all) != 1 {
		t.Errorf("%d notifications stored, want 1 (the valid id's)", len(all))
	}
	for _, n := range all {
		if n.EventID != "c\uFFFD" {
			t.Errorf("stored %+v, want only event c\uFFFD", n)
		}
	}
}

// The other bodies the API decodes get the same strictness, and their
// problems speak JSON: the path of the field, no Go types.
func TestBodiesStrict(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	tests := []struct {
		name, method, path, body string
		field, detail            string
	}{
		{"audience: unknown nested field", "PUT", "/v1/audiences/team",
			`{"members": [{"id": "a", "email": "a@x"}, {"id": "b", "emial": "b@x"}]}`, "members[1].emial", "unknown field"},
		{"audience: member is a string", "PUT", "/v1/audiences/team", `{"members": ["ada"]}`, "members[0]", "want an object, got a string"},
		{"audience: member id not UTF-8", "PUT", "/v1/audiences/team",
			`{"members": [{"id": "a` + "\xff" + `", "email": "a@x"}]}`, "members[0].id", "not valid UTF-8 as sent (byte 0xff at offset 22)"},
		{"audience: key given twice", "PUT", "/v1/audiences/team",
			`{"members": [{"id": "a", "email": "a@x", "email": "b@x"}]}`, "members[0].email", `key "email" given twice`},
		{"audience: members given twice", "PUT", "/v1/audiences/team",
			`{"members": [{"id": "a", "email": "a@x"}], "members": []}`, "members", `key "members" given twice`},
		{"feed members: lone surrogate", "PUT", "/v1/feeds/news/members", `{"members": ["ada", "b\ud800"]}`, "members[1]", `lone UTF-16 surrogate \ud800`},
		{"feed members: history is a string", "PUT", "/v1/feeds/news/members", `{"members": ["ada"], "history": "yes"}`, "history", "want true or false, got a string"},
		{"read-all: up_to is a string", "POST", "/v1/users/ada/feed/read-all", `{"up_to": "7"}`, "up_to", "want an integer, got a string"},
		{"read-all: up_to given twice", "POST", "/v1/users/ada/feed/read-all", `{"up_to": 1, "up_to": 9}`, "up_to", `key "up_to" given twice`},
		{"batch: events given twice", "POST", "/v1/events:batch",
			`{"events": [` + asSentEvent("e1") + `], "events": [` + asSentEvent("e2") + `]}`, "events", `key "events" given twice`},
		{"batch: unknown field", "POST", "/v1/events:batch", `{"events": [], "evnts": []}`, "evnts", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := wantProblem(t, b.do(t, tt.method, tt.path, tt.body), http.StatusBadRequest, "invalid-json")
			if p.Field != tt.field || !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("problem %+v, want field %q and %q", p, tt.field, tt.detail)
			}
			for _, goish := range []string{"Go ", "relay.", "int64", "struct", "json: "} {
				if strings.Contains(p.Detail, goish) {
					t.Errorf("detail %q speaks Go (%q)", p.Detail, goish)
				}
			}
		})
	}
	// Nothing of a refused body was written: the audience does not exist.
	p := wantProblem(t, b.do(t, "POST", "/v1/events", `{"id": "e", "type": "t", "audience": "team"}`), http.StatusBadRequest, "invalid-event")
	if p.Field != "audience" || !strings.Contains(p.Detail, `no audience "team"`) {
		t.Errorf("event to the refused audience: %+v, want no such audience", p)
	}
}

package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// Every string a client can make the store keep has a bound; beyond it the
// request is a 400 naming the header, path segment or query parameter, and
// nothing is stored.
func TestStoredStringLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ev := jsonOf(t, receipt("evt_1", 1))
	batch := `{"events": [` + ev + `]}`
	long := strings.Repeat("k", 256)

	// Idempotency-Key: up to 255 printable ASCII characters.
	for _, key := range []string{long, "caf\xc3\xa9", "tab\there"} {
		for _, path := range []string{"/v1/events", "/v1/events:batch", "/v1/notifications/1/retry"} {
			body := ev
			if path == "/v1/events:batch" {
				body = batch
			}
			p := wantProblem(t, b.do(t, "POST", path, body, "Idempotency-Key", key), http.StatusBadRequest, "invalid-request")
			if p.Field != "Idempotency-Key" || !strings.Contains(p.Detail, "255") {
				t.Errorf("POST %s with a key of %d bytes: %+v", path, len(key), p)
			}
		}
	}
	wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=evt_1&purpose=receipt", ""), http.StatusNotFound, "not-found")
	accepted(t, b.do(t, "POST", "/v1/events", ev, "Idempotency-Key", long[:255]))

	// Users, tenants and feeds named in the path or the query.
	user := strings.Repeat("u", 257)
	tenant := strings.Repeat("t", 65)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/users/" + user + "/feed/read-all", `{"up_to": 1}`, "user"},
		{"POST", "/v1/users/" + user + "/feed/dismiss-all", "", "user"},
		{"POST", "/v1/users/" + user + "/feed/1/read", "", "user"},
		{"POST", "/v1/users/" + user + "/feed/1/dismiss", "", "user"},
		{"GET", "/v1/users/" + user + "/feed", "", "user"},
		{"GET", "/v1/users/" + user + "/feed/unread_count", "", "user"},
		{"POST", "/v1/users/ada/feed/read-all?tenant=" + tenant, "", "tenant"},
		{"POST", "/v1/users/ada/feed/1/read?tenant=bad%20tenant", "", "tenant"},
		{"GET", "/v1/users/ada/feed?tenant=" + tenant, "", "tenant"},
		{"PUT", "/v1/feeds/team:ops/members?tenant=" + tenant, `{"members": ["ada"]}`, "tenant"},
		{"PUT", "/v1/feeds/" + strings.Repeat("f", 65) + "/members", `{"members": ["ada"]}`, "feed"},
		{"PUT", "/v1/audiences/team?tenant=" + tenant, jsonOf(t, map[string]any{"members": people(1)}), "tenant"},
		{"PUT", "/v1/audiences/" + strings.Repeat("a", 65), jsonOf(t, map[string]any{"members": people(1)}), "name"},
		{"GET", "/v1/notifications?event_id=evt_1&purpose=receipt&tenant=" + tenant, "", "tenant"},
	} {
		rep := b.do(t, c.method, c.path, c.body)
		p := wantProblem(t, rep, http.StatusBadRequest, "invalid-request")
		if p.Field != c.field {
			t.Errorf("%s %.60s…: field %q, want %q", c.method, c.path, p.Field, c.field)
		}
		if len(rep.body) > 1024 {
			t.Errorf("%s %.60s…: a problem of %d bytes echoes the value", c.method, c.path, len(rep.body))
		}
	}
	// Feed members are ids: 256 bytes at most.
	p := wantProblem(t, b.do(t, "PUT", "/v1/feeds/team:ops/members", `{"members": ["`+user+`"]}`), http.StatusBadRequest, "invalid-event")
	if p.Field != "members[0]" {
		t.Errorf("a long member: field %q", p.Field)
	}
	// At the bounds, all is well.
	ok := strings.Repeat("u", 256)
	if rep := b.do(t, "POST", "/v1/users/"+ok+"/feed/read-all?tenant="+strings.Repeat("t", 64), ""); rep.status != http.StatusOK {
		t.Errorf("read-all at the bounds: %s", rep)
	}
	if rep := b.do(t, "PUT", "/v1/feeds/"+strings.Repeat("f", 64)+"/members", `{"members": ["`+ok+`"]}`); rep.status != http.StatusOK {
		t.Errorf("members at the bounds: %s", rep)
	}
}

package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/relay"
)

var (
	opaqueNotification = regexp.MustCompile(`^n_[0-7][0-9a-hjkmnp-tv-z]{12}$`)
	opaqueEvent        = regexp.MustCompile(`^ev_[0-7][0-9a-hjkmnp-tv-z]{12}$`)
)

// wantOpaqueIDs checks that every "id" and "next_cursor" in a JSON body,
// at any depth, and every cursor or before in a next link, is an opaque id
// (n_… or ev_…), never a row id: row ids come from one sequence shared by
// every tenant, so a tenant that saw two of them would know how many
// notifications the others sent in between.
func wantOpaqueIDs(tb testing.TB, what string, body []byte) (n int) {
	tb.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		tb.Fatalf("%s: %v: %s", what, err, body)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				switch k {
				case "id", "next_cursor":
					s, ok := e.(string)
					if !ok || !opaqueNotification.MatchString(s) && !opaqueEvent.MatchString(s) {
						tb.Errorf("%s: %s is %v, want an opaque id (n_… or ev_…): %s", what, p, e, body)
					}
					n++
				case "next":
					u, err := url.Parse(fmt.Sprint(e))
					if err != nil {
						tb.Errorf("%s: %s: %v", what, p, err)
						break
					}
					for _, q := range []string{"cursor", "before"} {
						if c := u.Query().Get(q); c != "" && !opaqueNotification.MatchString(c) && !opaqueEvent.MatchString(c) {
							tb.Errorf("%s: %s carries %s=%s, want an opaque id", what, p, q, c)
						}
					}
				}
				walk(p, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
	return n
}

// Every id the API shows is opaque, in every answer that has one (an
// accept, a batch, a listing and its cursor, one notification by id and
// by key, a retry, the quarantine and its drop), and decodes to the row
// the store has. Every path or cursor that takes one refuses a row id, an
// id of the other kind and a malformed one with a detail that says which;
// and one tenant's ids are, to another, ids of nothing: the same 404 as an
// id of no row, and no change to the row.
func TestAPIShowsAndTakesOnlyOpaqueIDs(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	b := setup(t, options{DB: db, Relay: relay.Options{Chunk: 1},
		Tokens: map[string]string{sha256hex("tok-acme-0123456789"): "acme", sha256hex("tok-beta-0123456789"): "beta"},
		API:    api.Options{PageSize: 2}})
	acme := []string{"Authorization", "Bearer tok-acme-0123456789"}
	beta := []string{"Authorization", "Bearer tok-beta-0123456789"}
	ctx := context.Background()

	// Bodies with ids: each is checked whole.
	ok := func(what string, rep reply, status int) reply {
		t.Helper()
		if rep.status != status {
			t.Fatalf("%s: %s, want %d", what, rep, status)
		}
		if wantOpaqueIDs(t, what, rep.body) == 0 {
			t.Errorf("%s: no id in %s", what, rep.body)
		}
		return rep
	}
	first := ok("accept", b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 3)), append(acme, "Idempotency-Key", "k1")...), http.StatusAccepted)
	res := decode[acceptBody](t, first)
	ok("accept replayed", b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_1", 3)), append(acme, "Idempotency-Key", "k1")...), http.StatusAccepted)
	ok("batch", b.do(t, "POST", "/v1/events:batch", `{"events": [`+jsonOf(t, receipt("evt_2", 1))+`]}`, acme...), http.StatusOK)
	ok("beta's accept", b.do(t, "POST", "/v1/events", jsonOf(t, receipt("evt_b", 1)), beta...), http.StatusAccepted)
	next := ok("list", b.do(t, "GET", "/v1/notifications", "", acme...), http.StatusOK)
	ok("next page", b.do(t, "GET", decode[pageBody](t, next).Next, "", acme...), http.StatusOK)
	ok("by event", b.do(t, "GET", res.Next, "", acme...), http.StatusOK)
	n0 := res.Notifications[0]
	ok("one", b.do(t, "GET", "/v1/notifications/"+n0.ID, "", acme...), http.StatusOK)
	ok("by key", b.do(t, "GET", "/v1/notifications?key="+n0.Key, "", acme...), http.StatusOK)

	// The id is the row's: the relay (and so the commands) reads it back
	// to the same notification as its row id.
	byID, err := b.r.Notification(ctx, n0.ID)
	if err != nil || byID.Key != n0.Key {
		t.Fatalf("relay.Notification(%s): %+v, %v; want key %s", n0.ID, byID, err, n0.Key)
	}
	if byRow, err := b.r.Notification(ctx, fmt.Sprint(byID.ID)); err != nil || byRow.Key != n0.Key {
		t.Fatalf("relay.Notification(%d): %+v, %v; want key %s", byID.ID, byRow, err, n0.Key)
	}
	row := byID.ID

	// Refused, with what was wrong named: a row id (of the caller's own
	// notification), an event's id, and spellings that are no id.
	x, err := b.r.IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, says string }{
		{fmt.Sprint(row), "a row id"},
		{x.Event(row), "an event's id"},
		{"n_abc", "not an id"},
		{strings.ToUpper(n0.ID), "not an id"},
		{n0.ID + "0", "not an id"},
		{"n_8" + n0.ID[3:], "not an id"}, // above 2^63
	} {
		for _, req := range []struct{ method, path string }{{"GET", "/v1/notifications/" + c.id}, {"POST", "/v1/notifications/" + c.id + "/retry"}} {
			p := wantProblem(t, b.do(t, req.method, req.path, "", acme...), http.StatusNotFound, "not-found")
			if !strings.Contains(p.Detail, fmt.Sprintf("%q", c.id)) || !strings.Contains(p.Detail, c.says) || !strings.Contains(p.Detail, "n_ and 13 characters") {
				t.Errorf("%s %s: detail %q, want it to name %q as %s and say what an id is", req.method, req.path, p.Detail, c.id, c.says)
			}
		}
		if !strings.HasPrefix(c.id, "ev_") {
			p := wantProblem(t, b.do(t, "GET", "/v1/notifications?cursor="+url.QueryEscape(c.id), "", acme...), http.StatusBadRequest, "invalid-query")
			if !strings.HasPrefix(p.Detail, fmt.Sprintf("cursor: %q", c.id)) || !strings.Contains(p.Detail, c.says) {
				t.Errorf("cursor %s: detail %q", c.id, p.Detail)
			}
		}
	}
	for _, id := range []string{fmt.Sprint(row), n0.ID, "ev_abc"} {
		p := wantProblem(t, b.do(t, "POST", "/v1/quarantine/"+id+"/drop", "", acme...), http.StatusNotFound, "not-found")
		if !strings.Contains(p.Detail, fmt.Sprintf("%q", id)) || !strings.Contains(p.Detail, "ev_ and 13 characters") {
			t.Errorf("quarantine drop %s: detail %q", id, p.Detail)
		}
	}

	// Another tenant's id is an id of nothing: the same answer as for an id
	// no row has, and its retry changes nothing.
	nowhere := x.Notification(1 << 40)
	for _, req := range []struct{ method, path string }{{"GET", "/v1/notifications/"}, {"POST", "/v1/notifications/"}} {
		suffix := map[string]string{"GET": "", "POST": "/retry"}[req.method]
		theirs := wantProblem(t, b.do(t, req.method, req.path+n0.ID+suffix, "", beta...), http.StatusNotFound, "not-found")
		none := wantProblem(t, b.do(t, req.method, req.path+nowhere+suffix, "", beta...), http.StatusNotFound, "not-found")
		if want := strings.ReplaceAll(none.Detail, nowhere, n0.ID); theirs.Detail != want {
			t.Errorf("%s %s as beta: %q; an id of no row: %q (want the same)", req.method, req.path, theirs.Detail, none.Detail)
		}
	}
	if n, err := b.r.Notification(ctx, n0.ID); err != nil || n.Status != "pending" || n.Tenant != "acme" {
		t.Errorf("acme's notification after beta's requests: %+v, %v", n, err)
	}
	// A cursor made of acme's id pages through beta's own only.
	p := decode[pageBody](t, b.do(t, "GET", "/v1/notifications?cursor="+res.Notifications[0].ID, "", beta...))
	for _, n := range p.Notifications {
		if n.Tenant != "beta" {
			t.Errorf("beta's page from acme's cursor lists %+v", n)
		}
	}

	// The quarantine: an event's id (ev_…), taken back by drop.
	breakFanOut(t, db, "evt_1")
	runIdle(t, b.r)
	q := ok("quarantine", b.do(t, "GET", "/v1/quarantine", "", acme...), http.StatusOK)
	var qs struct{ Events []quarantined }
	json.Unmarshal(q.body, &qs)
	if len(qs.Events) != 1 || !opaqueEvent.MatchString(qs.Events[0].ID) {
		t.Fatalf("quarantine: %s", q.body)
	}
	ev := qs.Events[0].ID
	ok("one, quarantined", b.do(t, "GET", "/v1/notifications/"+n0.ID, "", acme...), http.StatusOK)
	wantProblem(t, b.do(t, "POST", "/v1/quarantine/"+ev+"/drop", "", beta...), http.StatusNotFound, "not-found")
	if rep := b.do(t, "POST", "/v1/quarantine/"+ev+"/drop", "", acme...); rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"id":"`+ev+`"`) {
		t.Errorf("drop %s: %s", ev, rep)
	}
}

package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/relay"
)

// feedPageBody is the body of GET /v1/users/{user}/feed.
type feedPageBody struct {
	Items    []feedItemBody `json:"items"`
	ReadUpTo int64          `json:"read_up_to"`
	Next     string         `json:"next"`
}

type feedItemBody struct {
	Seq       int64           `json:"seq"`
	Feed      string          `json:"feed"`
	EventID   string          `json:"event_id"`
	Type      string          `json:"type"`
	Read      bool            `json:"read"`
	CreatedAt time.Time       `json:"created_at"`
	Message   json.RawMessage `json:"message"`
}

// feedEvent is an event posted to feeds only.
func feedEvent(id, subject string, feeds ...string) relay.Event {
	return relay.Event{ID: id, Type: "deploy.finished", Feeds: feeds, Subject: subject}
}

// postFeedEvent posts ev and checks it was accepted with no notifications.
func (b *bundle) postFeedEvent(tb testing.TB, ev relay.Event, hdr ...string) acceptBody {
	tb.Helper()
	res := accepted(tb, b.do(tb, "POST", "/v1/events", jsonOf(tb, ev), hdr...))
	if res.Count != 0 || len(res.Notifications) != 0 {
		tb.Errorf("feed-only event %s: count %d with %d notifications, want none", ev.ID, res.Count, len(res.Notifications))
	}
	return res
}

func (b *bundle) feedPage(tb testing.TB, path string, hdr ...string) feedPageBody {
	tb.Helper()
	rep := b.do(tb, "GET", path, "", hdr...)
	if rep.status != http.StatusOK {
		tb.Fatalf("GET %s: %s", path, rep)
	}
	return decode[feedPageBody](tb, rep)
}

func (b *bundle) unreadCount(tb testing.TB, user string, hdr ...string) int64 {
	tb.Helper()
	rep := b.do(tb, "GET", "/v1/users/"+user+"/feed/unread_count", "", hdr...)
	if rep.status != http.StatusOK {
		tb.Fatalf("unread count of %s: %s", user, rep)
	}
	return decode[struct {
		Unread int64 `json:"unread"`
	}](tb, rep).Unread
}

// readAll posts read-all (body "" for none) and returns the watermark.
func (b *bundle) readAll(tb testing.TB, user, body string, hdr ...string) int64 {
	tb.Helper()
	rep := b.do(tb, "POST", "/v1/users/"+user+"/feed/read-all", body, hdr...)
	if rep.status != http.StatusOK {
		tb.Fatalf("read-all %s %q: %s", user, body, rep)
	}
	got := decode[struct {
		Kind string `json:"kind"`
		UpTo int64  `json:"up_to"`
	}](tb, rep)
	if got.Kind != "read" {
		tb.Errorf("read-all kind %q", got.Kind)
	}
	return got.UpTo
}

func itemSeqs(items []feedItemBody) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

func seqPath(user string, seq int64, action string) string {
	return "/v1/users/" + user + "/feed/" + strconv.FormatInt(seq, 10) + "/" + action
}

func TestFeeds(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})

	rep := b.do(t, "PUT", "/v1/feeds/team:ops/members", `{"members": ["ada", "ben"]}`)
	if rep.status != http.StatusOK {
		t.Fatalf("set members: %s", rep)
	}
	if got := decode[map[string]any](t, rep); got["tenant"] != "default" || got["feed"] != "team:ops" || got["members"] != 2.0 {
		t.Errorf("set members: %v", got)
	}

	// Feeds only, no recipients: accepted, nothing to deliver.
	b.postFeedEvent(t, feedEvent("e1", "Deploy v1", "team:ops", "*"))
	b.postFeedEvent(t, feedEvent("e2", "Maintenance tonight", "*"))
	b.postFeedEvent(t, feedEvent("e3", "Your report is ready", "@ada"))
	b.postFeedEvent(t, feedEvent("e4", "Dev only", "team:dev"))

	// Newest first; e1, in two of ada's feeds, once (at its newer item).
	ada := b.feedPage(t, "/v1/users/ada/feed")
	want := []struct{ event, feed, subject string }{
		{"e3", "@ada", "Your report is ready"}, {"e2", "*", "Maintenance tonight"}, {"e1", "*", "Deploy v1"}}
	if len(ada.Items) != len(want) || ada.ReadUpTo != 0 || ada.Next != "" {
		t.Fatalf("ada's feed: %+v, want %v", ada, want)
	}
	for i, it := range ada.Items {
		var msg struct {
			Subject string `json:"subject"`
		}
		if err := json.Unmarshal(it.Message, &msg); err != nil {
			t.Fatalf("item %d message %s: %v", i, it.Message, err)
		}
		if it.EventID != want[i].event || it.Feed != want[i].feed || msg.Subject != want[i].subject || it.Read ||
			it.Type != "deploy.finished" || it.CreatedAt.IsZero() || i > 0 && it.Seq >= ada.Items[i-1].Seq {
			t.Errorf("item %d: %+v (message %s), want %v unread, newest first", i, it, it.Message, want[i])
		}
	}
	seqOf := func(event, feed string) int64 {
		for _, it := range ada.Items {
			if it.EventID == event && it.Feed == feed {
				return it.Seq
			}
		}
		t.Fatalf("no item of %s in %s", event, feed)
		return 0
	}
	e1, e2, e3 := seqOf("e1", "*"), seqOf("e2", "*"), seqOf("e3", "@ada")
	cy := b.feedPage(t, "/v1/users/cy/feed")
	if got := itemSeqs(cy.Items); !slices.Equal(got, []int64{e2, e1}) {
		t.Errorf("cy (no teams) sees %v, want [%d %d]", got, e2, e1)
	}
	if n := b.unreadCount(t, "ada"); n != 3 {
		t.Errorf("ada unread %d, want 3", n)
	}
	if n := b.unreadCount(t, "cy"); n != 2 {
		t.Errorf("cy unread %d, want 2", n)
	}

	// Paging by the next link: every item once, in order.
	var paged []int64
	next := "/v1/users/ada/feed?limit=3"
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatalf("still paging after %d pages: %v", pages, paged)
		}
		p := b.feedPage(t, next)
		if len(p.Items) > 3 {
			t.Fatalf("page of %d with limit 3", len(p.Items))
		}
		paged = append(paged, itemSeqs(p.Items)...)
		next = p.Next
	}
	if all := itemSeqs(ada.Items); !slices.Equal(paged, all) {
		t.Errorf("paged %v, want %v", paged, all)
	}

	// Read all up to what the client showed.
	if m := b.readAll(t, "ada", `{"up_to": `+strconv.FormatInt(e2, 10)+`}`); m != e2 {
		t.Errorf("read-all up to %d: watermark %d", e2, m)
	}
	ada = b.feedPage(t, "/v1/users/ada/feed")
	if ada.ReadUpTo != e2 {
		t.Errorf("read_up_to %d, want %d", ada.ReadUpTo, e2)
	}
	for _, it := range ada.Items {
		if it.Read != (it.Seq <= e2) {
			t.Errorf("item %d read %v with the watermark at %d", it.Seq, it.Read, e2)
		}
	}
	if n := b.unreadCount(t, "ada"); n != 1 {
		t.Errorf("ada unread %d after read-all up to e2, want 1 (e3)", n)
	}
	// A stale read-all does not move it back.
	if m := b.readAll(t, "ada", `{"up_to": `+strconv.FormatInt(e1, 10)+`}`); m != e2 {
		t.Errorf("read-all up to %d after %d: watermark %d, want %d", e1, e2, m, e2)
	}

	// One item read, one dismissed.
	if rep := b.do(t, "POST", seqPath("ada", e3, "read"), ""); rep.status != http.StatusOK {
		t.Fatalf("read e3: %s", rep)
	}
	if n := b.unreadCount(t, "ada"); n != 0 {
		t.Errorf("ada unread %d after reading e3, want 0", n)
	}
	if rep := b.do(t, "POST", seqPath("ada", e2, "dismiss"), ""); rep.status != http.StatusOK {
		t.Fatalf("dismiss e2: %s", rep)
	}
	ada = b.feedPage(t, "/v1/users/ada/feed")
	if got := itemSeqs(ada.Items); slices.Contains(got, e2) || !slices.Contains(got, e3) || !ada.Items[0].Read {
		t.Errorf("after dismissing %d and reading %d: %+v", e2, e3, ada.Items)
	}
	// cy still has e2.
	if got := itemSeqs(b.feedPage(t, "/v1/users/cy/feed").Items); !slices.Contains(got, e2) {
		t.Errorf("ada's dismissal hid e2 from cy: %v", got)
	}

	// Items ada cannot see are not found.
	dev := int64(0)
	for _, it := range b.feedPage(t, "/v1/users/ben/feed").Items {
		if it.EventID == "e4" {
			t.Errorf("ben sees team:dev's e4")
		}
	}
	if rep := b.do(t, "PUT", "/v1/feeds/team:dev/members", `{"members": ["dee"], "history": true}`); rep.status != http.StatusOK {
		t.Fatalf("set members: %s", rep)
	}
	for _, it := range b.feedPage(t, "/v1/users/dee/feed").Items {
		if it.EventID == "e4" {
			dev = it.Seq
		}
	}
	if dev == 0 {
		t.Fatalf("dee, who joined team:dev with history, does not see e4")
	}
	for _, path := range []string{seqPath("ada", dev, "read"), seqPath("ada", dev, "dismiss"), seqPath("cy", e3, "read"),
		seqPath("ada", 1<<40, "read"), "/v1/users/ada/feed/abc/read", "/v1/users/ada/feed/0/dismiss"} {
		wantProblem(t, b.do(t, "POST", path, ""), http.StatusNotFound, "not-found")
	}

	// Read all without a body: up to the newest item now.
	if m := b.readAll(t, "cy", ""); m < dev {
		t.Errorf("read-all without up_to: watermark %d, want the newest (at least %d)", m, dev)
	}
	if n := b.unreadCount(t, "cy"); n != 0 {
		t.Errorf("cy unread %d after read-all, want 0", n)
	}
	// An up_to past the newest item stops at the newest: it cannot read
	// items not posted yet.
	if m := b.readAll(t, "ben", `{"up_to": 1000000000}`); m >= 1000000000 || m < dev {
		t.Errorf("read-all up to 1e9: watermark %d, want the newest item (at least %d)", m, dev)
	}
	b.postFeedEvent(t, feedEvent("e5", "Later", "*"))
	for _, u := range []string{"cy", "ben"} {
		if n := b.unreadCount(t, u); n != 1 {
			t.Errorf("%s unread %d after a new item, want 1", u, n)
		}
	}

	// A resend adds no feed item: a duplicate, with or without a key.
	body := jsonOf(t, feedEvent("e1", "Deploy v1", "team:ops", "*"))
	if dup := accepted(t, b.do(t, "POST", "/v1/events", body)); !dup.Duplicate {
		t.Errorf("resend: %+v, want a duplicate", dup)
	}
	if dup := accepted(t, b.do(t, "POST", "/v1/events", body, "Idempotency-Key", "other-key")); !dup.Duplicate || dup.Count != 0 {
		t.Errorf("resend under another key: %+v, want a duplicate", dup)
	}
	n := 0
	for _, it := range b.feedPage(t, "/v1/users/ben/feed").Items {
		if it.EventID == "e1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("ben has %d items of e1 after resends, want 1", n)
	}

	// Bad requests.
	for _, c := range []struct {
		method, path, body string
		status             int
		kind               string
	}{
		{"PUT", "/v1/feeds/*/members", `{"members": ["ada"]}`, http.StatusBadRequest, "invalid-request"},
		{"PUT", "/v1/feeds/@ada/members", `{"members": ["ada"]}`, http.StatusBadRequest, "invalid-request"},
		{"PUT", "/v1/feeds/team:ops/members", `{"members": [""]}`, http.StatusBadRequest, "invalid-event"},
		{"PUT", "/v1/feeds/team:ops/members", `{"users": ["ada"]}`, http.StatusBadRequest, "invalid-json"},
		{"POST", "/v1/users/ada/feed/read-all", `{"up_to": -1}`, http.StatusBadRequest, "invalid-query"},
		{"POST", "/v1/users/ada/feed/read-all", `{"upto": 3}`, http.StatusBadRequest, "invalid-json"},
		{"GET", "/v1/users/ada/feed?limit=0", "", http.StatusBadRequest, "invalid-query"},
		{"GET", "/v1/users/ada/feed?limit=201", "", http.StatusBadRequest, "invalid-query"},
		{"GET", "/v1/users/ada/feed?before=x", "", http.StatusBadRequest, "invalid-query"},
	} {
		wantProblem(t, b.do(t, c.method, c.path, c.body), c.status, c.kind)
	}
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, feedEvent("e6", "x", "bad feed"))), http.StatusBadRequest, "invalid-event")
	wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, feedEvent("e7", "x"))), http.StatusBadRequest, "invalid-event")
}

// Tenants share user ids, feed names and event ids, and see only their own.
func TestFeedsTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}
	for _, tok := range [][]string{acme, beta} {
		if rep := b.do(t, "PUT", "/v1/feeds/team:ops/members", `{"members": ["ada"]}`, tok...); rep.status != http.StatusOK {
			t.Fatalf("set members: %s", rep)
		}
	}
	if res := b.postFeedEvent(t, feedEvent("e1", "acme news", "*", "team:ops"), acme...); res.Tenant != "acme" {
		t.Errorf("acme's event in tenant %q", res.Tenant)
	}
	if res := b.postFeedEvent(t, feedEvent("e1", "beta news", "*"), beta...); res.Tenant != "beta" || res.Duplicate {
		t.Errorf("beta's e1: %+v", res)
	}

	subjects := func(p feedPageBody) []string {
		var out []string
		for _, it := range p.Items {
			var m struct {
				Subject string `json:"subject"`
			}
			json.Unmarshal(it.Message, &m)
			out = append(out, m.Subject)
		}
		return out
	}
	acmeAda := b.feedPage(t, "/v1/users/ada/feed", acme...)
	if got := subjects(acmeAda); !slices.Equal(got, []string{"acme news"}) {
		t.Errorf("acme's ada sees %v", got)
	}
	betaAda := b.feedPage(t, "/v1/users/ada/feed", beta...)
	if got := subjects(betaAda); !slices.Equal(got, []string{"beta news"}) {
		t.Errorf("beta's ada sees %v", got)
	}
	if got := subjects(b.feedPage(t, "/v1/users/ada/feed?tenant=beta", beta...)); !slices.Equal(got, []string{"beta news"}) {
		t.Errorf("beta naming itself sees %v", got)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 1 {
		t.Errorf("acme's ada unread %d, want 1", n)
	}
	if n := b.unreadCount(t, "ada", beta...); n != 1 {
		t.Errorf("beta's ada unread %d, want 1", n)
	}

	// beta cannot mark acme's items, and its read-all is its own.
	for _, it := range acmeAda.Items {
		wantProblem(t, b.do(t, "POST", seqPath("ada", it.Seq, "read"), "", beta...), http.StatusNotFound, "not-found")
		wantProblem(t, b.do(t, "POST", seqPath("ada", it.Seq, "dismiss"), "", beta...), http.StatusNotFound, "not-found")
	}
	b.readAll(t, "ada", "", beta...)
	if n := b.unreadCount(t, "ada", beta...); n != 0 {
		t.Errorf("beta's ada unread %d after read-all, want 0", n)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 1 {
		t.Errorf("acme's ada unread %d after beta's read-all, want 1", n)
	}

	// Naming another tenant is forbidden, on every feed endpoint.
	seq := strconv.FormatInt(acmeAda.Items[0].Seq, 10)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/users/ada/feed?tenant=acme", ""},
		{"GET", "/v1/users/ada/feed/unread_count?tenant=acme", ""},
		{"POST", "/v1/users/ada/feed/read-all?tenant=acme", ""},
		{"POST", "/v1/users/ada/feed/dismiss-all?tenant=acme", ""},
		{"POST", "/v1/users/ada/feed/" + seq + "/read?tenant=acme", ""},
		{"POST", "/v1/users/ada/feed/" + seq + "/dismiss?tenant=acme", ""},
		{"PUT", "/v1/feeds/team:ops/members?tenant=acme", `{"members": []}`},
	} {
		wantProblem(t, b.do(t, c.method, c.path, c.body, beta...), http.StatusForbidden, "tenant-mismatch")
		wantProblem(t, b.do(t, c.method, c.path, c.body), http.StatusUnauthorized, "unauthorized")
	}
	// Nothing of acme's changed.
	if got := b.feedPage(t, "/v1/users/ada/feed", acme...); !slices.Equal(itemSeqs(got.Items), itemSeqs(acmeAda.Items)) || got.ReadUpTo != 0 {
		t.Errorf("acme's ada after beta's attempts: %+v, want %+v", got, acmeAda)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 1 {
		t.Errorf("acme's ada unread %d, want 1", n)
	}
}

// Everything a tenant reads of its feeds is independent of other tenants'
// volume (a shared sequence would leak it): acme's scenario runs twice, once alone and once
// with beta posting bursts between acme's steps (to the same feed and user
// names), and acme's answers are the same bytes.
func TestFeedsIndependentOfOtherTenants(t *testing.T) {
	t.Parallel()
	quiet, loud := acmeFeedAnswers(t, false), acmeFeedAnswers(t, true)
	if quiet != loud {
		t.Fatalf("acme's answers depend on beta's volume:\nalone:\n%s\nwith beta's bursts:\n%s", quiet, loud)
	}
	// The scenario reached what it is about.
	for _, want := range []string{`"read_up_to":3`, `{"kind":"read","up_to":5}`, `"next":"/v1/users/ada/feed?before=3\u0026limit=1"`,
		`{"items":[{"seq":8,"feed":"@cy","event_id":"e5","type":"deploy.finished","read":true`, `{"unread":2}`} {
		if !strings.Contains(quiet, want) {
			t.Errorf("acme's answers lack %s:\n%s", want, quiet)
		}
	}
}

// acmeFeedAnswers runs acme's feed scenario on a fresh server with a fixed
// clock and returns every answer acme got, status and body; with burst,
// beta posts between acme's steps.
func acmeFeedAnswers(t *testing.T, burst bool) string {
	t.Helper()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b := setup(t, options{Relay: relay.Options{Now: func() time.Time { return at }},
		Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}
	var out strings.Builder
	do := func(method, path, body string) reply {
		rep := b.do(t, method, path, body, acme...)
		fmt.Fprintf(&out, "%s %s %s -> %d %s\n", method, path, body, rep.status, bytes.TrimSpace(rep.body))
		return rep
	}
	post := func(id string, feeds ...string) {
		do("POST", "/v1/events", jsonOf(t, feedEvent(id, "acme "+id, feeds...)))
	}
	posted := 0
	others := func(n int) {
		if !burst {
			return
		}
		for range n {
			posted++
			b.postFeedEvent(t, feedEvent(fmt.Sprintf("b%d", posted), "beta", "*", "team:ops", "@ada"), beta...)
		}
	}
	if burst {
		if rep := b.do(t, "PUT", "/v1/feeds/team:ops/members", `{"members": ["ada", "ben", "cy"]}`, beta...); rep.status != http.StatusOK {
			t.Fatalf("beta's members: %s", rep)
		}
	}

	others(13)
	do("PUT", "/v1/feeds/team:ops/members", `{"members": ["ada", "ben"]}`)
	others(7)
	post("e1", "*", "team:ops", "@ada") // the README's example: one item for ada
	others(5)
	post("e2", "*")
	post("e3", "@ben")
	others(11)
	do("GET", "/v1/users/ada/feed", "")
	do("GET", "/v1/users/ada/feed/unread_count", "")
	for next := "/v1/users/ada/feed?limit=1"; next != ""; {
		next = decode[feedPageBody](t, do("GET", next, "")).Next
	}
	do("POST", "/v1/users/ada/feed/read-all", `{"up_to": 3}`)
	do("GET", "/v1/users/ben/feed", "")
	others(9)
	do("POST", "/v1/users/ben/feed/read-all", "") // up to acme's newest, whatever beta posted
	do("POST", "/v1/users/ben/feed/read-all", `{"up_to": 1000000}`)
	// cy joins after beta's volume: from acme's newest on.
	do("PUT", "/v1/feeds/team:ops/members", `{"members": ["ada", "ben", "cy"]}`)
	others(17)
	post("e4", "team:ops")
	others(3)
	post("e5", "*", "@cy")
	for _, u := range []string{"ada", "ben", "cy"} {
		do("GET", "/v1/users/"+u+"/feed", "")
		do("GET", "/v1/users/"+u+"/feed/unread_count", "")
	}
	do("POST", "/v1/users/cy/feed/7/read", "") // e5's "*" item: cy sees e5 at 8, in @cy
	do("POST", "/v1/users/ada/feed/4/dismiss", "")
	do("POST", "/v1/users/ada/feed/dismiss-all", `{"up_to": 2}`)
	for _, u := range []string{"ada", "cy"} {
		do("GET", "/v1/users/"+u+"/feed", "")
		do("GET", "/v1/users/"+u+"/feed/unread_count", "")
	}
	if burst && b.unreadCount(t, "ada", beta...) < int64(posted) {
		t.Fatalf("beta's ada does not have beta's %d items", posted)
	}
	return out.String()
}

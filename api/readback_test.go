package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/relay"
)

// What an operator reads back over HTTP: the feed items an accept posted,
// a feed's members, audiences, and an event's notifications whatever their
// purpose. The bodies are decoded into types of this file (not the API's),
// strictly, so a field renamed or dropped fails here.

// posted is a feed item as an accept answers it.
type posted struct {
	Feed string `json:"feed"`
	Seq  int64  `json:"seq"`
}

// acceptedItems is the feed_items of a 202 (or of a batch result).
func acceptedItems(tb testing.TB, body []byte) []posted {
	tb.Helper()
	var v struct {
		FeedItems *[]posted `json:"feed_items"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		tb.Fatalf("decode %s: %v", body, err)
	}
	if v.FeedItems == nil {
		tb.Fatalf("no feed_items in %s", body)
	}
	return *v.FeedItems
}

// POST /v1/events answers with the feed items the event posted, one per
// feed, in the order given, with the seqs the feed pages show; a
// resend answers with those of the first accept; an event posted to no
// feed answers [].
func TestAcceptAnswersFeedItems(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ev := feedEvent("e1", "Deploy done", "team:ops", "*", "@ada")
	rep := b.do(t, "POST", "/v1/events", jsonOf(t, ev))
	if rep.status != http.StatusAccepted {
		t.Fatalf("POST: %s", rep)
	}
	want := []posted{{"team:ops", 1}, {"*", 2}, {"@ada", 3}}
	if got := acceptedItems(t, rep.body); !slices.Equal(got, want) {
		t.Fatalf("feed_items %+v, want %+v", got, want)
	}
	for _, hdr := range [][]string{nil, {"Idempotency-Key", "k1"}} {
		again := b.do(t, "POST", "/v1/events", jsonOf(t, ev), hdr...)
		if got := acceptedItems(t, again.body); !accepted(t, again).Duplicate || !slices.Equal(got, want) {
			t.Errorf("resend (%v): %s, want a duplicate with %+v", hdr, again, want)
		}
		// The same shape as the first answer: no notifications is [], not null.
		if !strings.Contains(string(again.body), `"notifications":[]`) {
			t.Errorf("resend (%v): %s, want \"notifications\": []", hdr, again)
		}
	}
	// ada reads "*" and "@ada": the event shows once, at seq 3, the seq the
	// accept named for "@ada".
	if items := b.feedPage(t, "/v1/users/ada/feed").Items; len(items) != 1 || items[0].Seq != 3 || items[0].Feed != "@ada" {
		t.Errorf("ada's feed %+v, want e1 at seq 3 in @ada", items)
	}
	// With recipients too; and none for an event posted to no feed.
	both := receipt("e2", 1)
	both.Feeds = []string{"@ben"}
	if got := acceptedItems(t, b.do(t, "POST", "/v1/events", jsonOf(t, both)).body); !slices.Equal(got, []posted{{"@ben", 4}}) {
		t.Errorf("an event with recipients and a feed: feed_items %+v, want @ben at 4", got)
	}
	if got := acceptedItems(t, b.do(t, "POST", "/v1/events", jsonOf(t, receipt("e3", 1))).body); len(got) != 0 {
		t.Errorf("an event posted to no feed: feed_items %+v, want []", got)
	}
	// A batch's results carry them as a single POST would.
	_, res := b.postBatch(t, jsonOf(t, map[string]any{"events": []relay.Event{feedEvent("e4", "x", "*"), ev}}), "")
	wantStatuses(t, res, http.StatusAccepted, http.StatusAccepted)
	if got := acceptedItems(t, res.Results[0].Result); !slices.Equal(got, []posted{{"*", 5}}) {
		t.Errorf("batch e4: feed_items %+v, want * at 5", got)
	}
	if got := acceptedItems(t, res.Results[1].Result); !slices.Equal(got, want) {
		t.Errorf("batch resend of e1: feed_items %+v, want %+v", got, want)
	}
}

// member is a feed member as GET /v1/feeds/{feed}/members shows it.
type member struct {
	User      string `json:"user"`
	JoinedSeq int64  `json:"joined_seq"`
}

type membersBody struct {
	Tenant  string   `json:"tenant"`
	Feed    string   `json:"feed"`
	Members []member `json:"members"`
	Next    string   `json:"next"`
}

func (b *bundle) members(tb testing.TB, path string, hdr ...string) membersBody {
	tb.Helper()
	rep := b.do(tb, "GET", path, "", hdr...)
	if rep.status != http.StatusOK {
		tb.Fatalf("GET %s: %s", path, rep)
	}
	return decode[membersBody](tb, rep)
}

// PUT /v1/feeds/{feed}/members needs "members": a body without it is a
// 400 that changes nothing, and "members": [] empties the feed. GET reads
// the members back in user order, each with the seq it joined at, a page
// at a time, within the caller's tenant.
func TestFeedMembersPutNeedsMembersAndGetReadsThem(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}
	b.postFeedEvent(t, feedEvent("e1", "first", "*"), acme...)
	put := func(body string, hdr []string) reply {
		t.Helper()
		return b.do(t, "PUT", "/v1/feeds/team:ops/members", body, hdr...)
	}
	if rep := put(`{"members": ["cy", "ada"]}`, acme); rep.status != http.StatusOK {
		t.Fatalf("PUT: %s", rep)
	}
	if rep := put(`{"members": ["zed"], "history": true}`, beta); rep.status != http.StatusOK {
		t.Fatalf("PUT beta: %s", rep)
	}
	want := []member{{"ada", 1}, {"cy", 1}}
	if got := b.members(t, "/v1/feeds/team:ops/members", acme...); got.Tenant != "acme" || got.Feed != "team:ops" ||
		!slices.Equal(got.Members, want) || got.Next != "" {
		t.Fatalf("acme's members %+v, want %+v", got, want)
	}
	if got := b.members(t, "/v1/feeds/team:ops/members", beta...).Members; !slices.Equal(got, []member{{"zed", 0}}) {
		t.Fatalf("beta's members %+v, want zed from 0 (history)", got)
	}

	for _, body := range []string{`{}`, `{"history": true}`, `{"members": null}`} {
		p := wantProblem(t, put(body, acme), http.StatusBadRequest, "invalid-event")
		if p.Field != "members" || !strings.Contains(p.Detail, "required") {
			t.Errorf("PUT %s: %+v, want members named as required", body, p)
		}
	}
	if got := b.members(t, "/v1/feeds/team:ops/members", acme...).Members; !slices.Equal(got, want) {
		t.Fatalf("after the refused PUTs: %+v, want %+v unchanged", got, want)
	}

	// Pages of one, by the next link.
	var paged []member
	for path := "/v1/feeds/team:ops/members?limit=1"; path != ""; {
		p := b.members(t, path, acme...)
		paged = append(paged, p.Members...)
		if len(paged) > 3 {
			t.Fatalf("paging does not end: %+v", paged)
		}
		path = p.Next
	}
	if !slices.Equal(paged, want) {
		t.Errorf("paged members %+v, want %+v", paged, want)
	}

	// Another tenant is forbidden; "*" has no members list.
	wantProblem(t, b.do(t, "GET", "/v1/feeds/team:ops/members?tenant=beta", "", acme...), http.StatusForbidden, "tenant-mismatch")
	if p := wantProblem(t, b.do(t, "GET", "/v1/feeds/*/members", "", acme...), http.StatusBadRequest, "invalid-request"); p.Field != "feed" {
		t.Errorf("GET members of *: field %q, want feed", p.Field)
	}

	if rep := put(`{"members": []}`, acme); rep.status != http.StatusOK {
		t.Fatalf("PUT []: %s", rep)
	}
	if got := b.members(t, "/v1/feeds/team:ops/members", acme...).Members; got == nil || len(got) != 0 {
		t.Errorf("after members []: %+v, want []", got)
	}
	if got := b.members(t, "/v1/feeds/team:ops/members", beta...).Members; !slices.Equal(got, []member{{"zed", 0}}) {
		t.Errorf("beta's members after acme emptied its feed: %+v", got)
	}
}

type audienceInfo struct {
	Name      string    `json:"name"`
	Members   int       `json:"members"`
	UpdatedAt time.Time `json:"updated_at"`
}

type audienceListBody struct {
	Tenant    string         `json:"tenant"`
	Audiences []audienceInfo `json:"audiences"`
	Next      string         `json:"next"`
}

type audienceBody struct {
	Tenant  string            `json:"tenant"`
	Name    string            `json:"name"`
	Members []relay.Recipient `json:"members"`
}

// Audiences are listed (names, member counts, when put), read back (the
// members as put, in order: the body can be put back) and deleted over
// HTTP, each within the caller's tenant; an event naming a deleted
// audience is refused.
func TestAudiencesListedReadDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{sha256hex(acmeToken): "acme", sha256hex(betaToken): "beta"}})
	acme := []string{"Authorization", "Bearer " + acmeToken}
	beta := []string{"Authorization", "Bearer " + betaToken}
	team := []relay.Recipient{{ID: "cy", Email: "cy@example.com"}, {ID: "ada", Phone: "+15550100"}}
	start := time.Now().Add(-time.Second)
	for _, a := range []struct {
		name    string
		members []relay.Recipient
		tok     []string
	}{{"team", team, acme}, {"all", people(3), acme}, {"team", people(1), beta}} {
		if rep := b.do(t, "PUT", "/v1/audiences/"+a.name, jsonOf(t, map[string]any{"members": a.members}), a.tok...); rep.status != http.StatusOK {
			t.Fatalf("PUT %s: %s", a.name, rep)
		}
	}

	list := decode[audienceListBody](t, b.do(t, "GET", "/v1/audiences", "", acme...))
	var names []string
	for _, a := range list.Audiences {
		names = append(names, a.Name)
		if a.UpdatedAt.Before(start) || a.UpdatedAt.After(time.Now()) {
			t.Errorf("audience %s updated at %s, want about now", a.Name, a.UpdatedAt)
		}
	}
	if list.Tenant != "acme" || !slices.Equal(names, []string{"all", "team"}) || list.Audiences[0].Members != 3 || list.Audiences[1].Members != 2 || list.Next != "" {
		t.Fatalf("acme's audiences %+v, want all (3) and team (2)", list)
	}
	first := decode[audienceListBody](t, b.do(t, "GET", "/v1/audiences?limit=1", "", acme...))
	if len(first.Audiences) != 1 || first.Next == "" {
		t.Fatalf("a page of 1: %+v", first)
	}
	if rest := decode[audienceListBody](t, b.do(t, "GET", first.Next, "", acme...)); len(rest.Audiences) != 1 || rest.Audiences[0].Name != "team" {
		t.Errorf("the next page %+v, want team", rest)
	}

	got := decode[audienceBody](t, b.do(t, "GET", "/v1/audiences/team", "", acme...))
	if got.Tenant != "acme" || got.Name != "team" || len(got.Members) != 2 || got.Members[0].ID != "cy" || got.Members[1].Phone != "+15550100" {
		t.Fatalf("GET team: %+v, want cy and ada as put", got)
	}
	// What GET shows can be put back as it is.
	if rep := b.do(t, "PUT", "/v1/audiences/team", jsonOf(t, map[string]any{"members": got.Members}), acme...); rep.status != http.StatusOK {
		t.Errorf("PUT back what GET showed: %s", rep)
	}
	if theirs := decode[audienceBody](t, b.do(t, "GET", "/v1/audiences/team", "", beta...)); len(theirs.Members) != 1 || theirs.Tenant != "beta" {
		t.Errorf("beta's team: %+v", theirs)
	}

	if rep := b.do(t, "DELETE", "/v1/audiences/team", "", acme...); rep.status != http.StatusOK {
		t.Fatalf("DELETE: %s", rep)
	}
	wantProblem(t, b.do(t, "GET", "/v1/audiences/team", "", acme...), http.StatusNotFound, "not-found")
	wantProblem(t, b.do(t, "DELETE", "/v1/audiences/team", "", acme...), http.StatusNotFound, "not-found")
	ev := relay.Event{ID: "evt_a", Type: "incident", Audience: "team", Subject: "Down"}
	if p := wantProblem(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev), acme...), http.StatusBadRequest, "invalid-event"); p.Field != "audience" {
		t.Errorf("an event naming the deleted audience: field %q", p.Field)
	}
	if res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev), beta...)); res.Count != 1 {
		t.Errorf("beta's team, untouched: %+v", res)
	}
	if names := decode[audienceListBody](t, b.do(t, "GET", "/v1/audiences", "", acme...)).Audiences; len(names) != 1 || names[0].Name != "all" {
		t.Errorf("acme's audiences after the delete: %+v", names)
	}

	for _, path := range []string{"/v1/audiences?tenant=beta", "/v1/audiences/team?tenant=beta"} {
		for _, method := range []string{"GET", "DELETE"} {
			if method == "DELETE" && path == "/v1/audiences?tenant=beta" {
				continue
			}
			wantProblem(t, b.do(t, method, path, "", acme...), http.StatusForbidden, "tenant-mismatch")
		}
	}
	for _, method := range []string{"GET", "DELETE"} {
		if p := wantProblem(t, b.do(t, method, "/v1/audiences/"+strings.Repeat("a", 65), "", acme...), http.StatusBadRequest, "invalid-request"); p.Field != "name" {
			t.Errorf("%s a name of 65 bytes: field %q", method, p.Field)
		}
	}
	wantProblem(t, b.do(t, "GET", "/v1/audiences?limit=0", "", acme...), http.StatusBadRequest, "invalid-query")
}

// GET /v1/notifications?event_id=X lists every notification of the event,
// whatever purposes it was accepted under, in id order and paged without
// skip or repeat; purpose= narrows to one. On an open API ?tenant= picks
// the tenant listed (validated as an event's tenant); without it, the
// listing covers every tenant and event_id looks in "default".
func TestListByEventIDAndTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	receiptEv := receipt("evt_1", 2)
	reminder := receipt("evt_1", 1)
	reminder.Purpose = "reminder"
	other := receipt("evt_2", 1)
	acme := receipt("evt_1", 1)
	acme.Tenant = "acme"
	var want []string
	for _, ev := range []relay.Event{receiptEv, other, reminder, acme} {
		res := accepted(t, b.do(t, "POST", "/v1/events", jsonOf(t, ev)))
		if ev.Tenant == "" && ev.ID == "evt_1" {
			want = append(want, ids(res.Notifications)...)
		}
	}
	listIDs := func(path string) []string {
		t.Helper()
		var got []string
		for pages := 0; path != ""; pages++ {
			rep := b.do(t, "GET", path, "")
			if rep.status != http.StatusOK {
				t.Fatalf("GET %s: %s", path, rep)
			}
			p := decode[pageBody](t, rep)
			for _, n := range p.Notifications {
				got = append(got, n.ID)
			}
			if pages > 10 {
				t.Fatalf("paging %s does not end", path)
			}
			path = p.Next
		}
		return got
	}
	if got := listIDs("/v1/notifications?event_id=evt_1"); !slices.Equal(got, want) {
		t.Errorf("evt_1, every purpose: %v, want %v", got, want)
	}
	if got := listIDs("/v1/notifications?event_id=evt_1&limit=1"); !slices.Equal(got, want) {
		t.Errorf("evt_1 by pages of 1: %v, want %v", got, want)
	}
	if got := listIDs("/v1/notifications?event_id=evt_1&purpose=reminder"); !slices.Equal(got, want[2:]) {
		t.Errorf("evt_1's reminder: %v, want %v", got, want[2:])
	}
	wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=evt_1&purpose=nope", ""), http.StatusNotFound, "not-found")
	p := wantProblem(t, b.do(t, "GET", "/v1/notifications?event_id=nope", ""), http.StatusNotFound, "not-found")
	if !strings.Contains(p.Detail, `"nope"`) || !strings.Contains(p.Detail, `"default"`) {
		t.Errorf("an unknown event: %q, want the event and tenant named", p.Detail)
	}

	tenants := func(path string) map[string]int {
		t.Helper()
		out := map[string]int{}
		rep := b.do(t, "GET", path, "")
		if rep.status != http.StatusOK {
			t.Fatalf("GET %s: %s", path, rep)
		}
		for _, n := range decode[pageBody](t, rep).Notifications {
			out[n.Tenant]++
		}
		return out
	}
	for path, want := range map[string]map[string]int{
		"/v1/notifications":                            {"default": 4, "acme": 1},
		"/v1/notifications?tenant=acme":                {"acme": 1},
		"/v1/notifications?tenant=default":             {"default": 4},
		"/v1/notifications?tenant=acme&event_id=evt_1": {"acme": 1},
		"/v1/notifications?tenant=nobody":              {},
		"/v1/notifications?status=pending&tenant=acme": {"acme": 1},
	} {
		if got := tenants(path); len(got) != len(want) || got["acme"] != want["acme"] || got["default"] != want["default"] {
			t.Errorf("GET %s: by tenant %v, want %v", path, got, want)
		}
	}
	for _, v := range []string{"", "bad tenant", strings.Repeat("t", 65)} {
		p := wantProblem(t, b.do(t, "GET", "/v1/notifications?tenant="+url.QueryEscape(v), ""), http.StatusBadRequest, "invalid-request")
		if p.Field != "tenant" || len(p.Detail) > 300 {
			t.Errorf("?tenant=%q: %+v, want the tenant named, briefly", v, p)
		}
	}
}

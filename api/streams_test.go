package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// sse is one Server-Sent Event as a client parses it; a comment line (a
// heartbeat) is an event of its own with comment set.
type sse struct {
	id, event, data, comment string
}

// stream is an open feed stream: its events as they arrive.
type stream struct {
	events chan sse
	close  func()
}

// openStream opens user's feed stream with hdr; a refusal comes back as
// its reply, and stream is nil.
func (b *bundle) openStream(tb testing.TB, user string, hdr ...string) (*stream, reply) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/v1/users/"+user+"/feed/stream", nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		cancel()
		tb.Fatalf("open stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		var body strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&body)
		return nil, reply{status: resp.StatusCode, header: resp.Header, body: []byte(body.String())}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		tb.Errorf("stream Content-Type %q", ct)
	}
	s := &stream{events: make(chan sse, 4096)}
	done := make(chan struct{})
	s.close = func() { cancel(); resp.Body.Close(); <-done }
	tb.Cleanup(s.close)
	go func() {
		defer close(done)
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sse{}) {
					s.events <- ev
				}
				ev = sse{}
			case strings.HasPrefix(line, ":"):
				s.events <- sse{comment: strings.TrimSpace(line[1:])}
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "id":
					ev.id = v
				case "event":
					ev.event = v
				case "data":
					ev.data += v
				}
			}
		}
	}()
	return s, reply{status: resp.StatusCode, header: resp.Header}
}

// next is the next event that is not a heartbeat nor a retry hint.
func (s *stream) next(tb testing.TB) sse {
	tb.Helper()
	timeout := time.After(bound)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				tb.Fatal("the stream ended")
			}
			if ev.comment != "" || ev.event == "" && ev.data == "" {
				continue
			}
			return ev
		case <-timeout:
			tb.Fatalf("no event within %s", bound)
		}
	}
}

// item reads the next event as an item: its id must be its seq.
func (s *stream) item(tb testing.TB) feedItemBody {
	tb.Helper()
	ev := s.next(tb)
	if ev.event != "item" {
		tb.Fatalf("got event %+v, want an item", ev)
	}
	var it feedItemBody
	if err := json.Unmarshal([]byte(ev.data), &it); err != nil {
		tb.Fatalf("item %s: %v", ev.data, err)
	}
	if ev.id != strconv.FormatInt(it.Seq, 10) {
		tb.Fatalf("item with seq %d has event id %q", it.Seq, ev.id)
	}
	return it
}

type counts struct {
	Unread   int64 `json:"unread"`
	ReadUpTo int64 `json:"read_up_to"`
}

// state reads the next event as the counts.
func (s *stream) state(tb testing.TB) counts {
	tb.Helper()
	ev := s.next(tb)
	if ev.event != "state" || ev.id != "" {
		tb.Fatalf("got event %+v, want state (without an id)", ev)
	}
	var c counts
	if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
		tb.Fatal(err)
	}
	return c
}

func lastID(id int64) []string { return []string{"Last-Event-ID", strconv.FormatInt(id, 10)} }

// A stream sends each new item of its user's feeds once, oldest first,
// with its seq as id, then the unread count; another user's items never;
// reads and dismisses made elsewhere, and read-all, as they commit.
func TestFeedStreamLive(t *testing.T) {
	t.Parallel()
	b, acme, _, acmeKey, _ := userTokenSetup(t)
	ada := mint(t, acmeKey, "acme", "ada")
	s, rep := b.openStream(t, "ada", ada...)
	if s == nil {
		t.Fatalf("open: %s", rep)
	}
	if c := s.state(t); c.Unread != 2 {
		t.Fatalf("first state: %+v, want 2 unread", c)
	}
	b.postFeedEvent(t, feedEvent("b1", "bob's", "@bob"), acme...)
	e4 := b.postFeedEvent(t, feedEvent("e4", "New for ada", "@ada"), acme...).FeedItems[0].Seq
	if it := s.item(t); it.Seq != e4 || it.EventID != "e4" || it.Read {
		t.Fatalf("item %+v, want e4 at %d, unread (bob's item is not ada's)", it, e4)
	}
	if c := s.state(t); c.Unread != 3 {
		t.Fatalf("after e4: %+v, want 3 unread", c)
	}
	// Marked read by another client (the tenant's server here).
	if rep := b.do(t, "POST", seqPath("ada", e4, "read"), "", acme...); rep.status != http.StatusOK {
		t.Fatal(rep)
	}
	if ev := s.next(t); ev.event != "read" || ev.data != `{"seq": `+strconv.FormatInt(e4, 10)+`, "read": true}` {
		t.Fatalf("after a read elsewhere: %+v", ev)
	}
	if c := s.state(t); c.Unread != 2 {
		t.Fatalf("after the read: %+v", c)
	}
	page := b.feedPage(t, "/v1/users/ada/feed", acme...)
	oldest := page.Items[len(page.Items)-1].Seq
	if rep := b.do(t, "POST", seqPath("ada", oldest, "dismiss"), "", acme...); rep.status != http.StatusOK {
		t.Fatal(rep)
	}
	if ev := s.next(t); ev.event != "dismissed" || ev.data != `{"seq": `+strconv.FormatInt(oldest, 10)+`}` {
		t.Fatalf("after a dismiss elsewhere: %+v", ev)
	}
	if c := s.state(t); c.Unread != 1 {
		t.Fatalf("after the dismiss: %+v", c)
	}
	b.readAll(t, "ada", `{"up_to": `+strconv.FormatInt(e4, 10)+`}`, acme...)
	for {
		ev := s.next(t)
		if ev.event == "read" {
			continue // the items the watermark covered
		}
		if ev.event != "state" || ev.data != `{"unread": 0, "read_up_to": `+strconv.FormatInt(e4, 10)+`}` {
			t.Fatalf("after read-all: %+v", ev)
		}
		break
	}
}

// A reconnect with Last-Event-ID gets exactly the items after it, oldest
// first, and none before: after a reconnect, and after a restart of the
// API and its relay on the same database.
func TestFeedStreamResumes(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "relay.db")
	tokens := map[string]string{api.HashToken("acme-token"): "acme"}
	b := setup(t, options{DB: db, Tokens: tokens, API: api.Options{StreamSweep: time.Hour}})
	acme := bearer("acme-token")
	k := b.createKey(t, "", acme...)
	ada := mint(t, k, "acme", "ada")
	var want []int64
	post := func(b *bundle, id string) {
		want = append(want, b.postFeedEvent(t, feedEvent(id, id, "@ada", "*"), acme...).FeedItems[1].Seq)
	}
	post(b, "e1")
	post(b, "e2")

	s, rep := b.openStream(t, "ada", append(lastID(0), ada...)...)
	if s == nil {
		t.Fatal(rep)
	}
	// An event in two of ada's feeds is one item, at its newer seq.
	for _, seq := range want {
		if it := s.item(t); it.Seq != seq {
			t.Fatalf("item %d, want %d", it.Seq, seq)
		}
	}
	s.state(t)
	last := want[len(want)-1]
	s.close()
	want = want[:0]
	post(b, "e3")
	post(b, "e4")
	s, _ = b.openStream(t, "ada", append(lastID(last), ada...)...)
	for _, seq := range want {
		if it := s.item(t); it.Seq != seq {
			t.Fatalf("after a reconnect: item %d, want %d (exactly the missed ones)", it.Seq, seq)
		}
	}
	if ev := s.next(t); ev.event != "state" {
		t.Fatalf("after the missed items: %+v, want state and no repeat", ev)
	}
	last = want[len(want)-1]
	s.close()

	// One item while it is down, one after it restarted.
	want = want[:0]
	post(b, "e5")
	b.stopStreams()
	b.srv.Close()
	if err := b.closeRelay(); err != nil {
		t.Fatal(err)
	}
	b = setup(t, options{DB: db, Tokens: tokens, API: api.Options{StreamSweep: time.Hour}})
	post(b, "e6")
	s, _ = b.openStream(t, "ada", append(lastID(last), ada...)...)
	for _, seq := range want {
		if it := s.item(t); it.Seq != seq {
			t.Fatalf("after a restart: item %d, want %d", it.Seq, seq)
		}
	}
	if c := s.state(t); c.Unread != 6 {
		t.Fatalf("after a restart: %+v, want 6 unread", c)
	}
	// And live from there.
	post(b, "e7")
	if it := s.item(t); it.Seq != want[len(want)-1] {
		t.Fatalf("live after the restart: %d, want %d", it.Seq, want[len(want)-1])
	}
}

// Streams are bounded per user and per tenant: beyond, 429 with
// Retry-After, at once; a closed stream frees its place. An idle stream
// sends heartbeats. The token rules are the feed's.
func TestFeedStreamBoundsAndHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{api.HashToken("acme-token"): "acme"},
		API: api.Options{MaxStreamsPerUser: 2, MaxStreamsPerTenant: 3, StreamHeartbeat: 20 * time.Millisecond}})
	acme := bearer("acme-token")
	k := b.createKey(t, "", acme...)
	ada, bob, carol := mint(t, k, "acme", "ada"), mint(t, k, "acme", "bob"), mint(t, k, "acme", "carol")
	a1, _ := b.openStream(t, "ada", ada...)
	a2, _ := b.openStream(t, "ada", ada...)
	if a1 == nil || a2 == nil {
		t.Fatal("two streams for ada refused")
	}
	s, rep := b.openStream(t, "ada", ada...)
	if s != nil {
		t.Fatal("a third stream for ada was opened")
	}
	p := wantProblem(t, rep, http.StatusTooManyRequests, "too-many-streams")
	if rep.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "this user has 2 streams open") {
		t.Errorf("beyond the user's bound: %s Retry-After %q", rep, rep.header.Get("Retry-After"))
	}
	if s, rep := b.openStream(t, "bob", bob...); s == nil {
		t.Fatalf("bob's stream: %s", rep)
	}
	_, rep = b.openStream(t, "carol", carol...)
	if p := wantProblem(t, rep, http.StatusTooManyRequests, "too-many-streams"); !strings.Contains(p.Detail, "tenant has 3 streams") {
		t.Errorf("beyond the tenant's bound: %s", rep)
	}
	// Heartbeats on an idle stream.
	timeout := time.After(bound)
	for beats := 0; beats < 2; {
		select {
		case ev := <-a1.events:
			if ev.comment == "heartbeat" {
				beats++
			}
		case <-timeout:
			t.Fatal("no heartbeats on an idle stream")
		}
	}
	// A closed stream frees its place (once its handler has seen it go).
	a2.close()
	deadline := time.Now().Add(bound)
	for {
		s, rep := b.openStream(t, "carol", carol...)
		if s != nil {
			break
		}
		if rep.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("carol after ada closed one: %s", rep)
		}
	}
	// The token rules: another user's stream, a bad Last-Event-ID.
	_, rep = b.openStream(t, "bob", ada...)
	wantProblem(t, rep, http.StatusForbidden, "user-mismatch")
	_, rep = b.openStream(t, "ada", append([]string{"Last-Event-ID", "x1"}, acme...)...)
	if p := wantProblem(t, rep, http.StatusBadRequest, "invalid-request"); p.Field != "Last-Event-ID" {
		t.Errorf("a bad Last-Event-ID: %+v", p)
	}
}

// On PostgreSQL an item accepted on one node reaches a stream on another
// (LISTEN/NOTIFY), and so does one accepted while that node's listening
// connection was cut: on reconnecting it re-reads what it may have
// missed. No sweep runs: only the notifications can deliver.
func TestFeedStreamAcrossPostgresNodes(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	node := func() *bundle {
		st, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return setup(t, options{Store: st, Tokens: map[string]string{api.HashToken("acme-token"): "acme"},
			API: api.Options{StreamSweep: time.Hour}})
	}
	n1, n2 := node(), node()
	acme := bearer("acme-token")
	k := n1.createKey(t, "", acme...)
	ada := mint(t, k, "acme", "ada")
	s, rep := n2.openStream(t, "ada", ada...)
	if s == nil {
		t.Fatal(rep)
	}
	s.state(t)
	seq := n1.postFeedEvent(t, feedEvent("e1", "from node 1", "@ada"), acme...).FeedItems[0].Seq
	if it := s.item(t); it.Seq != seq || it.EventID != "e1" {
		t.Fatalf("node 2 streamed %+v, want e1 at %d", it, seq)
	}
	if c := s.state(t); c.Unread != 1 {
		t.Fatalf("node 2's count: %+v", c)
	}

	// Cut every listening connection (node 1's and node 2's) and post while
	// they reconnect.
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var cut int
	if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = 'LISTEN edgerelay_feeds' AND pid <> pg_backend_pid()`).Scan(&cut); err != nil || cut < 2 {
		t.Fatalf("cut %d listening connections (%v), want both nodes'", cut, err)
	}
	seq = n1.postFeedEvent(t, feedEvent("e2", "during the cut", "@ada"), acme...).FeedItems[0].Seq
	if it := s.item(t); it.Seq != seq || it.EventID != "e2" {
		t.Fatalf("after the cut node 2 streamed %+v, want e2 at %d", it, seq)
	}
}

// The unread count a stream sends never counts an item it has not sent:
// while another client posts sixty items to ada's feed as fast as it can,
// each state's unread is at most the two unread before plus the items
// received so far, and the stream ends at 62 with every item once. (With
// the count read after the page, an item committed between the two reads
// was counted before it was sent: TestFeedStreamLive saw it once as a
// state of 3 where it waited for e4.)
func TestFeedStreamCountsOnlyWhatItSent(t *testing.T) {
	t.Parallel()
	b, _, _, acmeKey, _ := userTokenSetup(t)
	s, rep := b.openStream(t, "ada", mint(t, acmeKey, "acme", "ada")...)
	if s == nil {
		t.Fatalf("open: %s", rep)
	}
	if c := s.state(t); c.Unread != 2 {
		t.Fatalf("first state: %+v, want 2 unread", c)
	}
	const n = 60
	posted := make(chan struct{})
	defer func() { <-posted }() // the store is closed only after the posts end
	go func() {
		defer close(posted)
		for i := range n {
			ev := feedEvent("h"+strconv.Itoa(i), "item", "@ada")
			ev.Tenant = "acme"
			if _, err := b.r.Accept(context.Background(), ev); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	seen := map[int64]bool{}
	for {
		ev := s.next(t)
		switch ev.event {
		case "item":
			seq, _ := strconv.ParseInt(ev.id, 10, 64)
			if seen[seq] {
				t.Fatalf("item %d sent twice", seq)
			}
			seen[seq] = true
		case "state":
			var c counts
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatal(err)
			}
			if c.Unread > int64(2+len(seen)) {
				t.Fatalf("state %+v after %d items: it counts items not sent yet", c, len(seen))
			}
			if c.Unread == 2+n && len(seen) == n {
				return
			}
		case "reset":
			t.Fatalf("reset: %+v", ev)
		}
	}
}

// A stream that reconnects behind by more than two windows of items gets
// every one it missed, oldest first, and then the count, up to
// streamCatchUp (1,000); behind by more it is told to reset, with the newest seq as id, and
// goes on live from there. (The catch-up once stopped after two windows
// and moved on to the newest, so a tab back after 101 to 999 items never
// got the ones in between.)
func TestFeedStreamCatchesUp(t *testing.T) {
	t.Parallel()
	b, _, _, acmeKey, _ := userTokenSetup(t)
	ada := mint(t, acmeKey, "acme", "ada")
	var seqs []int64
	post := func(id string) int64 {
		ev := feedEvent(id, "item", "@ada")
		ev.Tenant = "acme"
		res, err := b.r.Accept(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, res.FeedItems[0].Seq)
		return res.FeedItems[0].Seq
	}
	from := post("c-start")
	for _, missed := range []int{3*50 + 7, 1000} {
		t.Run(strconv.Itoa(missed)+" missed", func(t *testing.T) {
			seqs = seqs[:0]
			for i := range missed {
				post(fmt.Sprintf("c%d-%d", missed, i))
			}
			s, rep := b.openStream(t, "ada", append(lastID(from), ada...)...)
			if s == nil {
				t.Fatal(rep)
			}
			defer s.close()
			for i, seq := range seqs {
				if it := s.item(t); it.Seq != seq {
					t.Fatalf("item %d of %d: seq %d, want %d (each missed item, oldest first)", i+1, missed, it.Seq, seq)
				}
			}
			if ev := s.next(t); ev.event != "state" {
				t.Fatalf("after the %d missed items: %+v, want state", missed, ev)
			}
			from = seqs[len(seqs)-1]
		})
	}
	t.Run("1001 missed", func(t *testing.T) {
		seqs = seqs[:0]
		for i := range 1001 {
			post(fmt.Sprintf("r-%d", i))
		}
		s, rep := b.openStream(t, "ada", append(lastID(from), ada...)...)
		if s == nil {
			t.Fatal(rep)
		}
		defer s.close()
		newest := seqs[len(seqs)-1]
		if ev := s.next(t); ev.event != "reset" || ev.id != strconv.FormatInt(newest, 10) {
			t.Fatalf("1001 behind: %+v, want reset with id %d", ev, newest)
		}
		if ev := s.next(t); ev.event != "state" {
			t.Fatalf("after the reset: %+v, want state", ev)
		}
		live := post("r-live")
		if it := s.item(t); it.Seq != live {
			t.Fatalf("live after the reset: %d, want %d", it.Seq, live)
		}
	})
}

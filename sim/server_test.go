package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// bound is how long any test waits for something that should happen at
// once; reaching it means a bug, not a slow machine.
const bound = 10 * time.Second

type bundle struct {
	ts     *httptest.Server
	url    string       // the send endpoint
	client *http.Client // no keep-alive: one request per connection (see TestGoTransportRetriesIdempotentPOST)
	done   chan record  // one per finished send request
	t      *testing.T
}

// setup starts a Server over real loopback HTTP. tweak runs before the
// server starts, to install hooks without races.
func setup(t *testing.T, opts Options, tweak ...func(*Server)) (*Server, *bundle) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv := New(opts)
	b := &bundle{done: make(chan record, 100), t: t}
	srv.onDone = func(r record) {
		select {
		case b.done <- r:
		default:
		}
	}
	for _, f := range tweak {
		f(srv)
	}
	b.ts = httptest.NewServer(srv)
	t.Cleanup(b.ts.Close)
	t.Cleanup(srv.Close) // runs first: ends held requests so ts.Close does not wait
	b.url = b.ts.URL + "/v1/emails"
	b.client = &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
	return srv, b
}

type reply struct {
	status int
	body   []byte
	header http.Header
	err    error
}

func (b *bundle) send(key, to string) reply {
	return b.sendWith(b.client, key, to)
}

func (b *bundle) sendWith(c *http.Client, key, to string) reply {
	body := fmt.Sprintf(`{"from": "relay@example.com", "to": %q, "subject": "Receipt", "text": "Thanks", "extra": 1}`, to)
	return b.do(c, key, body)
}

func (b *bundle) do(c *http.Client, key, body string) reply {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: rb, header: resp.Header, err: err}
}

func (b *bundle) waitDone() record {
	b.t.Helper()
	select {
	case r := <-b.done:
		return r
	case <-time.After(bound):
		b.t.Fatal("send request never finished")
		return record{}
	}
}

func wantStatus(t *testing.T, r reply, status int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("want %d, got error %v", status, r.err)
	}
	if r.status != status {
		t.Fatalf("want %d, got %d %s", status, r.status, r.body)
	}
}

func wantNoAnswer(t *testing.T, r reply) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("want no answer, got %d %s", r.status, r.body)
	}
}

func wantCounts(t *testing.T, srv *Server, want map[string]int) {
	t.Helper()
	if got := srv.Counts(); !maps.Equal(got, want) {
		t.Fatalf("deliveries per recipient: got %v, want %v", got, want)
	}
}

func script(honour *bool, rules ...Rule) *Script { return &Script{HonourKeys: honour, Rules: rules} }

func TestKeys(t *testing.T) {
	t.Parallel()
	const ada = "ada@example.com"
	t.Run("same key twice sends once and replays the first answer", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true})
		first := b.send("evt_501:receipt", ada)
		second := b.send("evt_501:receipt", ada)
		wantStatus(t, first, 200)
		wantStatus(t, second, 200)
		if !bytes.Equal(first.body, second.body) {
			t.Fatalf("replay differs: %q then %q", first.body, second.body)
		}
		if string(first.body) != `{"id":"sim_1"}`+"\n" {
			t.Fatalf("body %q", first.body)
		}
		if first.header.Get("Idempotent-Replayed") != "" || second.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("Idempotent-Replayed: %q then %q", first.header.Get("Idempotent-Replayed"), second.header.Get("Idempotent-Replayed"))
		}
		wantCounts(t, srv, map[string]int{ada: 1})
		if n := srv.Requests(); n != 2 {
			t.Fatalf("requests %d, want 2", n)
		}
		if d := srv.Deliveries(); len(d) != 1 || d[0].Key != "evt_501:receipt" || d[0].Seq != 1 || d[0].Subject != "Receipt" {
			t.Fatalf("deliveries %+v", d)
		}
	})
	t.Run("different keys send twice", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true})
		wantStatus(t, b.send("evt_503:receipt", "cy@example.com"), 200)
		r := b.send("evt_504:receipt", "cy@example.com")
		wantStatus(t, r, 200)
		if string(r.body) != `{"id":"sim_2"}`+"\n" {
			t.Fatalf("body %q", r.body)
		}
		wantCounts(t, srv, map[string]int{"cy@example.com": 2})
	})
	t.Run("honouring off sends every time", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: false})
		wantStatus(t, b.send("k", ada), 200)
		wantStatus(t, b.send("k", ada), 200)
		wantCounts(t, srv, map[string]int{ada: 2})
	})
	t.Run("no key sends every time", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true})
		wantStatus(t, b.send("", ada), 200)
		wantStatus(t, b.send("", ada), 200)
		wantCounts(t, srv, map[string]int{ada: 2})
	})
	t.Run("addresses compare case-insensitively", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{Script: script(nil, Rule{To: "Ada@Example.com", Attempts: []int{2}, Action: ActionReject})})
		wantStatus(t, b.send("", "ADA@example.com"), 200)
		wantStatus(t, b.send("", "ada@example.com"), 400)
		wantCounts(t, srv, map[string]int{ada: 1})
	})
}

func TestKeyTTL(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	srv, b := setup(t, Options{HonourKeys: true, KeyTTL: time.Hour}, func(s *Server) {
		s.now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	wantStatus(t, b.send("k", "ada@example.com"), 200)
	clock.Add(int64(59 * time.Minute))
	if r := b.send("k", "ada@example.com"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("within the TTL: want a replay, got %d %s", r.status, r.body)
	}
	clock.Add(int64(time.Minute))
	wantStatus(t, b.send("k", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 2})

	clock.Add(int64(2 * time.Hour))
	wantStatus(t, b.send("other", "ben@example.com"), 200)
	srv.mu.Lock()
	_, kept := srv.keys["k"]
	srv.mu.Unlock()
	if kept {
		t.Fatal("expired key not pruned")
	}
}

func TestLoseAnswer(t *testing.T) {
	t.Parallel()
	lose := Rule{To: "ada@example.com", Attempts: []int{1}, Action: ActionLoseAnswer}
	t.Run("keys honoured", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, lose)})
		wantNoAnswer(t, b.send("k", "ada@example.com"))
		wantCounts(t, srv, map[string]int{"ada@example.com": 1}) // the email was sent
		r := b.send("k", "ada@example.com")
		wantStatus(t, r, 200)
		if r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != `{"id":"sim_1"}`+"\n" {
			t.Fatalf("want the stored answer, got %q (replayed %q)", r.body, r.header.Get("Idempotent-Replayed"))
		}
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("keys ignored", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: false, Script: script(nil, lose)})
		wantNoAnswer(t, b.send("k", "ada@example.com"))
		wantStatus(t, b.send("k", "ada@example.com"), 200)
		wantCounts(t, srv, map[string]int{"ada@example.com": 2})
	})
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rule       Rule
		status     int
		retryAfter string
	}{
		{"503 by default", Rule{Action: ActionRefuse}, 503, ""},
		{"503 with retry-after", Rule{Action: ActionRefuse, Status: 503, RetryAfter: 2 * time.Second}, 503, "2"},
		{"429 rounds retry-after up", Rule{Action: ActionRefuse, Status: 429, RetryAfter: 1500 * time.Millisecond}, 429, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.rule.To, tc.rule.Attempts = "ben@example.com", []int{1}
			srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, tc.rule)})
			r := b.send("evt_502:receipt", "ben@example.com")
			wantStatus(t, r, tc.status)
			if got := r.header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			wantCounts(t, srv, map[string]int{})
			// A refusal is not stored: the retry is processed.
			r = b.send("evt_502:receipt", "ben@example.com")
			wantStatus(t, r, 200)
			if r.header.Get("Idempotent-Replayed") != "" {
				t.Fatal("the retry after a refusal was replayed")
			}
			wantCounts(t, srv, map[string]int{"ben@example.com": 1})
		})
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	t.Run("without deliver nothing is sent", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionFail})})
		wantStatus(t, b.send("k", "ada@example.com"), 500)
		wantCounts(t, srv, map[string]int{})
		wantStatus(t, b.send("k", "ada@example.com"), 200)
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("with deliver and keys the retry gets the success", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionFail, Status: 502, Deliver: true})})
		wantStatus(t, b.send("k", "ada@example.com"), 502)
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
		r := b.send("k", "ada@example.com")
		wantStatus(t, r, 200)
		if r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != `{"id":"sim_1"}`+"\n" {
			t.Fatalf("want the stored success, got %q", r.body)
		}
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("with deliver and no keys the retry sends again", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionFail, Status: 504, Deliver: true})})
		wantStatus(t, b.send("k", "ada@example.com"), 504)
		wantStatus(t, b.send("k", "ada@example.com"), 200)
		wantCounts(t, srv, map[string]int{"ada@example.com": 2})
	})
}

func TestReject(t *testing.T) {
	t.Parallel()
	srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "ada@example.com", Attempts: []int{1}, Action: ActionReject, Status: 422})})
	first := b.send("k", "ada@example.com")
	wantStatus(t, first, 422)
	// A permanent rejection is stored: the retry gets it back, though no
	// rule matches attempt 2.
	second := b.send("k", "ada@example.com")
	wantStatus(t, second, 422)
	if second.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, second.body) {
		t.Fatalf("want the stored rejection, got %q", second.body)
	}
	wantStatus(t, b.send("", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 1})
}

func TestSlow(t *testing.T) {
	t.Parallel()
	t.Run("answers after the delay", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{Script: script(nil, Rule{To: "*", Action: ActionSlow, Delay: 20 * time.Millisecond})})
		start := time.Now()
		wantStatus(t, b.send("", "ada@example.com"), 200)
		if el := time.Since(start); el < 20*time.Millisecond {
			t.Fatalf("answered after %s, want at least 20ms", el)
		}
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("a client that gives up sends nothing and frees the key", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionSlow, Delay: time.Hour})})
		impatient := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		wantNoAnswer(t, b.sendWith(impatient, "k", "ada@example.com"))
		if rec := b.waitDone(); rec.Outcome != "gave up while slow" {
			t.Fatalf("outcome %q", rec.Outcome)
		}
		wantCounts(t, srv, map[string]int{})
		wantStatus(t, b.send("k", "ada@example.com"), 200)
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
}

func TestHang(t *testing.T) {
	t.Parallel()
	t.Run("until the client times out", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionHang})})
		impatient := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		r := b.sendWith(impatient, "k", "ada@example.com")
		var ne interface{ Timeout() bool }
		if !errors.As(r.err, &ne) || !ne.Timeout() {
			t.Fatalf("want a client timeout, got %v (status %d)", r.err, r.status)
		}
		rec := b.waitDone() // the handler ends with the client, not after a minute
		if rec.Status != 200 || rec.Delivered != 1 {
			t.Fatalf("record %+v", rec)
		}
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
		wantStatus(t, b.send("k", "ada@example.com"), 200)
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("until the delay passes", func(t *testing.T) {
		t.Parallel()
		srv, b := setup(t, Options{Script: script(nil, Rule{To: "*", Action: ActionHang, Delay: 10 * time.Millisecond})})
		wantNoAnswer(t, b.send("", "ada@example.com"))
		wantCounts(t, srv, map[string]int{"ada@example.com": 1})
	})
	t.Run("until the server is closed", func(t *testing.T) {
		t.Parallel()
		holding := make(chan Action, 1)
		srv, b := setup(t, Options{Script: script(nil, Rule{To: "*", Action: ActionHang})}, func(s *Server) {
			s.wait = func(ctx context.Context, a Action, d time.Duration) error {
				holding <- a
				return s.sleep(ctx, a, d)
			}
		})
		got := make(chan reply, 1)
		go func() { got <- b.send("", "ada@example.com") }()
		select {
		case <-holding:
		case <-time.After(bound):
			t.Fatal("request never held")
		}
		srv.Close()
		select {
		case r := <-got:
			wantNoAnswer(t, r)
		case <-time.After(bound):
			t.Fatal("Close did not end the hang")
		}
		if rec := b.waitDone(); rec.Outcome != "held until the simulator closed, then closed" || rec.Delivered != 1 {
			t.Fatalf("record %+v", rec)
		}
	})
}

func TestInProgressKey(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionSlow, Delay: time.Hour})},
		func(s *Server) {
			s.wait = func(ctx context.Context, a Action, d time.Duration) error {
				close(entered)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
	first := make(chan reply, 1)
	go func() { first <- b.send("k", "ada@example.com") }()
	select {
	case <-entered:
	case <-time.After(bound):
		t.Fatal("first request never started")
	}
	r := b.send("k", "ada@example.com")
	wantStatus(t, r, 409)
	if !strings.Contains(string(r.body), "a request with this Idempotency-Key is in progress") {
		t.Fatalf("409 body %q", r.body)
	}
	close(release)
	var f reply
	select {
	case f = <-first:
	case <-time.After(bound):
		t.Fatal("first request never answered")
	}
	wantStatus(t, f, 200)
	third := b.send("k", "ada@example.com")
	wantStatus(t, third, 200)
	if !bytes.Equal(f.body, third.body) {
		t.Fatalf("replay %q differs from %q", third.body, f.body)
	}
	wantCounts(t, srv, map[string]int{"ada@example.com": 1})
}

// TestAcceptanceCase plays the ada/ben/cy case: four payments, evt_501
// delivered twice by the queue, a worker that retries anything that is not
// a definite answer. Only a key derived from the event, sent to a provider
// that honours keys, gives each payment exactly one receipt.
func TestAcceptanceCase(t *testing.T) {
	t.Parallel()
	type event struct{ id, to string }
	events := []event{
		{"evt_501", "ada@example.com"},
		{"evt_502", "ben@example.com"},
		{"evt_503", "cy@example.com"},
		{"evt_504", "cy@example.com"},
		{"evt_501", "ada@example.com"}, // redelivered
	}
	perEvent := func(e event, _ int) string { return e.id + ":receipt" }
	var n atomic.Int64
	perAttempt := func(event, int) string { return fmt.Sprintf("uuid-%d", n.Add(1)) }
	byAddress := func(e event, _ int) string { return e.to }

	for _, tc := range []struct {
		name   string
		script string
		key    func(event, int) string
		want   map[string]int
	}{
		{"event key, keys honoured", "acceptance.json", perEvent, map[string]int{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 2}},
		{"new key per attempt", "acceptance.json", perAttempt, map[string]int{"ada@example.com": 4, "ben@example.com": 1, "cy@example.com": 2}},
		{"address as key", "acceptance.json", byAddress, map[string]int{"ada@example.com": 1, "ben@example.com": 1, "cy@example.com": 1}},
		{"event key, keys ignored", "acceptance-nokeys.json", perEvent, map[string]int{"ada@example.com": 4, "ben@example.com": 1, "cy@example.com": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc, err := LoadScript("../testdata/faults/" + tc.script)
			if err != nil {
				t.Fatal(err)
			}
			srv, b := setup(t, Options{HonourKeys: !*sc.HonourKeys, Script: sc}) // the script must win
			var seen []string
			for _, e := range events {
				for attempt := 1; ; attempt++ {
					if attempt > 5 {
						t.Fatalf("%s: no answer after 5 attempts", e.id)
					}
					r := b.send(tc.key(e, attempt), e.to)
					if r.err != nil {
						seen = append(seen, "lost")
						continue // unknown: retry with (we hope) the same key
					}
					seen = append(seen, fmt.Sprint(r.status))
					if r.status == 200 {
						break
					}
				}
			}
			wantCounts(t, srv, tc.want)
			if got, want := strings.Join(seen, " "), "lost lost 200 503 200 200 200 200"; got != want {
				t.Fatalf("answers: got %s, want %s", got, want)
			}
			if n := srv.Requests(); n != 8 {
				t.Fatalf("requests %d, want 8", n)
			}
		})
	}
}

// TestGoTransportRetriesIdempotentPOST pins down a net/http behaviour the
// relay must know: a POST carrying Idempotency-Key is "replayable", so when
// a reused keep-alive connection closes without an answer the Transport
// silently sends it again. The simulator counts both requests; the caller
// sees one call that succeeded.
func TestGoTransportRetriesIdempotentPOST(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key          string
		wantAnswered bool
		wantRequests int
	}{
		{"k", true, 3},
		{"", false, 2},
	} {
		t.Run(fmt.Sprintf("key %q", tc.key), func(t *testing.T) {
			t.Parallel()
			srv, b := setup(t, Options{HonourKeys: true, Script: script(nil, Rule{To: "ada@example.com", Attempts: []int{1}, Action: ActionLoseAnswer})})
			keepAlive := &http.Client{Timeout: bound, Transport: &http.Transport{}}
			t.Cleanup(keepAlive.CloseIdleConnections)
			wantStatus(t, b.sendWith(keepAlive, "", "warm@example.com"), 200) // leaves an idle connection
			r := b.sendWith(keepAlive, tc.key, "ada@example.com")
			if answered := r.err == nil; answered != tc.wantAnswered {
				t.Fatalf("answered %v (err %v), want %v", answered, r.err, tc.wantAnswered)
			}
			if n := srv.Requests(); n != tc.wantRequests {
				t.Fatalf("requests %d, want %d", n, tc.wantRequests)
			}
			wantCounts(t, srv, map[string]int{"warm@example.com": 1, "ada@example.com": 1})
		})
	}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	srv, b := setup(t, Options{HonourKeys: true})
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := b.client.Get(b.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}

	for _, tc := range []struct {
		body   string
		status int
		err    string
	}{
		{`{"from": "relay@example.com", "to": "ada@example.com"`, 400, "not valid JSON"},
		{``, 400, "not valid JSON"},
		{`{"to": "ada@example.com"}`, 422, "from: required"},
		{`{"from": "relay@example.com"}`, 422, "to: required"},
		{`{"from": "relay@example.com", "to": []}`, 422, "to: required"},
		{`{"from": "relay@example.com", "to": 7}`, 422, "to: want"},
		{`{"from": "relay@example.com", "to": "ada"}`, 422, `to: \"ada\" is not an email address`},
	} {
		r := b.do(b.client, "bad", tc.body)
		wantStatus(t, r, tc.status)
		if !strings.Contains(string(r.body), tc.err) || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: got %s, want an error containing %q", tc.body, r.body, tc.err)
		}
	}
	// Validation failures are not stored for the key: the corrected request is processed.
	wantStatus(t, b.do(b.client, "bad", `{"from": "relay@example.com", "to": ["Ada@example.com", "ben@example.com"], "subject": "Hi", "text": "t", "html": "<p>t</p>"}`), 200)

	status, body := get("/deliveries")
	var d struct {
		Total       int            `json:"total"`
		ByRecipient map[string]int `json:"by_recipient"`
		Deliveries  []Delivery     `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &d); err != nil || status != 200 {
		t.Fatalf("GET /deliveries: %d %s (%v)", status, body, err)
	}
	if d.Total != 2 || d.ByRecipient["ada@example.com"] != 1 || d.ByRecipient["ben@example.com"] != 1 ||
		d.Deliveries[0].To != "ada@example.com" || d.Deliveries[1].Seq != 2 || d.Deliveries[1].Key != "bad" || d.Deliveries[0].At.IsZero() {
		t.Fatalf("GET /deliveries: %s", body)
	}
	for _, field := range []string{`"seq":`, `"to":`, `"key":`, `"subject":`, `"text":`, `"at":`} {
		if !bytes.Contains(body, []byte(field)) {
			t.Errorf("GET /deliveries lacks %s: %s", field, body)
		}
	}
	if status, body := get("/requests"); status != 200 || string(body) != `{"total":8}`+"\n" {
		t.Fatalf("GET /requests: %d %s", status, body)
	}
	for _, path := range []string{"/v1/emails", "/v1/sms", "/"} {
		if status, body := get(path); status != 404 || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("GET %s: %d %s, want a 404 JSON error", path, status, body)
		}
	}

	resp, err := b.client.Post(b.ts.URL+"/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || srv.Requests() != 0 || len(srv.Deliveries()) != 0 {
		t.Fatalf("POST /reset: %d, then %d requests, %d deliveries", resp.StatusCode, srv.Requests(), len(srv.Deliveries()))
	}
	if status, body := get("/deliveries"); status != 200 || !bytes.Contains(body, []byte(`"deliveries":[]`)) {
		t.Fatalf("GET /deliveries after reset: %s", body)
	}
	// Keys were forgotten too.
	wantStatus(t, b.send("bad", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 1})
}

func TestResetForgetsAttempts(t *testing.T) {
	t.Parallel()
	srv, b := setup(t, Options{Script: script(nil, Rule{To: "*", Attempts: []int{1}, Action: ActionRefuse})})
	wantStatus(t, b.send("", "ada@example.com"), 503)
	wantStatus(t, b.send("", "ada@example.com"), 200)
	srv.Reset()
	wantStatus(t, b.send("", "ada@example.com"), 503)
}

func TestHonourKeysPrecedence(t *testing.T) {
	t.Parallel()
	off, on := false, true
	srv, b := setup(t, Options{HonourKeys: true, Script: script(&off)})
	wantStatus(t, b.send("k", "ada@example.com"), 200)
	wantStatus(t, b.send("k", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 2}) // the script's false won

	srv.SetHonourKeys(true)
	wantStatus(t, b.send("k2", "ada@example.com"), 200)
	wantStatus(t, b.send("k2", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 3})

	srv.SetScript(script(nil)) // no honour_keys: the setting stays
	wantStatus(t, b.send("k2", "ada@example.com"), 200)
	wantCounts(t, srv, map[string]int{"ada@example.com": 3})

	srv.SetScript(script(&off))
	srv.SetScript(script(&on, Rule{To: "*", Action: ActionReject}))
	wantStatus(t, b.send("k3", "ada@example.com"), 400)
	r := b.send("k3", "ada@example.com")
	wantStatus(t, r, 400)
	if r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the last script's honour_keys did not switch keys back on")
	}
}

func TestSetScriptPanicsOnInvalid(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `rules[0].action: unknown action "loose-answer"`) {
			t.Fatalf("recovered %v", r)
		}
	}()
	New(Options{Script: script(nil, Rule{To: "*", Action: "loose-answer"})})
}

// Latency: every well-formed send waits it before it is handled, and many
// wait at once (a timer each); a malformed one is answered at once.
func TestLatency(t *testing.T) {
	t.Parallel()
	const n = 8
	waiting := make(chan time.Duration, n)
	release := make(chan struct{})
	srv, b := setup(t, Options{Latency: time.Hour}, func(s *Server) {
		s.wait = func(ctx context.Context, a Action, d time.Duration) error {
			waiting <- d
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	wantStatus(t, b.do(b.client, "", `{"from": "relay@example.com"}`), 422)
	got := make(chan reply, n)
	for i := range n {
		go func() { got <- b.send("", fmt.Sprintf("u%d@example.com", i)) }()
	}
	for range n { // all n wait at the same time
		select {
		case d := <-waiting:
			if d != time.Hour {
				t.Fatalf("waited %v, want the latency", d)
			}
		case <-time.After(bound):
			t.Fatal("a request did not wait for the latency")
		}
	}
	if d := srv.Deliveries(); len(d) != 0 {
		t.Fatalf("delivered during the latency: %+v", d)
	}
	close(release)
	for range n {
		select {
		case r := <-got:
			wantStatus(t, r, 200)
		case <-time.After(bound):
			t.Fatal("no answer after the latency")
		}
	}
	if d := srv.Deliveries(); len(d) != n {
		t.Fatalf("%d deliveries, want %d", len(d), n)
	}
}

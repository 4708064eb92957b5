package api_test

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/edgerelay/edgerelay/api"
	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// The inbox element (GET /inbox.js) in a real headless browser (Debian's
// chromium), on an app's page of another origin, as an app embeds it: the
// page loads the script from the API's server and gives the element a
// user token. The page counts what the element says it received
// (edgerelay-inbox:item) before any dedupe, so a repeat shows.

// appPageHTML is the app's page: it records the items the element's stream
// delivered and its connections, and reaches into its shadow root.
const appPageHTML = `<!doctype html><html lang="en"><meta charset="utf-8"><title>an app</title>
<script>
window.seen = []; window.connects = 0; window.pwned = false; window.marked = [];
document.addEventListener('edgerelay-inbox:marked', (e) => marked.push(e.detail.kind));
document.addEventListener('edgerelay-inbox:item', (e) => seen.push(e.detail.seq));
document.addEventListener('edgerelay-inbox:connected', () => { connects++; window.connectedAt = performance.now(); });
document.addEventListener('edgerelay-inbox:error', (e) => { if (e.detail.status === 429) window.refusedAt = performance.now(); });
window.ib = (sel) => document.querySelector('edgerelay-inbox').shadowRoot.querySelector(sel);
window.titles = () => [...document.querySelector('edgerelay-inbox').shadowRoot.querySelectorAll('li .title')].map((e) => e.textContent);
window.badge = () => ib('.badge').classList.contains('zero') ? '0' : ib('.badge .count').textContent;
// While hold is set, the answers to feed page reads (what the server read
// then) are held from the element until release().
window.hold = false; window.held = 0;
let open;
const gate = new Promise((ok) => { open = ok; });
window.release = () => { window.hold = false; open(); };
const realFetch = window.fetch;
window.fetch = async (...args) => {
  const r = await realFetch(...args);
  if (window.hold && /\/feed\?limit=/.test(String(args[0]))) {
    window.held++;
    await gate;
  }
  return r;
};
</script>
<script src="%[1]s/inbox.js"%[3]s></script>
<p>An app</p>
<edgerelay-inbox server="%[1]s" token="%[2]s"></edgerelay-inbox>
`

// appServer serves the app's page at /?server=&token=.
func appServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		pin := ""
		if sri := q.Get("integrity"); sri != "" {
			pin = ` integrity="` + html.EscapeString(sri) + `" crossorigin="anonymous"`
		}
		fmt.Fprintf(w, appPageHTML, html.EscapeString(q.Get("server")), html.EscapeString(q.Get("token")), pin)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// browser starts one headless chromium for a test; its tabs are
// chromedp.NewContext of what it returns.
func browser(t *testing.T) context.Context {
	t.Helper()
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH (apt-get install chromium): the inbox's browser tests need it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first run starts the browser: no deadline on its context (one
	// would stop the browser).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("browser: %v", err)
	}
	return ctx
}

// tab is one browser tab on the app's page, showing user's inbox.
type tab struct {
	t   *testing.T
	ctx context.Context
}

func openTab(t *testing.T, browserCtx context.Context, app *httptest.Server, server string, token []string, more ...string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 3*bound)
	t.Cleanup(cancel)
	tok := strings.TrimPrefix(token[1], "Bearer ")
	q := url.Values{"server": {server}, "token": {tok}}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	page := app.URL + "/?" + q.Encode()
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open the app's page: %v", err)
	}
	return &tab{t: t, ctx: ctx}
}

// eval runs expr in the page and returns its value as T.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wait waits until expr is true in the page (within bound), saying what
// the page showed if it never is.
func (tb *tab) wait(what, expr string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, bound)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		tb.t.Fatalf("%s: not within %s (%v); the page shows titles %v, badge %q, seen %v", what, bound, err,
			eval[[]string](tb, `titles()`), eval[string](tb, `badge()`), eval[[]int64](tb, `seen`))
	}
}

func (tb *tab) screenshot(name string) {
	b, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err == nil {
		os.WriteFile(filepath.Join(tb.t.ArtifactDir(), name+".png"), b, 0o644)
	}
}

func jsList(v any) string { b, _ := json.Marshal(v); return string(b) }

// inboxSetup is userTokenSetup with the app's origin allowed.
func inboxSetup(t *testing.T, app *httptest.Server) (b *bundle, acme, ada []string) {
	b, acme, _, k, _ := userTokenSetup(t)
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatalf("set origins: %s", rep)
	}
	return b, acme, mint(t, k, "acme", "ada")
}

func TestInboxElementInABrowser(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	app := appServer(t)
	// Sequential: one browser, a tab or two at a time, on a loaded box.
	t.Run("live", func(t *testing.T) { inboxLive(t, bctx, app) })
	t.Run("two tabs", func(t *testing.T) { inboxTwoTabs(t, bctx, app) })
	t.Run("read-all marks what was shown", func(t *testing.T) { inboxReadAllShown(t, bctx, app) })
	t.Run("escapes", func(t *testing.T) { inboxEscapes(t, bctx, app) })
	t.Run("restart", func(t *testing.T) { inboxRestart(t, bctx, app) })
	t.Run("pages", func(t *testing.T) { inboxPages(t, bctx, app) })
	t.Run("idle timeout", func(t *testing.T) { inboxIdleTimeout(t, bctx, app) })
	t.Run("reconcile keeps a late item", func(t *testing.T) { inboxReconcileKeepsLateItem(t, bctx, app) })
	t.Run("reset keeps a late item", func(t *testing.T) { inboxResetKeepsLateItem(t, bctx, app) })
	t.Run("demo", func(t *testing.T) { inboxDemo(t, bctx, app) })
	t.Run("integrity", func(t *testing.T) { inboxIntegrity(t, bctx, app) })
	t.Run("bound", func(t *testing.T) { inboxBound(t, bctx, app) })
}

// Beyond the user's bound of streams, a second tab shows the feed, says
// the stream was refused (429), and goes live once the first tab closes.
func inboxBound(t *testing.T, bctx context.Context, app *httptest.Server) {
	b := setup(t, options{Tokens: map[string]string{api.HashToken("acme-token"): "acme"},
		API: api.Options{StreamSweep: time.Hour, MaxStreamsPerUser: 1}})
	acme := bearer("acme-token")
	k := b.createKey(t, "", acme...)
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatal(rep)
	}
	b.postFeedEvent(t, feedEvent("e1", "First", "@ada"), acme...)
	ada := mint(t, k, "acme", "ada")
	// The first tab under a context of its own, to close it mid-test.
	ctx, closeOne := chromedp.NewContext(bctx)
	defer closeOne()
	one := openTab(t, ctx, app, b.srv.URL, ada)
	one.wait("the first tab live", `connects === 1`)
	two := openTab(t, bctx, app, b.srv.URL, ada)
	two.wait("the second tab's feed, its stream refused", `titles().join('|') === 'First' && badge() === '1' && connects === 0 && ib('.status').textContent.includes('streams open')`)
	closeOne()
	two.wait("the second tab live once the first closed", `connects === 1`)
	// It waited the refusal's Retry-After (10 s) before trying again: the
	// page could read it (Access-Control-Expose-Headers).
	if waited := eval[float64](two, `connectedAt - refusedAt`); waited < 9900 {
		t.Errorf("the second tab connected %.0f ms after its refusal, want at least the 10 s of its Retry-After", waited)
	}
	seq := b.postFeedEvent(t, feedEvent("e2", "Second", "@ada"), acme...).FeedItems[0].Seq
	two.wait("the item in the second tab", `titles()[0] === 'Second' && badge() === '2'`)
	if got := eval[[]int64](two, `seen`); !slices.Equal(got, []int64{seq}) {
		t.Errorf("the second tab's stream delivered %v, want [%d]", got, seq)
	}
}

// A page that pins inbox.js by its hash (integrity=, crossorigin) runs it;
// one pinning another hash does not.
func inboxIntegrity(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, _, ada := inboxSetup(t, app)
	js := b.do(t, "GET", "/inbox.js", "")
	sum := sha512.Sum384(js.body)
	pin := "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
	tb := openTab(t, bctx, app, b.srv.URL, ada, "integrity", pin)
	tb.wait("the pinned element", `titles().length === 2 && badge() === '2'`)
	bad := openTab(t, bctx, app, b.srv.URL, ada, "integrity", "sha384-"+base64.StdEncoding.EncodeToString(make([]byte, 48)))
	if got := eval[bool](bad, `customElements.get('edgerelay-inbox') === undefined`); !got {
		t.Error("a page pinning another hash ran inbox.js")
	}
}

// The panel pages back by the feed list's cursor (page-size items a page).
func inboxPages(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, _, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().length === 2`)
	eval[bool](tb, `document.querySelector('edgerelay-inbox').setAttribute('page-size', '1'), true`)
	tb.wait("one item a page", `titles().join('|') === 'For ada' && !ib('.more').hidden`)
	eval[bool](tb, `ib('.bell').click(), ib('.more').click(), true`)
	tb.wait("the older page", `titles().join('|') === 'For ada|For everyone'`)
	// A full page may have been the last: the next one is empty, and ends it.
	eval[bool](tb, `ib('.more').click(), true`)
	tb.wait("no page after the last", `ib('.more').hidden && titles().length === 2`)
	eval[bool](tb, `document.querySelector('edgerelay-inbox').setAttribute('label', 'Alerts'), true`)
	tb.wait("the label", `ib('h2').textContent === 'Alerts' && ib('.bell .sr').textContent === 'Alerts' && titles().length === 2`)
}

// A stream silent for idle-timeout (here 1 s, under the server's 15 s
// heartbeat) is dropped and made again from the last id: nothing repeats.
func inboxIdleTimeout(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().length === 2 && connects === 1`)
	eval[bool](tb, `document.querySelector('edgerelay-inbox').setAttribute('idle-timeout', '1'), document.querySelector('edgerelay-inbox').refresh(), true`)
	tb.wait("two reconnects after the refresh's connection", `connects >= 4`)
	seq := b.postFeedEvent(t, feedEvent("e4", "After the reconnects", "@ada"), acme...).FeedItems[0].Seq
	tb.wait("the item", `titles()[0] === 'After the reconnects'`)
	tb.wait("another reconnect", `connects >= 5`)
	if got := eval[[]int64](tb, `seen`); !slices.Equal(got, []int64{seq}) {
		t.Errorf("across the reconnects the stream delivered %v, want [%d] once", got, seq)
	}
}

// After a reconnect the element reads its page again, to drop what was
// dismissed while it was away. An item the stream brings after that page was
// read is not on it, and stays. (The element once removed it, as
// dismissed: TestInboxElementInABrowser/idle_timeout lost its item this way
// on a loaded box.)
func inboxReconcileKeepsLateItem(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().length === 2 && connects === 1`)
	heldReread(tb, b, acme, "", 1, "After the page was read")
	if got := eval[[]string](tb, `titles()`); len(got) != 3 || got[0] != "After the page was read" {
		t.Errorf("after the page read without it, the panel shows %q: the late item was dropped", got)
	}
}

// A tab more than 1,000 items behind when it reconnects is told to read
// its feed again (event: reset), and the stream goes on live meanwhile: an
// item it brings while the page is read (committed after the read) stays.
func inboxResetKeepsLateItem(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	for i := 0; i < 1001; i += 100 {
		var evs []string
		for j := i; j < min(i+100, 1001); j++ {
			evs = append(evs, jsonOf(t, feedEvent(fmt.Sprintf("bulk-%d", j), fmt.Sprintf("Bulk %d", j), "@ada")))
		}
		if rep := b.do(t, "POST", "/v1/events:batch", `{"events": [`+strings.Join(evs, ",")+`]}`, acme...); rep.status != http.StatusOK || strings.Contains(string(rep.body), `"status":4`) {
			t.Fatalf("post the bulk: %d %.300s", rep.status, rep.body)
		}
	}
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().length === 20 && titles()[0] === 'Bulk 1000' && connects === 1`)
	// The reconnect asks for the items after seq 1, as a tab away for a
	// long time would: two reads held, the reset's reload and the reread.
	heldReread(tb, b, acme, "el._lastId = 1;", 2, "After the reset's read")
	if got := eval[[]string](tb, `titles()`); len(got) != 21 || got[0] != "After the reset's read" {
		t.Errorf("after the reload without it, the panel shows %d items starting %q: the late item was dropped", len(got), got[:min(2, len(got))])
	}
}

// heldReread makes the element read its page again while an item comes:
// with idle-timeout at a second, it refreshes; once the refresh's
// connection is up, arm runs and the next connection gets idle-timeout 45
// (it stays up), and every page read from there is held until the item,
// titled title and committed after the server read those pages, is shown.
// It returns once the reads (reads of them: _load or _reconcile) have
// been applied, and checks the stream brought the item once.
func heldReread(tb *tab, b *bundle, acme []string, arm string, reads int, title string) {
	t := tb.t
	t.Helper()
	eval[bool](tb, `(() => {
		const el = document.querySelector('edgerelay-inbox');
		window.applied = 0; // reads applied once a read was held
		for (const name of ['_load', '_reconcile']) {
			const f = el[name].bind(el);
			el[name] = async (s) => { try { await f(s); } finally { if (held) applied++; } };
		}
		document.addEventListener('edgerelay-inbox:connected', () => {
			if (connects === 2) { el.setAttribute('idle-timeout', '45'); `+arm+` window.hold = true; }
		});
		el.setAttribute('idle-timeout', '1');
		el.refresh();
		return true;
	})()`)
	tb.wait("the third connection's page reads, held", fmt.Sprintf(`held === %d && connects === 3`, reads))
	seq := b.postFeedEvent(t, feedEvent("late", title, "@ada"), acme...).FeedItems[0].Seq
	tb.wait("the late item from the stream", fmt.Sprintf(`seen.includes(%d) && titles()[0] === %s`, seq, jsList(title)))
	eval[bool](tb, `release(), true`)
	tb.wait("the held reads applied", fmt.Sprintf(`applied === %d`, reads))
	if got := eval[[]int64](tb, `seen`); !slices.Equal(got, []int64{seq}) {
		t.Errorf("the stream delivered %v, want [%d] once", got, seq)
	}
}

// The demo page, on the server's own origin (allowed by the tenant), takes
// the token from its fragment, drops it from the address, and works.
func inboxDemo(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+b.srv.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatal(rep)
	}
	ctx, cancel := chromedp.NewContext(bctx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 3*bound)
	defer cancel()
	tok := strings.TrimPrefix(ada[1], "Bearer ")
	if err := chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+"/inbox/demo#user=ada&token="+tok)); err != nil {
		t.Fatal(err)
	}
	tb := &tab{t: t, ctx: ctx}
	eval[bool](tb, `window.ib = (sel) => document.querySelector('edgerelay-inbox').shadowRoot.querySelector(sel);
		window.titles = () => [...document.querySelector('edgerelay-inbox').shadowRoot.querySelectorAll('li .title')].map((e) => e.textContent);
		window.badge = () => ib('.badge').classList.contains('zero') ? '0' : ib('.badge .count').textContent; window.seen = [];
		window.marked = []; document.addEventListener('edgerelay-inbox:marked', (e) => marked.push(e.detail.kind)); true`)
	tb.wait("the demo's inbox", `titles().length === 2 && badge() === '2'`)
	if got := eval[string](tb, `location.href`); strings.Contains(got, "token") {
		t.Errorf("the token stayed in the address: %s", got)
	}
	eval[bool](tb, `ib('.bell').click(), ib('.read-all').click(), true`)
	tb.wait("read-all from the demo", `marked.includes('read-all') && badge() === '0'`)
	if n := b.unreadCount(t, "ada", acme...); n != 0 {
		t.Errorf("after the demo's read-all: %d unread", n)
	}
	tb.screenshot("inbox-demo")
}

// An event accepted through the API appears at the top of the element with
// the badge's count, once; the bell and the panel work from the keyboard.
func inboxLive(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed and its count", `badge() === '2' && titles().join('|') === 'For ada|For everyone' && connects === 1`)
	if got := eval[string](tb, `ib('.badge').getAttribute('aria-live')`); got != "polite" {
		t.Errorf("the badge's aria-live is %q", got)
	}
	seq := b.postFeedEvent(t, feedEvent("e4", "Deploy finished", "@ada"), acme...).FeedItems[0].Seq
	tb.wait("the new item", `titles()[0] === 'Deploy finished' && badge() === '3'`)
	if got := eval[[]int64](tb, `seen`); !slices.Equal(got, []int64{seq}) {
		t.Errorf("the stream delivered %v, want [%d] once", got, seq)
	}
	if got := eval[string](tb, `ib('li').getAttribute('data-read') + ' ' + ib('li').getAttribute('role') + ' ' + ib('ul').getAttribute('role')`); got != "false listitem list" {
		t.Errorf("the new item's read/roles: %q", got)
	}
	tb.screenshot("inbox-live-closed")

	// The keyboard: Enter on the bell opens the panel and moves focus to
	// the newest item; Down moves to the next; Escape closes it and gives
	// focus back to the bell.
	focused := `(document.querySelector('edgerelay-inbox').shadowRoot.activeElement || {className: 'none'}).className`
	eval[bool](tb, `ib('.bell').focus(), true`)
	if err := chromedp.Do(tb.ctx, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	tb.wait("the panel open", `ib('.bell').getAttribute('aria-expanded') === 'true' && !ib('.panel').hidden`)
	if got := eval[string](tb, focused); got != "open" {
		t.Errorf("after opening, focus is on %q, want the newest item's button", got)
	}
	tb.screenshot("inbox-live-open")
	if err := chromedp.Do(tb.ctx, chromedp.KeyEvent(kb.ArrowDown)); err != nil {
		t.Fatal(err)
	}
	if got := eval[string](tb, `document.querySelector('edgerelay-inbox').shadowRoot.activeElement.closest('li').dataset.seq`); got == strconv.FormatInt(seq, 10) {
		t.Errorf("ArrowDown left focus on the newest item")
	}
	if err := chromedp.Do(tb.ctx, chromedp.KeyEvent(kb.Escape)); err != nil {
		t.Fatal(err)
	}
	tb.wait("the panel closed by Escape", `ib('.bell').getAttribute('aria-expanded') === 'false' && ib('.panel').hidden`)
	if got := eval[string](tb, focused); got != "bell" {
		t.Errorf("after Escape, focus is on %q, want the bell", got)
	}
}

// Reading an item in one tab updates another tab of the same user (through
// its stream): its badge and the item; a dismiss removes it there.
func inboxTwoTabs(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	one := openTab(t, bctx, app, b.srv.URL, ada)
	two := openTab(t, bctx, app, b.srv.URL, ada)
	for _, tb := range []*tab{one, two} {
		tb.wait("the feed", `badge() === '2' && titles().length === 2 && connects === 1`)
	}
	newest := b.feedPage(t, "/v1/users/ada/feed", acme...).Items[0].Seq
	eval[bool](one, `ib('.bell').click(), ib('li .open').click(), true`)
	two.wait("the read in the other tab", `badge() === '1' && ib('li[data-seq="`+strconv.FormatInt(newest, 10)+`"]').dataset.read === 'true'`)
	if n := b.unreadCount(t, "ada", acme...); n != 1 {
		t.Errorf("after the click: %d unread, want 1", n)
	}
	eval[bool](one, `ib('li[data-seq="`+strconv.FormatInt(newest, 10)+`"] .dismiss').click(), true`)
	two.wait("the dismiss in the other tab", `titles().join('|') === 'For everyone'`)
	one.screenshot("inbox-two-tabs-one")
	two.screenshot("inbox-two-tabs-two")
}

// Read-all marks read up to the newest item shown: one that arrived while
// the panel was open (offered as "1 new", not shown yet) stays unread.
func inboxReadAllShown(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `badge() === '2' && titles().length === 2`)
	eval[bool](tb, `ib('.bell').click(), true`)
	tb.wait("the panel open", `!ib('.panel').hidden`)
	late := b.postFeedEvent(t, feedEvent("late", "Arrived after the render", "@ada"), acme...).FeedItems[0].Seq
	tb.wait("the late item offered, not shown", `!ib('.fresh').hidden && ib('.fresh').textContent.includes('1 new') && titles().length === 2 && badge() === '3'`)
	tb.screenshot("inbox-read-all-before")
	eval[bool](tb, `ib('.read-all').click(), true`)
	tb.wait("read-all answered, and the count", `marked.includes('read-all') && badge() === '1'`)
	page := b.feedPage(t, "/v1/users/ada/feed", acme...)
	if page.Items[0].Seq != late || page.Items[0].Read || !page.Items[1].Read || !page.Items[2].Read {
		t.Fatalf("after read-all: %+v, want only the late item (%d) unread", page.Items, late)
	}
	if page.ReadUpTo >= late {
		t.Fatalf("read-all moved the watermark to %d, past the item shown after the render (%d)", page.ReadUpTo, late)
	}
	eval[bool](tb, `ib('.fresh').click(), true`)
	tb.wait("the late item shown, unread", `titles()[0] === 'Arrived after the render' && ib('li').dataset.read === 'false'`)
	tb.screenshot("inbox-read-all-after")
}

// What an item says is shown as text: a title that is an <img> with an
// onerror, a body with a script, run nothing and make no element.
func inboxEscapes(t *testing.T, bctx context.Context, app *httptest.Server) {
	b, acme, ada := inboxSetup(t, app)
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().length === 2 && connects === 1`)
	title := `<img src=x onerror="window.pwned=true">`
	ev := feedEvent("xss", title, "@ada")
	ev.Body = `<script>window.pwned=true</script><b>bold</b>`
	b.postFeedEvent(t, ev, acme...)
	tb.wait("the hostile item", `titles()[0] === `+jsList(title))
	eval[bool](tb, `ib('.bell').click(), true`)
	// An <img src=x> that existed would have fired onerror by the time the
	// page has loaded and painted it: wait for a frame after the panel shows.
	eval[bool](tb, `new Promise((ok) => requestAnimationFrame(() => setTimeout(() => ok(true), 0)))`)
	got := eval[string](tb, `[ib('li .body').textContent, document.querySelector('edgerelay-inbox').shadowRoot.querySelectorAll('img, script, b').length,
		document.querySelectorAll('img').length, window.pwned].join('|')`)
	if want := ev.Body + "|0|0|false"; got != want {
		t.Fatalf("the element shows %q, want %q (the text, no element made, nothing run)", got, want)
	}
	if got := eval[string](tb, `ib('li .dismiss').getAttribute('aria-label')`); got != "Dismiss: "+title {
		t.Errorf("the dismiss button's label %q", got)
	}
	tb.screenshot("inbox-escapes")
}

// A restart of the server mid-stream: the element reconnects to the same
// port with Last-Event-ID and gets the item accepted while it was down,
// then live ones, each once.
func inboxRestart(t *testing.T, bctx context.Context, app *httptest.Server) {
	db := filepath.Join(t.TempDir(), "relay.db")
	tokens := map[string]string{api.HashToken("acme-token"): "acme"}
	o := options{DB: db, Tokens: tokens, API: api.Options{StreamSweep: time.Hour}}
	b := setup(t, o)
	acme := bearer("acme-token")
	k := b.createKey(t, "", acme...)
	ada := mint(t, k, "acme", "ada")
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatal(rep)
	}
	post := func(b *bundle, id string) int64 {
		return b.postFeedEvent(t, feedEvent(id, "Item "+id, "@ada"), acme...).FeedItems[0].Seq
	}
	var want []int64
	post(b, "e1")
	tb := openTab(t, bctx, app, b.srv.URL, ada)
	tb.wait("the feed", `titles().join('|') === 'Item e1' && connects === 1`)
	want = append(want, post(b, "e2"))
	tb.wait("e2 live", `titles()[0] === 'Item e2'`)

	stop := func(b *bundle) {
		b.stopStreams()
		b.srv.Close()
		if err := b.closeRelay(); err != nil {
			t.Fatal(err)
		}
	}
	stop(b)
	// While the element's server is down, another process on the same
	// file accepts e3.
	o.Addr = ""
	other := setup(t, o)
	want = append(want, post(other, "e3"))
	stop(other)
	o.Addr = strings.TrimPrefix(b.srv.URL, "http://")
	b = setup(t, o)
	tb.wait("the reconnect and the missed item", `connects === 2 && titles()[0] === 'Item e3'`)
	want = append(want, post(b, "e4"))
	tb.wait("e4 live after the restart", `titles()[0] === 'Item e4' && badge() === '4'`)
	if got := eval[[]int64](tb, `seen`); !slices.Equal(got, want) {
		t.Fatalf("the stream delivered %v, want %v: each once, none missed", got, want)
	}
	if got := eval[[]string](tb, `titles()`); !slices.Equal(got, []string{"Item e4", "Item e3", "Item e2", "Item e1"}) {
		t.Fatalf("the element shows %v", got)
	}
}

// On PostgreSQL, an item accepted on node 1 reaches the element whose
// server is node 2 (LISTEN/NOTIFY; no sweep runs).
func TestInboxElementAcrossPostgresNodes(t *testing.T) {
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
	app := appServer(t)
	acme := bearer("acme-token")
	k := n1.createKey(t, "", acme...)
	if rep := n1.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatal(rep)
	}
	tb := openTab(t, browser(t), app, n2.srv.URL, mint(t, k, "acme", "ada"))
	tb.wait("the empty feed on node 2", `connects === 1 && badge() === '0' && !ib('.empty').hidden`)
	seq := n1.postFeedEvent(t, feedEvent("e1", "Accepted on node 1", "@ada"), acme...).FeedItems[0].Seq
	tb.wait("node 1's item on node 2", `titles()[0] === 'Accepted on node 1' && badge() === '1'`)
	if got := eval[[]int64](tb, `seen`); !slices.Equal(got, []int64{seq}) {
		t.Errorf("node 2's stream delivered %v, want [%d]", got, seq)
	}
	tb.screenshot("inbox-postgres-node2")
}

// The script and the demo page are served as files with their headers; the
// demo holds no token and runs only this server's scripts.
func TestInboxAssets(t *testing.T) {
	t.Parallel()
	b := setup(t, options{Tokens: map[string]string{}})
	for _, c := range []struct{ path, ctype, has string }{
		{"/inbox.js", "text/javascript; charset=utf-8", "customElements.define('edgerelay-inbox'"},
		{"/inbox/demo", "text/html; charset=utf-8", `<script src="/inbox.js"`},
		{"/inbox/demo.js", "text/javascript; charset=utf-8", "location.hash"},
	} {
		rep := b.do(t, "GET", c.path, "")
		if rep.status != http.StatusOK || rep.header.Get("Content-Type") != c.ctype || !strings.Contains(string(rep.body), c.has) {
			t.Errorf("GET %s (no token, closed API): %d %q, want 200 %s with %q", c.path, rep.status, rep.header.Get("Content-Type"), c.ctype, c.has)
		}
		etag := rep.header.Get("ETag")
		if again := b.do(t, "GET", c.path, "", "If-None-Match", etag); etag == "" || again.status != http.StatusNotModified {
			t.Errorf("GET %s with its ETag %q: %d, want 304", c.path, etag, again.status)
		}
	}
	rep := b.do(t, "GET", "/inbox/demo", "")
	if csp := rep.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("the demo's policy %q", csp)
	}
	if strings.Contains(string(rep.body), "eyJ") {
		t.Error("the demo page carries a token")
	}
	if rep := b.do(t, "GET", "/inbox.js", ""); rep.header.Get("Cross-Origin-Resource-Policy") != "cross-origin" || rep.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("inbox.js's Cross-Origin-Resource-Policy %q, Access-Control-Allow-Origin %q: an app's page under COEP, or pinning it by integrity, could not load it",
			rep.header.Get("Cross-Origin-Resource-Policy"), rep.header.Get("Access-Control-Allow-Origin"))
	}
}

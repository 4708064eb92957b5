package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/internal/testpar"
)

// The console in a real browser: Debian's chromium, headless, driven by
// chromedp. One browser serves every test of the package (each test gets
// its own browser context: its own cookies); without one the tests skip
// with one line.

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	dir    string
	err    error
}

func TestMain(m *testing.M) {
	testpar.Raise()
	code := m.Run()
	pgtest.Stop()
	if browser.cancel != nil {
		browser.cancel()
	}
	if browser.dir != "" {
		os.RemoveAll(browser.dir)
	}
	os.Exit(code)
}

// chromium finds the browser: EDGERELAY_CHROMIUM, else Debian's.
func chromium() string {
	if p := os.Getenv("EDGERELAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// tab returns a new tab in a browser context of its own, with a deadline.
func tab(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no browser: install Debian's chromium (apt-get install chromium) or set EDGERELAY_CHROMIUM to run the console's browser tests")
	}
	browser.once.Do(func() {
		if browser.dir, browser.err = os.MkdirTemp("", "edgerelay-chromium-"); browser.err != nil {
			return
		}
		// The flags the machine's notes list: no sandbox as root, and
		// nothing that reaches for the network beyond loopback.
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
			chromedp.UserDataDir(browser.dir), chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		browser.ctx, browser.cancel = ctx, func() { cancelCtx(); cancelAlloc() }
		browser.err = chromedp.Do(ctx) // starts the browser
	})
	if browser.err != nil {
		t.Fatalf("start %s: %v", path, browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelT)
	return ctx
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitFor evaluates js until it is true, across navigations (an
// evaluation whose page went away is tried again), for at most 10 s.
func waitFor(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if !poll(ctx, js, 10*time.Second) {
		t.Fatalf("still not %s after 10 s", js)
	}
}

// screenshot saves the page as NAME.png in the test's temp dir, and in
// EDGERELAY_SCREENSHOTS if set (how docs/ got its pictures).
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`, chromedp.EvalIgnoreExceptions))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, os.Getenv("EDGERELAY_SCREENSHOTS")} {
		if d == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// accessible checks what a person with a keyboard or a screen reader
// needs on every page: each form control labelled, each button and link
// named, the language set, one h1, the chart described; and that the
// first Tab reaches the skip link, whose Enter moves focus to the content.
func accessible(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	bad := eval[[]string](t, ctx, `(() => {
		const bad = [];
		for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
			const named = el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.closest('label') ||
				(el.id && document.querySelector('label[for="' + el.id + '"]'));
			if (!named) bad.push('unlabelled control ' + el.outerHTML.slice(0, 80));
		}
		for (const el of document.querySelectorAll('button, a')) {
			if (!el.textContent.trim() && !el.getAttribute('aria-label')) bad.push('unnamed ' + el.outerHTML.slice(0, 80));
		}
		for (const el of document.querySelectorAll('svg')) {
			if (el.getAttribute('role') !== 'img' || !el.getAttribute('aria-labelledby')) bad.push('svg without role and description');
		}
		if (document.documentElement.lang !== 'en') bad.push('no lang');
		const h1 = document.querySelectorAll('h1').length;
		if (h1 !== 1) bad.push(h1 + ' h1 elements');
		return bad;
	})()`)
	for _, b := range bad {
		t.Errorf("%s: %s", page, b)
	}
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`, chromedp.EvalIgnoreExceptions),
		chromedp.KeyEvent(kb.Tab))
	if got := eval[string](t, ctx, `document.activeElement.className`); got != "skip" {
		t.Errorf("%s: the first Tab focuses %q, want the skip link", page, got)
	}
	do(t, ctx, chromedp.KeyEvent(kb.Enter))
	// The link moves focus as it navigates to #main (in the same document):
	// under load that lands a little after the key.
	if !poll(ctx, `document.activeElement.id === "main" && location.hash === "#main"`, 5*time.Second) {
		t.Errorf("%s: Enter on the skip link focuses %q, want main", page, eval[string](t, ctx, `document.activeElement.id`))
	}
}

// poll evaluates js until it is true or within is over; an evaluation
// whose page went away (a navigation) is tried again.
func poll(ctx context.Context, js string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tabTo presses Tab until the element with id has focus, at most n times:
// it is reachable by keyboard.
func tabTo(t *testing.T, ctx context.Context, page, id string, n int) {
	t.Helper()
	var seen []string
	for range n {
		do(t, ctx, chromedp.KeyEvent(kb.Tab))
		got := eval[string](t, ctx, `document.activeElement.id || document.activeElement.tagName + ':' + document.activeElement.textContent.trim().slice(0, 20)`)
		if got == id {
			return
		}
		seen = append(seen, got)
	}
	t.Fatalf("%s: #%s not reached by Tab in %d presses (focus went %s)", page, id, n, strings.Join(seen, " → "))
}

// login signs in by keyboard alone: Tab to the token field, type, Enter.
func login(t *testing.T, ctx context.Context, f *fixture, token string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	accessible(t, ctx, "login")
	tabTo(t, ctx, "login", "token", 5)
	do(t, ctx, chromedp.KeyEvent(token), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS("#counts-h")))
}

// An operator signs in with a token, finds ada's receipt by recipient,
// sees both lost answers and the send in its audit trail with the
// guarantee that applies, retries a dead notification and sees it become
// sent with who retried it; every page is labelled and keyboard-reachable.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	f := setup(t, false)
	dir := t.TempDir()

	// A wrong token is refused on the page.
	do(t, ctx, chromedp.Navigate(f.url+"/login"), chromedp.SendKeys(chromedp.CSS("#token"), "ert_wrong"),
		chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#login-error")))
	if got := text(t, ctx, "#login-error"); !strings.Contains(got, "not known") {
		t.Fatalf("a wrong token: %q", got)
	}

	login(t, ctx, f, f.acmeToken)
	if got := text(t, ctx, "#tenant"); got != "acme" {
		t.Fatalf("signed in as tenant %q, want acme", got)
	}
	accessible(t, ctx, "overview")
	counts := text(t, ctx, "table.counts")
	if !strings.Contains(counts, "1") || strings.Contains(text(t, ctx, "main"), "eve") {
		t.Fatalf("overview counts %q", counts)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('svg.chart rect').length`); n == 0 {
		t.Fatal("the chart has no bars: the attempts of the last hour are not drawn")
	}
	// Needing a decision: dan's dead notification with whom it was for
	// and why, not a bare id; the health in an operator's words.
	decide := eval[[]string](t, ctx, `[...document.querySelectorAll('#decide tbody tr:not(.more)')].map(r => r.innerText)`)
	if len(decide) != 1 || !strings.Contains(decide[0], f.danID) || !strings.Contains(decide[0], "dan") ||
		!strings.Contains(decide[0], "email: dan@example.com") || !strings.Contains(decide[0], "503") {
		t.Fatalf("needing a decision: %q, want dan's %s with his address and the 503 that ended it", decide, f.danID)
	}
	if got := text(t, ctx, "dl.facts"); strings.Contains(got, "writing") || strings.Contains(got, "commits of") || !strings.Contains(got, "Database") {
		t.Fatalf("health: %q", got)
	}
	screenshot(t, ctx, dir, "console-overview")

	// Find ada's receipt by recipient, by keyboard: Tab to the field, type, Enter.
	do(t, ctx, chromedp.Navigate(f.url+"/notifications"), chromedp.WaitVisible(chromedp.CSS("#q-recipient")))
	accessible(t, ctx, "search")
	tabTo(t, ctx, "search", "q-recipient", 20)
	// The search page lists everything before a search too: wait for the
	// answer to this one, not the page already there.
	do(t, ctx, chromedp.KeyEvent("ada"), chromedp.KeyEvent(kb.Enter))
	waitFor(t, ctx, `location.search.includes("recipient=ada") && document.readyState === "complete" && !!document.querySelector("table.results")`)
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('table.results tbody tr')].map(r => r.innerText)`)
	if len(rows) != 1 || !strings.Contains(rows[0], "ada@example.com") || !strings.Contains(rows[0], "sent") {
		t.Fatalf("search by recipient ada: %q", rows)
	}
	accessible(t, ctx, "search results")
	// Each row says why, and the time fields read as the page writes
	// dates (text in UTC, not the browser's locale's picker).
	if why := eval[[]string](t, ctx, `[...document.querySelectorAll('table.results tbody td.why')].map(e => e.innerText)`); len(why) != 1 || why[0] == "" {
		t.Fatalf("the results' why column: %q", why)
	}
	if typ := eval[string](t, ctx, `document.querySelector('#q-from').type`); typ != "text" {
		t.Fatalf("the From field is %q, want text (YYYY-MM-DD HH:MM)", typ)
	}
	do(t, ctx, chromedp.Navigate(f.url+"/notifications?recipient=dan&from=2000-01-01+00:00&to=2999-01-01"), chromedp.WaitVisible(chromedp.CSS("table.results")))
	rows = eval[[]string](t, ctx, `[...document.querySelectorAll('table.results tbody tr')].map(r => r.innerText)`)
	if len(rows) != 1 || !strings.Contains(rows[0], "dead") || !strings.Contains(rows[0], "503") {
		t.Fatalf("search by recipient dan, created 2000-01-01 00:00 to 2999-01-01: %q", rows)
	}
	if got := eval[string](t, ctx, `document.querySelector('#q-from').value`); got != "2000-01-01 00:00" {
		t.Fatalf("the From field shows %q after the search, want it as typed", got)
	}
	screenshot(t, ctx, dir, "console-search")
	do(t, ctx, chromedp.Navigate(f.url+"/notifications?recipient=ada"), chromedp.WaitVisible(chromedp.CSS("table.results")))
	do(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href$="/notifications/%s"]`, f.adaID))), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	accessible(t, ctx, "ada's notification")
	outcomes := eval[[]string](t, ctx, `[...document.querySelectorAll('#attempts tbody tr td:nth-child(5) .outcome')].map(e => e.textContent)`)
	if strings.Join(outcomes, ",") != "unknown,unknown,sent" {
		t.Fatalf("ada's attempts: %v, want two lost answers and the send", outcomes)
	}
	if got := text(t, ctx, "#guarantee"); !strings.HasPrefix(got, "sent once: the provider honours keys") {
		t.Fatalf("ada's guarantee: %q", got)
	}
	if got := text(t, ctx, "#key"); !strings.HasPrefix(got, "er1_") {
		t.Fatalf("ada's key: %q", got)
	}
	if got := text(t, ctx, "#subject"); got != "Your receipt" {
		t.Fatalf("ada's message subject: %q", got)
	}
	screenshot(t, ctx, dir, "console-notification")

	// Retry the dead one: select it in the search, confirm with its count.
	do(t, ctx, chromedp.Navigate(f.url+"/notifications?status=dead"), chromedp.WaitVisible(chromedp.CSS("table.results")))
	tabTo(t, ctx, "dead search", fmt.Sprintf("pick-%s", f.danID), 40)
	do(t, ctx, chromedp.KeyEvent(" "), chromedp.Click(chromedp.CSS("#retry-selected")), chromedp.WaitVisible(chromedp.CSS("#confirm-count")))
	accessible(t, ctx, "retry confirmation")
	if got := text(t, ctx, "#confirm-count"); !strings.HasPrefix(got, "Retry 1 notification?") {
		t.Fatalf("confirmation: %q", got)
	}
	if st, _ := f.r.Store().Notification(t.Context(), "", f.dan, ""); st.Status != "dead" {
		t.Fatalf("dan is %s before the confirmation, want dead: nothing is retried before it", st.Status)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#retried-count")))
	if got := text(t, ctx, "#retried-count"); !strings.HasPrefix(got, "Retried 1 notification") {
		t.Fatalf("after the retry: %q", got)
	}
	waitStatus(t, f.r, f.dan, "sent")
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/notifications/%s", f.url, f.danID)), chromedp.WaitVisible(chromedp.CSS("#audit")))
	if got := text(t, ctx, "#status"); got != "sent" {
		t.Fatalf("dan's page says %q, want sent", got)
	}
	if got := text(t, ctx, "#audit tbody"); !strings.Contains(got, "console, token 1 (support) of tenant acme") || !strings.Contains(got, "retry (was dead)") {
		t.Fatalf("dan's audit trail: %q", got)
	}
	accessible(t, ctx, "dan's notification")
	screenshot(t, ctx, dir, "console-retried")

	for _, p := range []string{"quarantine", "audiences", "feeds", "workflows"} {
		do(t, ctx, chromedp.Navigate(f.url+"/"+p), chromedp.WaitVisible(chromedp.CSS("h1")))
		accessible(t, ctx, p)
	}
	// Signing out ends the session: the next page asks for a token.
	do(t, ctx, chromedp.Navigate(f.url+"/"), chromedp.Click(chromedp.CSS(".signout button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/notifications/%s", f.url, f.adaID)), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// Tenant beta's token sees none of acme's pages: not by search, not by
// URL, not in the overview, not as a retry.
func TestConsoleTenantsApartInBrowser(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	f := setup(t, false)
	login(t, ctx, f, f.betaToken)
	if got := text(t, ctx, "#tenant"); got != "beta" {
		t.Fatalf("signed in as %q, want beta", got)
	}
	if got := text(t, ctx, "table.counts tbody td:last-child"); got != "1" {
		t.Fatalf("beta's overview counts %q notifications, want its 1", got)
	}
	for _, u := range []string{
		fmt.Sprintf("/notifications/%s", f.adaID), fmt.Sprintf("/notifications/%s", f.danID),
	} {
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(f.url+u))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 404 || text(t, ctx, "h1") != "Not found" {
			t.Fatalf("beta opens %s: %d %q, want 404 Not found", u, resp.Status, text(t, ctx, "h1"))
		}
		if strings.Contains(text(t, ctx, "main"), "example.com") {
			t.Fatalf("beta's 404 for %s shows an address", u)
		}
	}
	for _, q := range []string{"recipient=ada", "address=ada@example.com", "event_id=evt_501", "status=dead", "type=account.alert"} {
		do(t, ctx, chromedp.Navigate(f.url+"/notifications?"+q), chromedp.WaitVisible(chromedp.CSS("#no-results")))
	}
	do(t, ctx, chromedp.Navigate(f.url+"/notifications?recipient=eve"), chromedp.WaitVisible(chromedp.CSS("table.results")))
	do(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/retry?id=%s", f.url, f.danID)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if got := text(t, ctx, "main"); !strings.Contains(got, "Nothing selected can be retried") || !strings.Contains(got, "Not found in this tenant") {
		t.Fatalf("beta asks to retry acme's dan: %q", got)
	}
	if got := text(t, ctx, "main"); strings.Contains(got, "dan") {
		t.Fatalf("beta's retry page names acme's recipient: %q", got)
	}
	// By key: acme's key opens nothing for beta.
	n, err := f.r.Store().Notification(t.Context(), "", f.ada, "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(f.url+"/notifications?key="+n.Key))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 404 {
		t.Fatalf("beta searches acme's key: %d, want 404", resp.Status)
	}
}

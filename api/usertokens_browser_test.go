package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edgerelay/edgerelay/usertoken"
)

// CORS as a real browser applies it (Debian's chromium): a page of an
// origin its tenant allows reads ada's feed with her token and marks it
// read (a POST with Authorization and a JSON body, so the browser sends a
// preflight first); a page of another origin cannot: its fetch fails, and
// nothing is marked.
func TestUserTokenCORSInABrowser(t *testing.T) {
	t.Parallel()
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH (apt-get install chromium): the CORS browser test needs it")
	}
	b, acme, _, acmeKey, _ := userTokenSetup(t)
	page := func() *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<!doctype html><title>an app</title><p>app")
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	app, evil := page(), page()
	if rep := b.do(t, "PUT", "/v1/feed-origins", `{"origins": ["`+app.URL+`"]}`, acme...); rep.status != 200 {
		t.Fatalf("set origins: %s", rep)
	}
	now := time.Now()
	tok, err := usertoken.Mint("acme", "ada", acmeKey.KID, []byte(acmeKey.Secret), now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	newest := b.feedPage(t, "/v1/users/ada/feed", acme...).Items[0].Seq

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(app.URL)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	ctx, cancel = context.WithTimeout(ctx, bound)
	defer cancel()
	// script marks ada's feed read up to newest, then reads her unread
	// count; it resolves to "count:N" or to the fetch's error.
	script := `(async () => {
	  const api = ` + strconv.Quote(b.srv.URL) + `, auth = {Authorization: 'Bearer ' + ` + strconv.Quote(tok) + `};
	  try {
	    const r = await fetch(api + '/v1/users/ada/feed/read-all', {method: 'POST',
	      headers: {...auth, 'Content-Type': 'application/json'}, body: JSON.stringify({up_to: ` + strconv.FormatInt(newest, 10) + `})});
	    if (!r.ok) return 'read-all: ' + r.status;
	    const c = await fetch(api + '/v1/users/ada/feed/unread_count', {headers: auth});
	    return 'count:' + (await c.json()).unread;
	  } catch (e) { return 'failed: ' + e.name; }
	})()`

	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if got != "failed: TypeError" {
		t.Errorf("a page of an origin no tenant allows: %q, want the fetch refused (TypeError)", got)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 2 {
		t.Fatalf("after the refused page's read-all: %d unread, want 2", n)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(app.URL)); err != nil {
		t.Fatal(err)
	}
	got, err = chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if got != "count:0" {
		t.Errorf("the allowed page: %q, want count:0 after its read-all", got)
	}
	if n := b.unreadCount(t, "ada", acme...); n != 0 {
		t.Errorf("after the allowed page's read-all: %d unread, want 0", n)
	}
}

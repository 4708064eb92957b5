package api_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edgerelay/edgerelay/model"
)

// The preferences page in a real headless browser (Debian's chromium): the
// recipient opens their link, sees marketing ticked and security ticked
// but disabled, unticks marketing, presses Save and sees "Saved."; the
// next newsletter is skipped while the OTP goes out. Screenshots go to
// the test's artifact directory (go test -artifacts keeps them).
func TestPreferencesPageInABrowser(t *testing.T) {
	t.Parallel()
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH (apt-get install chromium): the page's browser test needs it")
	}
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	page := b.srv.URL + links(t, b, "ada").Preferences.URL

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first run starts the browser: no deadline on its context (one
	// would stop the browser); the rest run under bound.
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	ctx, cancel = context.WithTimeout(ctx, bound)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
	}
	must(chromedp.Do(ctx, chromedp.WaitVisible(`input[value="marketing"]`)))
	marketingOn, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('input[value="marketing"]').checked`))
	must(err)
	securityOn, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('input[value="security"]').checked`))
	must(err)
	securityDisabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('input[value="security"]').disabled`))
	must(err)
	before, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(err)
	must(chromedp.Do(ctx, chromedp.Click(`input[value="marketing"]`), chromedp.Click(`button[type="submit"]`),
		chromedp.WaitVisible(`p[role="status"]`)))
	status, err := chromedp.Run(ctx, chromedp.Text(`p[role="status"]`))
	must(err)
	after, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(err)
	dir := t.ArtifactDir()
	os.WriteFile(filepath.Join(dir, "preferences-before.png"), before, 0o644)
	os.WriteFile(filepath.Join(dir, "preferences-saved.png"), after, 0o644)
	if !marketingOn || !securityOn || !securityDisabled {
		t.Fatalf("the page showed marketing ticked %v, security ticked %v and disabled %v", marketingOn, securityOn, securityDisabled)
	}
	if !strings.Contains(status, "Saved.") {
		t.Fatalf("after Save the page says %q", status)
	}
	if c := marketing(t, b, "ada"); c.Enabled || c.SetBy != model.SetByPage {
		t.Fatalf("after the browser's save: %+v, want marketing off, set by page", c)
	}
	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	accepted(t, b.do(t, "POST", "/v1/events", event("o1", "otp", "ada")))
	runIdle(t, b.r)
	if d := s.delivered(); len(d) != 1 || d[0] != "otp→ada" {
		t.Fatalf("delivered %v, want only the OTP", d)
	}
}

// After a one-click unsubscribe from email, the preferences page shows
// the email switch of the category, unticked and saying why, under the
// category's own (still ticked); ticking it and saving undoes the
// unsubscribe (the switch is dropped: email follows the category again),
// and the next newsletter is sent. In a real headless browser.
func TestPreferencesPageUndoesAnUnsubscribe(t *testing.T) {
	t.Parallel()
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH (apt-get install chromium): the page's browser test needs it")
	}
	s := newSink(t, time.Now)
	b := setup(t, options{Relay: prefOptions(s.prov)})
	l := links(t, b, "ada")
	if rep := postForm(t, b, l.Unsubscribe[0].URL, url.Values{"List-Unsubscribe": {"One-Click"}}); rep.status != 200 {
		t.Fatalf("one-click unsubscribe: %s", rep)
	}
	if m := marketing(t, b, "ada"); len(m.Channels) != 1 || m.Channels[0].Enabled {
		t.Fatalf("after the one-click: %+v, want marketing off on email", m)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+l.Preferences.URL)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	ctx, cancel = context.WithTimeout(ctx, bound)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
	}
	const emailBox = `input[name="channel"][value="marketing/email"]`
	must(chromedp.Do(ctx, chromedp.WaitVisible(emailBox)))
	categoryOn, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('input[value="marketing"]').checked`))
	must(err)
	emailOn, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+emailBox+`').checked`))
	must(err)
	text, err := chromedp.Run(ctx, chromedp.Text(`form`))
	must(err)
	before, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(err)
	os.WriteFile(filepath.Join(t.ArtifactDir(), "preferences-unsubscribed.png"), before, 0o644)
	if !categoryOn || emailOn {
		t.Fatalf("the page shows marketing ticked %v, marketing by email ticked %v; want ticked and unticked", categoryOn, emailOn)
	}
	if !strings.Contains(text, "marketing by email") || !strings.Contains(text, "turned off by an unsubscribe link") {
		t.Fatalf("the page does not say email was unsubscribed:\n%s", text)
	}

	must(chromedp.Do(ctx, chromedp.Click(emailBox), chromedp.Click(`button[type="submit"]`), chromedp.WaitVisible(`p[role="status"]`)))
	after, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(err)
	os.WriteFile(filepath.Join(t.ArtifactDir(), "preferences-resubscribed.png"), after, 0o644)
	if m := marketing(t, b, "ada"); !m.Enabled || len(m.Channels) != 0 {
		t.Fatalf("after ticking email and saving: %+v, want marketing on, with no switch of email's own", m)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+emailBox+`').length`)); err != nil || n != 0 {
		t.Fatalf("the saved page still shows email's own switch (%d, %v)", n, err)
	}
	accepted(t, b.do(t, "POST", "/v1/events", event("n1", "newsletter", "ada")))
	runIdle(t, b.r)
	if d := s.delivered(); len(d) != 1 || d[0] != "newsletter→ada" {
		t.Fatalf("delivered %v, want the newsletter", d)
	}
}

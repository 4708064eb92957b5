package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An email API provider marks commercial mail as smtp does: config check
// refuses a commercial type routed through a preset without
// list_unsubscribe, names it, and takes it with one.
func TestCommercialTypeNeedsListUnsubscribeOnEmailHTTP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, extra string) string {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(`providers:
  postmark:
    url: email-http+https://api.postmarkapp.com?preset=postmark&token=tok&from=news%40example.com`+extra+`
routes:
  email: postmark
types:
  newsletter:
    commercial: true
`), 0o644)
		return path
	}
	r := runCLI(t, "", "config", "check", write("bad.yaml", ""))
	if want := `line 8 (types.newsletter.commercial): type "newsletter" is commercial, but provider "postmark" would send it without List-Unsubscribe`; r.code != exitError || !strings.Contains(r.stderr, want) {
		t.Errorf("config check: exit %d\n%s\nwant %s", r.code, r.stderr, want)
	}
	if r := runCLI(t, "", "config", "check", write("good.yaml", "&list_unsubscribe=https%3A%2F%2Fnews.example.com%2Fu%2F%7Bkey%7D")); r.code != 0 {
		t.Errorf("config check with list_unsubscribe: exit %d\n%s", r.code, r.stderr)
	}
}

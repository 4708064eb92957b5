package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// show prints message text with its control characters escaped: a subject
// carrying an OSC sequence would otherwise retitle the operator's terminal.
func TestShowEscapesControlsInMessageText(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	ev := `{"id": "evt_1", "type": "t", "recipients": [{"id": "ada", "email": "ada@example.com"}],
  "subject": "hi \u001b]0;pwned\u0007 there", "body": "one\u001b[31mred \u202eevil"}`
	if r := runCLI(t, ev, "send", "--db", db); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := runCLI(t, "", "show", "1", "--db", db)
	if r.code != 0 {
		t.Fatalf("show: exit %d\n%s", r.code, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "\x1b\x07\u202e") {
		t.Errorf("show printed raw control characters:\n%q", r.stdout)
	}
	for _, want := range []string{`hi \x1b]0;pwned\x07 there`, `one\x1b[31mred \u202eevil`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show output lacks %s:\n%s", want, r.stdout)
		}
	}
}

package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flagsFirst, on the app's real flag definitions: flags (with the value of
// one that takes a value, even a value that starts with -) before the
// arguments, "--" keeping what follows it as arguments, and the words of a
// command that parses its own flags (batch send) as they came.
func TestFlagsFirstReordersByEachCommandsFlags(t *testing.T) {
	t.Parallel()
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"show 12 --json", "show --json 12"},
		{"show 12 --db -odd.db", "show --db -odd.db 12"},
		{"show 12 --db=x.db --json", "show --db=x.db --json 12"},
		{"--db x.db show 12 --json", "--db x.db show --json 12"},
		{"feed members ops ada --history --tenant acme", "feed members --history --tenant acme ops ada"},
		{"feed members ops ada -- --history", "feed members -- ops ada --history"},
		{"feed members --tenant acme ops -- -ada", "feed members --tenant acme -- ops -ada"},
		{"send -f event.json --db r.db", "send -f event.json --db r.db"},
		{"retry 4 --db r.db", "retry --db r.db 4"},
		{"retry --status dead --since 1h --dry-run", "retry --status dead --since 1h --dry-run"},
		{"addresses clear email a@x --tenant acme", "addresses clear --tenant acme email a@x"},
		{"show 12 --nope x", "show --nope 12 x"}, // unknown: moved alone, then named by the parser
		{"show 12 --db", "show --db"},            // a value missing at the end: the parser says so
		{"batch send f.csv --db r.db --json", "batch send f.csv --db r.db --json"},
		{"bogus 1 --json", "bogus 1 --json"},
		{"help show", "help show"},
		{"show - --json", "show --json -"},
	} {
		got := flagsFirst(app, append([]string{"edgerelay"}, strings.Fields(c.in)...))[1:]
		if want := strings.Fields(c.want); !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", c.in, got, want)
		}
	}
}

// Flags after arguments work on every command, through the CLI: before,
// urfave/cli read them as arguments (show 12 --json: "show takes one
// notification id"; feed members ops ada --history: --history a member).
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	if r := runCLI(t, adaEvent, "send", "--db", db); r.code != 0 {
		t.Fatal(r.stderr)
	}
	ok := func(r cliResult, args ...string) cliResult {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	run := func(args ...string) cliResult { t.Helper(); return ok(runCLI(t, "", args...), args...) }

	var n struct{ ID int64 }
	if err := json.Unmarshal([]byte(run("show", "1", "--json", "--db", db).stdout), &n); err != nil || n.ID != 1 {
		t.Fatalf("show 1 --json: %v %+v", err, n)
	}
	if r := run("--db", db, "show", "1", "--json"); !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("show with the global flag first and --json after: %q", r.stdout)
	}
	// A flag's value that starts with - stays the flag's.
	if r := runCLI(t, "", "show", "1", "--db", filepath.Join(dir, "-odd.db")); r.code != exitError || !strings.Contains(r.stderr, "-odd.db: no such file") {
		t.Fatalf("show 1 --db -odd.db: exit %d %q", r.code, r.stderr)
	}
	// --history and --tenant are flags, not members; after "--" they are members.
	if r := run("feed", "members", "--db", db, "ops", "ada", "--history", "--tenant", "acme"); !strings.Contains(r.stdout, "feed ops (tenant acme): 1 members") {
		t.Fatalf("feed members ops ada --history --tenant acme: %q", r.stdout)
	}
	if r := run("feed", "members", "--db", db, "ops", "ada", "--", "--history"); !strings.Contains(r.stdout, "(tenant default): 2 members") {
		t.Fatalf("feed members ops ada -- --history: %q", r.stdout)
	}
	backup := filepath.Join(dir, "copy.db")
	run("backup", backup, "--db", db)
	if _, err := os.Stat(backup); err != nil {
		t.Fatalf("backup FILE --db: %v", err)
	}
	members := filepath.Join(dir, "members.json")
	os.WriteFile(members, []byte(`{"members": [{"id": "ada", "email": "ada@example.com"}]}`), 0o644)
	if r := run("audience", "set", "vips", members, "--tenant", "acme", "--db", db); !strings.Contains(r.stdout, "audience vips (tenant acme): 1 members") {
		t.Fatalf("audience set NAME FILE --tenant: %q", r.stdout)
	}
	// Each of these reaches its action with its flags read: the error is
	// the action's, about the argument, not a usage error about the count.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"retry", "3", "--db", db}, "is pending"},
		{[]string{"quarantine", "retry", "9", "--db", db}, "not found"},
		{[]string{"token", "revoke", "99", "--db", db}, "99"},
		{[]string{"addresses", "clear", "email", "nobody@example.com", "--db", db, "--tenant", "acme"}, "nobody@example.com"},
	} {
		r := runCLI(t, "", c.args...)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// batch send parses its own flags, anywhere: still so.
	if r := run("batch", "send", "testdata/batch_example.jsonl", "--db", db, "--json", "--log-level", "warn"); !strings.Contains(r.stdout, `"batch"`) {
		t.Fatalf("batch send FILE --json: %q", r.stdout)
	}
	if r := runCLI(t, "", "show", "1", "--db"); r.code != exitUsage || !strings.Contains(r.stderr, "flag needs an argument: -db") {
		t.Fatalf("show 1 --db: exit %d %q", r.code, r.stderr)
	}
	// An unknown flag after the arguments is named, with what to do for an
	// argument that starts with -.
	if r := runCLI(t, "", "show", "1", "--jsno", "--db", db); r.code != exitUsage || !strings.Contains(r.stderr, "-jsno") || !strings.Contains(r.stderr, "goes after --") {
		t.Fatalf("show 1 --jsno: exit %d %q", r.code, r.stderr)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// strictEvent is an event whose id is given as it appears between the
// quotes; the id starts at offset 8, so a bad byte after "c" is at 9.
func strictEvent(id string) string {
	return `{"id": "` + id + `", "type": "notice", "recipients": [{"id": "ada", "email": "ada@example.com"}]}`
}

// Four sources' events whose ids differ as sent: encoding/json made the
// first three "c\uFFFD" (one new event, three duplicates never sent). Each
// id that is not UTF-8 as sent is refused with the field named; only the
// valid one is written. In-process and through the built binary.
func TestSendEventIDsAsSent(t *testing.T) {
	t.Parallel()
	cases := []struct{ id, stderr string }{
		{"c\xff", "invalid event: id: not valid UTF-8 as sent (byte 0xff at offset 9)\n"},
		{"c\xfe", "invalid event: id: not valid UTF-8 as sent (byte 0xfe at offset 9)\n"},
		{`c\ud800`, "invalid event: id: lone UTF-16 surrogate \\ud800\n"},
		{`c\ufffd`, ""},
	}
	check := func(t *testing.T, db string, send func(stdin string) cliResult) {
		for _, c := range cases {
			r := send(strictEvent(c.id))
			if c.stderr == "" {
				lines := decodeLines(t, r.stdout)
				if r.code != 0 || len(lines) != 1 || lines[0].EventID != "c\uFFFD" || lines[0].Result != "new" {
					t.Errorf("id %s: exit %d, %q %q; want one new notification of c\uFFFD", c.id, r.code, r.stdout, r.stderr)
				}
				continue
			}
			if r.code != exitRejected || r.stderr != "edgerelay: "+c.stderr || r.stdout != "" {
				t.Errorf("id %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.id, r.code, r.stdout, r.stderr, exitRejected, c.stderr)
			}
		}
		if n := countRows(t, db, "events"); n != 1 {
			t.Errorf("%d events stored, want 1 (the valid id's)", n)
		}
	}
	t.Run("in-process", func(t *testing.T) {
		t.Parallel()
		db := filepath.Join(t.TempDir(), "r.db")
		check(t, db, func(stdin string) cliResult { return runCLI(t, stdin, "--db", db, "send") })
	})
	t.Run("binary", func(t *testing.T) {
		t.Parallel()
		bin := binary(t)
		dir := t.TempDir()
		db := filepath.Join(dir, "r.db")
		check(t, db, func(stdin string) cliResult {
			f := filepath.Join(dir, "event.json")
			if err := os.WriteFile(f, []byte(stdin), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb strings.Builder
			cmd := exec.Command(bin, "send", "--db", db, "--file", f)
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return cliResult{code, out.String(), errb.String()}
		})
	})
}

// A JSON Lines file with such lines: each is reported with its line number
// and what is wrong, the valid lines are accepted.
func TestBatchSendEventIDsAsSent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, file := filepath.Join(dir, "r.db"), filepath.Join(dir, "in.jsonl")
	lines := []string{
		strictEvent("a1"),
		strictEvent("c\xff"),
		strictEvent("c\xfe"),
		strictEvent(`c\ud800`),
		strictEvent(`c\ufffd`),
		`{"id": "a6", "type": "notice", "id": "a7", "recipients": [{"id": "ada", "email": "ada@example.com"}]}`,
		`{"id": "a8", "type": "notice", "recipients": [{"id": "ada", "email": "ada@example.com"}], "data": {"note": "` + "\xff" + `"}}`,
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "batch", "send", file, "--db", db, "--json")
	if r.code != exitRejected {
		t.Fatalf("exit %d, want %d: %s", r.code, exitRejected, r.stderr)
	}
	for _, want := range []string{
		"batch: line 2: invalid event: id: not valid UTF-8 as sent (byte 0xff at offset 9)\n",
		"batch: line 3: invalid event: id: not valid UTF-8 as sent (byte 0xfe at offset 9)\n",
		"batch: line 4: invalid event: id: lone UTF-16 surrogate \\ud800\n",
		"batch: line 6: invalid event: id: key \"id\" given twice\n",
		fmt.Sprintf("batch: line 7: invalid event: data.note: not valid UTF-8 as sent (byte 0xff at offset %d)\n", strings.Index(lines[6], "\xff")),
		"batch: 7 lines, 2 accepted (2 new, 0 duplicate), 5 rejected",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if got := batchOut(t, r).Batch; got.New != 2 || got.Duplicate != 0 || got.Rejected != 5 {
		t.Errorf("%+v, want 2 new, 0 duplicate, 5 rejected", got)
	}
	if n := countRows(t, db, "events"); n != 2 {
		t.Errorf("%d events stored, want 2 (lines 1 and 5)", n)
	}
}

// audience set reads its file as strictly as the API's PUT: a member id
// that is not UTF-8 as sent is refused, not stored as another id.
func TestAudienceSetStrict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	for _, c := range []struct{ body, stderr string }{
		{`{"members": [{"id": "a` + "\xff" + `", "email": "a@x"}]}`, `members[0].id: not valid UTF-8 as sent (byte 0xff at offset 22)`},
		{`{"members": [{"id": "a", "email": "a@x", "email": "b@x"}]}`, `members[0].email: key "email" given twice`},
		{`{"members": [{"id": "a", "emial": "a@x"}]}`, `members[0].emial: unknown field`},
	} {
		f := filepath.Join(dir, "team.json")
		if err := os.WriteFile(f, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "", "audience", "set", "--db", db, "team", f)
		if r.code != exitRejected || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming %q", c.body, r.code, r.stderr, exitRejected, c.stderr)
		}
	}
	if _, err := os.Stat(db); err == nil {
		if n := countRows(t, db, "audiences"); n != 0 {
			t.Errorf("%d audiences stored, want none", n)
		}
	}
}

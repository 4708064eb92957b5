package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What the commands say they did and read back what they stored: send's
// feed items, audiences listed, read and deleted, a feed's members.

// sentLines splits send's output into notification and feed item lines
// (a feed item line has a feed).
func sentLines(t *testing.T, out string) (notes []acceptedLine, items []feedItemLine) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("output is not JSON lines: %v\n%s", err, out)
		}
		b, _ := json.Marshal(raw)
		if _, ok := raw["feed"]; ok {
			var it feedItemLine
			json.Unmarshal(b, &it)
			items = append(items, it)
			continue
		}
		var n acceptedLine
		json.Unmarshal(b, &n)
		notes = append(notes, n)
	}
	return notes, items
}

// send of an event posted to feeds prints a line per feed item with its
// seq (after the notification lines), and a resend prints the same seqs,
// marked duplicate.
func TestSendPrintsFeedItems(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	feedOnly := `{"id": "d1", "type": "deploy.finished", "subject": "Deployed", "feeds": ["team:ops", "*"]}`
	r := runCLI(t, feedOnly, "--db", db, "send")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	notes, items := sentLines(t, r.stdout)
	want := []feedItemLine{
		{Tenant: "default", EventID: "d1", Purpose: "deploy.finished", Feed: "team:ops", Seq: 1, Result: "new"},
		{Tenant: "default", EventID: "d1", Purpose: "deploy.finished", Feed: "*", Seq: 2, Result: "new"},
	}
	if len(notes) != 0 || len(items) != 2 || items[0] != want[0] || items[1] != want[1] {
		t.Fatalf("feed-only send printed %q; want the two feed items %+v", r.stdout, want)
	}

	both := `{"id": "d2", "type": "deploy.finished", "subject": "Deployed", "feeds": ["@ada"],
	  "recipients": [{"id": "ada", "email": "ada@example.com"}]}`
	r = runCLI(t, both, "--db", db, "send")
	notes, items = sentLines(t, r.stdout)
	if r.code != 0 || len(notes) != 1 || notes[0].Recipient != "ada" || len(items) != 1 || items[0].Feed != "@ada" || items[0].Seq != 3 {
		t.Fatalf("send with a recipient and a feed: exit %d, %q", r.code, r.stdout)
	}
	if !strings.HasPrefix(r.stdout, `{"id":`) {
		t.Errorf("the notification line comes first: %q", r.stdout)
	}

	r = runCLI(t, feedOnly, "--db", db, "send")
	_, items = sentLines(t, r.stdout)
	for i := range want {
		want[i].Result = "duplicate"
	}
	if r.code != 0 || len(items) != 2 || items[0] != want[0] || items[1] != want[1] {
		t.Fatalf("resend printed %q; want %+v", r.stdout, want)
	}
}

// audience list, get and delete read back and remove what audience set
// stored; get prints what set reads.
func TestAudienceListGetDelete(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	if r := runCLI(t, "", "audience", "list", "--db", db); r.code != exitError || !strings.Contains(r.stderr, db) {
		t.Fatalf("list on a missing database: exit %d %q, want 1 naming it", r.code, r.stderr)
	}
	if _, err := os.Stat(db); err == nil {
		t.Fatal("audience list created the database")
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	team := file("team.json", `{"members": [{"id": "cy", "email": "cy@example.com"}, {"id": "ada", "phone": "+15550100"}]}`)
	everyone := file("all.json", `{"members": [{"id": "a", "email": "a@example.com"}, {"id": "b", "email": "b@example.com"}, {"id": "c", "email": "c@example.com"}]}`)
	for _, args := range [][]string{{"on-call-team", team}, {"all", everyone}, {"--tenant", "acme", "on-call-team", everyone}} {
		if r := runCLI(t, "", append([]string{"audience", "set", "--db", db}, args...)...); r.code != 0 {
			t.Fatalf("set %v: exit %d %s", args, r.code, r.stderr)
		}
	}

	r := runCLI(t, "", "audience", "list", "--db", db)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	row := regexp.MustCompile(`^(\S+) +(\d+) +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)
	if r.code != 0 || len(lines) != 3 || !regexp.MustCompile(`^NAME +MEMBERS +UPDATED$`).MatchString(lines[0]) {
		t.Fatalf("list: exit %d\n%s", r.code, r.stdout)
	}
	for i, want := range [][2]string{{"all", "3"}, {"on-call-team", "2"}} {
		m := row.FindStringSubmatch(lines[i+1])
		if m == nil || m[1] != want[0] || m[2] != want[1] || strings.Index(lines[i+1], m[2]) != strings.Index(lines[0], "MEMBERS") {
			t.Errorf("list row %d %q, want %s with %s members, aligned", i, lines[i+1], want[0], want[1])
		}
	}
	r = runCLI(t, "", "audience", "list", "--db", db, "--tenant", "acme", "--json")
	var info struct {
		Name    string `json:"name"`
		Members int    `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &info); r.code != 0 || err != nil || info.Name != "on-call-team" || info.Members != 3 {
		t.Errorf("list --json for acme: exit %d %q (%v)", r.code, r.stdout, err)
	}

	r = runCLI(t, "", "audience", "get", "--db", db, "on-call-team")
	var got struct {
		Members []struct {
			ID    string `json:"id"`
			Email string `json:"email"`
			Phone string `json:"phone"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || len(got.Members) != 2 ||
		got.Members[0].ID != "cy" || got.Members[1].Phone != "+15550100" {
		t.Fatalf("get: exit %d %q (%v)", r.code, r.stdout, err)
	}
	// What get prints, set reads.
	again := file("again.json", r.stdout)
	if r := runCLI(t, "", "audience", "set", "--db", db, "copy", again); r.code != 0 || !strings.Contains(r.stdout, "2 members") {
		t.Errorf("set from get's output: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	if r := runCLI(t, "", "audience", "delete", "--db", db, "on-call-team"); r.code != 0 || !strings.Contains(r.stdout, "deleted") {
		t.Fatalf("delete: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, cmd := range []string{"get", "delete"} {
		r := runCLI(t, "", "audience", cmd, "--db", db, "on-call-team")
		if r.code != exitError || !strings.Contains(r.stderr, `no audience "on-call-team" in tenant "default"`) {
			t.Errorf("%s after delete: exit %d %q", cmd, r.code, r.stderr)
		}
	}
	ev := `{"id": "i1", "type": "incident", "audience": "on-call-team", "subject": "Down"}`
	if r := runCLI(t, ev, "--db", db, "send"); r.code != exitRejected || !strings.Contains(r.stderr, "audience") {
		t.Errorf("send to the deleted audience: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, strings.Replace(ev, `"subject"`, `"tenant": "acme", "subject"`, 1), "--db", db, "send"); r.code != 0 {
		t.Errorf("acme's audience of the same name, untouched: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "audience", "get", "--db", db, "bad name"); r.code != exitUsage || !strings.Contains(r.stderr, "NAME") {
		t.Errorf("get of a bad name: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "audience", "list", "--db", db, "--tenant", "nobody"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no audiences") {
		t.Errorf("list of a tenant with none: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// feed members FEED prints the members with where they joined; without
// USERs it never empties the feed, --clear does.
func TestFeedMembersPrintedAndClearedOnlyOnPurpose(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "r.db")
	runCLI(t, `{"id": "d1", "type": "deploy", "subject": "x", "feeds": ["*"]}`, "--db", db, "send")
	if r := runCLI(t, "", "feed", "members", "--db", db, "team:ops", "cy", "ada"); r.code != 0 || !strings.Contains(r.stdout, "2 members") {
		t.Fatalf("set: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "feed", "members", "--db", db, "--history", "team:ops", "cy", "ada", "zoe"); r.code != 0 {
		t.Fatalf("add zoe with history: exit %d %q", r.code, r.stderr)
	}
	want := "USER  JOINED\nada   1\ncy    1\nzoe   0\n"
	for range 2 { // printing changes nothing
		if r := runCLI(t, "", "feed", "members", "--db", db, "team:ops"); r.code != 0 || r.stdout != want {
			t.Fatalf("print: exit %d\n%s\nwant\n%s%s", r.code, r.stdout, want, r.stderr)
		}
	}
	r := runCLI(t, "", "feed", "members", "--db", db, "--json", "team:ops")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `{"user":"ada","joined_seq":1}`+"\n") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("--json: exit %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, "", "feed", "members", "--db", db, "--tenant", "acme", "team:ops"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no members") {
		t.Errorf("acme's team:ops: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "feed", "members", "--db", db, "--clear", "team:ops", "ada"); r.code != exitUsage {
		t.Errorf("--clear with users: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "feed", "members", "--db", db, "--clear", "team:ops"); r.code != 0 || !strings.Contains(r.stdout, "0 members") {
		t.Fatalf("--clear: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "feed", "members", "--db", db, "team:ops"); r.code != 0 || r.stdout != "" {
		t.Errorf("after --clear: exit %d %q", r.code, r.stdout)
	}
}

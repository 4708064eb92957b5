package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// badProviders answers /fail with a 422 (failed for good) and drops the
// connection of /lost after reading the request (the outcome is unknown).
func badProviders(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, `{"error": "invalid recipient"}`, http.StatusUnprocessableEntity)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// operatorDB is a database where some notifications ended failed, some
// dead, some unknown, through the CLI: event e-N (type otp, at-most-once)
// to ada (email, sms) and ben (email), and n-N (type notice, at-least-once,
// one attempt allowed) to cy. Email answers are lost, sms refused: ada's
// and ben's email end unknown, ada's sms failed, cy's email dead.
type operatorDB struct {
	db, cfg, route1, route2 string
}

func newOperatorDB(t *testing.T) *operatorDB {
	t.Helper()
	dir := t.TempDir()
	srv := badProviders(t)
	o := &operatorDB{db: filepath.Join(dir, "r.db"), cfg: filepath.Join(dir, "c.yaml"),
		route1: "email=webhook+" + srv.URL + "/lost", route2: "sms=webhook+" + srv.URL + "/fail"}
	os.WriteFile(o.cfg, []byte("retry:\n  max_attempts: 1\ntypes:\n  otp:\n    delivery: at-most-once\n"), 0o644)
	return o
}

// round accepts events e-N and n-N and dispatches until every notification
// is final; it returns the ids written, in order.
func (o *operatorDB) round(t *testing.T, n int, tenant string) []int64 {
	t.Helper()
	var ids []int64
	for _, ev := range []string{
		fmt.Sprintf(`{"id": "e-%d", "type": "otp", "tenant": %q, "recipients": [{"id": "ada", "email": "ada@example.com", "phone": "+15550100"}, {"id": "ben", "email": "ben@example.com"}], "body": "1234"}`, n, tenant),
		fmt.Sprintf(`{"id": "n-%d", "type": "notice", "tenant": %q, "recipients": [{"id": "cy", "email": "cy@example.com"}], "body": "hi"}`, n, tenant),
	} {
		r := runCLI(t, ev, "send", "--db", o.db)
		if r.code != 0 {
			t.Fatalf("send: %d %s", r.code, r.stderr)
		}
		for _, l := range decodeLines(t, r.stdout) {
			ids = append(ids, l.ID)
		}
	}
	r := runCLI(t, "", "dispatch", "--until-idle", "--db", o.db, "--config", o.cfg, "--route", o.route1, "--route", o.route2, "--log-level", "error")
	if r.code != exitFailed {
		t.Fatalf("dispatch: exit %d %s", r.code, r.stderr)
	}
	return ids
}

// nextMillisecond waits for the clock to reach the next millisecond (the
// stores keep milliseconds) and returns it: what was written before has an
// earlier time, what is written after has this one or later.
func nextMillisecond() time.Time {
	next := time.UnixMilli(time.Now().UnixMilli() + 1).UTC()
	for time.Now().Before(next) {
	}
	return next
}

// status lists the newest failed and dead notifications beside the
// unknown ones, in text and JSON, and its columns line up.
func TestStatusListsFailedDeadUnknownInColumns(t *testing.T) {
	t.Parallel()
	o := newOperatorDB(t)
	ids := o.round(t, 1, "default") // ada email, ada sms, ben email, cy email
	ids = append(ids, o.round(t, 2, "default")...)
	unknown, failed, dead := []int64{ids[6], ids[4], ids[2], ids[0]}, []int64{ids[5], ids[1]}, []int64{ids[7], ids[3]}

	r := runCLI(t, "", "status", "--db", o.db, "--json")
	var st struct {
		Counts  map[string]int64
		Unknown []int64  `json:"unknown_ids"`
		Failed  []int64  `json:"failed_ids"`
		Dead    []int64  `json:"dead_ids"`
		OldestS *float64 `json:"oldest_due_seconds"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, %v: %s", r.code, err, r.stdout)
	}
	if !slices.Equal(st.Unknown, unknown) || !slices.Equal(st.Failed, failed) || !slices.Equal(st.Dead, dead) ||
		st.Counts["failed"] != 2 || st.Counts["dead"] != 2 || st.Counts["unknown"] != 4 || st.OldestS == nil {
		t.Fatalf("status --json: %s\nwant unknown %v, failed %v, dead %v", r.stdout, unknown, failed, dead)
	}

	r = runCLI(t, "", "status", "--db", o.db)
	lines := strings.Split(r.stdout, "\n")
	col := -1 // where the counts start, the same on every status line
	for _, s := range model.Statuses {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  "+s+" ") })
		if i < 0 {
			t.Fatalf("status has no line for %s:\n%s", s, r.stdout)
		}
		l := lines[i]
		at := len("  "+s) + len(l[len("  "+s):]) - len(strings.TrimLeft(l[len("  "+s):], " "))
		if col < 0 {
			col = at
		}
		if at != col {
			t.Fatalf("the count of %s starts at column %d, the first one's at %d:\n%s", s, at, col, r.stdout)
		}
		want := map[string][]int64{"failed": failed, "dead": dead, "unknown": unknown}[s]
		if want != nil && !strings.HasSuffix(l, "newest "+joinIDs(want)) {
			t.Fatalf("status line %q, want it to end with newest %v", l, want)
		}
	}
	// The attempts table: every count ends where its heading ends.
	h := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "attempts by provider") })
	if h < 0 || h+2 >= len(lines) {
		t.Fatalf("no attempts table:\n%s", r.stdout)
	}
	head := lines[h]
	for _, row := range lines[h+1 : h+3] {
		for _, word := range []string{"sent", "refused", "unknown"} {
			end := strings.Index(head, word) + len(word)
			if end > len(row) || row[end-1] == ' ' || (end < len(row) && row[end] != ' ') {
				t.Fatalf("column %s ends at %d in the heading, not in the row:\n%s\n%s", word, end, head, row)
			}
		}
	}
}

// list selects by status, time, tenant and recipient, pages with --after,
// prints aligned columns or JSON.
func TestListByStatusAndTime(t *testing.T) {
	t.Parallel()
	o := newOperatorDB(t)
	first := o.round(t, 1, "default")
	between := nextMillisecond()
	second := o.round(t, 2, "acme")
	list := func(args ...string) []int64 {
		t.Helper()
		r := runCLI(t, "", append([]string{"list", "--db", o.db, "--json", "--limit", "0"}, args...)...)
		var out struct{ Notifications []model.Notification }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
			t.Fatalf("list %v: exit %d, %v: %s%s", args, r.code, err, r.stdout, r.stderr)
		}
		var ids []int64
		for _, n := range out.Notifications {
			ids = append(ids, n.ID)
		}
		return ids
	}
	since := between.UTC().Format(time.RFC3339Nano)
	for _, c := range []struct {
		args []string
		want []int64
	}{
		{nil, append(slices.Clone(first), second...)},
		{[]string{"--status", "dead"}, []int64{first[3], second[3]}},
		{[]string{"--status", "dead", "--since", "1h"}, []int64{first[3], second[3]}},
		{[]string{"--status", "dead", "--since", since}, []int64{second[3]}},
		{[]string{"--status", "unknown", "--created-since", since}, []int64{second[0], second[2]}},
		{[]string{"--since", "2099-01-01T00:00:00Z"}, nil},
		{[]string{"--tenant", "acme", "--status", "failed"}, []int64{second[1]}},
		{[]string{"--recipient", "cy"}, []int64{first[3], second[3]}},
		{[]string{"--recipient", "ada", "--status", "unknown", "--tenant", "default"}, []int64{first[0]}},
		{[]string{"--after", fmt.Sprint(first[3])}, second},
	} {
		if got := list(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("list %v: %v, want %v", c.args, got, c.want)
		}
	}

	// Human output: a heading and a row each, the columns aligned; more
	// than --limit says how to go on.
	r := runCLI(t, "", "list", "--db", o.db, "--status", "unknown", "--limit", "3")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(r.stderr, fmt.Sprintf("--after %d", second[0])) {
		t.Fatalf("list --limit 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, heading := range []string{"STATUS", "CHANGED", "RECIPIENT", "ADDRESS", "WHY"} {
		at := strings.Index(lines[0], heading)
		for _, l := range lines[1:] {
			if at > len(l) || l[at-1] != ' ' || l[at] == ' ' {
				t.Fatalf("column %s starts at %d in the heading, not in:\n%s\n%s", heading, at, lines[0], l)
			}
		}
	}
	if !strings.Contains(lines[1], "ada@example.com") || !strings.Contains(lines[1], "unknown") {
		t.Fatalf("first row %q", lines[1])
	}
	if r := runCLI(t, "", "list", "--db", o.db, "--status", "sent"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no notifications match") {
		t.Fatalf("list of nothing: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, bad := range [][]string{{"--status", "lost"}, {"--since", "yesterday"}, {"--limit", "-1"}, {"--tenant", "a b"}, {"12"}} {
		if r := runCLI(t, "", append([]string{"list", "--db", o.db}, bad...)...); r.code != exitUsage || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("list %v: exit %d %q; want a usage error naming %s", bad, r.code, r.stderr, bad[0])
		}
	}
}

// retry in bulk: --dry-run prints what it would retry and how many and
// changes nothing; without it, each is retried (pending, due) and counted.
// retry ID works as before.
func TestRetryInBulk(t *testing.T) {
	t.Parallel()
	o := newOperatorDB(t)
	first := o.round(t, 1, "default")
	between := nextMillisecond().Format(time.RFC3339Nano)
	second := o.round(t, 2, "default")
	statusOf := func(id int64) string {
		t.Helper()
		var n model.Notification
		json.Unmarshal([]byte(runCLI(t, "", "show", "--json", "--db", o.db, fmt.Sprint(id)).stdout), &n)
		return n.Status
	}

	r := runCLI(t, "", "retry", "--status", "unknown", "--since", between, "--dry-run", "--db", o.db)
	if r.code != 0 || !strings.Contains(r.stdout, "would retry 2 notifications (dry run: nothing changed)") ||
		!strings.Contains(r.stdout, fmt.Sprintf("\n%d ", second[0])) || !strings.Contains(r.stdout, fmt.Sprintf("\n%d ", second[2])) ||
		strings.Contains(r.stdout, fmt.Sprintf("\n%d ", first[0])) {
		t.Fatalf("retry --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, id := range []int64{first[0], first[2], second[0], second[2]} {
		if s := statusOf(id); s != model.StatusUnknown {
			t.Fatalf("after a dry run notification %d is %s", id, s)
		}
	}

	r = runCLI(t, "", "retry", "--status", "unknown", "--since", between, "--db", o.db)
	if r.code != 0 || !strings.Contains(r.stdout, "retried 2 notifications") {
		t.Fatalf("retry --status unknown --since: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for id, want := range map[int64]string{first[0]: "unknown", first[2]: "unknown", second[0]: "pending", second[2]: "pending", second[3]: "dead"} {
		if s := statusOf(id); s != want {
			t.Errorf("after the retry notification %d is %s, want %s", id, s, want)
		}
	}
	// Every dead one, with a limit: the oldest first, and more said.
	r = runCLI(t, "", "retry", "--status", "dead", "--limit", "1", "--db", o.db)
	if r.code != 0 || !strings.Contains(r.stdout, "retried 1 notification; more match beyond --limit 1") || statusOf(first[3]) != "pending" ||
		statusOf(second[3]) != "dead" {
		t.Fatalf("retry --status dead --limit 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "retry", "--status", "failed", "--recipient", "nobody", "--db", o.db); r.code != 0 || !strings.Contains(r.stdout, "retried 0 notifications") {
		t.Fatalf("retry of nothing: exit %d %q", r.code, r.stdout)
	}
	// retry ID as before, after the flags or before them.
	if r := runCLI(t, "", "retry", fmt.Sprint(first[1]), "--db", o.db); r.code != 0 || statusOf(first[1]) != "pending" {
		t.Fatalf("retry ID: exit %d %s", r.code, r.stderr)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"retry", "--status", "pending"}, "failed, dead, unknown or suppressed"},
		{[]string{"retry", "--dry-run"}, "failed, dead, unknown or suppressed"},
		{[]string{"retry", "--status", "dead", "12"}, "not both"},
		{[]string{"retry"}, "one notification id"},
	} {
		if r := runCLI(t, "", append(bad.args, "--db", o.db)...); r.code != exitUsage || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%v: exit %d %q; want a usage error saying %q", bad.args, r.code, r.stderr, bad.want)
		}
	}
}

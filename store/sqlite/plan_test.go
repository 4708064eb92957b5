package sqlite

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
	"strings"
	"testing"
	"time"
)

// The dispatcher's hot queries read the partial indexes of live rows in
// order. A plan through the status index sorts every pending row on each
// claim: a backlog of a million made each claim sort a million rows.
func TestDispatchQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// A backlog, so that a bad plan would show in the timing below too.
	acceptFor(t, s, "acme", "backlog", 3000)
	cases := []struct {
		name, query, want string
		args              []any
	}{
		{"claim", claimSQL(""), "notifications_due", []any{ms(time.Now()), 1, 10, routes.JSON(nil)}},
		{"claim with routes", claimSQL(""), "notifications_due", []any{ms(time.Now()), 1, 10,
			routes.JSON(&model.ClaimRoutes{Default: map[string][]string{"email": {"p"}}})}},
		{"claim by channel", claimSQL(" AND channel NOT IN (?5)"), "notifications_due", []any{ms(time.Now()), 1, 10, nil, "sms"}},
		{"expired leases", expiredLeasesSQL, "notifications_leased", []any{ms(time.Now()), 10}},
		{"next due", nextDueSQL, "notifications_due", nil},
		// Status lists the newest failed, dead and unknown ids: the status
		// index read backwards, not a sort of every row in the status.
		{"newest in a status", newestSQL, "notifications_status", []any{model.StatusDead, 20}},
	}
	for _, c := range cases {
		plan := queryPlan(t, s, c.query, c.args...)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "INDEX "+c.want) {
			t.Errorf("%s does not read %s:\n%s", c.name, c.want, text)
		}
		if strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s sorts instead of reading the index in order:\n%s", c.name, text)
		}
		t.Logf("%s:\n%s", c.name, text)
	}
	// And the claim takes the oldest due rows first.
	cs, err := s.Claim(context.Background(), model.ClaimRequest{Limit: 5, Now: time.Now().Add(time.Hour), Lease: time.Minute})
	if err != nil || len(cs) != 5 {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	for i := 1; i < len(cs); i++ {
		if cs[i].ID < cs[i-1].ID {
			t.Fatalf("claim order: %d after %d", cs[i].ID, cs[i-1].ID)
		}
	}
}

// queryPlan is SQLite's plan for query, one line per step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.rdb.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

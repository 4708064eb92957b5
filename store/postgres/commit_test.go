package postgres_test

import (
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// A claim or a settlement whose COMMIT answer is lost with its connection
// is resolved by asking the server (pg_xact_status): it is reported done,
// not failed. Reported failed, a committed claim would leave its
// notification to lease recovery, which records an attempt that never
// happened (an at-most-once type then ends unknown with no call made), and
// a committed settlement retried would write its attempt row twice.
func TestLostCommitAnswerIsResolved(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Start(t))
	ctx := t.Context()
	if _, _, err := s.AcceptEvents(ctx, []model.AcceptInput{event("acme", "e1", 1)}, t0); err != nil {
		t.Fatal(err)
	}
	postgres.LoseCommitAnswers(s, 1)
	cs, err := s.Claim(ctx, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("a claim whose answer was lost: %d claimed, %v; want 1, nil", len(cs), err)
	}
	c := cs[0]
	postgres.LoseCommitAnswers(s, 1)
	a := model.Attempt{Provider: "p", StartedAt: t0, EndedAt: t0, Outcome: "sent", HTTPStatus: 202}
	applied, err := s.Settle(ctx, []model.Settlement{{ID: c.ID, Token: c.Token, At: t0, Attempt: &a,
		Decision: model.Decision{Status: model.StatusSent}}})
	if err != nil || len(applied) != 1 || !applied[0] {
		t.Fatalf("a settlement whose answer was lost: %v, %v; want applied", applied, err)
	}
	n, err := s.Notification(ctx, "acme", c.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != model.StatusSent || n.Attempts != 1 || len(n.AttemptLog) != 1 {
		t.Errorf("after both lost answers: status %s, %d attempts, %d attempt rows; want sent, 1, 1", n.Status, n.Attempts, len(n.AttemptLog))
	}
	st := s.Stats()
	if st.Failed != 0 {
		t.Errorf("%d writes counted failed", st.Failed)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/postgres"
)

// Concurrent accepts share commits: 256 callers at once make far fewer
// than 256 transactions, and each caller's event is there once it is
// answered.
func TestConcurrentAcceptsShareCommits(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	s := open(t, url)
	const n = 256
	before := s.Stats()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = s.AcceptEvents(t.Context(), []model.AcceptInput{event("acme", fmt.Sprintf("e%d", i), 1)}, t0)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	commits, writes := after.Commits-before.Commits, after.Writes-before.Writes
	t.Logf("%d accepts in %d commits (largest group %d)", writes, commits, after.MaxBatch)
	if writes != n || commits > n/4 {
		t.Errorf("%d concurrent accepts: %d writes in %d commits; want %d writes in at most %d", n, writes, commits, n, n/4)
	}
	var rows int
	if err := conn(t, url).QueryRow(t.Context(), `SELECT count(*) FROM notifications`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Errorf("%d notifications; want %d", rows, n)
	}
}

// The writes queued while a committer is busy go into one transaction,
// and one that fails for a reason of its own (PostgreSQL refuses its
// statement; its request key was used for another request) is rolled back
// alone: the others of its group are committed and answered done.
func TestGroupMemberFailsAlone(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	s := open(t, url)
	ctx := t.Context()
	key := model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "request A"}
	hold := model.RequestHold{Now: t0, Until: t0.Add(time.Minute), Owner: "node-1"}
	if _, err := s.ClaimRequest(ctx, key, hold); err != nil {
		t.Fatal(err)
	}
	accept(t, s, event("acme", "due", 1))
	cs, err := s.Claim(ctx, model.ClaimRequest{Limit: 1, Now: t0, Lease: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	accept(t, s, event("acme", "later", 1))

	queued, release := postgres.HoldGroups(s)
	before := s.Stats()
	var wg sync.WaitGroup
	const good = 5
	goodErrs := make([]error, good)
	for i := range good {
		wg.Go(func() {
			_, _, goodErrs[i] = s.AcceptEvents(ctx, []model.AcceptInput{event("acme", fmt.Sprintf("g%d", i), 1)}, t0)
		})
	}
	var badErr, reusedErr, claimErr, settleErr error
	var claimed []model.Claimed
	var applied []bool
	wg.Go(func() {
		// A NUL byte: PostgreSQL refuses it in text, and the transaction
		// is aborted with it.
		_, _, badErr = s.AcceptEvents(ctx, []model.AcceptInput{event("acme", "bad\x00id", 1)}, t0)
	})
	wg.Go(func() {
		_, reusedErr = s.ClaimRequest(ctx, model.RequestKey{Tenant: "acme", Key: "k1", Fingerprint: "request B"}, hold)
	})
	wg.Go(func() {
		claimed, claimErr = s.Claim(ctx, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute})
	})
	wg.Go(func() {
		a := model.Attempt{Provider: "p", StartedAt: t0, EndedAt: t0, Outcome: "sent", HTTPStatus: 202}
		applied, settleErr = s.Settle(ctx, []model.Settlement{{ID: cs[0].ID, Token: cs[0].Token, At: t0, Attempt: &a,
			Decision: model.Decision{Status: model.StatusSent}}})
	})
	for range good + 4 {
		select {
		case <-queued:
		case <-time.After(30 * time.Second):
			t.Fatal("the writes were not queued")
		}
	}
	release()
	wg.Wait()

	if err := errors.Join(goodErrs...); err != nil {
		t.Errorf("the good accepts failed with another's error: %v", err)
	}
	if badErr == nil {
		t.Error("an event id with a NUL byte was accepted")
	}
	if !errors.Is(reusedErr, model.ErrKeyReused) {
		t.Errorf("claim of a key used for another request: %v; want ErrKeyReused", reusedErr)
	}
	if claimErr != nil || len(claimed) != 1 || claimed[0].EventID != "later" {
		t.Errorf("claim in the group: %v, %v; want the one due notification", claimed, claimErr)
	}
	if settleErr != nil || len(applied) != 1 || !applied[0] {
		t.Errorf("settle in the group: %v, %v; want applied", applied, settleErr)
	}
	after := s.Stats()
	if c := after.Commits - before.Commits; c > 2 {
		t.Errorf("%d writes took %d commits; want them grouped (at most 2)", good+4, c)
	}
	if f := after.Failed - before.Failed; f != 2 {
		t.Errorf("%d writes counted failed; want 2", f)
	}
	var events int
	if err := conn(t, url).QueryRow(ctx, `SELECT count(*) FROM events WHERE event_id LIKE 'g%'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != good {
		t.Errorf("%d of the %d good events are stored", events, good)
	}
	n, err := s.Notification(ctx, "acme", cs[0].ID, "")
	if err != nil || n.Status != model.StatusSent || len(n.AttemptLog) != 1 {
		t.Errorf("the settled notification: %+v, %v; want sent with one attempt row", n, err)
	}
}

// A group whose COMMIT answer is lost is resolved by asking the server:
// every member is answered done, and nothing is written twice.
func TestGroupLostCommitAnswerIsResolved(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Start(t))
	ctx := t.Context()
	queued, release := postgres.HoldGroups(s)
	postgres.LoseCommitAnswers(s, 1)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, _, errs[i] = s.AcceptEvents(ctx, []model.AcceptInput{event("acme", fmt.Sprintf("e%d", i), 1)}, t0)
		})
	}
	for range errs {
		<-queued
	}
	release()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("accepts whose group's answer was lost: %v", err)
	}
	cs, err := s.Claim(context.Background(), model.ClaimRequest{Limit: 100, Now: t0, Lease: time.Minute})
	if err != nil || len(cs) != len(errs) {
		t.Errorf("claimed %d, %v; want %d", len(cs), err, len(errs))
	}
}

// The same event accepted by several callers whose accepts share a
// transaction is written once: the first is new, the others duplicates of
// it, and one with other content a conflict.
func TestGroupedDuplicates(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	s := open(t, url)
	ctx := t.Context()
	queued, release := postgres.HoldGroups(s)
	const n = 4
	outs := make([][]model.Accepted, n+1)
	errs := make([][]error, n+1)
	fails := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		if i == n {
			for range n {
				<-queued
			}
		}
		wg.Go(func() {
			ev := event("acme", "e1", 2)
			if i == n { // queued last: the others' content is the event's
				ev.Event.Fingerprint = "other content"
			}
			outs[i], errs[i], fails[i] = s.AcceptEvents(ctx, []model.AcceptInput{ev, event("acme", fmt.Sprintf("own%d", i), 1)}, t0)
		})
	}
	<-queued
	release()
	wg.Wait()
	if err := errors.Join(fails...); err != nil {
		t.Fatal(err)
	}
	news, dups, conflicts := 0, 0, 0
	for i := range n + 1 {
		switch {
		case errors.Is(errs[i][0], model.ErrEventConflict):
			conflicts++
		case errs[i][0] != nil:
			t.Errorf("caller %d: %v", i, errs[i][0])
		case outs[i][0].Duplicate:
			dups++
		default:
			news++
			if len(outs[i][0].Notifications) != 2 || outs[i][0].Notifications[1].ID == 0 {
				t.Errorf("the new event's notifications: %+v", outs[i][0].Notifications)
			}
		}
		if errs[i][1] != nil || outs[i][1].Duplicate || len(outs[i][1].Notifications) != 1 || outs[i][1].Notifications[0].ID == 0 {
			t.Errorf("caller %d's own event: %+v, %v", i, outs[i][1], errs[i][1])
		}
	}
	if news != 1 || dups != n-1 || conflicts != 1 {
		t.Errorf("%d new, %d duplicates, %d conflicts; want 1, %d, 1", news, dups, conflicts, n-1)
	}
	var rows int
	if err := conn(t, url).QueryRow(ctx, `SELECT count(*) FROM notifications`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2+n+1 {
		t.Errorf("%d notifications; want %d", rows, 2+n+1)
	}
}

// The settlements of a group are written together where they settle
// different notifications; a second settlement of the same claim in the
// group still finds the first's done (not applied), as it would alone.
func TestGroupedSettlements(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Start(t))
	ctx := t.Context()
	accept(t, s, event("acme", "e1", 1), event("acme", "e2", 1))
	cs, err := s.Claim(ctx, model.ClaimRequest{Limit: 10, Now: t0, Lease: time.Minute})
	if err != nil || len(cs) != 2 {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	queued, release := postgres.HoldGroups(s)
	a := model.Attempt{Provider: "p", StartedAt: t0, EndedAt: t0, Outcome: "sent", HTTPStatus: 202}
	sets := []model.Settlement{
		{ID: cs[0].ID, Token: cs[0].Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusSent}},
		{ID: cs[1].ID, Token: cs[1].Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusSent}},
		{ID: cs[0].ID, Token: cs[0].Token, At: t0, Attempt: &a, Decision: model.Decision{Status: model.StatusFailed}},
	}
	applied := make([][]bool, len(sets))
	errs := make([]error, len(sets))
	var wg sync.WaitGroup
	for i := range sets {
		wg.Go(func() { applied[i], errs[i] = s.Settle(ctx, sets[i:i+1]) })
		<-queued // in this order
	}
	before := s.Stats()
	release()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !applied[0][0] || !applied[1][0] || applied[2][0] {
		t.Errorf("applied %v; want the first two, not the repeat", applied)
	}
	if c := s.Stats().Commits - before.Commits; c != 1 {
		t.Errorf("%d commits; want 1", c)
	}
	for i, c := range cs {
		n, err := s.Notification(ctx, "acme", c.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{2, 1}[i]; n.Status != model.StatusSent || len(n.AttemptLog) != want {
			t.Errorf("notification %d: %s with %d attempt rows; want sent with %d", c.ID, n.Status, len(n.AttemptLog), want)
		}
	}
}

// Large fan-outs do not all share one transaction: a group's accepts
// write at most a few thousand notifications, the rest wait for the next.
func TestGroupBoundsItsRows(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Start(t))
	ctx := t.Context()
	queued, release := postgres.HoldGroups(s)
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = s.AcceptEvents(ctx, []model.AcceptInput{event("acme", fmt.Sprintf("big%d", i), 2000)}, t0)
		})
	}
	for range n {
		<-queued
	}
	before := s.Stats()
	release()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := s.Stats().Commits - before.Commits; c != 2 {
		t.Errorf("3 accepts of 2,000 notifications each in %d commits; want 2 (4,000 and 2,000)", c)
	}
}

package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store"
)

// Runs: workflow runs written by the accept, cancelled by a later event,
// each step decided once, and a step's decision on an in-app item's read
// state taken in the transaction that writes it.
func runsSuite(t *testing.T, open opener) {
	runAll(t, open, []test{
		{name: "AcceptWritesRunsOnce", run: testRunsAcceptedOnce},
		{name: "CancelStopsWaitingRuns", run: testRunsCancelled},
		{name: "StepDecidedOnce", run: testRunStepDecidedOnce},
		{name: "ReadVersusStepRace", run: testRunReadRace},
		{name: "PruneKeepsWaitingRuns", run: testRunsPruned},
		{name: "ConcurrentDecidersDecideEachStepOnce", run: testRunsConcurrentDeciders},
		{name: "BatchCarriesEachRunOnce", run: testBatchCarriesEachRunOnce},
		{name: "BatchOfACancelledLeader", run: testBatchCancelledLeader},
		{name: "ThrottleStepPassesAtMostMax", run: testThrottleStepPassesAtMostMax},
	})
}

// runEvent is event id of tenant and type "invoice" whose n recipients
// r0…r(n-1) get runs of workflow version 1 with cancel key key.
func runEvent(tenant, id string, n int, key, cancels string) model.AcceptInput {
	in := newEvent(tenant, id, n)
	in.Event.Type, in.Event.Cancels = "invoice", cancels
	in.First = make([]model.Target, n)
	for i := range in.First {
		in.First[i] = model.Target{Recipient: fmt.Sprintf("r%d", i), Run: &model.RunSpec{Version: 1, CancelKey: key}}
	}
	return in
}

func runsOf(t *testing.T, s store.Store, tenant, state string) []model.Run {
	t.Helper()
	runs, err := s.Runs(t.Context(), model.RunFilter{Tenant: tenant, State: state, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func testRunsAcceptedOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	acc := accept(t, s, t0, runEvent("acme", "inv-1", 3, "invoice-1", ""))
	if len(acc[0].Notifications) != 0 || acc[0].Expanded != 3 {
		t.Fatalf("accept of a workflow's event = %+v; want 3 expanded, no notifications", acc[0])
	}
	again := accept(t, s, t0.Add(time.Second), runEvent("acme", "inv-1", 3, "invoice-1", ""))
	if !again[0].Duplicate {
		t.Fatalf("the event again = %+v; want a duplicate", again[0])
	}
	// A fan-out chunk written again (after a crash) adds no run.
	if _, err := s.ExpandEvent(ctx, acc[0].EventRow, 2, runEvent("acme", "inv-1", 3, "invoice-1", "").First[2:], t0); err != nil {
		t.Fatal(err)
	}
	runs := runsOf(t, s, "acme", "")
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3: %+v", len(runs), runs)
	}
	for i, r := range runs {
		if r.State != model.RunWaiting || r.Step != 0 || !r.DueAt.Equal(t0) || r.Recipient != fmt.Sprintf("r%d", i) ||
			r.Version != 1 || r.CancelKey != "invoice-1" || r.EventID != "inv-1" || r.Targets != 3 {
			t.Errorf("run %d = %+v", i, r)
		}
	}
	if got := runsOf(t, s, "beta", ""); len(got) != 0 {
		t.Errorf("another tenant sees %d runs", len(got))
	}
	due, err := s.DueRuns(ctx, t0.Add(-time.Millisecond), 10)
	if err != nil || len(due) != 0 {
		t.Fatalf("due before their time = %d, %v", len(due), err)
	}
	due, err = s.DueRuns(ctx, t0, 10)
	if err != nil || len(due) != 3 || string(due[0].Payload) != string(runEvent("acme", "inv-1", 3, "", "").Event.Payload) {
		t.Fatalf("due at their time = %+v, %v; want 3 with their event's payload", due, err)
	}
	if n, next, err := s.WaitingRuns(ctx); err != nil || n != 3 || !next.Equal(t0) {
		t.Fatalf("waiting runs = %d, next due %v, %v; want 3 from %v", n, next, err, t0)
	}
}

func testRunsCancelled(t *testing.T, s store.Store) {
	ctx := t.Context()
	accept(t, s, t0, runEvent("acme", "inv-1", 2, "invoice-1", ""), runEvent("acme", "inv-2", 1, "invoice-2", ""),
		runEvent("beta", "inv-1", 1, "invoice-1", ""))
	// The payment names the runs it cancels: in its own accept's
	// transaction, the tenant's only.
	pay := newEvent("acme", "pay-1", 1)
	pay.Event.Cancels = "invoice-1"
	accept(t, s, t0.Add(time.Minute), pay)
	cancelled := runsOf(t, s, "acme", model.RunCancelled)
	if len(cancelled) != 2 || cancelled[0].EventID != "inv-1" ||
		cancelled[0].Reason != `cancelled by event "pay-1" (payment): cancels "invoice-1"` {
		t.Fatalf("cancelled = %+v; want inv-1's two runs, with the reason", cancelled)
	}
	if w := runsOf(t, s, "acme", model.RunWaiting); len(w) != 1 || w[0].EventID != "inv-2" {
		t.Fatalf("waiting = %+v; want inv-2's", w)
	}
	if w := runsOf(t, s, "beta", model.RunWaiting); len(w) != 1 {
		t.Fatalf("beta's run = %+v; want it still waiting", w)
	}
	// A duplicate of the payment cancels nothing more (it writes nothing),
	// and a cancelled run is never due.
	n, err := s.CancelRuns(ctx, "acme", "invoice-2", "cancelled by the API", t0.Add(2*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("cancel by key = %d, %v", n, err)
	}
	if n, err := s.CancelRuns(ctx, "acme", "invoice-2", "again", t0.Add(3*time.Minute)); err != nil || n != 0 {
		t.Fatalf("cancel again = %d, %v; want none", n, err)
	}
	if due, err := s.DueRuns(ctx, t0.Add(time.Hour), 10); err != nil || len(due) != 1 || due[0].Tenant != "beta" {
		t.Fatalf("due = %+v, %v; want beta's alone", due, err)
	}
}

// postThenEmail decides a two-step run: step 0 posts to the recipient's
// feed; step 1 writes an email unless step 0's item is read.
func postThenEmail(p model.StepPlan, facts []model.StepFact, now time.Time) model.StepDecision {
	r := p.Run
	if r.Step == 0 {
		return model.StepDecision{StepID: "inbox", Outcome: model.StepSent, Reason: "posted",
			Feed: model.PersonalFeed(r.Recipient), Next: 1, NextDue: now}
	}
	if len(facts) != 1 || facts[0].Step != 0 || facts[0].FeedSeq == 0 {
		return model.StepDecision{StepID: "email", Outcome: model.StepSkipped, Reason: fmt.Sprintf("bad facts %+v", facts), Next: 2, Done: true}
	}
	if facts[0].Read {
		return model.StepDecision{StepID: "email", Outcome: model.StepSkipped, Reason: "read", Next: 2, Done: true, RunReason: "done"}
	}
	return model.StepDecision{StepID: "email", Outcome: model.StepSent, Reason: "unread", Next: 2, Done: true, RunReason: "done",
		Notification: &model.Target{Key: fmt.Sprintf("%s/%s/step1", r.EventID, r.Recipient), Recipient: r.Recipient,
			Channel: "email", Address: r.Recipient + "@example.com"},
		Seq: model.StepSeq(r.Targets, r.Seq, r.Step, 0)}
}

func plansOf(runs []model.Run) []model.StepPlan {
	ps := make([]model.StepPlan, len(runs))
	for i, r := range runs {
		ps[i] = model.StepPlan{Run: r}
		if r.Step == 1 {
			ps[i].Needs = []int{0}
		}
	}
	return ps
}

func decideDue(t *testing.T, s store.Store, now time.Time) int {
	t.Helper()
	due, err := s.DueRuns(t.Context(), now, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.DecideSteps(t.Context(), plansOf(due), func(p model.StepPlan, f []model.StepFact) model.StepDecision {
		return postThenEmail(p, f, now)
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testRunStepDecidedOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	acc := accept(t, s, t0, runEvent("acme", "inv-1", 2, "", ""))
	// Two deciders read the same due runs (two nodes); the second finds
	// them moved on and decides nothing.
	due, err := s.DueRuns(ctx, t0, 10)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(p model.StepPlan, f []model.StepFact) model.StepDecision { return postThenEmail(p, f, t0) }
	if n, err := s.DecideSteps(ctx, plansOf(due), decide, t0); err != nil || n != 2 {
		t.Fatalf("first decision = %d, %v", n, err)
	}
	if n, err := s.DecideSteps(ctx, plansOf(due), decide, t0); err != nil || n != 0 {
		t.Fatalf("the same plans again = %d, %v; want nothing decided", n, err)
	}
	if n := decideDue(t, s, t0); n != 2 {
		t.Fatalf("step 1 decided for %d runs, want 2", n)
	}
	if n := decideDue(t, s, t0.Add(time.Hour)); n != 0 {
		t.Fatalf("done runs decided again: %d", n)
	}
	runs := runsOf(t, s, "acme", "")
	for _, r := range runs {
		steps, err := s.RunSteps(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != model.RunDone || len(steps) != 2 || steps[0].FeedSeq == 0 || steps[1].Outcome != model.StepSent || steps[1].Notification == 0 {
			t.Fatalf("run %+v, steps %+v; want done, an item and an email", r, steps)
		}
	}
	// The steps' notifications are the event's, pending, with their keys.
	ns, err := s.EventNotifications(ctx, acc[0].EventRow, -1, 10)
	if err != nil || len(ns) != 2 || ns[0].Key != "inv-1/r0/step1" || ns[0].Status != model.StatusPending {
		t.Fatalf("the event's notifications = %+v, %v", ns, err)
	}
	// Each recipient's item is in their own feed.
	items, _, err := s.FeedPage(ctx, "acme", "r1", 0, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("r1's feed = %+v, %v", items, err)
	}
}

// The race the issue names: a mark-read hammered while the email steps
// come due. Each run ends with exactly one of an email written and a skip,
// never both or neither; a read that returned before the decision began is
// seen (skipped), and one that began after it returned is not (sent).
func testRunReadRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 60
	accept(t, s, t0, runEvent("acme", "inv-1", n, "", ""))
	if got := decideDue(t, s, t0); got != n {
		t.Fatalf("step 0 decided for %d runs", got)
	}
	runs := runsOf(t, s, "acme", "")
	seqs := make([]int64, n)
	for _, r := range runs {
		steps, err := s.RunSteps(ctx, r.ID)
		if err != nil || len(steps) != 1 {
			t.Fatalf("steps of run %s = %+v, %v", r.Recipient, steps, err)
		}
		seqs[recipientNo(t, r.Recipient)] = steps[0].FeedSeq
	}
	type span struct{ start, end time.Time }
	reads, decisions := make([]span, n), make([]span, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	// The reads go from the last recipient to the first while the steps
	// are decided from the first to the last: the early steps find their
	// items unread, the late ones read, and near where the two cross each
	// read races its step.
	wg.Go(func() {
		<-start
		for i := n - 1; i >= 0; i-- {
			reads[i].start = time.Now()
			var err error
			if i%2 == 0 {
				err = s.MarkItem(ctx, "acme", fmt.Sprintf("r%d", i), model.MarkRead, seqs[i])
			} else {
				_, err = s.MarkAll(ctx, "acme", fmt.Sprintf("r%d", i), model.MarkRead, seqs[i])
			}
			reads[i].end = time.Now()
			if err != nil {
				t.Error(err)
			}
		}
	})
	// The steps, one at a time, in the runs' order.
	wg.Go(func() {
		<-start
		for range n {
			due, err := s.DueRuns(ctx, t0, 1)
			if err != nil || len(due) == 0 {
				t.Errorf("due: %v, %v", due, err)
				return
			}
			i := recipientNo(t, due[0].Recipient)
			decisions[i].start = time.Now()
			if _, err := s.DecideSteps(ctx, plansOf(due), func(p model.StepPlan, f []model.StepFact) model.StepDecision {
				return postThenEmail(p, f, t0)
			}, t0); err != nil {
				t.Error(err)
				return
			}
			decisions[i].end = time.Now()
		}
	})
	close(start)
	wg.Wait()
	skipped, sent := 0, 0
	for _, r := range runsOf(t, s, "acme", "") {
		i := recipientNo(t, r.Recipient)
		steps, err := s.RunSteps(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != model.RunDone || len(steps) != 2 {
			t.Fatalf("run %d = %+v with steps %+v; want done after two", i, r, steps)
		}
		st := steps[1]
		switch {
		case st.Outcome == model.StepSkipped && st.Reason == "read" && st.Notification == 0:
			skipped++
			if reads[i].start.After(decisions[i].end) {
				t.Errorf("run %d skipped on a read that began after its step was decided", i)
			}
		case st.Outcome == model.StepSent && st.Notification != 0:
			sent++
			if reads[i].end.Before(decisions[i].start) {
				t.Errorf("run %d emailed though its read had committed before its step was decided", i)
			}
		default:
			t.Errorf("run %d step 1 = %+v; want exactly one of skipped (read) and sent (with its email)", i, st)
		}
	}
	acc, err := s.EventNotifications(ctx, runs[0].EventRow, -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(acc) != sent {
		t.Errorf("%d emails written for %d runs decided sent", len(acc), sent)
	}
	t.Logf("%d skipped (read first), %d emailed", skipped, sent)
}

func testRunsPruned(t *testing.T, s store.Store) {
	ctx := t.Context()
	accept(t, s, t0, runEvent("acme", "inv-1", 1, "", ""), runEvent("acme", "inv-2", 1, "k2", ""))
	if _, err := s.CancelRuns(ctx, "acme", "k2", "cancelled", t0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Prune(ctx, t0.Add(24*time.Hour), t0.Add(24*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 1 {
		t.Errorf("pruned %d runs, want the cancelled one", res.Runs)
	}
	w := runsOf(t, s, "acme", "")
	if len(w) != 1 || w[0].EventID != "inv-1" || w[0].State != model.RunWaiting {
		t.Fatalf("after prune = %+v; want inv-1's waiting run, with its event", w)
	}
	if due, err := s.DueRuns(ctx, t0, 10); err != nil || len(due) != 1 || len(due[0].Payload) == 0 {
		t.Fatalf("due after prune = %+v, %v", due, err)
	}
}

// recipientNo is i of recipient "ri".
func recipientNo(t *testing.T, rcpt string) int {
	var i int
	if _, err := fmt.Sscanf(rcpt, "r%d", &i); err != nil {
		t.Errorf("recipient %q: %v", rcpt, err)
	}
	return i
}

// Four deciders at once (four nodes' steppers) over the same due runs:
// each step is decided by exactly one of them.
func testRunsConcurrentDeciders(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 80
	accept(t, s, t0, runEvent("acme", "inv-1", n, "", ""))
	var mu sync.Mutex
	decided := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				due, err := s.DueRuns(ctx, t0, 16)
				if err != nil {
					t.Error(err)
					return
				}
				if len(due) == 0 {
					return
				}
				k, err := s.DecideSteps(ctx, plansOf(due), func(p model.StepPlan, f []model.StepFact) model.StepDecision {
					return postThenEmail(p, f, t0)
				}, t0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				decided += k
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if decided != 2*n {
		t.Errorf("%d steps decided, want %d (2 per run)", decided, 2*n)
	}
	for _, r := range runsOf(t, s, "acme", "") {
		steps, err := s.RunSteps(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != model.RunDone || len(steps) != 2 {
			t.Errorf("run of %s = %s with %d steps; want done with 2", r.Recipient, r.State, len(steps))
		}
	}
	items, _, err := s.FeedPage(ctx, "acme", "r0", 0, 10)
	if err != nil || len(items) != 1 {
		t.Errorf("r0's feed = %d items, %v; want 1", len(items), err)
	}
}

// batchStep decides a one-step workflow whose step is a batch of window
// and max (0: none), as the relay's policy does: open or join at attempt
// 0; the leader (or, its leader cancelled, the first run due) closes it
// when the window ends and the run is done; the others end carried.
func batchStep(p model.StepPlan, now time.Time, window time.Duration, max int) model.StepDecision {
	r, b := p.Run, p.Batch
	dec := model.StepDecision{StepID: "digest", Outcome: model.StepBatched, Next: 1, Done: true, RunReason: "led the batch on"}
	stay := func(attempt int, due time.Time) {
		dec.Next, dec.NextAttempt, dec.NextDue, dec.Done = 0, attempt, due, false
	}
	switch {
	case r.Attempt == 0 && b == nil:
		dec.Batch, dec.Window, dec.Reason = model.BatchOpen, window, "opened"
		stay(model.BatchLeading, now.Add(window))
	case r.Attempt == 0:
		dec.Batch, dec.Fill, dec.Reason = model.BatchJoin, max > 0 && b.Size+1 >= max, "joined"
		due := b.ClosesAt
		if dec.Fill {
			due = now
		}
		stay(model.BatchJoined, due)
	case b == nil:
		return model.StepDecision{StepID: "digest", Done: true, RunReason: "its batch is gone"}
	case !b.Open && b.Leader != r.ID:
		return model.StepDecision{StepID: "digest", Next: 0, Done: true, RunReason: "carried"}
	case b.Leader != r.ID && b.LeaderWaiting:
		return model.StepDecision{Wait: now.Add(time.Second)}
	case now.Before(b.ClosesAt):
		return model.StepDecision{Wait: b.ClosesAt}
	default:
		dec.Batch, dec.Attempt, dec.Reason = model.BatchClose, r.Attempt, "closed"
	}
	return dec
}

// stepBatches runs deciders (nodes' steppers) at once over the runs due at
// now until none is, each deciding with batchStep.
func stepBatches(t *testing.T, s store.Store, deciders int, now time.Time, window time.Duration, max int) {
	t.Helper()
	decideAtOnce(t, s, deciders, now, func(p *model.StepPlan) { p.Needs, p.Batched = nil, true },
		func(p model.StepPlan, _ []model.StepFact) model.StepDecision { return batchStep(p, now, window, max) })
}

// decideAtOnce runs deciders (nodes' steppers) at once over the runs due
// at now until none is, each plan marked by mark and decided by decide.
func decideAtOnce(t *testing.T, s store.Store, deciders int, now time.Time, mark func(*model.StepPlan), decide model.StepDecider) {
	t.Helper()
	var wg sync.WaitGroup
	for range deciders {
		wg.Go(func() {
			for {
				due, err := s.DueRuns(t.Context(), now, 8)
				if err != nil || len(due) == 0 {
					if err != nil {
						t.Error(err)
					}
					return
				}
				ps := plansOf(due)
				for i := range ps {
					mark(&ps[i])
				}
				// A run another decider holds is due again until it commits;
				// one told to wait is due later: DueRuns ends the loop.
				if _, err := s.DecideSteps(t.Context(), ps, decide, now); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// carriedBy reads which events each leader's batch carries on.
func carriedBy(t *testing.T, s store.Store, tenant string) map[int64][]string {
	t.Helper()
	out := map[int64][]string{}
	for _, r := range runsOf(t, s, tenant, "") {
		items, err := s.BatchItems(t.Context(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			out[r.ID] = append(out[r.ID], it.EventID)
		}
	}
	return out
}

// Sixty events for one recipient reach a batch step at once, decided by
// four deciders at once: with no max, one batch carries all sixty; with a
// max of 7, nine batches do; either way each event is carried exactly
// once, by a run that is done, and every other run ended carried.
func testBatchCarriesEachRunOnce(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		tenant  string
		max     int
		batches int
	}{{"acme", 0, 1}, {"bravo", 7, 9}} {
		var in []model.AcceptInput
		for i := range 60 {
			in = append(in, runEvent(tc.tenant, fmt.Sprintf("c-%02d", i), 1, "", ""))
		}
		accept(t, s, t0, in...)
		stepBatches(t, s, 4, t0, 10*time.Minute, tc.max)
		stepBatches(t, s, 4, t0.Add(10*time.Minute), 10*time.Minute, tc.max)
		// A run that found its batch still open (its leader was being
		// decided by another decider) looks again a second later.
		stepBatches(t, s, 4, t0.Add(10*time.Minute+2*time.Second), 10*time.Minute, tc.max)
		carried := carriedBy(t, s, tc.tenant)
		seen := map[string]int{}
		for _, evs := range carried {
			for _, e := range evs {
				seen[e]++
			}
		}
		if len(carried) != tc.batches || len(seen) != 60 {
			t.Errorf("%s (max %d): %d batches carrying %d events; want %d carrying 60", tc.tenant, tc.max, len(carried), len(seen), tc.batches)
		}
		for e, n := range seen {
			if n != 1 {
				t.Errorf("%s: event %s carried %d times", tc.tenant, e, n)
			}
		}
		for _, r := range runsOf(t, s, tc.tenant, "") {
			_, leads := carried[r.ID]
			if r.State != model.RunDone || (!leads && r.Reason != "carried") {
				t.Errorf("%s: run of %s is %s (%s); want done, led on or carried", tc.tenant, r.EventID, r.State, r.Reason)
			}
		}
	}
}

// A batch whose leader is cancelled while it is open is closed by the
// first of its runs to come due, which leads it on: the cancelled run's
// event is not carried, the others' are.
func testBatchCancelledLeader(t *testing.T, s store.Store) {
	ctx := t.Context()
	window := 10 * time.Minute
	accept(t, s, t0, runEvent("acme", "c-0", 1, "k0", ""))
	stepBatches(t, s, 1, t0, window, 0)
	accept(t, s, t0.Add(time.Minute), runEvent("acme", "c-1", 1, "k1", ""), runEvent("acme", "c-2", 1, "k2", ""))
	stepBatches(t, s, 1, t0.Add(time.Minute), window, 0)
	if n, err := s.CancelRuns(ctx, "acme", "k0", "cancelled", t0.Add(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("cancel the leader = %d, %v", n, err)
	}
	stepBatches(t, s, 1, t0.Add(window), window, 0)
	carried := carriedBy(t, s, "acme")
	if len(carried) != 1 {
		t.Fatalf("carried %v; want one batch", carried)
	}
	for leader, evs := range carried {
		if len(evs) != 2 || evs[0] != "c-1" || evs[1] != "c-2" {
			t.Errorf("the batch carries %v; want c-1 and c-2, not the cancelled c-0", evs)
		}
		for _, r := range runsOf(t, s, "acme", "") {
			if r.ID == leader && r.EventID != "c-1" {
				t.Errorf("the batch is led on by %s's run; want c-1's, the first due", r.EventID)
			}
		}
	}
}

// throttleStep decides a one-step workflow whose step is a throttle of
// max per window, as the relay's policy does: passed (taking a slot) while
// fewer than max slots are taken in the window, throttled after.
func throttleStep(p model.StepPlan, max int) model.StepDecision {
	dec := model.StepDecision{StepID: "limit", Outcome: model.StepThrottled, Next: 1, Done: true, RunReason: "throttled"}
	if p.Slots < max {
		dec.Outcome, dec.TakeSlot, dec.RunReason = model.StepPassed, true, "passed"
	}
	return dec
}

// Four deciders at once (four nodes' steppers) over the runs of forty
// events to r0 and r1, with a throttle step of 7 an hour: exactly 7 of
// each recipient's runs pass, whatever the interleaving; an hour later the
// window has moved and 7 more of each pass. A slot is pruned once its
// window ends, not before.
func testThrottleStepPassesAtMostMax(t *testing.T, s store.Store) {
	const max, per = 7, time.Hour
	round := func(now time.Time, events int, prefix string) map[string]int {
		var in []model.AcceptInput
		for i := range events {
			in = append(in, runEvent("acme", fmt.Sprintf("%s-%02d", prefix, i), 2, "", ""))
		}
		accept(t, s, now, in...)
		decideAtOnce(t, s, 4, now, func(p *model.StepPlan) { p.Throttle = &model.StepThrottle{Window: "invoice/limit", Per: per} },
			func(p model.StepPlan, _ []model.StepFact) model.StepDecision { return throttleStep(p, max) })
		passed := map[string]int{}
		for _, r := range runsOf(t, s, "acme", "") {
			if !strings.HasPrefix(r.EventID, prefix+"-") {
				continue
			}
			if r.State != model.RunDone {
				t.Errorf("run of %s to %s is %s; want done", r.EventID, r.Recipient, r.State)
			}
			if r.Reason == "passed" {
				passed[r.Recipient]++
			}
		}
		return passed
	}
	for i, now := range []time.Time{t0, t0.Add(per + time.Second)} {
		if got := round(now, 40, fmt.Sprintf("round%d", i)); got["r0"] != max || got["r1"] != max || len(got) != 2 {
			t.Errorf("round %d: runs passed per recipient %v; want %d each for r0 and r1", i, got, max)
		}
	}
	res, err := s.Prune(t.Context(), t0, t0.Add(per+time.Minute), 100)
	if err != nil || res.ThrottleSlots != 2*max {
		t.Errorf("prune as the first round's window ends = %d slots, %v; want the first round's %d", res.ThrottleSlots, err, 2*max)
	}
	// The second round's slots still count: one more run to r0 is throttled.
	now := t0.Add(per + time.Minute)
	if got := round(now, 1, "late"); got["r0"] != 0 {
		t.Errorf("a late run passed %v; want it throttled by the second round's slots", got)
	}
}

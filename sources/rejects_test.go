package sources_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/sources"
)

// exec runs one statement of the application's, written with ? for
// placeholders ($n on PostgreSQL).
func (a *legacyApp) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if a.kind == "postgres" {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", "$"+string(rune('0'+i)), 1)
		}
	}
	if _, err := a.db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// insertRaw commits an outbox row holding event as it is, and returns its id.
func (a *legacyApp) insertRaw(t *testing.T, event string) int64 {
	t.Helper()
	var id int64
	var err error
	if a.kind == "postgres" {
		err = a.db.QueryRow(`INSERT INTO edgerelay_outbox (event) VALUES ($1) RETURNING id`, event).Scan(&id)
	} else {
		res, e := a.db.Exec(`INSERT INTO edgerelay_outbox (event) VALUES (?)`, event)
		if err = e; err == nil {
			id, err = res.LastInsertId()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A row whose event is invalid is recorded in edgerelay's store with its
// id and reason; once the application fixes the row, a retry accepts it
// exactly once and the record goes. A row still invalid is recorded again
// (one more time, the request answered); a row the application deleted is
// recorded as gone. Retrying twice, before or after the tailer ran,
// accepts nothing twice. The same on every database a source reads.
func TestTailRejectedRowRecordedAndRetried(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mariadb"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testRejectedRowRecordedAndRetried(t, setupLegacy(t, kind))
		})
	}
}

func testRejectedRowRecordedAndRetried(t *testing.T, app *legacyApp) {
	ctx := t.Context()
	r := setupRelay(t, relay.Options{})
	src := app.source(t, "")
	name := src.Name()
	once := func() sources.TailStats {
		t.Helper()
		tl := sources.NewTailer(r, r.Store(), src, sources.TailOptions{Once: true, Poll: 10 * time.Millisecond})
		rctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		if err := tl.Run(rctx); err != nil {
			t.Fatalf("tail --once: %v", err)
		}
		return tl.Stats()
	}
	rejects := func() map[int64]model.SourceReject {
		t.Helper()
		rs, err := r.Store().SourceRejects(ctx, model.SourceRejectFilter{Source: name})
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]model.SourceReject{}
		for _, x := range rs {
			out[x.Row] = x
		}
		return out
	}
	notes := func(event string) int {
		t.Helper()
		per, _ := relayCounts(t, r)
		return per[event]
	}

	good := func(i int) string { return string(mustJSON(orderEvent(i))) }
	noRecipients := func(i int) string {
		return `{"id": "ord_` + string(rune('0'+i)) + `", "type": "order.created", "subject": "s", "body": "b"}`
	}
	app.insertRaw(t, good(1))
	fixed := app.insertRaw(t, noRecipients(2))
	still := app.insertRaw(t, noRecipients(3))
	deleted := app.insertRaw(t, noRecipients(4))
	last := app.insertRaw(t, good(6))

	st := once()
	if st.Rejected != 3 || st.Accepted != 2 || st.Position != last {
		t.Fatalf("first run: %+v; want 3 rejected, 2 accepted, position %d", st, last)
	}
	got := rejects()
	if len(got) != 3 {
		t.Fatalf("recorded %+v, want rows %d, %d, %d", got, fixed, still, deleted)
	}
	if x := got[fixed]; x.EventID != "ord_2" || !strings.Contains(x.Reason, "recipients") || x.Times != 1 || x.RetryAt != nil {
		t.Fatalf("row %d recorded as %+v; want event ord_2, the reason naming recipients, once, no retry asked", fixed, x)
	}

	// The application fixes one row and deletes another; the operator
	// asks for all three again, twice (the second asks nothing new).
	app.exec(t, `UPDATE edgerelay_outbox SET event = ? WHERE id = ?`, good(2), fixed)
	app.exec(t, `DELETE FROM edgerelay_outbox WHERE id = ?`, deleted)
	for range 2 {
		rows, err := r.Store().RetrySourceRejects(ctx, name, []int64{fixed, still, deleted, last + 100}, r.Now())
		if err != nil || !slices.Equal(rows, []int64{fixed, still, deleted}) {
			t.Fatalf("retry: %v, %v; want %v (row %d has no record)", rows, err, []int64{fixed, still, deleted}, last+100)
		}
	}
	st = once()
	if st.Retried != 2 || st.Accepted != 1 || st.Rejected != 1 || st.Gone != 1 || st.Position != last {
		t.Fatalf("retry run: %+v; want 2 retried (1 accepted, 1 rejected again), 1 gone, position %d", st, last)
	}
	if n := notes("ord_2"); n != 1 {
		t.Fatalf("fixed row's event has %d notifications, want 1", n)
	}
	got = rejects()
	if _, ok := got[fixed]; ok || len(got) != 2 {
		t.Fatalf("after the retry: %+v; want the fixed row %d gone, rows %d and %d left", got, fixed, still, deleted)
	}
	if x := got[still]; x.Times != 2 || x.RetryAt != nil || x.GoneAt != nil {
		t.Fatalf("row still invalid: %+v; want rejected twice, its request answered", x)
	}
	if x := got[deleted]; x.GoneAt == nil || x.RetryAt != nil || x.Times != 1 {
		t.Fatalf("deleted row: %+v; want recorded gone, its request answered", x)
	}

	// Retrying the accepted row again finds nothing to ask; a run then
	// reads nothing again and accepts nothing.
	if rows, err := r.Store().RetrySourceRejects(ctx, name, []int64{fixed}, r.Now()); err != nil || len(rows) != 0 {
		t.Fatalf("retry of the accepted row: %v, %v; want none", rows, err)
	}
	if st = once(); st.Retried != 0 || st.Accepted != 0 || st.Read != 0 {
		t.Fatalf("run after: %+v; want nothing read", st)
	}
	if n := notes("ord_2"); n != 1 {
		t.Fatalf("fixed row's event has %d notifications after a second retry, want 1", n)
	}
}

// A running tailer (as serve runs it) picks up a retry asked for from
// elsewhere (the CLI, the API) within its poll, without a restart.
func TestTailRunningPicksUpARetry(t *testing.T) {
	t.Parallel()
	app := setupLegacy(t, "sqlite")
	r := setupRelay(t, relay.Options{})
	src := app.source(t, "")
	rn := startTailer(t, r, src, sources.TailOptions{Poll: 10 * time.Millisecond})
	row := app.insertRaw(t, `{"id": "ord_1", "type": "order.created"}`)
	rn.waitStats(t, "the row rejected", func(s sources.TailStats) bool { return s.Rejected == 1 && s.Position == row })
	app.exec(t, `UPDATE edgerelay_outbox SET event = ? WHERE id = ?`, string(mustJSON(orderEvent(1))), row)
	if got, err := r.Store().RetrySourceRejects(t.Context(), src.Name(), nil, r.Now()); err != nil || !slices.Equal(got, []int64{row}) {
		t.Fatalf("retry all: %v, %v", got, err)
	}
	// The counters move before the batch is settled; the record goes with
	// the settle.
	rn.waitStats(t, "the row read again and accepted", func(s sources.TailStats) bool {
		rs, err := r.Store().SourceRejects(t.Context(), model.SourceRejectFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs) == 0
	})
	if st := rn.stop(); st.Retried != 1 || st.Accepted != 1 || st.Rejected != 1 {
		t.Fatalf("tailer: %+v; want the row rejected once, read again once and accepted", st)
	}
}

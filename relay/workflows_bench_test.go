package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/internal/pgtest"
	"github.com/edgerelay/edgerelay/providers"
)

// BenchmarkStepWorkflows is the scheduling cost of workflows on SQLite:
// how many due steps the stepper decides per second, each in the store
// transaction that reads its facts and writes its decision. Each round
// accepts an event of 200 recipients (not timed) and then decides, timed,
// the two steps of each run: an in-app post, then an email whose condition
// reads the item's read state. On PostgreSQL (a throwaway server,
// internal/pgtest) the same.
//
// Throttle is the same with a throttle step of three an hour before the
// email: each recipient's first three rounds pass it (a slot counted and
// taken, then the email), every later one ends there (the count alone).
//
//	go test ./relay -run '^$' -bench StepWorkflows
func BenchmarkStepWorkflows(b *testing.B) {
	const inbox = `{"steps": [
		{"id": "inbox", "channels": ["in_app"]},
		{"id": "email", "channels": ["email"], "if": "!steps.inbox.read"}]}`
	const throttle = `{"steps": [
		{"id": "limit", "throttle": {"max": 3, "per": "1h"}},
		{"id": "email", "channels": ["email"]}]}`
	passing := func(round int) int { return 2 }
	throttled := func(round int) int { return 1 + min(1, max(0, 3-round)) }
	b.Run("SQLite", func(b *testing.B) { benchmarkStepWorkflows(b, b.TempDir()+"/w.db", inbox, passing) })
	b.Run("PostgreSQL", func(b *testing.B) { benchmarkStepWorkflows(b, pgtest.Start(b), inbox, passing) })
	b.Run("Throttle/SQLite", func(b *testing.B) { benchmarkStepWorkflows(b, b.TempDir()+"/w.db", throttle, throttled) })
	b.Run("Throttle/PostgreSQL", func(b *testing.B) { benchmarkStepWorkflows(b, pgtest.Start(b), throttle, throttled) })
}

// benchmarkStepWorkflows runs the benchmark on the store at db with the
// workflow def, whose runs decide perRun(round) steps in round round.
func benchmarkStepWorkflows(b *testing.B, db, def string, perRun func(round int) int) {
	r, err := openAt(context.Background(), db, Options{Logger: slog.New(slog.DiscardHandler),
		Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if _, _, err := r.PutWorkflow(ctx, "default", "comment", []byte(def)); err != nil {
		b.Fatal(err)
	}
	const recipients = 200
	steps := 0
	var took time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ev := Event{ID: "e" + strconv.Itoa(i), Type: "comment", Subject: "New comment", Body: "Ann replied"}
		for j := range recipients {
			ev.Recipients = append(ev.Recipients, Recipient{ID: fmt.Sprintf("u%d", j), Email: fmt.Sprintf("u%d@example.com", j)})
		}
		if _, err := r.Accept(ctx, ev); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		n, err := r.StepWorkflows(ctx)
		took += time.Since(start)
		if want := perRun(i) * recipients; err != nil || n != want {
			b.Fatalf("round %d: decided %d steps, %v; want %d", i, n, err, want)
		}
		steps += n
	}
	b.ReportMetric(float64(steps)/took.Seconds(), "steps/s")
}

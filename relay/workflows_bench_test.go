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
// internal/pgtest) the same. go test ./relay -run '^$' -bench StepWorkflows
func BenchmarkStepWorkflows(b *testing.B) {
	b.Run("SQLite", func(b *testing.B) { benchmarkStepWorkflows(b, b.TempDir()+"/w.db") })
	b.Run("PostgreSQL", func(b *testing.B) { benchmarkStepWorkflows(b, pgtest.Start(b)) })
}

func benchmarkStepWorkflows(b *testing.B, db string) {
	r, err := openAt(context.Background(), db, Options{Logger: slog.New(slog.DiscardHandler),
		Routes: Routes{"*": {providers.NewLog(io.Discard, "log://discard")}}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if _, _, err := r.PutWorkflow(ctx, "default", "comment", []byte(`{"steps": [
		{"id": "inbox", "channels": ["in_app"]},
		{"id": "email", "channels": ["email"], "if": "!steps.inbox.read"}]}`)); err != nil {
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
		if err != nil || n != 2*recipients {
			b.Fatalf("decided %d steps, %v; want %d", n, err, 2*recipients)
		}
		steps += n
	}
	b.ReportMetric(float64(steps)/took.Seconds(), "steps/s")
}

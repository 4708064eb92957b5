package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// BenchmarkConsoleSearch measures the console's reads on a database of
// EDGERELAY_BENCH_CONSOLE_ROWS notifications (default 1,000,000: about a
// minute to build), two tenants, one recipient and address each, four
// types, created over two days, 4% dead (each tenant's both types), the rest
// sent but the last hour's, pending; attempts for the last hour's:
// a search page (50 rows) by each filter, a key's notification, and the
// overview. To see it run (the figures of a small database mean little):
//
//	EDGERELAY_BENCH_CONSOLE_ROWS=4000 go test ./store/sqlite -run '^$' -bench ConsoleSearch -benchtime 1x
//
// For figures, on a quiet machine:
//
//	go test ./store/sqlite -run '^$' -bench ConsoleSearch -benchtime 200x
func BenchmarkConsoleSearch(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("EDGERELAY_BENCH_CONSOLE_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("EDGERELAY_BENCH_CONSOLE_ROWS=%q: want a number of at least 1000", v)
		}
		rows = n
	}
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "console.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now().Truncate(time.Millisecond)
	start := now.Add(-48 * time.Hour)
	types := []string{"payment", "otp", "digest", "alert"}
	const per = 1000
	built := time.Now()
	for i := 0; i < rows; i += per {
		in := make([]model.AcceptInput, 0, per)
		for j := i; j < min(i+per, rows); j++ {
			tenant := []string{"acme", "beta"}[j%2]
			in = append(in, model.AcceptInput{
				Event: model.NewEvent{Tenant: tenant, EventID: fmt.Sprint("evt_", j), Purpose: "p", Type: types[j%4], Payload: []byte(`{}`),
					Message: []byte(`{}`), Fingerprint: fmt.Sprint(j), Targets: 1},
				First: []model.Target{{Key: fmt.Sprint("k", j), Recipient: fmt.Sprint("user", j), Channel: "email", Address: fmt.Sprintf("u%d@example.com", j)}},
			})
		}
		at := start.Add(time.Duration(float64(48*time.Hour) * float64(i) / float64(rows)))
		if _, _, err := s.AcceptEvents(ctx, in, at); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d notifications accepted in %s (%.0f/s, %d per commit)", rows, time.Since(built).Round(time.Millisecond),
		float64(rows)/time.Since(built).Seconds(), per)
	hour := ms(now.Add(-time.Hour))
	if err := s.w.do(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`UPDATE notifications SET updated_at = created_at,
			status = CASE WHEN id % 100 BETWEEN 1 AND 4 THEN 'dead' WHEN created_at < ? THEN 'sent' ELSE 'pending' END`, hour); err != nil {
			return err
		}
		_, err := tx.exec(`INSERT INTO attempts (notification, n, provider, started_at, ended_at, outcome)
			SELECT id, 1, 'resend', created_at, created_at, CASE id % 10 WHEN 0 THEN 'unknown' WHEN 1 THEN 'refused' ELSE 'sent' END
			FROM notifications WHERE created_at >= ?`, hour)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	mid := int64(rows / 2)
	cases := []struct {
		name string
		f    model.ListFilter
	}{
		{"tenant", model.ListFilter{}},
		{"recipient", model.ListFilter{Recipient: fmt.Sprint("user", rows-2)}},
		{"address", model.ListFilter{Address: fmt.Sprintf("u%d@example.com", rows-2)}},
		{"event id", model.ListFilter{EventID: fmt.Sprint("evt_", rows-2)}},
		{"status dead", model.ListFilter{Status: model.StatusDead}},
		{"status dead, page in the middle", model.ListFilter{Status: model.StatusDead, After: mid}},
		{"type", model.ListFilter{Type: "digest"}},
		{"type and status", model.ListFilter{Type: "digest", Status: model.StatusDead}},
		{"type and status sent", model.ListFilter{Type: "digest", Status: model.StatusSent}},
		{"type and a status none has", model.ListFilter{Type: "digest", Status: model.StatusUnknown}},
		{"last hour", model.ListFilter{CreatedSince: now.Add(-time.Hour)}},
		{"an hour a day ago", model.ListFilter{CreatedSince: now.Add(-25 * time.Hour), CreatedBefore: now.Add(-24 * time.Hour)}},
		{"an address none has", model.ListFilter{Address: "nobody@example.com"}},
	}
	for _, c := range cases {
		for _, newest := range []bool{true, false} { // the console reads newest first; the API oldest first
			name := c.name + "/newest first"
			if !newest {
				name = c.name + "/oldest first"
			}
			b.Run(name, func(b *testing.B) {
				f := c.f
				f.Tenant, f.Limit, f.Newest = "acme", 50, newest
				for b.Loop() {
					if _, err := s.ListNotifications(ctx, f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	b.Run("key", func(b *testing.B) {
		// The console opens a key's notification directly (the key index).
		for b.Loop() {
			if _, err := s.Notification(ctx, "acme", 0, fmt.Sprint("k", rows-2)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("overview", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Overview(ctx, "acme", now, now.Add(-time.Hour), time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/providers"
	"github.com/edgerelay/edgerelay/store/sqlite"
)

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"30x", "-1d", "d", "1.5d"} {
		if _, err := ParseAge(bad); err == nil {
			t.Errorf("ParseAge(%q) accepted", bad)
		}
	}
}

// Prune deletes what finished before the cutoff and keeps the rest; it
// never goes below the longest retry window.
func TestPrune(t *testing.T) {
	t.Parallel()
	c := &clock{}
	var out syncBuffer
	r := setupRelay(t, Options{Now: c.now, Routes: Routes{"*": {providers.NewLog(&out, "log://p")}}})
	ctx := context.Background()
	accept(t, r, receipt("old", Recipient{ID: "ada", Email: "ada@example.com"}))
	runIdle(t, r, time.Second)
	c.advance(40 * 24 * time.Hour)
	acc := accept(t, r, receipt("new", Recipient{ID: "ben", Email: "ben@example.com"}))
	res, err := r.Prune(ctx, 50*24*time.Hour)
	if err != nil || res.Notifications != 0 || res.Raised {
		t.Fatalf("nothing is 50 days old: %+v %v", res, err)
	}
	res, err = r.Prune(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Raised || res.OlderThan != DefaultPolicy.MaxAge {
		t.Fatalf("an age below the retry window was not raised: %+v", res)
	}
	if res.Notifications != 1 || res.Attempts != 1 || res.Events != 1 {
		t.Fatalf("prune: %+v", res)
	}
	if _, err := r.Notification(ctx, strconv.FormatInt(acc.Notifications[0].ID, 10)); err != nil {
		t.Fatalf("the pending notification was pruned: %v", err)
	}
	// The old event is gone: sending it again is new (why the floor exists).
	again := accept(t, r, receipt("old", Recipient{ID: "ada", Email: "ada@example.com"}))
	if again.Duplicate {
		t.Fatal("a pruned event is still a duplicate")
	}
}

func TestBackupWhileWriting(t *testing.T) {
	t.Parallel()
	r := setupRelay(t, Options{})
	ctx := context.Background()
	for i := range 50 {
		accept(t, r, receipt(fmt.Sprint("e", i), Recipient{ID: "u", Email: "u@example.com"}))
	}
	done := make(chan struct{})
	go func() { // writes go on during the backup
		defer close(done)
		for i := range 50 {
			r.Accept(ctx, receipt(fmt.Sprint("more", i), Recipient{ID: "u", Email: "u@example.com"}))
		}
	}()
	dest := filepath.Join(t.TempDir(), "backup.db")
	if err := r.Backup(ctx, dest); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := r.Backup(ctx, dest); err == nil {
		t.Fatal("backup over an existing file")
	}
	b, err := sqlite.Open(ctx, dest, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, _ := b.Status(ctx, time.Now())
	if n := st.Counts[model.StatusPending]; n < 50 || n > 100 {
		t.Fatalf("backup holds %d notifications", n)
	}
}

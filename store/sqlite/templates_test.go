package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/edgerelay/edgerelay/model"
)

// Two stores on one file (serve and a `template set` beside it) put
// versions of one template at once: each gets its own number, first time.
// The put has no retry on a number taken: each runs under BEGIN IMMEDIATE,
// so nothing commits between its read of the latest and its insert.
func TestTemplatePutsFromTwoWritersOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "relay.db")
	ctx := context.Background()
	var ss []*Store
	for range 2 {
		s, err := Open(ctx, path, Options{BusyTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ss = append(ss, s)
	}
	key := model.TemplateKey{Tenant: "acme", Name: "receipt", Channel: "email", Locale: "en"}
	const each = 10
	var mu sync.Mutex
	var versions []int
	var wg sync.WaitGroup
	for w, s := range ss {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, created, err := s.PutTemplate(ctx, key, map[string]string{"text": fmt.Sprint(w, "/", i)}, time.Now())
				if err != nil || !created {
					t.Errorf("writer %d put %d: created %v, %v", w, i, created, err)
					return
				}
				mu.Lock()
				versions = append(versions, v.Version)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	sort.Ints(versions)
	for i, v := range versions {
		if v != i+1 {
			t.Fatalf("versions %v: want 1 to %d, each once", versions, 2*each)
		}
	}
	g, err := ss[0].TemplateGeneration(ctx)
	if err != nil || g != 2*each {
		t.Errorf("generation %d (%v), want %d: one per version", g, err, 2*each)
	}
}

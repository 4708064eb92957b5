package sqlite

import (
	"context"

	"github.com/edgerelay/edgerelay/store"
)

var _ store.FeedSignals = (*Store)(nil)

// WatchFeeds calls fn after each of this process's commits that changed
// feeds, from the writer goroutine, until ctx ends. Another process
// writing the same file (a send beside serve) is not heard: its items
// reach streams at their next sweep.
func (s *Store) WatchFeeds(ctx context.Context, fn func(tenants []string)) error {
	w := s.w
	w.watchMu.Lock()
	if w.watchers == nil {
		w.watchers = map[*func([]string)]struct{}{}
	}
	w.watchers[&fn] = struct{}{}
	w.watchMu.Unlock()
	fn([]string{""}) // heard from now on: re-read what was committed before
	<-ctx.Done()
	w.watchMu.Lock()
	delete(w.watchers, &fn)
	w.watchMu.Unlock()
	return nil
}

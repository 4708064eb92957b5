package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/edgerelay/edgerelay/store"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
)

var _ store.FeedSignals = (*Store)(nil)

// notifyFeed queues a NOTIFY of tenant's feed change in tx: PostgreSQL
// delivers it when tx commits (never if it rolls back), to every
// listening node, this one included.
func notifyFeed(ctx context.Context, q querier, tenant string) error {
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, sqlstore.FeedChannel, tenant); err != nil {
		return fmt.Errorf("notify feed change: %w", err)
	}
	return nil
}

// WatchFeeds listens for feed changes on a connection of its own, taken
// out of the pool (a listening connection must not serve other queries),
// and calls fn with each notified tenant. A notification sent while the
// connection was lost is lost with it: once listening, and after each
// reconnect, fn hears "" (any tenant), and the streams read what they
// missed. It needs a session
// connection (not PgBouncer's transaction pooling, which cannot LISTEN).
func (s *Store) WatchFeeds(ctx context.Context, fn func(tenants []string)) error {
	wait := 100 * time.Millisecond
	for {
		err := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("feed listener lost its connection; reconnecting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// listen holds one listening connection until it fails or ctx ends.
func (s *Store) listen(ctx context.Context, fn func([]string)) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Hijack() // closed here, never handed back to the pool listening
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `LISTEN `+sqlstore.FeedChannel); err != nil {
		return err
	}
	// Listening (first, or again): re-read every stream, for what was
	// committed before the LISTEN took (a stream that opened first, or
	// the gap of a lost connection).
	fn([]string{""})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn([]string{n.Payload})
	}
}

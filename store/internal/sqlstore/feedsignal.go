package sqlstore

import "context"

// FeedChannel is the PostgreSQL channel a feed change is notified on; its
// payload is the tenant ("" for any).
const FeedChannel = "edgerelay_feeds"

// feedNotifier is a write transaction that can say its commit changed a
// tenant's feeds: SQLite's collects the tenants and signals after its
// commit; PostgreSQL's sends a NOTIFY, delivered at commit to every node.
type feedNotifier interface {
	FeedChanged(ctx context.Context, tenant string) error
}

// FeedChanged says, in q, a write transaction, that it changes tenant's
// feeds ("" when it does not know whose): live streams re-read them once
// it commits, and not before. A Querier that cannot say it does nothing.
func FeedChanged(ctx context.Context, q Querier, tenant string) error {
	if n, ok := q.(feedNotifier); ok {
		return n.FeedChanged(ctx, tenant)
	}
	return nil
}

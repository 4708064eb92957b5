package sqlstore

import (
	"context"
	"github.com/edgerelay/edgerelay/model"
)

// Run runs fn with a Querier of the driver's: one read (a snapshot or the
// pool) or one write transaction, as the driver gives it.
type Run func(ctx context.Context, fn func(q Querier) error) error

// The feed prune's reads and deletes (the driver runs them in its own
// reads and writes, in batches).
const (
	// PruneFeedCutsSQL ($1: the cutoff) is each tenant's oldest item and
	// its first item created at or after the cutoff (or one past its
	// newest).
	PruneFeedCutsSQL = `SELECT c.tenant,
			(SELECT seq FROM feed_items i WHERE i.tenant = c.tenant ORDER BY seq LIMIT 1),
			coalesce((SELECT seq FROM feed_items i WHERE i.tenant = c.tenant AND i.created_at >= $1 ORDER BY seq LIMIT 1), c.seq + 1)
		FROM feed_counters c`
	// PruneFeedItemsSQL deletes up to $3 of tenant $1's items below seq $2.
	PruneFeedItemsSQL = `DELETE FROM feed_items WHERE tenant = $1 AND seq IN
		(SELECT seq FROM feed_items WHERE tenant = $1 AND seq < $2 ORDER BY seq LIMIT $3)`
)

// FeedCut is a tenant's items to prune: those with seq < Below.
type FeedCut struct {
	Tenant string
	Below  int64
}

// FeedCuts reads the cut of each tenant with items to prune, those
// created before cutoff (Unix ms). New items take seqs above the counter
// read here, so a cut stays right while the writes run.
func FeedCuts(ctx context.Context, q Querier, cutoff int64) ([]FeedCut, error) {
	type row struct {
		cut    FeedCut
		oldest *int64
	}
	rows, err := All(ctx, q, func(r Rows) (row, error) {
		var w row
		return w, r.Scan(&w.cut.Tenant, &w.oldest, &w.cut.Below)
	}, PruneFeedCutsSQL, cutoff)
	if err != nil {
		return nil, err
	}
	var cuts []FeedCut
	for _, w := range rows {
		if w.oldest != nil && *w.oldest < w.cut.Below {
			cuts = append(cuts, w.cut)
		}
	}
	return cuts, nil
}

// PruneFeedCuts deletes up to batch items of cuts, in q, one write
// transaction, in order: deleted is how many, done how many cuts it
// finished.
func PruneFeedCuts(ctx context.Context, q Querier, cuts []FeedCut, batch int) (deleted int64, done int, err error) {
	for _, ct := range cuts {
		left := int64(batch) - deleted
		if left <= 0 {
			break
		}
		n, err := q.Exec(ctx, PruneFeedItemsSQL, ct.Tenant, ct.Below, left)
		if err != nil {
			return 0, 0, err
		}
		deleted += n
		if n == left {
			break // maybe more of this tenant's
		}
		done++
	}
	return deleted, done, nil
}

// PruneFeedItems deletes each tenant's oldest feed items, up to its first
// item created at or after cutoff, in writes of at most batch rows. A
// prefix of the tenant's sequence, not every old item: a feed's surviving
// positions then have no holes (unread counts are differences of
// positions), and each tenant's cut is found by reading only its old items
// in seq order. An item created before cutoff but after a younger one (a
// clock that stepped back) waits for the next prune.
func PruneFeedItems(ctx context.Context, read, write Run, cutoff int64, batch int) (int64, error) {
	var cuts []FeedCut
	if err := read(ctx, func(q Querier) (err error) {
		cuts, err = FeedCuts(ctx, q, cutoff)
		return err
	}); err != nil {
		return 0, err
	}
	var total int64
	for len(cuts) > 0 {
		var deleted int64
		var done int
		err := write(ctx, func(q Querier) (err error) {
			deleted, done, err = PruneFeedCuts(ctx, q, cuts, batch)
			return err
		})
		if err != nil {
			return total, err
		}
		total += deleted
		cuts = cuts[done:]
	}
	return total, nil
}

// Drain calls prune until it deletes fewer than batch, adding what it
// deleted to total: small batches keep each write short.
func Drain(batch int, total *int64, prune func() (int, error)) error {
	for {
		n, err := prune()
		*total += int64(n)
		if err != nil || n < batch {
			return err
		}
	}
}

// PrunableStatuses is model.PrunableStatuses as an SQL list, for a prune's
// IN (…).
var PrunableStatuses = quoted(model.PrunableStatuses())

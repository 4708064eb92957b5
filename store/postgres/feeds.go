package postgres

import (
	"cmp"
	"context"
	"edgerelay/store"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Feeds are fanned out on read: an event posted to a feed is one row
// however many users read that feed, and a user's view is the merge of the
// feeds they read. Feed names: "*" is the tenant's feed, "@USER" a user's
// personal feed, anything else a topic or team feed with explicit members.

// insertFeedItems posts an event to feeds, in the accept's transaction. The
// seqs come from the counter row (feed_seq, see 0004_feeds.sql), advanced
// here and locked until this transaction commits: the next poster waits
// for that commit, so items become visible in seq order and a reader that
// sees item n has seen every item below it. Positions (max + 1 per feed)
// are safe under the same lock.
func insertFeedItems(ctx context.Context, tx pgx.Tx, tenant string, eventRow int64, feeds []string, now time.Time) error {
	var uniq []string
	for _, f := range feeds {
		if !slices.Contains(uniq, f) {
			uniq = append(uniq, f)
		}
	}
	if len(uniq) == 0 {
		return nil
	}
	var last int64
	if err := tx.QueryRow(ctx, `INSERT INTO feed_seq (seq) VALUES ($1)
		ON CONFLICT (one) DO UPDATE SET seq = feed_seq.seq + excluded.seq RETURNING seq`, len(uniq)).Scan(&last); err != nil {
		return fmt.Errorf("number feed items: %w", err)
	}
	for i, f := range uniq {
		if _, err := tx.Exec(ctx, `INSERT INTO feed_items (seq, tenant, feed, pos, event, created_at)
			VALUES ($1, $2, $3, coalesce((SELECT max(pos) FROM feed_items WHERE tenant = $2 AND feed = $3), 0) + 1, $4, $5)`,
			last-int64(len(uniq)-1-i), tenant, f, eventRow, ms(now)); err != nil {
			return fmt.Errorf("post to feed %q: %w", f, err)
		}
	}
	return nil
}

// newestSeq is the last seq given: every item up to it is committed (or
// pruned), since items commit in seq order.
func newestSeq(ctx context.Context, q querier) (int64, error) {
	var seq int64
	err := q.QueryRow(ctx, `SELECT coalesce((SELECT seq FROM feed_seq), 0)`).Scan(&seq)
	return seq, err
}

// SetFeedMembers makes users the members of a feed. Members who stay keep
// when they joined; new members see items posted from now on (or, with
// history, the feed's whole past); members not listed leave.
func (s *Store) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	if users == nil {
		users = []string{} // an empty array, not NULL: every member leaves
	}
	return s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var joined int64
		if !history {
			var err error
			if joined, err = newestSeq(ctx, tx); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM feed_members WHERE tenant = $1 AND feed = $2 AND NOT ("user" = ANY($3::text[]))`,
			tenant, feed, users); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO feed_members (tenant, feed, "user", joined_seq)
			SELECT $1, $2, u, $4 FROM unnest($3::text[]) AS u ON CONFLICT DO NOTHING`, tenant, feed, users, joined); err != nil {
			return fmt.Errorf("add members: %w", err)
		}
		return nil
	})
}

// MarkAll moves a user's watermark of a kind to max(current, upTo): it
// never moves back, so a stale or reordered request cannot unread items.
// upTo < 0 means the newest item now; an upTo past the newest item is taken
// as the newest (a client's up_to from the future would otherwise swallow
// items not yet posted). It returns the watermark after the move.
func (s *Store) MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error) {
	var mark int64
	err := s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		newest, err := newestSeq(ctx, tx)
		if err != nil {
			return err
		}
		to := upTo
		if to < 0 || to > newest {
			to = newest
		}
		return tx.QueryRow(ctx, `INSERT INTO feed_marks (tenant, "user", kind, mark) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, "user", kind) DO UPDATE SET mark = greatest(feed_marks.mark, excluded.mark)
			RETURNING mark`, tenant, user, kind, to).Scan(&mark)
	})
	return mark, err
}

// MarkItem marks one item read or dismissed for a user. The item must be
// in one of the user's feeds (ErrNotFound otherwise, as for another
// tenant's). Below the watermark it is already so, and nothing is written.
func (s *Store) MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error {
	var feed string
	err := s.snapshot(ctx, func(q querier) error {
		feeds, err := userFeeds(ctx, q, tenant, user)
		if err != nil {
			return err
		}
		if err := q.QueryRow(ctx, `SELECT feed FROM feed_items WHERE seq = $1 AND tenant = $2`, seq, tenant).Scan(&feed); err != nil {
			if isNoRows(err) {
				return fmt.Errorf("feed item %d: %w", seq, store.ErrNotFound)
			}
			return err
		}
		i := slices.IndexFunc(feeds, func(f userFeed) bool { return f.feed == feed })
		if i < 0 || seq <= feeds[i].from {
			return fmt.Errorf("feed item %d: %w", seq, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO feed_item_marks (tenant, "user", kind, seq, feed)
			SELECT $1, $2, $3, $4, $5 WHERE $4 > coalesce((SELECT mark FROM feed_marks WHERE tenant = $1 AND "user" = $2 AND kind = $3), 0)
			ON CONFLICT DO NOTHING`, tenant, user, kind, seq, feed)
		return err
	})
}

// userFeed is a feed a user reads, from which item on (exclusive).
type userFeed struct {
	feed string
	from int64
}

func userFeeds(ctx context.Context, q querier, tenant, user string) ([]userFeed, error) {
	fs := []userFeed{{feed: store.TenantFeed}, {feed: store.PersonalFeed(user)}}
	rows, err := q.Query(ctx, `SELECT feed, joined_seq FROM feed_members WHERE tenant = $1 AND "user" = $2`, tenant, user)
	if err != nil {
		return nil, fmt.Errorf("read memberships: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f userFeed
		if err := rows.Scan(&f.feed, &f.from); err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, rows.Err()
}

func marks(ctx context.Context, q querier, tenant, user string) (read, dismissed int64, err error) {
	rows, err := q.Query(ctx, `SELECT kind, mark FROM feed_marks WHERE tenant = $1 AND "user" = $2`, tenant, user)
	if err != nil {
		return 0, 0, fmt.Errorf("read watermarks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var mark int64
		if err := rows.Scan(&kind, &mark); err != nil {
			return 0, 0, err
		}
		if kind == store.MarkRead {
			read = mark
		} else {
			dismissed = mark
		}
	}
	return read, dismissed, rows.Err()
}

// FeedPage is a user's feed, newest first: items with seq < before (0 for
// the newest), at most limit, from the feeds the user reads (each from
// when they joined it), without dismissed items, read in one snapshot.
// readMark is the user's read watermark.
func (s *Store) FeedPage(ctx context.Context, tenant, user string, before int64, limit int) (items []store.FeedItem, readMark int64, err error) {
	err = s.snapshot(ctx, func(q querier) error {
		items, readMark, err = feedPage(ctx, q, tenant, user, before, limit)
		return err
	})
	return items, readMark, err
}

func feedPage(ctx context.Context, q querier, tenant, user string, before int64, limit int) ([]store.FeedItem, int64, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	feeds, err := userFeeds(ctx, q, tenant, user)
	if err != nil {
		return nil, 0, err
	}
	readMark, dismissedMark, err := marks(ctx, q, tenant, user)
	if err != nil {
		return nil, 0, err
	}
	// Items marked one by one, in the range a page can reach.
	itemMarks := map[string]map[int64]bool{store.MarkRead: {}, store.MarkDismissed: {}}
	rows, err := q.Query(ctx, `SELECT kind, seq FROM feed_item_marks
		WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq < $3`, tenant, user, before)
	if err != nil {
		return nil, 0, fmt.Errorf("read item marks: %w", err)
	}
	for rows.Next() {
		var kind string
		var seq int64
		if err := rows.Scan(&kind, &seq); err != nil {
			rows.Close()
			return nil, 0, err
		}
		itemMarks[kind][seq] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	// Each feed's newest items before the cursor, from the index alone,
	// then a merge, then the page's items in full.
	var seqs []int64
	feedOf := map[int64]string{}
	for _, f := range feeds {
		from := max(f.from, dismissedMark)
		rows, err := q.Query(ctx, `SELECT seq FROM feed_items
			WHERE tenant = $1 AND feed = $2 AND seq > $3 AND seq < $4
			ORDER BY seq DESC LIMIT $5`, tenant, f.feed, from, before, limit+len(itemMarks[store.MarkDismissed]))
		if err != nil {
			return nil, 0, fmt.Errorf("read feed %q: %w", f.feed, err)
		}
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return nil, 0, err
			}
			if !itemMarks[store.MarkDismissed][seq] {
				seqs = append(seqs, seq)
				feedOf[seq] = f.feed
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, err
		}
	}
	slices.SortFunc(seqs, func(a, b int64) int { return cmp.Compare(b, a) })
	seqs = seqs[:min(len(seqs), limit)]
	items := make([]store.FeedItem, 0, len(seqs))
	if len(seqs) == 0 {
		return items, readMark, nil
	}
	rows, err = q.Query(ctx, `SELECT i.seq, i.created_at, e.event_id, e.type, e.message
		FROM feed_items i JOIN events e ON e.id = i.event
		WHERE i.seq = ANY($1) ORDER BY i.seq DESC`, seqs)
	if err != nil {
		return nil, 0, fmt.Errorf("read feed items: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var it store.FeedItem
		var created int64
		if err := rows.Scan(&it.Seq, &created, &it.EventID, &it.Type, &it.Message); err != nil {
			return nil, 0, err
		}
		it.Feed = feedOf[it.Seq]
		it.CreatedAt = fromMS(created)
		it.Read = it.Seq <= readMark || itemMarks[store.MarkRead][it.Seq]
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return items, readMark, nil
}

// UnreadCount counts a user's unread items across the feeds they read:
// items above the read and dismiss watermarks (and above when the user
// joined), less those read or dismissed one by one, in one snapshot. Per
// feed it is a few index lookups (positions are numbered per feed).
func (s *Store) UnreadCount(ctx context.Context, tenant, user string) (n int64, err error) {
	err = s.snapshot(ctx, func(q querier) error {
		n, err = unreadCount(ctx, q, tenant, user)
		return err
	})
	return n, err
}

func unreadCount(ctx context.Context, q querier, tenant, user string) (int64, error) {
	feeds, err := userFeeds(ctx, q, tenant, user)
	if err != nil {
		return 0, err
	}
	readMark, dismissedMark, err := marks(ctx, q, tenant, user)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, f := range feeds {
		from := max(f.from, readMark, dismissedMark)
		var last *int64
		if err := q.QueryRow(ctx, `SELECT max(pos) FROM feed_items WHERE tenant = $1 AND feed = $2`, tenant, f.feed).Scan(&last); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		if last == nil {
			continue // an empty feed
		}
		// Positions below the oldest surviving item were pruned: count from
		// it, not from position 0.
		var oldestSeq, oldestPos int64
		if err := q.QueryRow(ctx, `SELECT seq, pos FROM feed_items WHERE tenant = $1 AND feed = $2 ORDER BY seq LIMIT 1`,
			tenant, f.feed).Scan(&oldestSeq, &oldestPos); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var seen int64
		if from < oldestSeq {
			from, seen = oldestSeq-1, oldestPos-1
		} else if err := q.QueryRow(ctx, `SELECT pos FROM feed_items WHERE tenant = $1 AND feed = $2 AND seq <= $3
			ORDER BY seq DESC LIMIT 1`, tenant, f.feed, from).Scan(&seen); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var marked int64
		if err := q.QueryRow(ctx, `SELECT count(DISTINCT seq) FROM feed_item_marks
			WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq > $3 AND feed = $4`,
			tenant, user, from, f.feed).Scan(&marked); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		total += *last - seen - marked
	}
	return total, nil
}

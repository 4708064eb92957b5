package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"edgerelay/store"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Feeds are fanned out on read: an event posted to a feed is one row
// however many users read that feed, and a user's view is the merge of the
// feeds they read. Feed names: "*" is the tenant's feed (every user of the
// tenant reads it), "@USER" is a user's personal feed, anything else is a
// topic or team feed with explicit members.

// insertFeedItems posts an event to feeds, in the accept's transaction.
// pos is the feed's next position: the single writer makes max+1 safe.
func insertFeedItems(tx *Tx, tenant string, eventRow int64, feeds []string, now time.Time) error {
	for _, f := range feeds {
		if _, err := tx.exec(`INSERT INTO feed_items (tenant, feed, pos, event, created_at)
			VALUES (?1, ?2, coalesce((SELECT max(pos) FROM feed_items WHERE tenant = ?1 AND feed = ?2), 0) + 1, ?3, ?4)
			ON CONFLICT DO NOTHING`, tenant, f, eventRow, ms(now)); err != nil {
			return fmt.Errorf("post to feed %q: %w", f, err)
		}
	}
	return nil
}

// SetFeedMembers makes users the members of a feed. Members who stay keep
// when they joined; new members see items posted from now on (or, with
// history, the feed's whole past); members not listed leave.
func (s *Store) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	return s.w.do(ctx, func(tx *Tx) error {
		var joined int64
		if !history {
			if err := tx.queryRow(`SELECT coalesce(max(seq), 0) FROM feed_items`).Scan(&joined); err != nil {
				return err
			}
		}
		rows, err := tx.query(`SELECT user FROM feed_members WHERE tenant = ? AND feed = ?`, tenant, feed)
		if err != nil {
			return err
		}
		var old []string
		for rows.Next() {
			var u string
			if err := rows.Scan(&u); err != nil {
				rows.Close()
				return err
			}
			old = append(old, u)
		}
		rows.Close()
		for _, u := range old {
			if !slices.Contains(users, u) {
				if _, err := tx.exec(`DELETE FROM feed_members WHERE tenant = ? AND user = ? AND feed = ?`, tenant, u, feed); err != nil {
					return err
				}
			}
		}
		for _, u := range users {
			if _, err := tx.exec(`INSERT INTO feed_members (tenant, feed, user, joined_seq) VALUES (?, ?, ?, ?)
				ON CONFLICT DO NOTHING`, tenant, feed, u, joined); err != nil {
				return fmt.Errorf("add member %q: %w", u, err)
			}
		}
		return nil
	})
}

// MarkAll moves a user's watermark of a kind to max(current, upTo): it
// never moves back, so a stale or reordered request cannot unread items.
// upTo < 0 means the newest item now (which also covers items the user's
// client had not shown yet: the cost of not saying up to where); an upTo
// past the newest item is taken as the newest. It returns the watermark
// after the move. Constant time: one row (and the table's last seq).
func (s *Store) MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error) {
	var mark int64
	err := s.w.do(ctx, func(tx *Tx) error {
		// Never past the newest item: a client's up_to from the future
		// would otherwise swallow items not yet posted.
		var newest int64
		if err := tx.queryRow(`SELECT coalesce(max(seq), 0) FROM feed_items`).Scan(&newest); err != nil {
			return err
		}
		if upTo < 0 || upTo > newest {
			upTo = newest
		}
		return tx.queryRow(`INSERT INTO feed_marks (tenant, user, kind, mark) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant, user, kind) DO UPDATE SET mark = max(mark, excluded.mark)
			RETURNING mark`, tenant, user, kind, upTo).Scan(&mark)
	})
	return mark, err
}

// MarkItem marks one item read or dismissed for a user. The item must be
// in one of the user's feeds (ErrNotFound otherwise, as for another
// tenant's). Below the watermark it is already so, and nothing is written.
func (s *Store) MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error {
	feeds, err := userFeeds(ctx, s.rdb, tenant, user)
	if err != nil {
		return err
	}
	var feed string
	if err := s.rdb.QueryRowContext(ctx, `SELECT feed FROM feed_items WHERE seq = ? AND tenant = ?`, seq, tenant).Scan(&feed); err != nil {
		if isNoRows(err) {
			return fmt.Errorf("feed item %d: %w", seq, store.ErrNotFound)
		}
		return err
	}
	i := slices.IndexFunc(feeds, func(f userFeed) bool { return f.feed == feed })
	if i < 0 || seq <= feeds[i].from {
		return fmt.Errorf("feed item %d: %w", seq, store.ErrNotFound)
	}
	return s.w.do(ctx, func(tx *Tx) error {
		_, err := tx.exec(`INSERT INTO feed_item_marks (tenant, user, kind, seq, feed)
			SELECT ?1, ?2, ?3, ?4, ?5 WHERE ?4 > coalesce((SELECT mark FROM feed_marks WHERE tenant = ?1 AND user = ?2 AND kind = ?3), 0)
			ON CONFLICT DO NOTHING`, tenant, user, kind, seq, feed)
		return err
	})
}

// userFeed is a feed a user reads, from which item on (exclusive).
type userFeed struct {
	feed string
	from int64
}

// querier is the read pool or one read transaction (a snapshot).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// snapshot runs fn in one read transaction: every query sees the same
// committed state, so a page merged from several feeds cannot miss an item
// committed between two of its queries.
func (s *Store) snapshot(ctx context.Context, fn func(q querier) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

func userFeeds(ctx context.Context, q querier, tenant, user string) ([]userFeed, error) {
	fs := []userFeed{{feed: store.TenantFeed}, {feed: store.PersonalFeed(user)}}
	rows, err := q.QueryContext(ctx, `SELECT feed, joined_seq FROM feed_members WHERE tenant = ? AND user = ?`, tenant, user)
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
	rows, err := q.QueryContext(ctx, `SELECT kind, mark FROM feed_marks WHERE tenant = ? AND user = ?`, tenant, user)
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
// when they joined it), without dismissed items. ReadMark is the user's
// read watermark.
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
	rows, err := q.QueryContext(ctx, `SELECT kind, seq FROM feed_item_marks
		WHERE tenant = ? AND user = ? AND kind IN ('read', 'dismissed') AND seq < ?`, tenant, user, before)
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
	// Each feed's newest items before the cursor, from the index alone,
	// then a merge (an IN over the feeds could not use the index's order,
	// and would sort them all), then the page's items in full.
	var seqs []int64
	feedOf := map[int64]string{}
	for _, f := range feeds {
		from := max(f.from, dismissedMark)
		rows, err := q.QueryContext(ctx, `SELECT seq FROM feed_items
			WHERE tenant = ? AND feed = ? AND seq > ? AND seq < ?
			ORDER BY seq DESC LIMIT ?`, tenant, f.feed, from, before, limit+len(itemMarks[store.MarkDismissed]))
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
	args := make([]any, len(seqs))
	for i, seq := range seqs {
		args[i] = seq
	}
	rows, err = q.QueryContext(ctx, `SELECT i.seq, i.created_at, e.event_id, e.type, e.message
		FROM feed_items i JOIN events e ON e.id = i.event
		WHERE i.seq IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(seqs)), ", ")+`) ORDER BY i.seq DESC`, args...)
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
// joined), less those read or dismissed one by one. Per feed it is two
// index lookups (positions are numbered per feed), whatever the history.
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
		var last sql.NullInt64
		if err := q.QueryRowContext(ctx, `SELECT max(pos) FROM feed_items WHERE tenant = ? AND feed = ?`, tenant, f.feed).Scan(&last); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		if !last.Valid {
			continue // an empty feed
		}
		// Positions below the oldest surviving item were pruned: count from
		// it, not from position 0.
		var oldestSeq, oldestPos int64
		if err := q.QueryRowContext(ctx, `SELECT seq, pos FROM feed_items WHERE tenant = ? AND feed = ? ORDER BY seq LIMIT 1`,
			tenant, f.feed).Scan(&oldestSeq, &oldestPos); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var seen int64
		if from < oldestSeq {
			from, seen = oldestSeq-1, oldestPos-1
		} else if err := q.QueryRowContext(ctx, `SELECT pos FROM feed_items WHERE tenant = ? AND feed = ? AND seq <= ?
			ORDER BY seq DESC LIMIT 1`, tenant, f.feed, from).Scan(&seen); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var marked int64
		if err := q.QueryRowContext(ctx, `SELECT count(DISTINCT seq) FROM feed_item_marks
			WHERE tenant = ? AND user = ? AND kind IN ('read', 'dismissed') AND seq > ? AND feed = ?`,
			tenant, user, from, f.feed).Scan(&marked); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		total += last.Int64 - seen - marked
	}
	return total, nil
}

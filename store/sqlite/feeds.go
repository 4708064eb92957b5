package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"slices"
	"strings"
	"time"
)

// Feeds are fanned out on read: an event posted to a feed is one row
// however many users read that feed, and a user's view is the merge of the
// feeds they read. Feed names: "*" is the tenant's feed (every user of the
// tenant reads it), "@USER" is a user's personal feed, anything else is a
// topic or team feed with explicit members.
//
// Items are numbered per tenant: seq counts the tenant's items only, from
// the tenant's row in feed_counters, so nothing a tenant sees (seqs,
// watermarks, cursors, counts) depends on another tenant's volume. A number
// is never given twice, even after prune deleted the tenant's newest
// items. An event's items (one per feed) take consecutive numbers, and in
// a user's view an event is one item however many of their feeds it is in.

// insertFeedItems posts an event to feeds, in the accept's transaction,
// and returns the items in seq order (the feeds' order, each feed once).
// One upsert of the tenant's counter numbers all the event's items (the
// counter row, not max(seq) + 1: a pruned number is never given again).
// pos is the feed's next position: the single writer makes max+1 safe.
func insertFeedItems(tx *Tx, tenant string, eventRow int64, feeds []string, now time.Time) ([]model.FeedPost, error) {
	uniq := sqlstore.Distinct(feeds)
	if len(uniq) == 0 {
		return nil, nil
	}
	tx.feedChanged(tenant)
	var last int64
	if err := tx.queryRow(`INSERT INTO feed_counters (tenant, seq) VALUES (?1, ?2)
		ON CONFLICT (tenant) DO UPDATE SET seq = seq + ?2 RETURNING seq`, tenant, len(uniq)).Scan(&last); err != nil {
		return nil, fmt.Errorf("number feed items: %w", err)
	}
	first := last - int64(len(uniq)) + 1
	posts := make([]model.FeedPost, len(uniq))
	for i, f := range uniq {
		posts[i] = model.FeedPost{Feed: f, Seq: first + int64(i)}
		if _, err := tx.exec(`INSERT INTO feed_items (tenant, seq, feed, pos, event, copies, created_at)
			VALUES (?1, ?2, ?3, coalesce((SELECT max(pos) FROM feed_items WHERE tenant = ?1 AND feed = ?3), 0) + 1, ?4, ?5, ?6)`,
			tenant, posts[i].Seq, f, eventRow, len(uniq), ms(now)); err != nil {
			return nil, fmt.Errorf("post to feed %q: %w", f, err)
		}
	}
	return posts, nil
}

// foldItems posts the messages of settled notifications to feeds
// (Decision.Fold), in the settlement's transaction, so a notification ends
// folded exactly when its item is written. Each item is numbered from its
// tenant's counter like an accept's; the unique (event, feed) index
// dedupes (a feed holds an event once), and a duplicate takes no number.
// An event's items count one another (copies), so an event that now has
// more than one is counted once in an unread count.
func foldItems(tx *Tx, ss []model.Settlement, applied []bool) error {
	for i, st := range ss {
		f := st.Decision.Fold
		if !applied[i] || f == nil {
			continue
		}
		tx.feedChanged("") // its tenant is the notification's
		var tenant string
		var event, seq, copies int64
		err := tx.queryRow(`INSERT INTO feed_items (tenant, seq, feed, pos, event, copies, created_at, message)
			SELECT n.tenant, coalesce((SELECT seq FROM feed_counters WHERE tenant = n.tenant), 0) + 1, ?2,
				coalesce((SELECT max(pos) FROM feed_items WHERE tenant = n.tenant AND feed = ?2), 0) + 1,
				n.event, 1 + (SELECT count(*) FROM feed_items WHERE event = n.event), ?3, n.message
			FROM notifications n WHERE n.id = ?1
			ON CONFLICT (event, feed) DO NOTHING
			RETURNING tenant, seq, event, copies`, st.ID, f.Feed, ms(st.At)).Scan(&tenant, &seq, &event, &copies)
		if isNoRows(err) {
			continue // the feed holds the event already
		}
		if err != nil {
			return fmt.Errorf("fold notification %d into feed %q: %w", st.ID, f.Feed, err)
		}
		if _, err := tx.exec(`INSERT INTO feed_counters (tenant, seq) VALUES (?1, ?2)
			ON CONFLICT (tenant) DO UPDATE SET seq = ?2`, tenant, seq); err != nil {
			return fmt.Errorf("number the folded item of notification %d: %w", st.ID, err)
		}
		if copies > 1 {
			if _, err := tx.exec(`UPDATE feed_items SET copies = ?1 WHERE event = ?2`, copies, event); err != nil {
				return fmt.Errorf("count the items of event %d: %w", event, err)
			}
		}
	}
	return nil
}

// dialect is SQLite's share of the feed view's SQL. Some reads name their
// index (TestFeedQueriesUseIndexes checks their plans): without statistics
// SQLite would walk the tenant's whole sequence (the primary key) instead.
var dialect = &sqlstore.Dialect{
	OldestItem: `SELECT seq, pos FROM feed_items INDEXED BY feed_items_page
		WHERE tenant = $1 AND feed = $2 ORDER BY seq LIMIT 1`,
	PosAt: `SELECT pos FROM feed_items INDEXED BY feed_items_page
		WHERE tenant = $1 AND feed = $2 AND seq <= $3 ORDER BY seq DESC LIMIT 1`,
	SharedItems: `SELECT seq, event FROM feed_items INDEXED BY feed_items_shared
		WHERE tenant = $1 AND feed = $2 AND seq > $3 AND copies > 1`,
	PageItems:            pageItems,
	SuppressFromReceipts: suppressFromReceipts,
}

// pageItems reads n events' items through the event index (an IN list:
// SQLite has no arrays).
func pageItems(tenant string, events []int64) (string, []any) {
	args := make([]any, 0, len(events)+1)
	args = append(args, tenant)
	for _, e := range events {
		args = append(args, e)
	}
	return `SELECT i.event, i.seq, i.feed, e.created_at, e.event_id, e.type, coalesce(i.message, e.message)
		FROM feed_items i INDEXED BY feed_items_event JOIN events e ON e.id = i.event
		WHERE i.tenant = ? AND i.event IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(events)), ", ") + `)`, args
}

// SetFeedMembers makes users the members of a feed. Members who stay keep
// when they joined; new members see items posted from now on (or, with
// history, the feed's whole past); members not listed leave.
func (s *Store) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	return s.w.do(ctx, func(tx *Tx) error {
		tx.feedChanged(tenant)
		var joined int64
		if !history {
			if err := tx.queryRow(sqlstore.NewestSeqSQL, tenant).Scan(&joined); err != nil {
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

// FeedMembers lists a feed's members in user order, from the feed index
// (feed_members_feed), a page at a time.
func (s *Store) FeedMembers(ctx context.Context, tenant, feed, after string, limit int) ([]model.FeedMember, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT user, joined_seq FROM feed_members
		WHERE tenant = ? AND feed = ? AND user > ? ORDER BY user LIMIT ?`, tenant, feed, after, limit)
	if err != nil {
		return nil, fmt.Errorf("members of feed %q: %w", feed, err)
	}
	defer rows.Close()
	out := []model.FeedMember{}
	for rows.Next() {
		var m model.FeedMember
		if err := rows.Scan(&m.User, &m.JoinedSeq); err != nil {
			return nil, fmt.Errorf("members of feed %q: %w", feed, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("members of feed %q: %w", feed, err)
	}
	return out, nil
}

// MarkAll moves a user's watermark of a kind to max(current, upTo): it
// never moves back, so a stale or reordered request cannot unread items.
// upTo < 0 means the tenant's newest item now (which also covers items the
// user's client had not shown yet: the cost of not saying up to where); an
// upTo past the tenant's newest item is taken as the newest. It returns
// the watermark after the move. Constant time: two rows.
func (s *Store) MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error) {
	var mark int64
	err := s.w.do(ctx, func(tx *Tx) error {
		tx.feedChanged(tenant)
		// Never past the newest item: a client's up_to from the future
		// would otherwise swallow items not yet posted.
		var newest int64
		if err := tx.queryRow(sqlstore.NewestSeqSQL, tenant).Scan(&newest); err != nil {
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

// MarkItem marks one item read or dismissed for a user, with every other
// item of its event in the user's feeds (the user sees them as one). The
// item must be in one of the user's feeds (ErrNotFound otherwise, as for
// another tenant's). Below the watermark an item is already so, and
// nothing is written for it.
func (s *Store) MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error {
	var copies []sqlstore.ItemCopy
	err := s.snapshot(ctx, func(q sqlstore.Querier) (err error) {
		copies, err = sqlstore.ItemCopies(ctx, q, tenant, user, seq)
		return err
	})
	if err != nil {
		return err
	}
	return s.w.do(ctx, func(tx *Tx) error {
		tx.feedChanged(tenant)
		for _, c := range copies {
			if _, err := tx.exec(`INSERT INTO feed_item_marks (tenant, user, kind, seq, feed)
				SELECT ?1, ?2, ?3, ?4, ?5 WHERE ?4 > coalesce((SELECT mark FROM feed_marks WHERE tenant = ?1 AND user = ?2 AND kind = ?3), 0)
				ON CONFLICT DO NOTHING`, tenant, user, kind, c.Seq, c.Feed); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshot runs fn in one read transaction: every query sees the same
// committed state, so a page merged from several feeds cannot miss an item
// committed between two of its queries.
func (s *Store) snapshot(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(sqlstore.DB(tx))
}

// FeedPage is a user's feed, newest first (sqlstore's FeedPage, in one
// snapshot). ReadMark is the user's read watermark.
func (s *Store) FeedPage(ctx context.Context, tenant, user string, before int64, limit int) (items []model.FeedItem, readMark int64, err error) {
	err = s.snapshot(ctx, func(q sqlstore.Querier) error {
		items, readMark, err = dialect.FeedPage(ctx, q, tenant, user, before, limit)
		return err
	})
	return items, readMark, err
}

// UnreadCount counts a user's unread items across the feeds they read,
// each event once (sqlstore's UnreadCount, in one snapshot).
func (s *Store) UnreadCount(ctx context.Context, tenant, user string) (n int64, err error) {
	err = s.snapshot(ctx, func(q sqlstore.Querier) error {
		n, err = dialect.UnreadCount(ctx, q, tenant, user)
		return err
	})
	return n, err
}

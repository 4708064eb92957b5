package postgres

import (
	"context"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/store/internal/sqlstore"
	"time"

	"github.com/jackc/pgx/v5"
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

// insertFeedItems posts an event to feeds, in the accept's transaction.
// One upsert of the tenant's counter numbers all the event's items (the
// counter row, not max(seq) + 1: a pruned number is never given again).
// The counter row also orders the commits: it stays locked until this
// transaction commits, so the tenant's next poster (on any node) waits,
// and the tenant's items become visible in seq order: a reader that sees
// item n has seen every item below it (a sequence would not do: its
// numbers are drawn before commit, so "read all up to 12" could swallow an
// 11 committed later). pos, max + 1 per feed, is safe under the same lock.
//
// It returns the items in seq order (the feeds' order, each feed once).
func insertFeedItems(ctx context.Context, tx pgx.Tx, tenant string, eventRow int64, feeds []string, now time.Time) ([]model.FeedPost, error) {
	uniq := sqlstore.Distinct(feeds)
	if len(uniq) == 0 {
		return nil, nil
	}
	if err := notifyFeed(ctx, tx, tenant); err != nil {
		return nil, err
	}
	var last int64
	if err := tx.QueryRow(ctx, `INSERT INTO feed_counters (tenant, seq) VALUES ($1, $2)
		ON CONFLICT (tenant) DO UPDATE SET seq = feed_counters.seq + excluded.seq RETURNING seq`, tenant, len(uniq)).Scan(&last); err != nil {
		return nil, fmt.Errorf("number feed items: %w", err)
	}
	first := last - int64(len(uniq)) + 1
	posts := make([]model.FeedPost, len(uniq))
	for i, f := range uniq {
		posts[i] = model.FeedPost{Feed: f, Seq: first + int64(i)}
		if _, err := tx.Exec(ctx, `INSERT INTO feed_items (tenant, seq, feed, pos, event, copies, created_at)
			VALUES ($1, $2, $3, coalesce((SELECT max(pos) FROM feed_items WHERE tenant = $1 AND feed = $3), 0) + 1, $4, $5, $6)`,
			tenant, posts[i].Seq, f, eventRow, len(uniq), ms(now)); err != nil {
			return nil, fmt.Errorf("post to feed %q: %w", f, err)
		}
	}
	return posts, nil
}

// foldItems posts the messages of settled notifications to feeds
// (Decision.Fold), in the settlement's transaction, so a notification ends
// folded exactly when its item is written. The items are numbered as
// store/sqlite numbers them, as if posted one by one in the settlements'
// order: each tenant's next seqs from its counter row, each feed's next
// positions; a fold of an event into a feed that holds it already (from
// before, or an earlier fold of this batch) takes no number. An event's
// items count one another (copies), so an event that now has more than
// one is counted once in an unread count.
//
// One round trip, a batch of two statements. The first locks the tenants'
// counter rows, in tenant order (two settlements folding for the same
// tenants lock them alike), until commit, as an accept's insert locks its
// tenant's: the tenant's items still become visible in seq order, and no
// other transaction posts to the tenant meanwhile. The second runs after
// the first has its locks, so its snapshot (read committed: per statement)
// sees every item committed before them: its "does the feed hold the
// event" and "the feed's last position" are exact, and it needs no ON
// CONFLICT (a conflict would be a broken lock and fails the settlement).
func foldItems(ctx context.Context, tx pgx.Tx, ss []model.Settlement, applied []bool) error {
	var ids, ats []int64
	var feeds []string
	for i, st := range ss {
		if applied[i] && st.Decision.Fold != nil {
			ids, feeds, ats = append(ids, st.ID), append(feeds, st.Decision.Fold.Feed), append(ats, ms(st.At))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := notifyFeed(ctx, tx, ""); err != nil { // the tenants are the notifications'
		return err
	}
	b := &pgx.Batch{}
	b.Queue(lockFoldCountersSQL, ids)
	b.Queue(foldItemsSQL, ids, feeds, ats)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("fold %d notifications: lock their tenants' feed counters: %w", len(ids), err)
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("fold %d notifications into feeds %v: %w", len(ids), feeds, err)
	}
	return br.Close()
}

const (
	// A counter row made here (a tenant's first item is a fold) holds 0,
	// as having none means: nothing is posted yet.
	lockFoldCountersSQL = `INSERT INTO feed_counters (tenant, seq)
		SELECT DISTINCT tenant, 0 FROM notifications WHERE id = ANY($1::bigint[]) ORDER BY tenant
		ON CONFLICT (tenant) DO UPDATE SET seq = feed_counters.seq`
	// f: the folds in the settlements' order (ord), with their
	// notifications' tenant, event and message. fresh: each (event, feed)
	// once, its first fold, if the feed does not hold the event yet. Each
	// fresh fold takes its tenant's next seq and its feed's next position
	// in ord order; an event's items (those there and the fresh ones)
	// count all of them. The data-modifying parts do not see one another's
	// rows: the last UPDATE sets the copies of the event's items from
	// before, the INSERT gives the new ones the same count.
	foldItemsSQL = `WITH f AS (
			SELECT v.ord, v.feed, v.at, n.tenant, n.event, n.message
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) WITH ORDINALITY AS v (id, feed, at, ord)
			JOIN notifications n ON n.id = v.id
		), fresh AS (
			SELECT DISTINCT ON (f.event, f.feed) f.* FROM f
			WHERE NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.event = f.event AND i.feed = f.feed)
			ORDER BY f.event, f.feed, f.ord
		), numbered AS (
			SELECT x.*,
				c.seq + row_number() OVER (PARTITION BY x.tenant ORDER BY x.ord) AS seq,
				coalesce((SELECT max(pos) FROM feed_items i WHERE i.tenant = x.tenant AND i.feed = x.feed), 0)
					+ row_number() OVER (PARTITION BY x.tenant, x.feed ORDER BY x.ord) AS pos,
				(SELECT count(*) FROM feed_items i WHERE i.event = x.event) + count(*) OVER (PARTITION BY x.event) AS copies
			FROM fresh x JOIN feed_counters c ON c.tenant = x.tenant
		), posted AS (
			INSERT INTO feed_items (tenant, seq, feed, pos, event, copies, created_at, message)
			SELECT tenant, seq, feed, pos, event, copies, at, message FROM numbered
		), counted AS (
			UPDATE feed_counters c SET seq = m.seq
			FROM (SELECT tenant, max(seq) AS seq FROM numbered GROUP BY tenant) m WHERE c.tenant = m.tenant
		)
		UPDATE feed_items i SET copies = m.copies
		FROM (SELECT DISTINCT event, copies FROM numbered) m WHERE i.event = m.event`
)

// FeedMembers lists a feed's members in user order (bytewise: COLLATE "C",
// whatever the database's collation), a page at a time.
func (s *Store) FeedMembers(ctx context.Context, tenant, feed, after string, limit int) ([]model.FeedMember, error) {
	out := []model.FeedMember{}
	err := s.read(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT "user", joined_seq FROM feed_members
			WHERE tenant = $1 AND feed = $2 AND "user" COLLATE "C" > $3 ORDER BY "user" COLLATE "C" LIMIT $4`, tenant, feed, after, limit)
		if err != nil {
			return fmt.Errorf("members of feed %q: %w", feed, err)
		}
		defer rows.Close()
		for rows.Next() {
			var m model.FeedMember
			if err := rows.Scan(&m.User, &m.JoinedSeq); err != nil {
				return fmt.Errorf("members of feed %q: %w", feed, err)
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dialect is PostgreSQL's share of the feed view's SQL: its planner needs
// no index named, and an array carries the page's events.
var dialect = &sqlstore.Dialect{
	OldestItem:  `SELECT seq, pos FROM feed_items WHERE tenant = $1 AND feed = $2 ORDER BY seq LIMIT 1`,
	PosAt:       `SELECT pos FROM feed_items WHERE tenant = $1 AND feed = $2 AND seq <= $3 ORDER BY seq DESC LIMIT 1`,
	SharedItems: `SELECT seq, event FROM feed_items WHERE tenant = $1 AND feed = $2 AND seq > $3 AND copies > 1`,
	PageItems: func(tenant string, events []int64) (string, []any) {
		return `SELECT i.event, i.seq, i.feed, e.created_at, e.event_id, e.type, coalesce(i.message, e.message)
			FROM feed_items i JOIN events e ON e.id = i.event
			WHERE i.tenant = $1 AND i.event = ANY($2::bigint[])`, []any{tenant, events}
	},
	SuppressFromReceipts: suppressFromReceipts,
	ForUpdate:            " FOR UPDATE",
	LockRun:              " FOR UPDATE SKIP LOCKED",
	LockBatch:            " FOR UPDATE OF b",
	LockSlots:            `SELECT pg_advisory_xact_lock(hashtextextended($1, 17))`,
}

// SetFeedMembers makes users the members of a feed. Members who stay keep
// when they joined; new members see items posted from now on (or, with
// history, the feed's whole past); members not listed leave.
func (s *Store) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	if users == nil {
		users = []string{} // an empty array, not NULL: every member leaves
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if err := notifyFeed(ctx, tx, tenant); err != nil {
			return err
		}
		var joined int64
		if !history {
			if err := tx.QueryRow(ctx, sqlstore.NewestSeqSQL, tenant).Scan(&joined); err != nil {
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
// upTo < 0 means the tenant's newest item now (which also covers items the
// user's client had not shown yet: the cost of not saying up to where); an
// upTo past the tenant's newest item is taken as the newest. It returns
// the watermark after the move. Constant time: two rows.
func (s *Store) MarkAll(ctx context.Context, tenant, user, kind string, upTo int64) (int64, error) {
	var mark int64
	err := s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if err := notifyFeed(ctx, tx, tenant); err != nil {
			return err
		}
		// Never past the newest item: a client's up_to from the future
		// would otherwise swallow items not yet posted. The counter is
		// read committed: every item up to it has committed (they commit
		// in seq order).
		var newest int64
		if err := tx.QueryRow(ctx, sqlstore.NewestSeqSQL, tenant).Scan(&newest); err != nil {
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

// MarkItem marks one item read or dismissed for a user, with every other
// item of its event in the user's feeds (the user sees them as one). The
// item must be in one of the user's feeds (ErrNotFound otherwise, as for
// another tenant's). Below the watermark an item is already so, and
// nothing is written for it.
func (s *Store) MarkItem(ctx context.Context, tenant, user, kind string, seq int64) error {
	var copies []sqlstore.ItemCopy
	err := s.snapshot(ctx, func(q querier) (err error) {
		copies, err = sqlstore.ItemCopies(ctx, shared(q), tenant, user, seq)
		return err
	})
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		return nil
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		if err := notifyFeed(ctx, tx, tenant); err != nil {
			return err
		}
		for _, c := range copies {
			if _, err := tx.Exec(ctx, `INSERT INTO feed_item_marks (tenant, "user", kind, seq, feed)
				SELECT $1, $2, $3, $4, $5
				WHERE $4 > coalesce((SELECT mark FROM feed_marks WHERE tenant = $1 AND "user" = $2 AND kind = $3), 0)
				ON CONFLICT DO NOTHING`, tenant, user, kind, c.Seq, c.Feed); err != nil {
				return err
			}
		}
		return nil
	})
}

// FeedPage is a user's feed, newest first (sqlstore's FeedPage, in one
// snapshot). ReadMark is the user's read watermark.
func (s *Store) FeedPage(ctx context.Context, tenant, user string, before int64, limit int) (items []model.FeedItem, readMark int64, err error) {
	err = s.snapshot(ctx, func(q querier) error {
		items, readMark, err = dialect.FeedPage(ctx, shared(q), tenant, user, before, limit)
		return err
	})
	return items, readMark, err
}

// UnreadCount counts a user's unread items across the feeds they read,
// each event once (sqlstore's UnreadCount, in one snapshot).
func (s *Store) UnreadCount(ctx context.Context, tenant, user string) (n int64, err error) {
	err = s.snapshot(ctx, func(q querier) error {
		n, err = dialect.UnreadCount(ctx, shared(q), tenant, user)
		return err
	})
	return n, err
}

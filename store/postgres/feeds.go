package postgres

import (
	"cmp"
	"context"
	"edgerelay/model"
	"fmt"
	"math"
	"slices"
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
	var uniq []string
	for _, f := range feeds {
		if !slices.Contains(uniq, f) {
			uniq = append(uniq, f)
		}
	}
	if len(uniq) == 0 {
		return nil, nil
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

// eventFeedItems reads back the items an accepted event posted (a
// duplicate's answer), in seq order, from the event index.
func eventFeedItems(ctx context.Context, tx pgx.Tx, tenant string, eventRow int64) ([]model.FeedPost, error) {
	rows, err := tx.Query(ctx, `SELECT feed, seq FROM feed_items WHERE event = $1 AND tenant = $2 ORDER BY seq`, eventRow, tenant)
	if err != nil {
		return nil, fmt.Errorf("read feed items of event %d: %w", eventRow, err)
	}
	defer rows.Close()
	var out []model.FeedPost
	for rows.Next() {
		var p model.FeedPost
		if err := rows.Scan(&p.Feed, &p.Seq); err != nil {
			return nil, fmt.Errorf("read feed items of event %d: %w", eventRow, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

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

// The feed reads, one index lookup or range each.
const (
	newestSeqSQL   = `SELECT coalesce((SELECT seq FROM feed_counters WHERE tenant = $1), 0)`
	membershipsSQL = `SELECT feed, joined_seq FROM feed_members WHERE tenant = $1 AND "user" = $2`
	watermarksSQL  = `SELECT kind, mark FROM feed_marks WHERE tenant = $1 AND "user" = $2`
	itemMarksSQL   = `SELECT kind, seq FROM feed_item_marks
		WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq > $3`
	itemSQL       = `SELECT feed, event FROM feed_items WHERE tenant = $1 AND seq = $2`
	eventItemsSQL = `SELECT seq, feed FROM feed_items WHERE event = $1`
	// A feed's newest items below the cursor, from the index alone.
	pageSQL = `SELECT seq, event FROM feed_items
		WHERE tenant = $1 AND feed = $2 AND seq > $3 AND seq < $4
		ORDER BY seq DESC LIMIT $5`
	lastPosSQL        = `SELECT max(pos) FROM feed_items WHERE tenant = $1 AND feed = $2`
	oldestItemSQL     = `SELECT seq, pos FROM feed_items WHERE tenant = $1 AND feed = $2 ORDER BY seq LIMIT 1`
	posAtSQL          = `SELECT pos FROM feed_items WHERE tenant = $1 AND feed = $2 AND seq <= $3 ORDER BY seq DESC LIMIT 1`
	itemMarksCountSQL = `SELECT count(DISTINCT seq) FROM feed_item_marks
		WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq > $3 AND feed = $4`
	sharedItemsSQL = `SELECT seq, event FROM feed_items WHERE tenant = $1 AND feed = $2 AND seq > $3 AND copies > 1`
	// The events' items, from the event index, and the events (an item is
	// posted in its event's accept: its time is the event's).
	pageItemsSQL = `SELECT i.event, i.seq, i.feed, e.created_at, e.event_id, e.type, coalesce(i.message, e.message)
		FROM feed_items i JOIN events e ON e.id = i.event
		WHERE i.tenant = $1 AND i.event = ANY($2::bigint[])`
)

// SetFeedMembers makes users the members of a feed. Members who stay keep
// when they joined; new members see items posted from now on (or, with
// history, the feed's whole past); members not listed leave.
func (s *Store) SetFeedMembers(ctx context.Context, tenant, feed string, users []string, history bool) error {
	if users == nil {
		users = []string{} // an empty array, not NULL: every member leaves
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		var joined int64
		if !history {
			if err := tx.QueryRow(ctx, newestSeqSQL, tenant).Scan(&joined); err != nil {
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
		// Never past the newest item: a client's up_to from the future
		// would otherwise swallow items not yet posted. The counter is
		// read committed: every item up to it has committed (they commit
		// in seq order).
		var newest int64
		if err := tx.QueryRow(ctx, newestSeqSQL, tenant).Scan(&newest); err != nil {
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
	type copyOf struct {
		seq  int64
		feed string
	}
	var copies []copyOf
	err := s.snapshot(ctx, func(q querier) error {
		feeds, err := userFeeds(ctx, q, tenant, user)
		if err != nil {
			return err
		}
		v := view{from: feedsFrom(feeds)}
		var feed string
		var event int64
		if err := q.QueryRow(ctx, itemSQL, tenant, seq).Scan(&feed, &event); err != nil {
			if isNoRows(err) {
				return fmt.Errorf("feed item %d: %w", seq, model.ErrNotFound)
			}
			return err
		}
		if !v.reads(feed, seq) {
			return fmt.Errorf("feed item %d: %w", seq, model.ErrNotFound)
		}
		rows, err := q.Query(ctx, eventItemsSQL, event)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c copyOf
			if err := rows.Scan(&c.seq, &c.feed); err != nil {
				return err
			}
			if v.reads(c.feed, c.seq) {
				copies = append(copies, c)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		return nil
	}
	return s.write(ctx, model.WriteOther, func(ctx context.Context, tx pgx.Tx) error {
		for _, c := range copies {
			if _, err := tx.Exec(ctx, `INSERT INTO feed_item_marks (tenant, "user", kind, seq, feed)
				SELECT $1, $2, $3, $4, $5
				WHERE $4 > coalesce((SELECT mark FROM feed_marks WHERE tenant = $1 AND "user" = $2 AND kind = $3), 0)
				ON CONFLICT DO NOTHING`, tenant, user, kind, c.seq, c.feed); err != nil {
				return err
			}
		}
		return nil
	})
}

// userFeed is a feed a user reads, from which item on (exclusive).
type userFeed struct {
	feed string
	from int64
}

func userFeeds(ctx context.Context, q querier, tenant, user string) ([]userFeed, error) {
	fs := []userFeed{{feed: model.TenantFeed}, {feed: model.PersonalFeed(user)}}
	rows, err := q.Query(ctx, membershipsSQL, tenant, user)
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

func feedsFrom(feeds []userFeed) map[string]int64 {
	m := make(map[string]int64, len(feeds))
	for _, f := range feeds {
		m[f.feed] = f.from
	}
	return m
}

func marks(ctx context.Context, q querier, tenant, user string) (read, dismissed int64, err error) {
	rows, err := q.Query(ctx, watermarksSQL, tenant, user)
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
		if kind == model.MarkRead {
			read = mark
		} else {
			dismissed = mark
		}
	}
	return read, dismissed, rows.Err()
}

// itemMarks are the items a user read or dismissed one by one, above
// seq.
func itemMarks(ctx context.Context, q querier, tenant, user string, above int64) (map[string]map[int64]bool, error) {
	out := map[string]map[int64]bool{model.MarkRead: {}, model.MarkDismissed: {}}
	rows, err := q.Query(ctx, itemMarksSQL, tenant, user, above)
	if err != nil {
		return nil, fmt.Errorf("read item marks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var seq int64
		if err := rows.Scan(&kind, &seq); err != nil {
			return nil, err
		}
		out[kind][seq] = true
	}
	return out, rows.Err()
}

// view is what decides, for one user, which items they see and which they
// have read.
type view struct {
	from            map[string]int64 // the feeds they read, each from which seq on (exclusive)
	read, dismissed int64            // the watermarks
	items           map[string]map[int64]bool
}

// reads says whether the item is in one of the user's feeds, posted after
// they joined it.
func (v view) reads(feed string, seq int64) bool {
	from, ok := v.from[feed]
	return ok && seq > from
}

// visible says whether the item is in the user's view: theirs, and not
// dismissed.
func (v view) visible(feed string, seq int64) bool {
	return v.reads(feed, seq) && seq > v.dismissed && !v.items[model.MarkDismissed][seq]
}

func (v view) isRead(seq int64) bool { return seq <= v.read || v.items[model.MarkRead][seq] }

// FeedPage is a user's feed, newest first: at most limit items from the
// feeds the user reads (each from when they joined it), without dismissed
// items, and each event once however many of those feeds it was posted
// to. An event's place (its Seq, Feed) is its newest copy the user sees;
// it is read when every copy is. Items are those with seq < before (0 for
// the newest). ReadMark is the user's read watermark.
func (s *Store) FeedPage(ctx context.Context, tenant, user string, before int64, limit int) (items []model.FeedItem, readMark int64, err error) {
	err = s.snapshot(ctx, func(q querier) error {
		items, readMark, err = feedPage(ctx, q, tenant, user, before, limit)
		return err
	})
	return items, readMark, err
}

// pageCandidate is an event's newest visible item below the cursor.
type pageCandidate struct {
	seq, event int64
	feed       string
}

func feedPage(ctx context.Context, q querier, tenant, user string, before int64, limit int) ([]model.FeedItem, int64, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	feeds, err := userFeeds(ctx, q, tenant, user)
	if err != nil {
		return nil, 0, err
	}
	v := view{from: feedsFrom(feeds)}
	if v.read, v.dismissed, err = marks(ctx, q, tenant, user); err != nil {
		return nil, 0, err
	}
	if v.items, err = itemMarks(ctx, q, tenant, user, min(v.read, v.dismissed)); err != nil {
		return nil, 0, err
	}
	// Below a cursor, one event more than the page: an event with an item
	// at or above the cursor was on an earlier page and is left out, and
	// its items being consecutive, at most one such event reaches below the
	// cursor. The loop only repeats if more did.
	need := limit
	if before < math.MaxInt64 {
		need++
	}
	for {
		cands, all, err := pageCandidates(ctx, q, tenant, feeds, v, before, need)
		if err != nil {
			return nil, 0, err
		}
		items, err := pageItems(ctx, q, tenant, v, cands, before)
		if err != nil {
			return nil, 0, err
		}
		if len(items) >= limit || all {
			return items[:min(len(items), limit)], v.read, nil
		}
		need += max(1, len(cands)-len(items))
	}
}

// pageCandidates merges the user's feeds below the cursor into events,
// newest first: up to need of them, each at its newest visible item (all
// is set when there are no more). Each feed's newest items come from the
// index alone (an IN over the feeds could not use the index's order, and
// would sort them all). A feed read to its limit bounds what is known: an
// older item of that feed may not have been read yet, so events are taken
// only down to there, and there are enough of them, since a feed holds an
// event once.
func pageCandidates(ctx context.Context, q querier, tenant string, feeds []userFeed, v view, before int64, need int) ([]pageCandidate, bool, error) {
	n := need + len(v.items[model.MarkDismissed])
	var pool []pageCandidate
	known := int64(0) // every visible item at or above it is in pool
	for _, f := range feeds {
		rows, err := q.Query(ctx, pageSQL, tenant, f.feed, max(f.from, v.dismissed), before, n)
		if err != nil {
			return nil, false, fmt.Errorf("read feed %q: %w", f.feed, err)
		}
		got, last := 0, int64(0)
		for rows.Next() {
			c := pageCandidate{feed: f.feed}
			if err := rows.Scan(&c.seq, &c.event); err != nil {
				rows.Close()
				return nil, false, err
			}
			got, last = got+1, c.seq
			if !v.items[model.MarkDismissed][c.seq] {
				pool = append(pool, c)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
		if got == n {
			known = max(known, last)
		}
	}
	slices.SortFunc(pool, func(a, b pageCandidate) int { return cmp.Compare(b.seq, a.seq) })
	var cands []pageCandidate
	seen := map[int64]bool{}
	for _, c := range pool {
		if c.seq < known {
			break
		}
		if seen[c.event] {
			continue // an older copy of an event already placed
		}
		seen[c.event] = true
		cands = append(cands, c)
		if len(cands) == need {
			return cands, false, nil
		}
	}
	return cands, known == 0, nil
}

// pageItems reads the candidates' events in full, with every item of each
// (one query through the event index): an event with a visible item at or
// above the cursor is left out (an earlier page showed it), and an event is
// read when each of its visible items is.
func pageItems(ctx context.Context, q querier, tenant string, v view, cands []pageCandidate, before int64) ([]model.FeedItem, error) {
	items := make([]model.FeedItem, 0, len(cands))
	if len(cands) == 0 {
		return items, nil
	}
	rowsOf := make([]int64, len(cands))
	for i, c := range cands {
		rowsOf[i] = c.event
	}
	rows, err := q.Query(ctx, pageItemsSQL, tenant, rowsOf)
	if err != nil {
		return nil, fmt.Errorf("read feed items: %w", err)
	}
	defer rows.Close()
	type event struct {
		it    model.FeedItem
		above bool // a visible item at or above the cursor
		read  bool
	}
	events := make(map[int64]*event, len(cands))
	for rows.Next() {
		var row int64
		var it model.FeedItem
		var created int64
		if err := rows.Scan(&row, &it.Seq, &it.Feed, &created, &it.EventID, &it.Type, &it.Message); err != nil {
			return nil, err
		}
		if !v.visible(it.Feed, it.Seq) {
			continue
		}
		e := events[row]
		if e == nil {
			e = &event{read: true}
			events[row] = e
		}
		e.above = e.above || it.Seq >= before
		e.read = e.read && v.isRead(it.Seq)
		if it.Seq > e.it.Seq && it.Seq < before {
			it.CreatedAt = fromMS(created)
			e.it = it
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range cands {
		e := events[c.event]
		if e == nil || e.above {
			continue
		}
		e.it.Read = e.read
		items = append(items, e.it)
	}
	return items, nil
}

// UnreadCount counts a user's unread items across the feeds they read,
// each event once: items above the read and dismiss watermarks (and above
// when the user joined), less those read or dismissed one by one, less the
// extra copies of events posted to several of the user's feeds. Per feed
// it is two index lookups (positions are numbered per feed), whatever the
// history, and one step per unread item whose event was posted to more
// than one feed.
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
	counted := make([]userFeed, 0, len(feeds)) // each feed's items counted: from seq on (exclusive)
	for _, f := range feeds {
		from := max(f.from, readMark, dismissedMark)
		var last *int64
		if err := q.QueryRow(ctx, lastPosSQL, tenant, f.feed).Scan(&last); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		if last == nil {
			continue // an empty feed
		}
		// Positions below the oldest surviving item were pruned: count from
		// it, not from position 0. (Prune deletes each tenant's oldest
		// items first, so a feed's surviving positions have no holes.)
		var oldestSeq, oldestPos int64
		if err := q.QueryRow(ctx, oldestItemSQL,
			tenant, f.feed).Scan(&oldestSeq, &oldestPos); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var seen int64
		if from < oldestSeq {
			from, seen = oldestSeq-1, oldestPos-1
		} else if err := q.QueryRow(ctx, posAtSQL, tenant, f.feed, from).Scan(&seen); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var marked int64
		if err := q.QueryRow(ctx, itemMarksCountSQL,
			tenant, user, from, f.feed).Scan(&marked); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		total += *last - seen - marked
		counted = append(counted, userFeed{feed: f.feed, from: from})
	}
	extra, err := extraCopies(ctx, q, tenant, user, counted)
	if err != nil {
		return 0, fmt.Errorf("unread count: %w", err)
	}
	return total - extra, nil
}

// extraCopies is how many of the items counted were a second (third …)
// unread copy of an event: it walks only items whose event was posted to
// more than one feed (the partial index feed_items_shared).
func extraCopies(ctx context.Context, q querier, tenant, user string, counted []userFeed) (int64, error) {
	type shared struct{ seq, event int64 }
	var items []shared
	lowest := int64(math.MaxInt64)
	for _, f := range counted {
		rows, err := q.Query(ctx, sharedItemsSQL, tenant, f.feed, f.from)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var it shared
			if err := rows.Scan(&it.seq, &it.event); err != nil {
				rows.Close()
				return 0, err
			}
			items = append(items, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		lowest = min(lowest, f.from)
	}
	if len(items) == 0 {
		return 0, nil
	}
	// Items marked one by one were not counted.
	marked, err := itemMarks(ctx, q, tenant, user, lowest)
	if err != nil {
		return 0, err
	}
	perEvent := map[int64]int64{}
	for _, it := range items {
		if !marked[model.MarkRead][it.seq] && !marked[model.MarkDismissed][it.seq] {
			perEvent[it.event]++
		}
	}
	var extra int64
	for _, n := range perEvent {
		extra += n - 1
	}
	return extra, nil
}

package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"math"
	"slices"
	"time"
)

// The feed view: what a user sees of the feeds they read, merged at read
// time. Every function here reads; the caller gives it one snapshot (a
// read transaction), so a page merged from several feeds cannot miss an
// item committed between two of its queries.

// The feed reads, one index lookup or range each.
const (
	NewestSeqSQL   = `SELECT coalesce((SELECT seq FROM feed_counters WHERE tenant = $1), 0)`
	MembershipsSQL = `SELECT feed, joined_seq FROM feed_members WHERE tenant = $1 AND "user" = $2`
	WatermarksSQL  = `SELECT kind, mark FROM feed_marks WHERE tenant = $1 AND "user" = $2`
	ItemMarksSQL   = `SELECT kind, seq FROM feed_item_marks
		WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq > $3`
	ItemSQL       = `SELECT feed, event FROM feed_items WHERE tenant = $1 AND seq = $2`
	EventItemsSQL = `SELECT seq, feed FROM feed_items WHERE event = $1`
	// A feed's newest items below the cursor, from the index alone.
	PageSQL = `SELECT seq, event FROM feed_items
		WHERE tenant = $1 AND feed = $2 AND seq > $3 AND seq < $4
		ORDER BY seq DESC LIMIT $5`
	LastPosSQL        = `SELECT max(pos) FROM feed_items WHERE tenant = $1 AND feed = $2`
	ItemMarksCountSQL = `SELECT count(DISTINCT seq) FROM feed_item_marks
		WHERE tenant = $1 AND "user" = $2 AND kind IN ('read', 'dismissed') AND seq > $3 AND feed = $4`
)

// ItemCopy is one of an event's items in a user's feeds.
type ItemCopy struct {
	Seq  int64
	Feed string
}

// ItemCopies is every item of the event of item seq that the user reads
// (the user sees them as one). The item must be in one of the user's
// feeds (ErrNotFound otherwise, as for another tenant's).
func ItemCopies(ctx context.Context, q Querier, tenant, user string, seq int64) ([]ItemCopy, error) {
	feeds, err := userFeeds(ctx, q, tenant, user)
	if err != nil {
		return nil, err
	}
	v := view{from: feedsFrom(feeds)}
	var feed string
	var event int64
	if err := q.QueryRow(ctx, ItemSQL, tenant, seq).Scan(&feed, &event); err != nil {
		if IsNoRows(err) {
			return nil, fmt.Errorf("feed item %d: %w", seq, model.ErrNotFound)
		}
		return nil, err
	}
	if !v.reads(feed, seq) {
		return nil, fmt.Errorf("feed item %d: %w", seq, model.ErrNotFound)
	}
	rows, err := q.Query(ctx, EventItemsSQL, event)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var copies []ItemCopy
	for rows.Next() {
		var c ItemCopy
		if err := rows.Scan(&c.Seq, &c.Feed); err != nil {
			return nil, err
		}
		if v.reads(c.Feed, c.Seq) {
			copies = append(copies, c)
		}
	}
	return copies, rows.Err()
}

// EventFeedItems reads back the items an accepted event posted (a
// duplicate's answer), in seq order, from the event index.
func EventFeedItems(ctx context.Context, q Querier, tenant string, eventRow int64) ([]model.FeedPost, error) {
	out, err := All(ctx, q, func(r Rows) (model.FeedPost, error) {
		var p model.FeedPost
		return p, r.Scan(&p.Feed, &p.Seq)
	}, `SELECT feed, seq FROM feed_items WHERE event = $1 AND tenant = $2 ORDER BY seq`, eventRow, tenant)
	if err != nil {
		return nil, fmt.Errorf("read feed items of event %d: %w", eventRow, err)
	}
	return out, nil
}

// IsNoRows reports whether err is a query's finding no row.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// FromMS is a time stored as Unix milliseconds.
func FromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// MS is a time as stored: Unix milliseconds.
func MS(t time.Time) int64 { return t.UnixMilli() }

// userFeed is a feed a user reads, from which item on (exclusive).
type userFeed struct {
	feed string
	from int64
}

func userFeeds(ctx context.Context, q Querier, tenant, user string) ([]userFeed, error) {
	fs := []userFeed{{feed: model.TenantFeed}, {feed: model.PersonalFeed(user)}}
	rows, err := q.Query(ctx, MembershipsSQL, tenant, user)
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

func marks(ctx context.Context, q Querier, tenant, user string) (read, dismissed int64, err error) {
	rows, err := q.Query(ctx, WatermarksSQL, tenant, user)
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
func itemMarks(ctx context.Context, q Querier, tenant, user string, above int64) (map[string]map[int64]bool, error) {
	out := map[string]map[int64]bool{model.MarkRead: {}, model.MarkDismissed: {}}
	rows, err := q.Query(ctx, ItemMarksSQL, tenant, user, above)
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

// pageCandidate is an event's newest visible item below the cursor.
type pageCandidate struct {
	seq, event int64
	feed       string
}

// FeedPage is a user's feed, newest first: at most limit items from the
// feeds the user reads (each from when they joined it), without dismissed
// items, and each event once however many of those feeds it was posted
// to. An event's place (its Seq, Feed) is its newest copy the user sees;
// it is read when every copy is. Items are those with seq < before (0 for
// the newest). The int64 is the user's read watermark.
func (d *Dialect) FeedPage(ctx context.Context, q Querier, tenant, user string, before int64, limit int) ([]model.FeedItem, int64, error) {
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
		items, err := d.pageItems(ctx, q, tenant, v, cands, before)
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
func pageCandidates(ctx context.Context, q Querier, tenant string, feeds []userFeed, v view, before int64, need int) ([]pageCandidate, bool, error) {
	n := need + len(v.items[model.MarkDismissed])
	var pool []pageCandidate
	known := int64(0) // every visible item at or above it is in pool
	for _, f := range feeds {
		rows, err := q.Query(ctx, PageSQL, tenant, f.feed, max(f.from, v.dismissed), before, n)
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
func (d *Dialect) pageItems(ctx context.Context, q Querier, tenant string, v view, cands []pageCandidate, before int64) ([]model.FeedItem, error) {
	items := make([]model.FeedItem, 0, len(cands))
	if len(cands) == 0 {
		return items, nil
	}
	events := make([]int64, len(cands))
	for i, c := range cands {
		events[i] = c.event
	}
	query, args := d.PageItems(tenant, events)
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read feed items: %w", err)
	}
	defer rows.Close()
	type event struct {
		it    model.FeedItem
		above bool // a visible item at or above the cursor
		read  bool
	}
	byRow := make(map[int64]*event, len(cands))
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
		e := byRow[row]
		if e == nil {
			e = &event{read: true}
			byRow[row] = e
		}
		e.above = e.above || it.Seq >= before
		e.read = e.read && v.isRead(it.Seq)
		if it.Seq > e.it.Seq && it.Seq < before {
			it.CreatedAt = FromMS(created)
			e.it = it
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range cands {
		e := byRow[c.event]
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
func (d *Dialect) UnreadCount(ctx context.Context, q Querier, tenant, user string) (int64, error) {
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
		var last sql.NullInt64
		if err := q.QueryRow(ctx, LastPosSQL, tenant, f.feed).Scan(&last); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		if !last.Valid {
			continue // an empty feed
		}
		// Positions below the oldest surviving item were pruned: count from
		// it, not from position 0. (Prune deletes each tenant's oldest
		// items first, so a feed's surviving positions have no holes.)
		var oldestSeq, oldestPos int64
		if err := q.QueryRow(ctx, d.OldestItem,
			tenant, f.feed).Scan(&oldestSeq, &oldestPos); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var seen int64
		if from < oldestSeq {
			from, seen = oldestSeq-1, oldestPos-1
		} else if err := q.QueryRow(ctx, d.PosAt, tenant, f.feed, from).Scan(&seen); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		var marked int64
		if err := q.QueryRow(ctx, ItemMarksCountSQL,
			tenant, user, from, f.feed).Scan(&marked); err != nil {
			return 0, fmt.Errorf("unread count: %w", err)
		}
		total += last.Int64 - seen - marked
		counted = append(counted, userFeed{feed: f.feed, from: from})
	}
	extra, err := d.extraCopies(ctx, q, tenant, user, counted)
	if err != nil {
		return 0, fmt.Errorf("unread count: %w", err)
	}
	return total - extra, nil
}

// extraCopies is how many of the items counted were a second (third …)
// unread copy of an event: it walks only items whose event was posted to
// more than one feed (the partial index feed_items_shared).
func (d *Dialect) extraCopies(ctx context.Context, q Querier, tenant, user string, counted []userFeed) (int64, error) {
	type shared struct{ seq, event int64 }
	var items []shared
	lowest := int64(math.MaxInt64)
	for _, f := range counted {
		rows, err := q.Query(ctx, d.SharedItems, tenant, f.feed, f.from)
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

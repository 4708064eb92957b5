-- 0007: feed items are numbered per tenant. 0004 numbered them with one
-- global sequence, so the gaps between a tenant's seqs, its read-all
-- answers and its digests' ranges counted every other tenant's items.
--
-- seq now counts the tenant's items only (1, 2, 3 … within the tenant). It
-- is given by a counter row per tenant, advanced in the accept's
-- transaction, never by max(seq) + 1: prune may delete a tenant's newest
-- items, and a number once given is never given again, so no watermark,
-- cursor or digest range can cover an item posted after it. An event's
-- items (one per feed it is posted to) take consecutive numbers.
--
-- Existing items keep their seqs: global numbers already increase within
-- each tenant. Each tenant's counter starts at the highest number it holds
-- or was shown: its newest item, a watermark (read-all without up_to took
-- the global newest) or an item mark. So every existing watermark, mark and
-- page stays as it was, and new items number above all of them.

CREATE TABLE feed_counters (
    tenant     TEXT    PRIMARY KEY,
    seq        INTEGER NOT NULL,           -- the last seq given to the tenant's items
    -- The counter when this migration ran: a job run from before it
    -- (job_runs.tenant IS NULL) fixed a seq of the old global sequence,
    -- which covers this tenant's items up to min(upper_seq, legacy_seq).
    legacy_seq INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

INSERT INTO feed_counters (tenant, seq, legacy_seq)
SELECT tenant, max(s), max(s) FROM (
    SELECT tenant, max(seq) AS s FROM feed_items GROUP BY tenant
    UNION ALL SELECT tenant, max(mark) FROM feed_marks GROUP BY tenant
    UNION ALL SELECT tenant, max(seq) FROM feed_item_marks GROUP BY tenant
) GROUP BY tenant;

-- The primary key becomes (tenant, seq): SQLite cannot change a primary
-- key in place, so the table is rebuilt. copies is how many feeds the
-- item's event was posted to: an event in several feeds that one user
-- reads is one item in that user's view and count, and only items with
-- copies > 1 need that check (feed_items_shared).
CREATE TABLE feed_items_new (
    tenant     TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    feed       TEXT    NOT NULL,
    pos        INTEGER NOT NULL,                           -- the feed's 1, 2, 3 …
    event      INTEGER NOT NULL REFERENCES events (id),   -- the message is the event's
    copies     INTEGER NOT NULL DEFAULT 1,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, seq)
) WITHOUT ROWID;

INSERT INTO feed_items_new (tenant, seq, feed, pos, event, copies, created_at)
SELECT tenant, seq, feed, pos, event, (SELECT count(*) FROM feed_items c WHERE c.event = i.event), created_at
FROM feed_items i;

DROP TABLE feed_items;
ALTER TABLE feed_items_new RENAME TO feed_items;

CREATE UNIQUE INDEX feed_items_pos ON feed_items (tenant, feed, pos);
CREATE UNIQUE INDEX feed_items_event ON feed_items (event, feed);  -- an event is in a feed once
-- A feed's items in seq order, with their event: a page is read from this
-- index alone.
CREATE INDEX feed_items_page ON feed_items (tenant, feed, seq, event);
CREATE INDEX feed_items_shared ON feed_items (tenant, feed, seq, event, copies) WHERE copies > 1;

-- joined_seq, which no answer shows, was the global newest item when the
-- member joined: it becomes at most the tenant's counter (the tenant's
-- items up to it are the same items), so it holds no other tenant's count.
UPDATE feed_members SET joined_seq = min(joined_seq,
    coalesce((SELECT seq FROM feed_counters c WHERE c.tenant = feed_members.tenant), 0));

-- The tenant whose item sequence upper_seq is in; NULL for runs from
-- before this migration, whose upper_seq is in the old global sequence.
ALTER TABLE job_runs ADD COLUMN tenant TEXT;

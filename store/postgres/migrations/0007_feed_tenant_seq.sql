-- 0007: feed items are numbered per tenant, as store/sqlite's 0007. 0004
-- numbered them with one sequence for every tenant, so the gaps between a
-- tenant's seqs, its read-all answers and its digests' ranges counted
-- every other tenant's items.
--
-- seq now counts the tenant's items only (1, 2, 3 … within the tenant). It
-- is given by a counter row per tenant, advanced in the accept's
-- transaction and locked until its commit: the tenant's next poster waits
-- for that commit, so a tenant's items become visible in seq order (0004's
-- one counter row did the same for everyone at once). A number is never
-- given again, even after prune deleted the tenant's newest items. An
-- event's items (one per feed it is posted to) take consecutive numbers.
--
-- Existing items keep their seqs: the old numbers already increase within
-- each tenant. Each tenant's counter starts at the highest number it holds
-- or was shown: its newest item, a watermark or an item mark.

CREATE TABLE feed_counters (
    tenant     text    PRIMARY KEY,
    seq        bigint  NOT NULL,           -- the last seq given to the tenant's items
    -- The counter when this migration ran: a job run from before it
    -- (job_runs.tenant IS NULL) fixed a seq of the old sequence, which
    -- covers this tenant's items up to least(upper_seq, legacy_seq).
    legacy_seq bigint  NOT NULL DEFAULT 0
);

INSERT INTO feed_counters (tenant, seq, legacy_seq)
SELECT tenant, max(s), max(s) FROM (
    SELECT tenant, max(seq) AS s FROM feed_items GROUP BY tenant
    UNION ALL SELECT tenant, max(mark) FROM feed_marks GROUP BY tenant
    UNION ALL SELECT tenant, max(seq) FROM feed_item_marks GROUP BY tenant
) AS highest GROUP BY tenant;

-- 0004's one counter row goes: the tenants' rows replace it.
DROP TABLE feed_seq;

-- The primary key becomes (tenant, seq). copies is how many feeds the
-- item's event was posted to: an event in several feeds that one user
-- reads is one item in that user's view and count, and only items with
-- copies > 1 need that check (feed_items_shared). The table is rebuilt, as
-- SQLite's is, so both keep their columns in the same order.
CREATE TABLE feed_items_new (
    tenant     text    NOT NULL,
    seq        bigint  NOT NULL,
    feed       text    NOT NULL,
    pos        bigint  NOT NULL,                           -- the feed's 1, 2, 3 …
    event      bigint  NOT NULL REFERENCES events (id),   -- the message is the event's
    copies     integer NOT NULL DEFAULT 1,
    created_at bigint  NOT NULL,
    PRIMARY KEY (tenant, seq)
);

INSERT INTO feed_items_new (tenant, seq, feed, pos, event, copies, created_at)
SELECT tenant, seq, feed, pos, event, (SELECT count(*) FROM feed_items c WHERE c.event = i.event), created_at
FROM feed_items i;

DROP TABLE feed_items;
ALTER TABLE feed_items_new RENAME TO feed_items;
ALTER TABLE feed_items RENAME CONSTRAINT feed_items_new_pkey TO feed_items_pkey;
ALTER TABLE feed_items RENAME CONSTRAINT feed_items_new_event_fkey TO feed_items_event_fkey;

CREATE UNIQUE INDEX feed_items_pos ON feed_items (tenant, feed, pos);
CREATE UNIQUE INDEX feed_items_event ON feed_items (event, feed);  -- an event is in a feed once
-- A feed's items in seq order, with their event: a page is read from this
-- index alone.
CREATE INDEX feed_items_page ON feed_items (tenant, feed, seq, event);
CREATE INDEX feed_items_shared ON feed_items (tenant, feed, seq, event, copies) WHERE copies > 1;

-- joined_seq was the newest item of the old sequence when the member
-- joined: it becomes at most the tenant's counter.
UPDATE feed_members SET joined_seq = least(joined_seq,
    coalesce((SELECT seq FROM feed_counters c WHERE c.tenant = feed_members.tenant), 0));

-- The tenant whose item sequence upper_seq is in; NULL for runs from
-- before this migration, whose upper_seq is in the old sequence.
ALTER TABLE job_runs ADD COLUMN tenant text;

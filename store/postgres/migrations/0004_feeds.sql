-- 0004: in-app feeds, fanned out on read, as store/sqlite's 0004. An item
-- is stored once per feed, whatever the number of readers; what each user
-- has read is a watermark on the item sequence plus the few items read one
-- by one.

-- seq is the item sequence, the cursor of every feed page and the unit of
-- every watermark, so a reader must never see item 12 before item 11: a
-- "read all up to 12" would swallow 11 unseen. A PostgreSQL sequence gives
-- numbers before commit, in no commit order; SQLite's AUTOINCREMENT is in
-- commit order because one writer makes every write. Here the numbers come
-- from a counter row that the posting transaction advances: its row lock
-- makes the next poster wait for this one's commit, so items commit (and
-- become visible) in seq order. A number is never given twice. The row is
-- made by the first post (no row: no item yet).
CREATE TABLE feed_seq (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint  NOT NULL                   -- the last seq given
);

-- pos numbers a feed's items 1, 2, 3 …: unread counts are differences of
-- positions, found by two index lookups instead of counting rows. It is
-- given under the counter row's lock too.
CREATE TABLE feed_items (
    seq        bigint  PRIMARY KEY,
    tenant     text    NOT NULL,
    feed       text    NOT NULL,
    pos        bigint  NOT NULL,
    event      bigint  NOT NULL REFERENCES events (id),   -- the message is the event's
    created_at bigint  NOT NULL,
    UNIQUE (tenant, feed, pos),
    UNIQUE (event, feed)                                   -- an event is in a feed once
);

CREATE INDEX feed_items_page ON feed_items (tenant, feed, seq);

-- Who reads which feed, from when: joined_seq is the newest item when the
-- user joined. A user's personal feed ("@USER") and the tenant's feed ("*")
-- need no row. ("user" is quoted: it is a reserved word in PostgreSQL.)
CREATE TABLE feed_members (
    tenant     text    NOT NULL,
    feed       text    NOT NULL,
    "user"     text    NOT NULL,
    joined_seq bigint  NOT NULL,
    PRIMARY KEY (tenant, "user", feed)
);

CREATE INDEX feed_members_feed ON feed_members (tenant, feed, "user");

-- Watermarks: every item with seq <= mark is read or dismissed. They only
-- move forward.
CREATE TABLE feed_marks (
    tenant text    NOT NULL,
    "user" text    NOT NULL,
    kind   text    NOT NULL CHECK (kind IN ('read', 'dismissed')),
    mark   bigint  NOT NULL,
    PRIMARY KEY (tenant, "user", kind)
);

-- Items read or dismissed one by one, above the watermark.
CREATE TABLE feed_item_marks (
    tenant text    NOT NULL,
    "user" text    NOT NULL,
    kind   text    NOT NULL CHECK (kind IN ('read', 'dismissed')),
    seq    bigint  NOT NULL,
    feed   text    NOT NULL,
    PRIMARY KEY (tenant, "user", kind, seq)
);

-- 0004: in-app feeds, fanned out on read. An item is stored once per feed,
-- whatever the number of readers; what each user has read is a watermark
-- on the global item sequence plus the few items read one by one.

-- seq is the global, monotonic item sequence (AUTOINCREMENT: never
-- reused), the cursor of every feed page and the unit of every watermark.
-- pos numbers a feed's items 1, 2, 3 …: unread counts are differences of
-- positions, found by two index lookups instead of counting rows.
CREATE TABLE feed_items (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT    NOT NULL,
    feed       TEXT    NOT NULL,
    pos        INTEGER NOT NULL,
    event      INTEGER NOT NULL REFERENCES events (id),   -- the message is the event's
    created_at INTEGER NOT NULL,
    UNIQUE (tenant, feed, pos),
    UNIQUE (event, feed)                                   -- an event is in a feed once
);

CREATE INDEX feed_items_page ON feed_items (tenant, feed, seq);

-- Who reads which feed, from when: joined_seq is the newest item when the
-- user joined (items up to it are not theirs, unless history was granted).
-- A user's personal feed ("@USER") and the tenant's feed ("*") need no row.
CREATE TABLE feed_members (
    tenant     TEXT    NOT NULL,
    feed       TEXT    NOT NULL,
    user       TEXT    NOT NULL,
    joined_seq INTEGER NOT NULL,
    PRIMARY KEY (tenant, user, feed)
) WITHOUT ROWID;

CREATE INDEX feed_members_feed ON feed_members (tenant, feed, user);

-- Watermarks: every item with seq <= mark is read (kind 'read') or
-- dismissed (kind 'dismissed'). They only move forward.
CREATE TABLE feed_marks (
    tenant TEXT    NOT NULL,
    user   TEXT    NOT NULL,
    kind   TEXT    NOT NULL CHECK (kind IN ('read', 'dismissed')),
    mark   INTEGER NOT NULL,
    PRIMARY KEY (tenant, user, kind)
) WITHOUT ROWID;

-- Items read or dismissed one by one, above the watermark.
CREATE TABLE feed_item_marks (
    tenant TEXT    NOT NULL,
    user   TEXT    NOT NULL,
    kind   TEXT    NOT NULL CHECK (kind IN ('read', 'dismissed')),
    seq    INTEGER NOT NULL,
    feed   TEXT    NOT NULL,
    PRIMARY KEY (tenant, user, kind, seq)
) WITHOUT ROWID;

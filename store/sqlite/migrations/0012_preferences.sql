-- 0012: what recipients decide (issue 17): preferences per category and
-- channel, quiet hours in their time zone, the throttles' slots, the
-- tenants' keys for signed links, and the status skipped.

-- A notification a preference or a throttle forbids ends skipped, without
-- an attempt. Widening the status CHECK touches no stored row, so it is
-- made as SQLite documents for such changes ("Making Other Kinds Of Table
-- Schema Changes", ALTER TABLE): the table's text in sqlite_schema is
-- edited in place. Rebuilding the table instead would need foreign keys off
-- (attempts reference it), which a migration's transaction cannot turn off.
-- Only 'bounced' is matched, so a migration that added another status
-- first keeps it. The CREATE TABLEs below bump the schema cookie, so
-- every connection reads the new text.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, '''bounced''', '''bounced'', ''skipped''')
    WHERE type = 'table' AND name = 'notifications';
PRAGMA writable_schema = RESET;
-- The edit must have taken: else the migration fails here, before the
-- version moves.
CREATE TEMP TABLE migration_0012_check (ok INTEGER NOT NULL CHECK (ok));
INSERT INTO migration_0012_check SELECT count(*) FROM sqlite_schema
    WHERE type = 'table' AND name = 'notifications' AND sql LIKE '%''skipped''%';
DROP TABLE migration_0012_check;

-- A recipient's switches: a category on or off on every channel
-- (channel ''), or on one channel. What is not here is the config's
-- default. set_by says through what it was set.
CREATE TABLE pref_switches (
    tenant    TEXT    NOT NULL,
    recipient TEXT    NOT NULL,
    category  TEXT    NOT NULL,
    channel   TEXT    NOT NULL,
    enabled   INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    set_at    INTEGER NOT NULL,
    set_by    TEXT    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient, category, channel)
) WITHOUT ROWID;

-- A recipient's quiet hours, per category (category '': every optional
-- category), in minutes after local midnight; end < start crosses midnight.
CREATE TABLE pref_quiet_hours (
    tenant       TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    category     TEXT    NOT NULL,
    start_minute INTEGER NOT NULL CHECK (start_minute BETWEEN 0 AND 1439),
    end_minute   INTEGER NOT NULL CHECK (end_minute BETWEEN 0 AND 1439 AND end_minute <> start_minute),
    set_at       INTEGER NOT NULL,
    set_by       TEXT    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient, category)
) WITHOUT ROWID;

-- A recipient's IANA time zone, in which quiet hours are read.
CREATE TABLE pref_zones (
    tenant    TEXT    NOT NULL,
    recipient TEXT    NOT NULL,
    timezone  TEXT    NOT NULL,
    set_at    INTEGER NOT NULL,
    set_by    TEXT    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient)
) WITHOUT ROWID;

-- Each tenant's key for the links recipients use (one-click unsubscribe,
-- the preferences page): made once, when first needed, and kept.
CREATE TABLE tenant_keys (
    tenant     TEXT    PRIMARY KEY,
    key        BLOB    NOT NULL CHECK (length(key) >= 32),
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

-- A throttle's slots: one per notification that went on within its
-- category's limit, counted per tenant, recipient and category over the
-- window. The writer takes them one after another, so the count is exact.
CREATE TABLE throttle_slots (
    notification INTEGER PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    category     TEXT    NOT NULL,
    taken_at     INTEGER NOT NULL
);

CREATE INDEX throttle_slots_window ON throttle_slots (tenant, recipient, category, taken_at);

CREATE INDEX throttle_slots_taken ON throttle_slots (taken_at);

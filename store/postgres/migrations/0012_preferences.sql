-- 0012: what recipients decide (issue 17), as store/sqlite's 0012:
-- preferences per category and channel, quiet hours in their time zone,
-- the throttles' slots, the tenants' keys for signed links, and the status
-- skipped.

-- A notification a preference or a throttle forbids ends skipped, without
-- an attempt. 0001's CHECK is unnamed, so it carries PostgreSQL's default
-- name. The CHECK as it stands is widened by one status, not rewritten
-- whole, so a migration that added another status first keeps it.
DO $$
DECLARE def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
        WHERE conname = 'notifications_status_check' AND conrelid = 'notifications'::regclass;
    IF position('''bounced''::text' IN def) = 0 THEN
        RAISE EXCEPTION 'notifications_status_check has no bounced: %', def;
    END IF;
    ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
    EXECUTE 'ALTER TABLE notifications ADD CONSTRAINT notifications_status_check '
        || replace(def, '''bounced''::text', '''bounced''::text, ''skipped''::text');
END $$;

-- A recipient's switches: a category on or off on every channel
-- (channel ''), or on one channel. What is not here is the config's
-- default. set_by says through what it was set.
CREATE TABLE pref_switches (
    tenant    text    NOT NULL,
    recipient text    NOT NULL,
    category  text    NOT NULL,
    channel   text    NOT NULL,
    enabled   boolean NOT NULL,
    set_at    bigint  NOT NULL,
    set_by    text    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient, category, channel)
);

-- A recipient's quiet hours, per category (category '': every optional
-- category), in minutes after local midnight; end < start crosses midnight.
CREATE TABLE pref_quiet_hours (
    tenant       text    NOT NULL,
    recipient    text    NOT NULL,
    category     text    NOT NULL,
    start_minute integer NOT NULL CHECK (start_minute BETWEEN 0 AND 1439),
    end_minute   integer NOT NULL CHECK (end_minute BETWEEN 0 AND 1439 AND end_minute <> start_minute),
    set_at       bigint  NOT NULL,
    set_by       text    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient, category)
);

-- A recipient's IANA time zone, in which quiet hours are read.
CREATE TABLE pref_zones (
    tenant    text    NOT NULL,
    recipient text    NOT NULL,
    timezone  text    NOT NULL,
    set_at    bigint  NOT NULL,
    set_by    text    NOT NULL CHECK (set_by IN ('api', 'page', 'unsubscribe', 'cli')),
    PRIMARY KEY (tenant, recipient)
);

-- Each tenant's key for the links recipients use (one-click unsubscribe,
-- the preferences page): made once, when first needed, and kept.
CREATE TABLE tenant_keys (
    tenant     text    PRIMARY KEY,
    key        bytea   NOT NULL CHECK (length(key) >= 32),
    created_at bigint  NOT NULL
);

-- A throttle's slots: one per notification that went on within its
-- category's limit, counted per tenant, recipient and category over the
-- window. Takes of one window hold an advisory lock, so the count is exact
-- across processes.
CREATE TABLE throttle_slots (
    notification bigint  PRIMARY KEY,
    tenant       text    NOT NULL,
    recipient    text    NOT NULL,
    category     text    NOT NULL,
    taken_at     bigint  NOT NULL
);

CREATE INDEX throttle_slots_window ON throttle_slots (tenant, recipient, category, taken_at);

CREATE INDEX throttle_slots_taken ON throttle_slots (taken_at);

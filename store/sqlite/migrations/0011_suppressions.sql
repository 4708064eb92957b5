-- 0011: a suppression list per tenant, in place of 0006's dead-address
-- marks (issue 17).

-- A notification whose address is on its tenant's list when it is claimed
-- ends 'suppressed', never called. SQLite cannot alter a CHECK constraint,
-- and rebuilding notifications would mean dropping a table that attempts
-- references. Widening the list of allowed values is safe to do in the
-- schema text (sqlite.org/lang_altertable.html, "Making Other Kinds Of Table
-- Schema Changes": every row already stored satisfies the wider check). The
-- value is put first in the list, so that other migrations doing the same
-- compose. The CREATE TABLE below changes the schema cookie, so every other
-- connection reads the new text; RESET makes this one read it now.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (status IN (''pending'',', 'CHECK (status IN (''suppressed'', ''pending'',')
    WHERE type = 'table' AND name = 'notifications';
PRAGMA writable_schema = RESET;

-- The address as the list keys it (normalised for its channel by the relay:
-- an email address in lower case), where that is not the address itself.
-- Rows accepted before: email addresses with capitals get their key here
-- (the relay folds ASCII only, as lower() does).
ALTER TABLE notifications ADD COLUMN address_key TEXT;
UPDATE notifications SET address_key = lower(address) WHERE channel = 'email' AND address <> lower(address);

-- One entry per tenant, channel and address. expires_at NULL: never (hard
-- bounces and complaints, by default). notification is the one whose send
-- or receipt put it there; it is not a foreign key, since prune deletes old
-- notifications and the entry outlives them.
CREATE TABLE suppressions (
    tenant       TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    reason       TEXT    NOT NULL CHECK (reason IN ('hard_bounce', 'soft_bounce', 'complaint', 'manual')),
    source       TEXT    NOT NULL CHECK (source IN ('provider', 'receipt', 'dsn', 'arf', 'import', 'api', 'cli')),
    provider     TEXT    NOT NULL DEFAULT '',
    notification INTEGER,
    detail       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    PRIMARY KEY (tenant, channel, address)
) WITHOUT ROWID;

CREATE INDEX suppressions_expires ON suppressions (expires_at) WHERE expires_at IS NOT NULL;

-- Every mark becomes a hard bounce that keeps its expiry (the marks
-- were promised to lapse).
INSERT INTO suppressions (tenant, channel, address, reason, source, provider, detail, created_at, expires_at)
    SELECT tenant, channel, CASE WHEN channel = 'email' THEN lower(address) ELSE address END,
           'hard_bounce', 'provider', provider, reason, created_at, expires_at
    FROM invalid_addresses WHERE true
    ON CONFLICT DO NOTHING;

DROP TABLE invalid_addresses;

-- A receipt may put the address of its notification on the list (a hard
-- bounce, a complaint): the entry is made when the notification is found,
-- which may be after the receipt (a callback faster than the record of the
-- send). source says what carried it, when not the provider's callback.
ALTER TABLE receipts ADD COLUMN source TEXT;
ALTER TABLE receipts ADD COLUMN suppress TEXT;
ALTER TABLE receipts ADD COLUMN suppress_until INTEGER;

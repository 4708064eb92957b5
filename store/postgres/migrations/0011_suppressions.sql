-- 0011: a suppression list per tenant, in place of 0006's dead-address
-- marks (issue 17), as store/sqlite's 0011.

-- A notification whose address is on its tenant's list when it is claimed
-- ends 'suppressed', never called. The status check is widened from its
-- own definition, not restated, so that other migrations adding a status
-- the same way compose.
DO $$
DECLARE def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
        WHERE conrelid = 'notifications'::regclass AND conname = 'notifications_status_check';
    ALTER TABLE notifications DROP CONSTRAINT notifications_status_check;
    EXECUTE 'ALTER TABLE notifications ADD CONSTRAINT notifications_status_check '
        || replace(def, 'ARRAY[''pending''::text', 'ARRAY[''suppressed''::text, ''pending''::text');
END $$;

-- The address as the list keys it (normalised for its channel by the relay:
-- an email address in lower case), where that is not the address itself.
ALTER TABLE notifications ADD COLUMN address_key text COLLATE "C";
-- The relay folds ASCII only (as SQLite's lower() does); translate does the
-- same whatever the database's locale.
UPDATE notifications SET address_key = translate(address, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
    WHERE channel = 'email' AND address <> translate(address, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');

-- One entry per tenant, channel and address. expires_at NULL: never.
-- notification is the one whose send or receipt put it there; not a
-- foreign key, since prune deletes old notifications and the entry
-- outlives them. The key sorts bytewise, as SQLite's does.
CREATE TABLE suppressions (
    tenant       text    COLLATE "C" NOT NULL,
    channel      text    COLLATE "C" NOT NULL,
    address      text    COLLATE "C" NOT NULL,
    reason       text    NOT NULL CHECK (reason IN ('hard_bounce', 'soft_bounce', 'complaint', 'manual')),
    source       text    NOT NULL CHECK (source IN ('provider', 'receipt', 'dsn', 'arf', 'import', 'api', 'cli')),
    provider     text    NOT NULL DEFAULT '',
    notification bigint,
    detail       text    NOT NULL DEFAULT '',
    created_at   bigint  NOT NULL,
    expires_at   bigint,
    PRIMARY KEY (tenant, channel, address)
);

CREATE INDEX suppressions_expires ON suppressions (expires_at) WHERE expires_at IS NOT NULL;

-- Every mark becomes a hard bounce that keeps its expiry (the marks were
-- promised to lapse).
INSERT INTO suppressions (tenant, channel, address, reason, source, provider, detail, created_at, expires_at)
    SELECT tenant, channel, CASE WHEN channel = 'email' THEN translate(address, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') ELSE address END,
           'hard_bounce', 'provider', provider, reason, created_at, expires_at
    FROM invalid_addresses
    ON CONFLICT DO NOTHING;

DROP TABLE invalid_addresses;

-- A receipt may put the address of its notification on the list (a hard
-- bounce, a complaint): the entry is made when the notification is found,
-- which may be after the receipt. source says what carried it, when not
-- the provider's callback.
ALTER TABLE receipts ADD COLUMN source text;
ALTER TABLE receipts ADD COLUMN suppress text;
ALTER TABLE receipts ADD COLUMN suppress_until bigint;

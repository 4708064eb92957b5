-- 0006: fenced claims, quarantined fan-outs, and address marks that belong
-- to one tenant and expire, as store/sqlite's 0006.

-- Every claim takes claims + 1 as its fence token, and every write that
-- assumes it still owns the claim names it: a node whose lease was taken
-- over changes nothing. (The UPDATE mirrors SQLite's for rows claimed by
-- an older binary; a new database has none.)
ALTER TABLE notifications ADD COLUMN claims bigint NOT NULL DEFAULT 0;
UPDATE notifications SET attempts = attempts - 1, cycle_attempts = cycle_attempts - 1
    WHERE status = 'sending' AND attempts > 0;

-- A fan-out that cannot go on is quarantined until an operator releases or
-- drops it (dropped counts the notifications given up).
ALTER TABLE events ADD COLUMN quarantined_at bigint;
ALTER TABLE events ADD COLUMN quarantine_reason text;
ALTER TABLE events ADD COLUMN dropped integer NOT NULL DEFAULT 0;
DROP INDEX events_unexpanded;
CREATE INDEX events_unexpanded ON events (id) WHERE expanded < targets AND quarantined_at IS NULL;
CREATE INDEX events_quarantined ON events (tenant, id) WHERE quarantined_at IS NOT NULL;

-- A dead address is dead for the tenant whose provider said so, and only
-- until expires_at. Existing marks are kept for the tenants whose own
-- attempts drew the refusal from that provider, for 30 days. The key's
-- columns sort bytewise (COLLATE "C"), as SQLite's do, whatever the
-- database's collation: a page's cursor means the same in both stores.
CREATE TABLE invalid_addresses_new (
    tenant     text    COLLATE "C" NOT NULL,
    channel    text    COLLATE "C" NOT NULL,
    address    text    COLLATE "C" NOT NULL,
    provider   text    NOT NULL,
    reason     text    NOT NULL,
    created_at bigint  NOT NULL,
    expires_at bigint  NOT NULL,
    CONSTRAINT invalid_addresses_tenant_pkey PRIMARY KEY (tenant, channel, address)
);

INSERT INTO invalid_addresses_new (tenant, channel, address, provider, reason, created_at, expires_at)
    SELECT DISTINCT n.tenant, i.channel, i.address, i.provider, i.reason, i.created_at, i.created_at + 30 * 86400000::bigint
    FROM invalid_addresses i JOIN notifications n ON n.channel = i.channel AND n.address = i.address
    WHERE EXISTS (SELECT 1 FROM attempts a WHERE a.notification = n.id AND a.provider = i.provider
                  AND a.outcome = 'refused' AND a.permanent)
    ON CONFLICT DO NOTHING;

DROP TABLE invalid_addresses;
ALTER TABLE invalid_addresses_new RENAME TO invalid_addresses;
ALTER TABLE invalid_addresses RENAME CONSTRAINT invalid_addresses_tenant_pkey TO invalid_addresses_pkey;

CREATE INDEX invalid_addresses_expires ON invalid_addresses (expires_at);

-- 0006: fenced claims, quarantined fan-outs, and address marks that belong
-- to one tenant and expire.

-- Every claim takes claims + 1 as its fence token, and every write that
-- assumes it still owns the claim (record, release, give up, settle an
-- expired lease) names it: a process whose lease was taken over changes
-- nothing. attempts now counts calls recorded: a claim no longer counts one
-- (a claim that only waited at a provider's gate is not an attempt), so a
-- row claimed by an older binary gives its in-flight attempt back, to be
-- counted when that attempt is recorded or settled.
ALTER TABLE notifications ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
UPDATE notifications SET attempts = attempts - 1, cycle_attempts = cycle_attempts - 1
    WHERE status = 'sending' AND attempts > 0;

-- A fan-out that cannot go on (its stored payload no longer decodes, or it
-- does not advance) is quarantined: it leaves the expander's work list
-- until an operator releases it (after a fix) or drops the rest of it
-- (dropped counts the notifications given up).
ALTER TABLE events ADD COLUMN quarantined_at INTEGER;
ALTER TABLE events ADD COLUMN quarantine_reason TEXT;
ALTER TABLE events ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;
DROP INDEX events_unexpanded;
CREATE INDEX events_unexpanded ON events (id) WHERE expanded < targets AND quarantined_at IS NULL;
CREATE INDEX events_quarantined ON events (tenant, id) WHERE quarantined_at IS NOT NULL;

-- A dead address is dead for the tenant whose provider said so, not for
-- every tenant (a tenant's own server answering 550 must not block other
-- tenants' mail), and only for a while (expires_at). Existing marks are
-- kept for the tenants whose own attempts drew the refusal from that
-- provider; they expire 30 days after they were made.
CREATE TABLE invalid_addresses_new (
    tenant     TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    address    TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, address)
) WITHOUT ROWID;

INSERT INTO invalid_addresses_new (tenant, channel, address, provider, reason, created_at, expires_at)
    SELECT DISTINCT n.tenant, i.channel, i.address, i.provider, i.reason, i.created_at, i.created_at + 30 * 86400000
    FROM invalid_addresses i JOIN notifications n ON n.channel = i.channel AND n.address = i.address
    WHERE EXISTS (SELECT 1 FROM attempts a WHERE a.notification = n.id AND a.provider = i.provider
                  AND a.outcome = 'refused' AND a.permanent = 1)
    ON CONFLICT DO NOTHING;

DROP TABLE invalid_addresses;
ALTER TABLE invalid_addresses_new RENAME TO invalid_addresses;

CREATE INDEX invalid_addresses_expires ON invalid_addresses (expires_at);

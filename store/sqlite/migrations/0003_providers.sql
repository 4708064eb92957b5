-- 0003: failover between providers, addresses known to be dead, and
-- delivery receipts from providers.

-- A route may list several providers. route_pos is the one the next attempt
-- uses; pinned is set once an attempt's outcome was unknown: from then on
-- only that provider may be tried (with the same key), since a second
-- provider could deliver a second copy.
ALTER TABLE notifications ADD COLUMN route_pos INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notifications ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;

-- Receipts are matched to notifications by the provider's message id.
CREATE INDEX notifications_message ON notifications (provider, provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- An address a provider said is dead for good (an unregistered push token):
-- nothing more is sent to it on that channel.
CREATE TABLE invalid_addresses (
    channel    TEXT    NOT NULL,
    address    TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (channel, address)
) WITHOUT ROWID;

-- Status callbacks from providers (delivered, bounced, ...), each kept once:
-- dedupe is the provider's receipt id where it gives one, else message id +
-- status (the message id alone would drop the later "delivered"). A receipt
-- may arrive before the send that it is about is recorded; it is matched
-- then.
CREATE TABLE receipts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    provider     TEXT    NOT NULL,
    dedupe       TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('sent', 'delivered', 'bounced', 'complained', 'failed')),
    detail       TEXT,
    at           INTEGER,          -- when the provider says it happened
    received_at  INTEGER NOT NULL,
    UNIQUE (provider, dedupe)
);

CREATE INDEX receipts_message ON receipts (provider, message_id);

-- 0001: the relay core. Times are Unix milliseconds (UTC); ids are integers
-- from monotonic sequences (AUTOINCREMENT never reuses an id, so later
-- cursors and watermarks can rely on them).

-- One row per accepted event: the intent, written in the transaction that
-- acknowledges it. The unique constraint is the dedupe of redelivered events.
CREATE TABLE events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    purpose       TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    payload       TEXT    NOT NULL,           -- the normalised event as JSON
    message       TEXT    NOT NULL,           -- what every recipient is sent (no recipient list)
    fingerprint   TEXT    NOT NULL,           -- sha256 of payload: a resend must match
    targets       INTEGER NOT NULL,           -- notifications the event fans out to
    expanded      INTEGER NOT NULL DEFAULT 0, -- targets already written as notifications
    created_at    INTEGER NOT NULL,
    UNIQUE (tenant, event_id, purpose)
);

-- Events whose fan-out is not finished: the expander's work list.
CREATE INDEX events_unexpanded ON events (id) WHERE expanded < targets;

-- One row per (event, recipient, channel). The idempotency key is unique:
-- that constraint, not a lookup, is what stops a second notification.
CREATE TABLE notifications (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    key                 TEXT    NOT NULL UNIQUE,
    event               INTEGER NOT NULL REFERENCES events (id),
    seq                 INTEGER NOT NULL,      -- position in the event's fan-out
    tenant              TEXT    NOT NULL,
    type                TEXT    NOT NULL,
    recipient           TEXT    NOT NULL,      -- the recipient's id in the source system
    channel             TEXT    NOT NULL,
    address             TEXT    NOT NULL,
    status              TEXT    NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'dead', 'unknown', 'delivered', 'bounced')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    -- The retry budget (max attempts, max age) counts from the start of the
    -- current cycle: creation, or the last manual retry.
    cycle_attempts      INTEGER NOT NULL DEFAULT 0,
    cycle_started_at    INTEGER NOT NULL,
    next_attempt_at     INTEGER NOT NULL,      -- when pending: not before this
    lease_until         INTEGER,               -- when sending: the claim expires then
    claimed_at          INTEGER,               -- when sending: the current attempt's start
    provider            TEXT,                  -- the provider of the last attempt
    provider_message_id TEXT,
    last_response       TEXT,
    reason              TEXT,                  -- why it is failed, dead or unknown
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    UNIQUE (event, seq)
);

CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_leased ON notifications (lease_until) WHERE status = 'sending';
CREATE INDEX notifications_status ON notifications (status);

-- One row per provider call, written once when the call's outcome is known
-- (or when a crash is discovered), never updated.
CREATE TABLE attempts (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    notification        INTEGER NOT NULL REFERENCES notifications (id),
    n                   INTEGER NOT NULL,      -- 1 for the first attempt
    provider            TEXT    NOT NULL,
    started_at          INTEGER NOT NULL,
    ended_at            INTEGER NOT NULL,
    outcome             TEXT    NOT NULL CHECK (outcome IN ('sent', 'refused', 'unknown')),
    permanent           INTEGER NOT NULL DEFAULT 0,
    http_status         INTEGER,
    provider_message_id TEXT,
    response            TEXT,
    detail              TEXT,                  -- what the outcome was, in words
    decision            TEXT                   -- what the relay did next, and why
);

CREATE INDEX attempts_notification ON attempts (notification, n);

CREATE INDEX attempts_provider ON attempts (provider, outcome);

-- 0002: what the HTTP API keeps: stored request idempotency, API tokens,
-- named audiences, and the indexes that page notifications by id.

-- One row per Idempotency-Key header seen (IETF Idempotency-Key draft,
-- Stripe style). The primary key is the claim: of two requests with the same
-- key, exactly one inserts the row and runs; the other is told the key is in
-- flight, or gets the stored response once it is done.
CREATE TABLE request_keys (
    tenant       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  TEXT    NOT NULL,           -- sha256 of method, path and body: a retry must match
    state        TEXT    NOT NULL CHECK (state IN ('in_flight', 'done')),
    -- When in_flight: the claim holds until then; a claim older than this is
    -- abandoned (its process died) and the next request with the same
    -- fingerprint takes it over. When done: when the response was stored.
    locked_until INTEGER NOT NULL,
    status       INTEGER,                    -- when done: the HTTP status to replay
    content_type TEXT,                       -- when done
    body         BLOB,                       -- when done
    created_at   INTEGER NOT NULL,           -- when the current claim was taken
    expires_at   INTEGER NOT NULL,           -- from then on the key is free again and the row may be pruned
    PRIMARY KEY (tenant, key)
);

CREATE INDEX request_keys_expires ON request_keys (expires_at);

-- API tokens. Only the hex sha256 of a token is kept, never the token: a
-- copy of the database does not let anyone call the API.
CREATE TABLE tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,             -- what the operator calls it ("billing service")
    hash       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);

CREATE INDEX tokens_tenant ON tokens (tenant);

-- A named list of recipients an event can be sent to instead of listing
-- them. members is the count in audience_members, kept so a listing need not
-- count them.
CREATE TABLE audiences (
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    members    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- An audience's members in order. Each is replaced as a whole with its
-- audience, and read back in seq order, so the primary key is the only
-- access path: WITHOUT ROWID keeps one b-tree instead of a table and an index.
CREATE TABLE audience_members (
    tenant    TEXT    NOT NULL,
    audience  TEXT    NOT NULL,
    seq       INTEGER NOT NULL,              -- position in the audience, from 0
    recipient TEXT    NOT NULL,              -- the recipient as JSON, opaque to the store
    PRIMARY KEY (tenant, audience, seq),
    FOREIGN KEY (tenant, audience) REFERENCES audiences (tenant, name) ON DELETE CASCADE
) WITHOUT ROWID;

-- Paging notifications by id (the API's cursor) within a tenant, a tenant
-- and a status, a recipient, or an event: each ends in id so a page is a
-- range read in order, never a scan and a sort. (Any tenant and a status
-- uses notifications_status from 0001: an index on status is ordered by id
-- within a status already.)
CREATE INDEX notifications_tenant ON notifications (tenant, id);
CREATE INDEX notifications_tenant_status ON notifications (tenant, status, id);
-- recipient first: recipient ids come from the source system and are
-- selective, and the same index serves a lookup of a recipient across
-- tenants (an operator's token) as well as within one.
CREATE INDEX notifications_recipient ON notifications (recipient, tenant, id);
CREATE INDEX notifications_event ON notifications (event, id);

-- 0030: what a browser needs to read one user's feed directly. Each
-- tenant's keys sign the user tokens its backend mints (HS256): the secret
-- is kept as it was shown, since a signature can only be checked with it
-- (a copy of the database can mint user tokens, as it can read the feeds
-- themselves). A key is never deleted, only retired: a retired key
-- verifies nothing, and its id is never given to another secret, so a
-- token signed before the retirement can never come back to life.
CREATE TABLE user_token_keys (
    tenant     TEXT    NOT NULL,
    kid        TEXT    NOT NULL,
    secret     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,  -- ms
    retired_at INTEGER,           -- ms; NULL while it verifies tokens
    PRIMARY KEY (tenant, kid)
) WITHOUT ROWID;

-- The browser origins a tenant lets call its users' feeds (CORS). A row
-- per origin, found by origin alone as well: a preflight carries no token,
-- so it is answered for an origin that some tenant allows, and the request
-- that follows is held to its token's tenant.
CREATE TABLE feed_origins (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT    NOT NULL,
    origin     TEXT    NOT NULL,  -- scheme://host[:port], as a browser sends it
    created_at INTEGER NOT NULL,  -- ms
    UNIQUE (tenant, origin)
);
CREATE INDEX feed_origins_origin ON feed_origins (origin);

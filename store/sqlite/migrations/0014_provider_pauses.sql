-- 0014: the pauses providers asked for (Retry-After), for every process
-- that shares the database: one row per provider, the latest end kept.
CREATE TABLE provider_pauses (
    provider TEXT    PRIMARY KEY,
    until    INTEGER NOT NULL
) WITHOUT ROWID;

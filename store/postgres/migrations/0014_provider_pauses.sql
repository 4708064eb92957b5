-- 0014: the pauses providers asked for (Retry-After), for every node that
-- shares the database, as store/sqlite's 0012: one row per provider, the
-- latest end kept.
CREATE TABLE provider_pauses (
    provider text   PRIMARY KEY,
    until    bigint NOT NULL
);

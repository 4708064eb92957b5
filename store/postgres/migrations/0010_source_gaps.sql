-- 0010: the ids below a tailed source's position that were missing when
-- later rows were read (gaps): in MySQL and PostgreSQL, ids are taken
-- before commit, so concurrent transactions commit out of id order. Saved
-- with the position, in its transaction: a restart that knew only the
-- position would never read them.
CREATE TABLE source_gaps (
    source text   NOT NULL,
    first  bigint NOT NULL,
    last   bigint NOT NULL,
    since  bigint NOT NULL,           -- when first missed (ms)
    mark   bigint NOT NULL DEFAULT 0, -- the source's clock then (µs)
    PRIMARY KEY (source, first)
);

-- 0026: workflows (issue 26), one row per version of a tenant's workflow
-- for one event type, as templates are kept: the primary key numbers the
-- versions (a writer inserts the next number or finds it taken, never
-- checks first); definition is the checked workflow as JSON; DELETE sets
-- retired_at on the latest version, every version stays readable, and a
-- later PUT makes the next one. A run names the version it started with.
CREATE TABLE workflows (
    tenant     TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    definition TEXT    NOT NULL,
    created_at INTEGER NOT NULL, -- ms
    retired_at INTEGER,          -- ms
    PRIMARY KEY (tenant, type, version)
) WITHOUT ROWID;

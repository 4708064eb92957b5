-- 0026: workflows (issue 26), as store/sqlite's 0026: one row per version
-- of a tenant's workflow for one event type, numbered by the primary key
-- (a writer inserts the next number or finds it taken, never checks
-- first); definition is the checked workflow as JSON; DELETE sets
-- retired_at on the latest version.
CREATE TABLE workflows (
    tenant     text    NOT NULL,
    type       text    NOT NULL,
    version    integer NOT NULL CHECK (version >= 1),
    definition text    NOT NULL,
    created_at bigint  NOT NULL, -- ms
    retired_at bigint,           -- ms
    PRIMARY KEY (tenant, type, version)
);

-- 0019: message templates managed over the API (issue 16), as
-- store/sqlite's 0019: one row per version, numbered by the primary key
-- (a writer inserts the next number or finds it taken, never checks
-- first); parts is the JSON object part -> source; DELETE sets retired_at
-- on the latest version.
CREATE TABLE templates (
    tenant     text    NOT NULL,
    name       text    NOT NULL,
    channel    text    NOT NULL,
    locale     text    NOT NULL,
    version    integer NOT NULL CHECK (version >= 1),
    parts      text    NOT NULL,
    created_at bigint  NOT NULL,
    retired_at bigint,
    PRIMARY KEY (tenant, name, channel, locale, version)
);

-- One row, made by the first change to templates and raised by every
-- change after, in its transaction (its row lock
-- also queues template writers of every node): each serve reads this one
-- row every few seconds and reloads its templates when it moved.
CREATE TABLE template_generation (
    id  integer PRIMARY KEY CHECK (id = 1),
    gen bigint  NOT NULL
);

-- 0019: message templates managed over the API (issue 16), one row per
-- version. The primary key numbers the versions: a writer inserts the
-- next number or finds it taken, never checks first. parts is the JSON
-- object part -> source. DELETE sets retired_at on the latest version;
-- every version stays readable, and a later PUT makes the next one.
CREATE TABLE templates (
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    locale     TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    parts      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER,
    PRIMARY KEY (tenant, name, channel, locale, version)
) WITHOUT ROWID;

-- One row, made by the first change to templates and raised by every
-- change after, in its transaction: each serve
-- reads this one row every few seconds and reloads its templates when it
-- moved (another process PUT one).
CREATE TABLE template_generation (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    gen INTEGER NOT NULL
);

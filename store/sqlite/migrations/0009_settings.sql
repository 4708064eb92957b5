-- 0009: values made once per database and kept in it (store.Secrets), so
-- that every process on the file uses the same: the key of the opaque ids
-- the API shows (relay/ids.go). A value is written once and never changed.
CREATE TABLE settings (
    name       TEXT    PRIMARY KEY,
    value      BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

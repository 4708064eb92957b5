-- 0009: values made once per database and kept in it (store.Secrets), as
-- store/sqlite's 0009: the key of the opaque ids the API shows
-- (relay/ids.go), the same for every node. A value is written once and
-- never changed.
CREATE TABLE settings (
    name       text   PRIMARY KEY,
    value      bytea  NOT NULL,
    created_at bigint NOT NULL
);

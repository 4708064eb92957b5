-- 0008: leases for work one process at a time must do (the schedules,
-- each tailed source), among every process that shares the database, as
-- store/sqlite's 0008. A lease is held until until; its holder renews it
-- before then, or another process takes it over once it has lapsed.
CREATE TABLE leases (
    name   text    PRIMARY KEY,
    holder text    NOT NULL,
    until  bigint  NOT NULL
);

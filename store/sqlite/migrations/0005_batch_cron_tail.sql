-- 0005: scheduled runs, digests and tailed sources.

-- One row per run of a scheduled job, identified by the job and the time it
-- was scheduled for (not when it ran): a run repeated after a restart, or
-- by a second instance, is the same run. upper_seq fixes, at the first
-- attempt, the newest feed item a digest run covers, so a repeat covers the
-- same items.
CREATE TABLE job_runs (
    job          TEXT    NOT NULL,
    scheduled_at INTEGER NOT NULL,
    upper_seq    INTEGER NOT NULL DEFAULT 0,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    status       TEXT    NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    detail       TEXT,
    PRIMARY KEY (job, scheduled_at)
) WITHOUT ROWID;

-- How far each tailed source has been read: its last relayed row id, saved
-- after each batch of rows is accepted (a crash before it re-reads rows that
-- are then duplicates: the event's unique identity, not this position, is
-- what stops a second notification). It only moves forward.
CREATE TABLE source_positions (
    source     TEXT    PRIMARY KEY,
    position   INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

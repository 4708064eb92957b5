-- 0005: scheduled runs, digests and tailed sources, as store/sqlite's 0005.

-- One row per run of a scheduled job, identified by the job and the time it
-- was scheduled for: a run repeated after a restart, or by another node,
-- is the same run. upper_seq fixes, at the first attempt, the newest feed
-- item a digest run covers.
CREATE TABLE job_runs (
    job          text    NOT NULL,
    scheduled_at bigint  NOT NULL,
    upper_seq    bigint  NOT NULL DEFAULT 0,
    started_at   bigint  NOT NULL,
    finished_at  bigint,
    status       text    NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    detail       text,
    PRIMARY KEY (job, scheduled_at)
);

-- How far each tailed source has been read. It only moves forward.
CREATE TABLE source_positions (
    source     text    PRIMARY KEY,
    position   bigint  NOT NULL,
    updated_at bigint  NOT NULL
);

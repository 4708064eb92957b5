-- 0017: outbox rows whose event was rejected, kept until a retry accepts
-- them or an operator drops them. Written in the transaction that saves
-- the tailer's position past the row, so none is lost to a crash.
CREATE TABLE source_rejects (
    source    text   NOT NULL,
    row_id    bigint NOT NULL,
    event_id  text   NOT NULL DEFAULT '',
    reason    text   NOT NULL,
    first_at  bigint NOT NULL,           -- ms
    last_at   bigint NOT NULL,           -- ms
    times     bigint NOT NULL DEFAULT 1,
    retry_at  bigint,                    -- an operator asked to read it again (ms)
    gone_at   bigint,                    -- a retry found no such row (ms)
    PRIMARY KEY (source, row_id)
);

-- The tailer looks for requested retries every poll: a partial index keeps
-- that read small however many rows are recorded.
CREATE INDEX source_rejects_retry ON source_rejects (source, row_id) WHERE retry_at IS NOT NULL;

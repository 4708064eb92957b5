-- 0017: outbox rows whose event was rejected, kept until a retry accepts
-- them or an operator drops them. Written in the transaction that saves
-- the tailer's position past the row, so none is lost to a crash.
CREATE TABLE source_rejects (
    source    TEXT    NOT NULL,
    row_id    INTEGER NOT NULL,
    event_id  TEXT    NOT NULL DEFAULT '',
    reason    TEXT    NOT NULL,
    first_at  INTEGER NOT NULL,           -- ms
    last_at   INTEGER NOT NULL,           -- ms
    times     INTEGER NOT NULL DEFAULT 1,
    retry_at  INTEGER,                    -- an operator asked to read it again (ms)
    gone_at   INTEGER,                    -- a retry found no such row (ms)
    PRIMARY KEY (source, row_id)
) WITHOUT ROWID;

-- The tailer looks for requested retries every poll: a partial index keeps
-- that read small however many rows are recorded.
CREATE INDEX source_rejects_retry ON source_rejects (source, row_id) WHERE retry_at IS NOT NULL;

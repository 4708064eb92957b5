-- 0029: batch steps. The first of a recipient's runs of a workflow version
-- to reach a batch step opens a batch (its leader) that closes a window
-- later; the runs reaching the step while it is open join it. The unique
-- index on the open batch of (tenant, type, version, recipient, step) is
-- what makes one open batch: a second opener's insert finds it taken and
-- joins instead (never a check-then-insert). When the batch closes, the
-- runs still waiting in it are marked carried (a run cancelled before is
-- not) and the leader goes on with their events; the others end there.
CREATE TABLE workflow_batches (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant    TEXT    NOT NULL,
    type      TEXT    NOT NULL,
    version   INTEGER NOT NULL,
    recipient TEXT    NOT NULL,
    step      INTEGER NOT NULL,
    leader    INTEGER NOT NULL,  -- the run that goes on with the batch
    state     TEXT    NOT NULL CHECK (state IN ('open', 'closed')),
    size      INTEGER NOT NULL,  -- the runs that joined it, the leader's included; once closed, those carried
    opened_at INTEGER NOT NULL,  -- ms
    closes_at INTEGER NOT NULL,  -- ms: the end of the window, or when it filled up
    closed_at INTEGER            -- ms
);
CREATE UNIQUE INDEX workflow_batches_open ON workflow_batches (tenant, type, version, recipient, step) WHERE state = 'open';
CREATE INDEX workflow_batches_leader ON workflow_batches (leader);

CREATE TABLE workflow_batch_runs (
    batch   INTEGER NOT NULL,
    run     INTEGER NOT NULL,
    carried INTEGER NOT NULL DEFAULT 0, -- 1: waiting in the batch when it closed, so its event goes on with the leader
    PRIMARY KEY (batch, run)
) WITHOUT ROWID;
CREATE INDEX workflow_batch_runs_run ON workflow_batch_runs (run);

-- A batch step records 'batched' (opened, joined, closed): the outcome's
-- CHECK is widened, which SQLite does by rebuilding the table.
CREATE TABLE workflow_steps_0029 (
    run          INTEGER NOT NULL REFERENCES workflow_runs (id),
    step         INTEGER NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0, -- the channel's position in the step (an undelivered fallback writes one row per channel tried); a batch step's record of its opening, joining or closing
    step_id      TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('sent', 'skipped', 'delayed', 'batched')),
    reason       TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,  -- ms: when the step became due
    decided_at   INTEGER NOT NULL,  -- ms
    notification INTEGER,           -- the notification it wrote
    feed_seq     INTEGER,           -- the in-app item it posted (the tenant's feed sequence)
    PRIMARY KEY (run, step, attempt)
) WITHOUT ROWID;
INSERT INTO workflow_steps_0029 SELECT run, step, attempt, step_id, outcome, reason, due_at, decided_at, notification, feed_seq FROM workflow_steps;
DROP TABLE workflow_steps;
ALTER TABLE workflow_steps_0029 RENAME TO workflow_steps;
CREATE INDEX workflow_steps_notification ON workflow_steps (notification) WHERE notification IS NOT NULL; -- show: the run of a step's notification

-- 0031: throttle steps. A run passing a throttle step takes a slot of its
-- window (the workflow's type and the step's id, per recipient), in the
-- transaction that decides the step; at most the step's max slots are
-- taken after any window's start. One slot per (run, step), so a step
-- decided again (it never is) could not take a second. expires_at is when
-- the slot stops counting: prune deletes it then, whatever its age.
CREATE TABLE workflow_slots (
    run        INTEGER NOT NULL,
    step       INTEGER NOT NULL,
    tenant     TEXT    NOT NULL,
    recipient  TEXT    NOT NULL,
    scope      TEXT    NOT NULL,  -- the window: type/step-id
    taken_at   INTEGER NOT NULL,  -- ms
    expires_at INTEGER NOT NULL,  -- ms: taken_at + the step's per
    PRIMARY KEY (run, step)
) WITHOUT ROWID;
CREATE INDEX workflow_slots_window ON workflow_slots (tenant, recipient, scope, taken_at);
CREATE INDEX workflow_slots_expires ON workflow_slots (expires_at);

-- A throttle step records 'passed' or 'throttled': the outcome's CHECK is
-- widened, which SQLite does by rebuilding the table.
CREATE TABLE workflow_steps_0031 (
    run          INTEGER NOT NULL REFERENCES workflow_runs (id),
    step         INTEGER NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0, -- the channel's position in the step (an undelivered fallback writes one row per channel tried); a batch step's record of its opening, joining or closing
    step_id      TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('sent', 'skipped', 'delayed', 'batched', 'passed', 'throttled')),
    reason       TEXT    NOT NULL,
    due_at       INTEGER NOT NULL,  -- ms: when the step became due
    decided_at   INTEGER NOT NULL,  -- ms
    notification INTEGER,           -- the notification it wrote
    feed_seq     INTEGER,           -- the in-app item it posted (the tenant's feed sequence)
    PRIMARY KEY (run, step, attempt)
) WITHOUT ROWID;
INSERT INTO workflow_steps_0031 SELECT run, step, attempt, step_id, outcome, reason, due_at, decided_at, notification, feed_seq FROM workflow_steps;
DROP TABLE workflow_steps;
ALTER TABLE workflow_steps_0031 RENAME TO workflow_steps;
CREATE INDEX workflow_steps_notification ON workflow_steps (notification) WHERE notification IS NOT NULL; -- show: the run of a step's notification

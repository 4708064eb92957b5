-- 0031: one kind of throttle slot for category throttles and throttle
-- steps. A slot is held by a notification (a category throttle's, taken
-- just before the call: holder 'n' and its id) or by a run's throttle step
-- (taken in the transaction that decides the step: 'r', the run, '.', the
-- step), in a window: the tenant, the recipient and the scope (a
-- category's name, or a throttle step's type/step-id: category names have
-- no '/'). At most the throttle's max slots of a window are taken after
-- any window's start, counted on throttle_slots_window. expires_at is when
-- a slot stops counting (taken_at + the throttle's per): prune deletes it
-- then, whatever prune's age, so a throttle whose per is longer than the
-- prune age no longer forgets slots it still counts. The slots taken
-- before this migration did not record their per: they expire 366 days
-- after they were taken.
CREATE TABLE throttle_slots_0031 (
    holder     TEXT    PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    recipient  TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    taken_at   INTEGER NOT NULL,  -- ms
    expires_at INTEGER NOT NULL   -- ms
) WITHOUT ROWID;
INSERT INTO throttle_slots_0031 SELECT 'n' || notification, tenant, recipient, category, taken_at, taken_at + 366 * 86400000 FROM throttle_slots;
DROP TABLE throttle_slots;
ALTER TABLE throttle_slots_0031 RENAME TO throttle_slots;
CREATE INDEX throttle_slots_window ON throttle_slots (tenant, recipient, scope, taken_at);
CREATE INDEX throttle_slots_expires ON throttle_slots (expires_at);

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
